"""Results name the code that made them: the checkout's commit and whether its tracked files were edited."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from webrl import code_version as versions
from webrl.cache_builds import DONE_MARKER, publish_model_dir

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def fresh(monkeypatch):
    """code_version asked anew (it is cached per process), with SOURCE_DIR as a test sets it."""
    versions.code_version.cache_clear()
    yield monkeypatch
    versions.code_version.cache_clear()


def test_a_checkout_gives_its_commit_and_whether_tracked_files_changed(fresh):
    version = versions.code_version()
    assert version["commit"] == _git("rev-parse", "HEAD")
    assert len(version["commit"]) == 40
    assert version["dirty"] is bool(_git("status", "--porcelain", "--untracked-files=no"))


def test_outside_a_checkout_there_is_no_commit_and_no_dirty_flag(fresh, tmp_path):
    fresh.setattr(versions, "SOURCE_DIR", tmp_path)
    version = versions.code_version()
    assert version["commit"] is None and version["dirty"] is None
    assert set(version) == {"webrl", "commit", "dirty"}


def test_every_published_model_directory_records_the_code_that_built_it(fresh, tmp_path):
    built = tmp_path / "actor.tmp"
    built.mkdir()
    (built / "model.safetensors").write_bytes(b"weights")
    target = publish_model_dir(built, tmp_path / "actor", {"metrics": {"actor/loss": 0.5}})
    marker = json.loads((target / DONE_MARKER).read_text())
    assert marker == {"metrics": {"actor/loss": 0.5}, "code": versions.code_version()}
    assert marker["code"]["commit"] == _git("rev-parse", "HEAD")
