"""Episodes that end in an error are counted (`eval/errors`, `rollout/errors`) and shown in the phase table."""

from __future__ import annotations

from webrl.data.trajectory import Task, Trajectory
from webrl.metrics import errored
from webrl.report import format_phase_table


def _episode(task_id: str, status: str) -> Trajectory:
    task = Task(task_id=task_id, intent="find the cheapest laptop", sites=["shop"], start_url="http://shop/")
    return Trajectory(task=task, status=status, error="browser crashed" if status == "error" else None)


def test_only_error_statuses_count():
    episodes = [_episode("a", "error"), _episode("b", "exit"), _episode("c", "timeout"), _episode("d", "error")]
    assert errored(episodes) == 2.0
    assert errored([]) == 0.0


def test_the_phase_table_shows_eval_and_rollout_errors():
    history = [
        {"phase": 0, "test/success_rate": 0.5, "eval/errors": errored([_episode("a", "error")])},
        {"phase": 1, "eval/errors": 0.0, "rollout/errors": errored([_episode("b", "error"), _episode("c", "error")])},
    ]
    header, _rule, first, second = format_phase_table(history).splitlines()
    eval_at = header.index("eval err")
    rollout_at = header.index("rollout err")
    assert first[eval_at:rollout_at].split() == ["1"] and first[rollout_at:].split()[0] == "-"
    assert second[eval_at:rollout_at].split() == ["0"] and second[rollout_at:].split()[0] == "2"
