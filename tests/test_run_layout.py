"""RunLayout names every file of a run directory; these names are what resumes, baselines and users rely on."""

from __future__ import annotations

import json

from webrl.data.trajectory import Task, Trajectory, write_trajectories
from webrl.run_layout import RunLayout, phase_name


def trajectory(task_id: str) -> Trajectory:
    return Trajectory(task=Task(task_id=task_id, intent=f"do {task_id}", sites=["shop"], start_url="http://x/"))


def test_run_files_sit_at_the_top_of_the_run_directory(tmp_path):
    layout = RunLayout(tmp_path)
    assert layout.config_path == tmp_path / "config.json"
    assert layout.config_changes_path == tmp_path / "config_changes.json"
    assert layout.state_path == tmp_path / "run_state.json"
    assert layout.phases_csv == tmp_path / "phases.csv"
    assert layout.replay_dir == tmp_path / "replay"


def test_phase_files_sit_in_a_zero_padded_phase_directory(tmp_path):
    layout = RunLayout(str(tmp_path))
    phase = tmp_path / "phase_007"
    assert phase_name(7) == "phase_007" and phase_name(123) == "phase_123"
    assert layout.phase_dir(7) == phase
    assert layout.tasks_path(7) == phase / "tasks.json"
    assert layout.rollouts_path(7, 1) == phase / "rollouts.rank1.jsonl"
    assert layout.eval_path(7, 0) == phase / "eval.rank0.jsonl"
    assert layout.labelled_path(7) == phase / "labelled.jsonl"
    assert layout.replay_samples_path(7) == phase / "replay_samples.jsonl"
    assert layout.critic_path(7) == phase / "critic.pt"
    assert layout.critic_values_path(7) == phase / "critic_values.json"
    assert layout.actor_dir(7) == phase / "actor"
    assert layout.metrics_dir(7) == phase / "metrics"
    assert layout.metrics_path(7, "critic") == phase / "metrics" / "critic.json"


def test_readers_merge_the_rank_shards_in_task_order(tmp_path):
    layout = RunLayout(tmp_path)
    write_trajectories(layout.rollouts_path(1, 0), [trajectory("c"), trajectory("a")])
    write_trajectories(layout.rollouts_path(1, 1), [trajectory("b")])
    write_trajectories(layout.eval_path(1, 0), [trajectory("e")])
    write_trajectories(layout.labelled_path(1), [trajectory("l")])
    layout.tasks_path(1).write_text(json.dumps([Task("t", "do t", ["shop"], "http://x/").to_dict()]))
    assert [t.task.task_id for t in layout.rollouts(1)] == ["a", "b", "c"]
    assert [t.task.task_id for t in layout.evaluations(1)] == ["e"]
    assert [t.task.task_id for t in layout.labelled(1)] == ["l"]
    assert [task.task_id for task in layout.tasks(1)] == ["t"]


def test_launch_logs_come_in_launch_order_past_nine_launches(tmp_path):
    layout = RunLayout(tmp_path)
    for version in (0, 2, 10, 9, 1):
        (layout.launch_logs_dir / f"version_{version}").mkdir(parents=True)
        (layout.launch_logs_dir / f"version_{version}" / "metrics.csv").write_text("step\n")
    assert [path.parent.name for path in layout.launch_logs()] == [
        "version_0",
        "version_1",
        "version_2",
        "version_9",
        "version_10",
    ]


def test_phases_are_the_numbered_phase_directories_in_order(tmp_path):
    layout = RunLayout(tmp_path)
    assert layout.phases() == []
    for name in ("phase_010", "phase_002", "phase_old", "phase_"):
        (tmp_path / name).mkdir()
    (tmp_path / "phase_003").write_text("a file, not a phase")
    assert layout.phases() == [2, 10]
