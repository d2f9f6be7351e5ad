"""A file written into directories that did not exist survives a power loss: each new directory's entry is fsynced.

A directory's entry lives in its parent, so fsyncing only the directory a file is renamed into does not make
the file durable when that directory is new: after a power loss `phase_001/metrics/` could be gone while the
fsynced `run_state.json` marks the stage whose metrics it held as done. The fsyncs are recorded here (a power
loss cannot be), with the real ones still made.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sample_records import build_trajectory

from webrl.data import atomic_io, trajectory
from webrl.data.atomic_io import write_json_atomic
from webrl.data.trajectory import TrajectoryWriter


@pytest.fixture
def synced(monkeypatch) -> list[Path]:
    """The directories fsynced from here on, in order."""
    calls: list[Path] = []
    real = atomic_io.fsync_dir

    def record(path) -> None:
        calls.append(Path(path))
        real(path)

    monkeypatch.setattr(atomic_io, "fsync_dir", record)
    monkeypatch.setattr(trajectory, "fsync_dir", record)
    return calls


def test_a_stage_file_in_new_directories_is_made_durable_in_each_parent(tmp_path, synced):
    run = tmp_path / "run"
    run.mkdir()
    target = run / "phase_001" / "metrics" / "curriculum.json"
    write_json_atomic(target, {"curriculum/tasks": 3.0})
    assert {run, run / "phase_001", run / "phase_001" / "metrics"} <= set(synced)
    assert synced.index(run) < synced.index(run / "phase_001" / "metrics"), "a directory is durable before its file"


def test_a_write_into_an_existing_directory_fsyncs_that_directory_alone(tmp_path, synced):
    write_json_atomic(tmp_path / "run_state.json", {"phase": 0})
    assert synced == [tmp_path]


def test_an_episode_file_opened_in_a_new_directory_is_durable_in_its_parent(tmp_path, synced):
    writer = TrajectoryWriter(tmp_path / "phase_000" / "rollouts.rank0.jsonl")
    writer.write(build_trajectory("t0"))
    writer.close()
    assert {tmp_path, tmp_path / "phase_000"} <= set(synced)
