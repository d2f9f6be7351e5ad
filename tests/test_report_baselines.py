"""The run report's baselines from a comparison root: a sibling is drawn only when its evaluation was made on the
run's held-out tasks with the run's evaluation settings."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from webrl.config import load_config
from webrl.data.atomic_io import write_json_atomic
from webrl.data.trajectory import Task, Trajectory, write_trajectories
from webrl.evaluation.identity import evaluation_settings
from webrl.loop_config import WebRLConfig
from webrl.report_baselines import find_baselines
from webrl.run_layout import RunLayout

TASKS = ["1", "2", "3", "4"]
RUN = ["env.max_steps=5"]
"""The report's run's settings: its held-out evaluation took at most 5 steps an episode."""


def _evaluations(solved: int) -> list[Trajectory]:
    tasks = [Task(task_id, f"intent {task_id}", ["shopping"], "http://x/") for task_id in TASKS]
    return [Trajectory(task, status="exit", eval_reward=float(i < solved)) for i, task in enumerate(tasks)]


def _config(run_dir: Path, overrides: list[str]) -> WebRLConfig:
    return load_config(WebRLConfig, [f"output_dir={run_dir}", *overrides])


def _loop_run(run_dir: Path, overrides: list[str], changes: dict | None = None) -> None:
    """A WebRL run evaluated at phase 1, started with `overrides`; `changes`: accepted before that evaluation."""
    layout = RunLayout(run_dir)
    write_trajectories(layout.eval_path(1, 0), _evaluations(2))
    write_json_atomic(layout.config_path, dataclasses.asdict(_config(run_dir, overrides)))
    if changes:
        write_json_atomic(layout.config_changes_path, [{"from_phase": 1, "changes": changes}])


def _recipe_run(run_dir: Path, overrides: list[str]) -> None:
    """A recipe's evaluation (`eval_<name>-<id>`), its identity recording the settings of `overrides`."""
    identity = {"checkpoint": str(run_dir / "actor"), "weights_sha256": "0" * 64}
    identity.update(evaluation_settings(_config(run_dir, overrides)))
    write_trajectories(run_dir / f"eval_{run_dir.name}-0123456789.jsonl", _evaluations(1))
    write_json_atomic(run_dir / f"eval_{run_dir.name}-0123456789.json", {"identity": identity})


def _launched(run_dir: Path) -> None:
    write_json_atomic(run_dir / "launches.json", [])


def test_a_sibling_evaluated_on_the_same_tasks_with_other_settings_is_no_baseline(tmp_path, caplog):
    """A comparison relaunched with `env.max_steps=6 resume.allow_changes=[env.max_steps]` evaluates its recipes
    again with 6 steps on the same task ids, and a WebRL run that accepted a change before its evaluation made it
    with other settings: neither rate compares with this run's 5-step evaluation."""
    root = tmp_path / "cmp"
    _loop_run(root / "webrl", RUN)
    _recipe_run(root / "sft", RUN)
    _recipe_run(root / "filtered_bc", ["env.max_steps=6"])
    _loop_run(root / "no_replay", RUN)
    _loop_run(root / "no_kl", RUN, changes={"env.html_chars": [1500, 900]})
    for name in ("sft", "filtered_bc", "no_replay", "no_kl"):
        _launched(root / name)
    with caplog.at_level(logging.INFO, logger="webrl.report_baselines"):
        baselines = find_baselines(root / "webrl", set(TASKS))
    assert [baseline.name for baseline in baselines] == ["no_replay", "sft"]
    skipped = {record.getMessage() for record in caplog.records}
    assert any("filtered_bc" in line and "other settings" in line and "max_steps 6 → 5" in line for line in skipped)
    assert any("no_kl" in line and "html_chars 900 → 1500" in line for line in skipped)
