"""Episodes that end in an error are counted (`eval/errors`, `rollout/errors`) and shown in the phase table.

Those the browser or the site failed twice (`infra_error`) are counted apart and left out of every success rate.
"""

from __future__ import annotations

from webrl.data.trajectory import Task, Trajectory
from webrl.inference.rollout_metrics import ActivityClock, rollout_metrics, rollout_sums
from webrl.metrics import errored, infra_errors, success_by_site
from webrl.report import format_phase_table


def _episode(task_id: str, status: str, reward: float | None = None, infra: bool = False) -> Trajectory:
    task = Task(task_id=task_id, intent="find the cheapest laptop", sites=["shop"], start_url="http://shop/")
    metadata = {"infra_error": True, "attempts": 2} if infra else {}
    error = "browser crashed" if status == "error" else None
    return Trajectory(task=task, status=status, error=error, eval_reward=reward, outcome=reward, metadata=metadata)


def test_infra_errors_are_counted_apart_and_left_out_of_success_rates():
    episodes = [
        _episode("a", "exit", 1.0),
        _episode("b", "exit", 0.0),
        _episode("c", "error", infra=True),
        # The marker counts only on an episode that ended in "error".
        _episode("d", "exit", 1.0, infra=True),
    ]
    assert [t.infra_error for t in episodes] == [False, False, True, False]
    assert infra_errors(episodes) == 1.0 and errored(episodes) == 1.0
    # a, b, d count: 2 of 3; c is neither a success nor a failure.
    assert success_by_site(episodes, key="outcome") == {
        "success_rate": 2 / 3,
        "episodes": 3.0,
        "success_rate/shop": 2 / 3,
        "infra_errors": 1.0,
    }
    metrics = rollout_metrics(episodes, rollout_sums(ActivityClock(), 0), [])
    assert metrics["rollout/success_rate"] == 2 / 3 and metrics["rollout/success_rate/shop"] == 2 / 3
    assert (metrics["rollout/infra_errors"], metrics["rollout/retried"], metrics["rollout/status/error"]) == (1, 2, 1)


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
