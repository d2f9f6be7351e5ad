"""Which code made a result: the installed webrl version and, from a git checkout, its commit.

A result is only comparable with another made by the same code, so the records that outlive a run
(an evaluation's JSON, the marker of every model directory a run builds or caches) carry this
beside the checkpoint and settings that made them. The checkout is asked with `git` itself, so an
edited file shows as `dirty`; an installed wheel has no checkout and records its version alone.
"""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

SOURCE_DIR = Path(__file__).resolve().parent
"""The webrl package's own directory: the checkout (if any) that holds it is the one asked."""


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=SOURCE_DIR, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


@functools.cache
def code_version() -> dict[str, Any]:
    """`{"webrl": version or None, "commit": sha or None, "dirty": bool or None}`, asked once per process.

    `dirty` is whether the checkout's tracked files differ from the commit (untracked files aside);
    None where there is no checkout (an installed wheel) or no git.
    """
    try:
        version: str | None = metadata.version("webrl")
    except metadata.PackageNotFoundError:
        version = None
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"webrl": version, "commit": commit, "dirty": None if status is None else bool(status)}
