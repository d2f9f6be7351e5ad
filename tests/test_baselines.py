"""Filtered BC's selection (percentile of ORM scores) and the learning table that compares methods."""

from __future__ import annotations

import pytest

from webrl.baselines import percentile, phase_rollouts, successful, top_scored
from webrl.data.trajectory import Task, Trajectory, write_trajectories
from webrl.report import format_comparison
from webrl.run_layout import RunLayout


def scored(task_id: str, score: float | None, site: str = "shop", success: float = 0.0) -> Trajectory:
    task = Task(task_id=task_id, intent=f"do {task_id}", sites=[site], start_url="http://x/")
    return Trajectory(task=task, orm_score=score, eval_reward=success)


def test_percentile_interpolates_like_numpy():
    values = [0.9, 0.1, 0.5, 0.3, 0.7]  # sorted .1 .3 .5 .7 .9; 70th: position 2.8 -> .5 + .8 * .2 = .66
    assert percentile(values, 70) == pytest.approx(0.66)
    assert percentile(values, 0) == 0.1 and percentile(values, 100) == 0.9
    assert percentile([0.4], 70) == 0.4


def test_top_scored_keeps_the_trajectories_at_or_above_the_threshold():
    trajectories = [scored(f"t{i}", s) for i, s in enumerate([0.9, 0.1, 0.5, 0.3, 0.7, 0.66])]
    # sorted .1 .3 .5 .66 .7 .9; 70th: position 3.5 -> .66 + .5 * .04 = .68
    kept, threshold = top_scored(trajectories, 70)
    assert threshold == pytest.approx(0.68)
    assert [t.task.task_id for t in kept] == ["t0", "t4"]


def test_top_scored_names_an_unscored_trajectory():
    with pytest.raises(ValueError, match="t1.*reward.orm_labels=true"):
        top_scored([scored("t0", 0.5), scored("t1", None)], 70)


def test_successful_keeps_the_successes_by_the_training_outcome_whatever_their_share():
    outcomes = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]  # 20 % succeed: a 70th percentile would be 0
    trajectories = [Trajectory(task=scored(f"t{i}", None).task, outcome=o) for i, o in enumerate(outcomes)]
    assert percentile(outcomes, 70) == 0.0
    kept, threshold = successful(trajectories)
    assert [t.task.task_id for t in kept] == ["t0", "t9"] and threshold == 0.5


def test_successful_names_an_unlabelled_trajectory():
    labelled = Trajectory(task=scored("t0", None).task, outcome=1.0)
    with pytest.raises(ValueError, match="t1.*filtered_bc.score=outcome"):
        successful([labelled, Trajectory(task=scored("t1", None).task)])


def test_phase_rollouts_names_the_missing_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="filtered_bc.source_run.*phase_001/labelled.jsonl"):
        phase_rollouts(tmp_path, 1)
    write_trajectories(RunLayout(tmp_path).labelled_path(1), [scored("a", 0.2)])
    assert [t.task.task_id for t in phase_rollouts(tmp_path, 1)] == ["a"]


def test_comparison_puts_sft_then_baselines_then_phases():
    history = [
        {"phase": 0, "test/success_rate": 0.25, "test/success_rate/shop": 0.5, "test/episodes": 4.0},
        {"phase": 1, "test/success_rate": 0.5, "test/success_rate/shop": 1.0, "test/episodes": 4.0},
    ]
    table = format_comparison(history, {"Filtered BC": {"success_rate": 0.375, "episodes": 8.0}})
    lines = table.splitlines()
    assert lines[0].split() == ["method", "test", "%", "shop", "%", "episodes"]
    assert lines[2].split() == ["SFT", "25.0", "50.0", "4"]
    assert lines[3].split() == ["Filtered", "BC", "37.5", "-", "8"]
    assert lines[4].split() == ["WebRL", "phase", "1", "50.0", "100.0", "4"]
