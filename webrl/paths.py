"""Where webrl keeps what outlives a run (the user cache directory), and paths made absolute once at start-up.

Models, demonstrations, SFT and ORM checkpoints are built once and shared by every run of the user, so they
live in a per-user cache rather than in whatever folder a command happens to start from. A run's paths are
made absolute when its config is read: a stage that changes directory, and each process a launcher or a
comparison starts, then reads and writes the same places the first process did.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENVIRONMENT = "WEBRL_CACHE_DIR"
"""The environment variable that names the cache directory outright (a shared filesystem, a scratch disk)."""
CACHE_NAME = "webrl"
"""The cache's folder inside the XDG cache home."""


def absolute_path(path: str | os.PathLike[str]) -> Path:
    """`path` with `~` expanded, made absolute against the current folder and normalised; symlinks stay as named."""
    return Path(os.path.abspath(Path(path).expanduser()))


def user_cache_dir() -> Path:
    """`$WEBRL_CACHE_DIR` if set, else `$XDG_CACHE_HOME/webrl`, else `~/.cache/webrl`; always absolute.

    A relative `$XDG_CACHE_HOME` is ignored, as the XDG Base Directory specification asks.
    """
    explicit = os.environ.get(CACHE_ENVIRONMENT, "")
    if explicit:
        return absolute_path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    home = Path(xdg) if xdg and Path(xdg).is_absolute() else Path("~/.cache")
    return absolute_path(home / CACHE_NAME)
