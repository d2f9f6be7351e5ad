"""The last phase paired with phase 0: hand-computed counts, Wilson intervals and exact McNemar p."""

from __future__ import annotations

import json

import pytest

from webrl.data.trajectory import Task, Trajectory, write_trajectories
from webrl.evaluation.phase_gain import format_phase_gain, phase_gain, write_phase_gain
from webrl.run_layout import RunLayout

TASKS = [str(number) for number in range(1, 11)]


def episodes(solved: set[str], tasks: list[str] = TASKS, infra_error: str = "") -> list[Trajectory]:
    made = []
    for task_id in tasks:
        task = Task(task_id, f"intent {task_id}", ["shopping"], "http://x/", intent_template_id=1)
        failed_by_browser = task_id == infra_error
        made.append(
            Trajectory(
                task,
                status="error" if failed_by_browser else "exit",
                eval_reward=float(task_id in solved),
                metadata={"infra_error": failed_by_browser},
            )
        )
    return made


def evaluated(run_dir, phase: int, solved: set[str], **kwargs) -> None:
    layout = RunLayout(run_dir)
    trajectories = episodes(solved, **kwargs)
    write_trajectories(layout.eval_path(phase, 0), trajectories)
    layout.record_eval_tasks(phase, [t.task.task_id for t in trajectories])


def test_the_last_phase_is_paired_with_phase_0(tmp_path):
    """Phase 0 solves 1-3, phase 2 solves 2-8: 5 gained (4-8), 1 lost (1); p = 2 * P(X <= 1 | 6, 1/2) = 14/64."""
    evaluated(tmp_path, 0, {"1", "2", "3"})
    evaluated(tmp_path, 2, {"2", "3", "4", "5", "6", "7", "8"})
    gain = phase_gain(tmp_path, 2)
    assert (gain["phases"], gain["tasks"], gain["gained"], gain["lost"]) == ([0, 2], 10, 5, 1)
    assert gain["p_value"] == pytest.approx(14 / 64)
    # Wilson 95 % of 3/10 and 7/10 (z = 1.96): centre (0.3 + 0.19208) / 1.38416, half-width 0.2318 / 1.38416
    assert gain["start"]["successes"] == 3 and gain["start"]["wilson_95"] == pytest.approx([0.1078, 0.6032], abs=1e-4)
    assert gain["end"]["successes"] == 7 and gain["end"]["wilson_95"] == pytest.approx([0.3968, 0.8922], abs=1e-4)
    line = format_phase_gain(gain, "test")
    assert line == (
        "held-out test (10 tasks): phase 0 3 (30.0 %, 95 % Wilson [10.8, 60.3]) -> phase 2 7 (70.0 %, 95 % Wilson "
        "[39.7, 89.2]); 5 gained, 1 lost, exact McNemar p = 0.219"
    )
    assert json.loads(write_phase_gain(tmp_path, gain).read_text()) == gain


def test_an_episode_the_browser_failed_is_left_out_of_the_pairing(tmp_path):
    """Task 4, solved in phase 1, failed by the browser in phase 0: 9 tasks pair, and it counts as neither."""
    evaluated(tmp_path, 0, {"1"}, infra_error="4")
    evaluated(tmp_path, 1, {"1", "4"})
    gain = phase_gain(tmp_path, 1)
    assert (gain["tasks"], gain["gained"], gain["lost"], gain["end"]["successes"]) == (9, 0, 0, 1)
    assert gain["p_value"] == 1.0


def test_nothing_pairs_without_two_evaluations_of_the_same_tasks(tmp_path):
    evaluated(tmp_path, 0, {"1"})
    assert phase_gain(tmp_path, 0) is None  # a run that stopped at phase 0 has no gain
    assert phase_gain(tmp_path, 1) is None  # phase 1 not evaluated
    evaluated(tmp_path, 1, {"1"}, tasks=TASKS[:5])  # another subset of tasks
    assert phase_gain(tmp_path, 1) is None
