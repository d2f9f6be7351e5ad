"""Trajectory JSONL storage: round trips, torn last line recovery, errors that name file:line."""

from __future__ import annotations

import json
import warnings

import pytest

from webrl.data.atomic_io import read_jsonl
from webrl.data.trajectory import (
    Task,
    TrajectoryFileError,
    TrajectoryWriter,
    read_trajectories,
    sampled_copies,
    write_trajectories,
)


def test_round_trip_keeps_every_field(tmp_path, make_trajectory):
    first = make_trajectory("a", orm_score=0.83, orm_reward=1.0, eval_reward=0.0)
    first.task.extra["old_task_id"] = 12
    first.steps[0].action = {"name": "click", "element": "1"}
    first.steps[0].response_logprobs = [-0.5, -0.25]
    second = make_trajectory("b", outcome=None, num_steps=1)
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [first, second])
    assert read_trajectories(path) == [first, second]
    assert json.loads(path.read_text().splitlines()[0])["task"]["old_task_id"] == 12


def test_writer_appends_and_reader_drops_a_torn_last_line(tmp_path, make_trajectory):
    path = tmp_path / "t.jsonl"
    kept = [make_trajectory(str(i)) for i in range(3)]
    with TrajectoryWriter(path, fsync=False) as writer:
        for trajectory in kept:
            writer.write(trajectory)
    with path.open("a") as handle:
        handle.write('{"schema": 1, "task": {"task_id": "torn", "int')
    with pytest.warns(UserWarning, match=r"t\.jsonl:4: dropping a torn last line"):
        assert read_trajectories(path) == kept


def test_writer_truncates_a_torn_tail_before_appending(tmp_path, make_trajectory):
    path = tmp_path / "t.jsonl"
    before = make_trajectory("before")
    write_trajectories(path, [before])
    with path.open("a") as handle:
        handle.write('{"schema": 1, "ta')
    after = make_trajectory("after")
    with pytest.warns(UserWarning, match="torn last line"), TrajectoryWriter(path, fsync=False) as writer:
        writer.write(after)
    assert read_trajectories(path) == [before, after]


def test_writer_keeps_a_whole_last_record_that_lost_only_its_newline(tmp_path, make_trajectory):
    path = tmp_path / "t.jsonl"
    first, second = make_trajectory("a"), make_trajectory("b")
    with TrajectoryWriter(path, fsync=False) as writer:
        writer.write(first)
        writer.write(second)
    path.write_bytes(path.read_bytes()[:-1])  # the crash came after the record and before its newline
    assert read_trajectories(path) == [first, second]  # what a resumed rollout counts as finished
    third = make_trajectory("c")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with TrajectoryWriter(path, fsync=False) as writer:
            writer.write(third)
    assert [t.task.task_id for t in read_trajectories(path)] == ["a", "b", "c"]
    assert read_trajectories(path) == [first, second, third]
    assert [str(w.message) for w in caught] == []
    records, dropped = read_jsonl(path)
    assert [number for number, _ in records] == [1, 2, 3] and dropped == 0
    assert path.read_bytes().count(b"\n") == 3 and path.read_bytes().endswith(b"\n")


def test_writer_drops_half_a_record_with_a_warning_and_keeps_the_whole_ones(tmp_path, make_trajectory):
    path = tmp_path / "t.jsonl"
    first = make_trajectory("a")
    write_trajectories(path, [first])
    half = json.dumps(make_trajectory("b").to_dict()).encode()
    with path.open("ab") as handle:
        handle.write(half[: len(half) // 2])
    torn = rf"t\.jsonl: dropping a torn last line \({len(half) // 2} bytes\)"
    with pytest.warns(UserWarning, match=torn), TrajectoryWriter(path, fsync=False) as writer:
        writer.write(make_trajectory("c"))
    assert [t.task.task_id for t in read_trajectories(path)] == ["a", "c"]


def test_bad_middle_line_names_file_and_line(tmp_path, make_trajectory):
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [make_trajectory("a"), make_trajectory("b")])
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "{not json\n" + lines[1])
    with pytest.raises(TrajectoryFileError, match=r"t\.jsonl:2: not valid JSON"):
        read_trajectories(path)


def test_record_without_task_names_file_and_line(tmp_path, make_trajectory):
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [make_trajectory("a")])
    with path.open("a") as handle:
        handle.write('{"schema": 1, "steps": []}\n')
    with pytest.raises(TrajectoryFileError, match=r"t\.jsonl:2: not a trajectory record"):
        read_trajectories(path)


def test_task_from_dict_names_missing_keys():
    with pytest.raises(ValueError, match=r"missing \['intent'\]"):
        Task.from_dict({"task_id": 3})
    task = Task.from_dict({"task_id": 3, "intent": "x", "old_task_id": 9})
    assert task.task_id == "3" and task.to_dict()["old_task_id"] == 9


def test_sampled_copies_repeat_each_task_in_a_row_under_ids_of_their_own():
    tasks = [
        Task.from_dict({"task_id": i, "intent": f"do {i}", "eval": {"eval_types": ["string_match"]}}) for i in (7, 8)
    ]
    assert sampled_copies(tasks, 1) == tasks, "one sample: the tasks themselves"
    copies = sampled_copies(tasks, 3)
    assert [t.task_id for t in copies] == ["7", "7~1", "7~2", "8", "8~1", "8~2"]
    assert copies[0] is tasks[0]
    assert [t.intent for t in copies] == ["do 7"] * 3 + ["do 8"] * 3
    assert copies[1].eval == tasks[0].eval and copies[1].to_dict() | {"task_id": "7"} == tasks[0].to_dict()
    with pytest.raises(ValueError, match="at least 1"):
        sampled_copies(tasks, 0)
