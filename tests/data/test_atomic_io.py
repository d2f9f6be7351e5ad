"""Crash-consistent files: an atomic write killed before its rename, torn JSONL tails, phase-keyed rewrites.

The fault runs in a child process (`os._exit` would end pytest itself): it writes through the real
module with `WEBRL_FAULT` naming the write, and the parent reads what the "crash" left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from webrl.data.atomic_io import (
    FAULT_ENV,
    FAULT_EXIT_CODE,
    FAULT_LOG_ENV,
    JsonlError,
    fault_point,
    publish_dir,
    read_jsonl,
    write_json_atomic,
)
from webrl.data.replay import ReplayBuffer
from webrl.data.trajectory import TrajectoryWriter, read_trajectories, read_trajectories_counted, write_trajectories

REPO = Path(__file__).resolve().parents[2]


def _child(code: str, fault: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, FAULT_LOG_ENV)}
    env["PYTHONPATH"] = str(REPO)
    if fault is not None:
        env[FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_a_fault_before_the_rename_leaves_the_old_file_and_the_next_write_replaces_it(tmp_path):
    path = tmp_path / "phase_001" / "tasks.json"
    write_json_atomic(path, {"version": "old"})
    code = f"from webrl.data.atomic_io import write_json_atomic; write_json_atomic({str(path)!r}, {{'version': 'new'}})"
    crashed = _child(code, "write:phase_001/tasks.json")
    assert crashed.returncode == FAULT_EXIT_CODE, crashed.stderr
    assert "injected fault at write:" in crashed.stderr
    assert json.loads(path.read_text()) == {"version": "old"}
    leftover = path.with_name(".tasks.json.tmp")
    assert json.loads(leftover.read_text()) == {"version": "new"}, "the temp file was complete, only not renamed"

    resumed = _child(code, None)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(path.read_text()) == {"version": "new"}
    assert not leftover.exists()


def test_a_fault_names_a_path_suffix_not_a_substring(tmp_path):
    path = tmp_path / "mycritic.pt"
    code = f"from webrl.data.atomic_io import write_bytes_atomic; write_bytes_atomic({str(path)!r}, b'x')"
    assert _child(code, "write:critic.pt").returncode == 0
    assert path.read_bytes() == b"x"
    assert _child(code, "write:mycritic.pt").returncode == FAULT_EXIT_CODE


def test_a_writer_that_raises_leaves_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "critic.pt"
    path.write_bytes(b"old")

    def failing(handle):
        handle.write(b"half")
        raise RuntimeError("disk full")

    from webrl.data.atomic_io import atomic_write

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, failing)
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["critic.pt"]


def test_the_fault_log_lists_every_point_reached_in_order(tmp_path, monkeypatch):
    log = tmp_path / "points.txt"
    monkeypatch.setenv(FAULT_LOG_ENV, str(log))
    monkeypatch.delenv(FAULT_ENV, raising=False)
    write_json_atomic(tmp_path / "a.json", 1)
    fault_point("stage:0:curriculum:written")
    write_json_atomic(tmp_path / "b.json", 2)
    assert log.read_text().splitlines() == [
        f"write:{(tmp_path / 'a.json').as_posix()}",
        "stage:0:curriculum:written",
        f"write:{(tmp_path / 'b.json').as_posix()}",
    ]


def test_a_fault_inside_publish_dir_keeps_the_old_directory(tmp_path):
    target, tmp = tmp_path / "actor", tmp_path / "actor.tmp"
    target.mkdir()
    (target / "config.json").write_text("old")
    tmp.mkdir()
    (tmp / "config.json").write_text("new")
    code = f"from webrl.data.atomic_io import publish_dir; publish_dir({str(tmp)!r}, {str(target)!r})"
    assert _child(code, "write:actor").returncode == FAULT_EXIT_CODE
    assert (target / "config.json").read_text() == "old"
    publish_dir(tmp, target)
    assert (target / "config.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["actor"]


def test_the_copy_a_crash_left_aside_stays_until_a_whole_target_replaces_it(tmp_path, monkeypatch):
    """A crash between publish_dir's renames leaves only `.actor.old` whole; the next publish must not delete it
    before the new directory stands, or a second crash would leave no finished copy at all."""
    import webrl.data.atomic_io as atomic_io

    target, old, tmp = tmp_path / "actor", tmp_path / ".actor.old", tmp_path / "actor.tmp"
    old.mkdir()
    (old / "config.json").write_text("old")
    tmp.mkdir()
    (tmp / "config.json").write_text("new")
    removed_while: list[bool] = []
    real_rmtree = atomic_io.shutil.rmtree
    monkeypatch.setattr(
        atomic_io.shutil, "rmtree", lambda path: removed_while.append(target.exists()) or real_rmtree(path)
    )
    publish_dir(tmp, target)
    assert removed_while == [True] and (target / "config.json").read_text() == "new" and not old.exists()


# ---------------------------------------------------------------------------------------------- torn JSONL
def _jsonl(*records: dict) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)


def test_a_half_last_line_is_dropped_counted_and_warned(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(_jsonl({"a": 1}, {"a": 2}) + b'{"a": 3, "b"')
    with pytest.warns(UserWarning, match=r"r\.jsonl:3: dropping a torn last line \(12 bytes\)"):
        records, dropped = read_jsonl(path)
    assert records == [(1, {"a": 1}), (2, {"a": 2})] and dropped == 1


def test_a_multibyte_character_cut_in_half_is_a_torn_line_not_an_error(tmp_path):
    path = tmp_path / "r.jsonl"
    whole = json.dumps({"intent": "café"}, ensure_ascii=False).encode()
    cut = whole[: whole.index("é".encode()) + 1]  # the first of é's two bytes
    assert cut.endswith(b"\xc3")
    path.write_bytes(_jsonl({"intent": "thé"}) + cut)
    with pytest.warns(UserWarning, match="torn last line"):
        assert read_jsonl(path) == ([(1, {"intent": "thé"})], 1)


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(_jsonl({"a": 1}) + b'{"a": 2}')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_jsonl(path) == ([(1, {"a": 1}), (2, {"a": 2})], 0)


def test_a_bad_line_before_the_last_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(_jsonl({"a": 1}) + b'{"a": "\xc3"}\n' + _jsonl({"a": 3}))
    with pytest.raises(JsonlError, match=r"r\.jsonl:2: not UTF-8"):
        read_jsonl(path)
    path.write_bytes(_jsonl({"a": 1}) + b"{half\n" + _jsonl({"a": 3}))
    with pytest.raises(JsonlError, match=r"r\.jsonl:2: not valid JSON"):
        read_jsonl(path)


def test_trajectories_after_a_torn_multibyte_tail_read_and_append_cleanly(tmp_path, make_trajectory):
    path = tmp_path / "rollouts.rank0.jsonl"
    first = make_trajectory("a", intent="Trouver le café")
    write_trajectories(path, [first])
    torn = json.dumps(make_trajectory("b", intent="Acheter du thé").to_dict(), ensure_ascii=False).encode()
    with path.open("ab") as handle:
        handle.write(torn[: torn.index("é".encode()) + 1])
    with pytest.warns(UserWarning, match="torn last line"):
        assert read_trajectories_counted(path) == ([first], 1)
    second = make_trajectory("c")
    with pytest.warns(UserWarning, match="torn last line"), TrajectoryWriter(path, fsync=False) as writer:
        writer.write(second)
    assert read_trajectories(path) == [first, second]


# ---------------------------------------------------------------------------------------------- replay buffer
def test_re_adding_a_phase_rewrites_it_and_earlier_phases_exclude_it(tmp_path, make_trajectory):
    buffer = ReplayBuffer(tmp_path)
    buffer.add_phase(0, [make_trajectory("a"), make_trajectory("b")])
    phase1 = [make_trajectory("c", num_steps=2, phase=1)]
    buffer.add_phase(1, phase1, overwrite=True)
    buffer.add_phase(1, phase1, overwrite=True)  # the replay stage redone after a crash
    reopened = ReplayBuffer(tmp_path)
    assert len(reopened) == 3 and reopened.stats()[1]["steps"] == 2
    assert [t.task.task_id for t in reopened.trajectories()] == ["a", "b", "c"]
    assert [t.task.task_id for t in reopened.trajectories(before=1)] == ["a", "b"]
    assert reopened.phase_path(1) == tmp_path / "phase_001" / "trajectories.jsonl"


def test_a_missing_manifest_is_rebuilt_from_the_phase_files(tmp_path, make_trajectory):
    buffer = ReplayBuffer(tmp_path)
    buffer.add_phase(0, [make_trajectory("a"), make_trajectory("b", outcome=0.0)])
    buffer.add_phase(2, [make_trajectory("c", num_steps=4, phase=2)])
    expected = buffer.stats()
    buffer.manifest_path.unlink()
    with pytest.warns(
        UserWarning, match=r"manifest\.json is missing; rebuilt it from 2 phase files \(phases \[0, 2\]\)"
    ):
        rebuilt = ReplayBuffer(tmp_path)
    assert rebuilt.stats() == expected
    assert json.loads(buffer.manifest_path.read_text())["phases"].keys() == {"0", "2"}
    assert [t.task.task_id for t in rebuilt.trajectories()] == ["a", "b", "c"]
