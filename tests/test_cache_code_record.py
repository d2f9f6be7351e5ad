"""A cache entry reused as found says so when other code built it: its key holds settings and data, not code."""

from __future__ import annotations

import json
import logging

import pytest

import webrl.cache_builds as cache_builds
from tests.sample_records import build_trajectory
from webrl.cache_builds import DONE_MARKER, build_once
from webrl.data.trajectory import write_trajectories
from webrl.starting_models import collect_demonstrations, demonstrations_done

THIS = {"webrl": "0.1.0", "commit": "b" * 40, "dirty": False}


@pytest.fixture(autouse=True)
def this_code(monkeypatch):
    monkeypatch.setattr(cache_builds, "code_version", lambda: dict(THIS))


def _entry(tmp_path, code):
    target = tmp_path / "sft-x"
    target.mkdir()
    (target / DONE_MARKER).write_text(json.dumps({"shape": 1, **({"code": code} if code is not None else {})}))
    return target


def _reuse(target, caplog, **kwargs) -> str:
    built = []
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="webrl.training"):
        build_once(target, lambda: built.append(1), **kwargs)
    assert not built  # reused, never rebuilt
    return caplog.text


def test_an_entry_built_by_another_commit_is_reused_with_a_warning_naming_both(tmp_path, caplog):
    text = _reuse(_entry(tmp_path, {**THIS, "commit": "a" * 40}), caplog)
    assert f"built by commit {'a' * 40}" in text and f"not by this code ({'b' * 40})" in text


@pytest.mark.parametrize(
    "code",
    [THIS, None, {"webrl": "0.1.0", "commit": None, "dirty": None}],
    ids=["the same commit", "no record (older entry)", "built from a wheel, versions equal"],
)
def test_an_entry_of_this_code_or_of_unknown_code_is_reused_silently(tmp_path, caplog, code):
    assert _reuse(_entry(tmp_path, code), caplog) == ""


def test_wheels_of_other_versions_are_compared_by_version(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(cache_builds, "code_version", lambda: {"webrl": "0.2.0", "commit": None, "dirty": None})
    text = _reuse(_entry(tmp_path, {"webrl": "0.1.0", "commit": None, "dirty": None}), caplog)
    assert "built by webrl 0.1.0, not by this code (0.2.0)" in text


def test_demonstrations_recorded_by_other_code_are_reused_with_the_warning(tmp_path, caplog):
    path = tmp_path / "demos.jsonl"
    write_trajectories(path, [build_trajectory("t0", eval_reward=1.0)])
    demonstrations_done(path).write_text(json.dumps({"code": {**THIS, "commit": "c" * 40}}))
    with caplog.at_level(logging.WARNING, logger="webrl.training"):
        kept = collect_demonstrations(None, path, limit=1, concurrency=1)  # the environment is never touched
    assert [t.task.task_id for t in kept] == ["t0"]
    assert f"{path}: reusing a cache entry built by commit {'c' * 40}" in caplog.text
