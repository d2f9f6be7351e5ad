"""Per-task outcomes: read from trajectories, and loaded back from an earlier evaluation to pair with.

A paired test needs each task's success, not a rate, so every evaluation's JSON keeps its outcomes
(task id -> success). A baseline can be that JSON, or the trajectories JSONL of any evaluation
(`recipes.evaluate`'s `eval_<name>-<id>.jsonl`, a WebRL phase's `eval.rank0.jsonl`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from webrl.data.trajectory import Trajectory, is_success, read_trajectories
from webrl.evaluation.breakdown import TaskOutcome


def task_outcomes(trajectories: list[Trajectory]) -> list[TaskOutcome]:
    """Each trajectory's task and evaluator verdict (`is_success(eval_reward)`), as `webrl.metrics` counts it.

    Trajectories without an evaluator reward, or that the browser, the site or the engine failed (`infra_error`), are
    left out, as they are from the success rates.
    """
    return [
        TaskOutcome(t.task.task_id, t.task.site, t.task.intent_template_id, is_success(t.eval_reward))
        for t in trajectories
        if t.eval_reward is not None and not t.infra_error
    ]


def success_map(outcomes: list[TaskOutcome]) -> dict[str, bool]:
    """task id -> success, the form a later comparison pairs on."""
    return {outcome.task_id: outcome.success for outcome in outcomes}


def load_outcomes(path: Path) -> dict[str, bool]:
    """task id -> success from an evaluation's JSON (its `outcomes`) or from a trajectories JSONL file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"baseline {path} does not exist (give an eval_*.json or a trajectories .jsonl)")
    if path.suffix == ".jsonl":
        return success_map(task_outcomes(read_trajectories(path)))
    record = json.loads(path.read_text(encoding="utf-8"))
    outcomes = record.get("outcomes") if isinstance(record, dict) else None
    if not isinstance(outcomes, dict):
        raise ValueError(
            f"baseline {path} has no per-task `outcomes` (written by recipes.evaluate since it pairs results); "
            "give its eval_<name>-<id>.jsonl trajectories instead"
        )
    return {str(task): bool(success) for task, success in outcomes.items()}


@dataclass(frozen=True)
class Baseline:
    """An earlier evaluation to pair with: where its outcomes came from, and task id -> success."""

    source: str
    outcomes: dict[str, bool]


def load_baseline(path: Path) -> Baseline:
    return Baseline(str(path), load_outcomes(path))
