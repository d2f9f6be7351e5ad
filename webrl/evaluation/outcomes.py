"""Per-task outcomes: read from trajectories, and loaded back from an earlier evaluation to pair with.

A paired test needs each task's success, not a rate, so every evaluation's JSON keeps its outcomes
(task id -> success) and the ids of every task it attempted (`task_ids`: the outcomes leave out the
episodes a browser, site or engine failure ended, and a pairing must still know it ran on the same
tasks). A baseline can be that JSON, or the trajectories JSONL of any evaluation (`recipes.evaluate`'s
`eval_<name>-<id>.jsonl`, a WebRL phase's `eval.rankR.jsonl`, read with its other ranks' shards).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webrl.data.trajectory import Trajectory, is_success, read_trajectories
from webrl.evaluation.breakdown import TaskOutcome
from webrl.run_layout import RunLayout

_PHASE_DIR, _RANK_SHARD = re.compile(r"phase_(\d+)"), re.compile(r"eval\.rank\d+\.jsonl")


def scored_episodes(trajectories: list[Trajectory]) -> list[Trajectory]:
    """The trajectories with an evaluator verdict: one without an evaluator reward, or that the browser, the site or
    the engine failed (`infra_error`), is left out, as it is from the success rates."""
    return [t for t in trajectories if t.eval_reward is not None and not t.infra_error]


def task_outcomes(trajectories: list[Trajectory]) -> list[TaskOutcome]:
    """Each scored trajectory's task and evaluator verdict (`is_success(eval_reward)`), as `webrl.metrics` counts it."""
    return [
        TaskOutcome(t.task.task_id, t.task.site, t.task.intent_template_id, is_success(t.eval_reward))
        for t in scored_episodes(trajectories)
    ]


def success_map(outcomes: list[TaskOutcome], source: str = "") -> dict[str, bool]:
    """task id -> success, the form a later comparison pairs on; a task with two outcomes is an error naming
    `source`: a map would keep one of them silently while the rates count both, and pair on a different set."""
    counts = Counter(outcome.task_id for outcome in outcomes)
    repeated = sorted((task for task, count in counts.items() if count > 1), key=str)
    if repeated:
        shown = ", ".join(repeated[:5]) + (f" and {len(repeated) - 5} more" if len(repeated) > 5 else "")
        raise ValueError(
            f"{source or 'the evaluation'}: tasks {shown} have more than one outcome; a paired test needs one "
            "episode per task"
        )
    return {outcome.task_id: outcome.success for outcome in outcomes}


def load_outcomes(path: Path) -> dict[str, bool]:
    """task id -> success from an evaluation's JSON (its `outcomes`) or from a trajectories JSONL file."""
    return load_baseline(path).outcomes


@dataclass(frozen=True)
class Baseline:
    """An earlier evaluation to pair with: where its outcomes came from, task id -> success, the tasks attempted."""

    source: str
    outcomes: dict[str, bool]
    attempted: frozenset[str] = frozenset()
    """Every task id it evaluated, those a browser, site or engine failure left out of `outcomes` included (empty: as
    `outcomes`): a later evaluation must have the same tasks, not merely include these."""

    @property
    def tasks(self) -> frozenset[str]:
        return self.attempted or frozenset(self.outcomes)


def load_baseline(path: Path) -> Baseline:
    """An evaluation's JSON (`outcomes` and `task_ids`) or trajectories JSONL file, as a baseline to pair with."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"baseline {path} does not exist (give an eval_*.json or a trajectories .jsonl)")
    if path.suffix == ".jsonl":
        episodes = read_evaluation(path)
        return Baseline(str(path), success_map(task_outcomes(episodes), str(path)), attempted_ids(episodes))
    record = json.loads(path.read_text(encoding="utf-8"))
    outcomes = record.get("outcomes") if isinstance(record, dict) else None
    if not isinstance(outcomes, dict):
        raise ValueError(
            f"baseline {path} has no per-task `outcomes` (written by recipes.evaluate since it pairs results); "
            "give its eval_<name>-<id>.jsonl trajectories instead"
        )
    successes = {str(task): bool(success) for task, success in outcomes.items()}
    return Baseline(str(path), successes, _recorded_tasks(record, path))


def read_evaluation(path: Path) -> list[Trajectory]:
    """The episodes of a trajectories JSONL file; for one rank's shard of a WebRL phase (`phase_NNN/eval.rankR.jsonl`),
    every rank's, as the run reads its evaluation (`RunLayout.evaluations`): one shard holds a part of the tasks."""
    phase = _PHASE_DIR.fullmatch(path.parent.name)
    if phase and _RANK_SHARD.fullmatch(path.name):
        return RunLayout(path.parent.parent).evaluations(int(phase.group(1)))
    return read_trajectories(path)


def attempted_ids(trajectories: list[Trajectory]) -> frozenset[str]:
    """Every trajectory's task id, whether or not it has an outcome."""
    return frozenset(trajectory.task.task_id for trajectory in trajectories)


def _recorded_tasks(record: dict[str, Any], path: Path) -> frozenset[str]:
    """The JSON's `task_ids`; for one written before it had them, the ids of its trajectories `.jsonl` beside it, or
    none (the outcomes' tasks stand for them) when that is gone too."""
    task_ids = record.get("task_ids")
    if isinstance(task_ids, list):
        return frozenset(str(task) for task in task_ids)
    trajectories = path.with_suffix(".jsonl")
    return attempted_ids(read_trajectories(trajectories)) if trajectories.is_file() else frozenset()
