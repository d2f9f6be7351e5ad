"""RunFigures: every figure of the run report, read from what a run directory already holds.

The report must be writable at any moment of a run (the loop writes it after each phase) and from
any run directory, however old or unfinished, so each reader here returns "nothing" for a file that
is missing or unreadable instead of raising: the report then says which section has no data.
Success rates are recounted from the evaluation JSONL (not taken from `phases.csv`) because a 95 %
interval needs the counts, not only the rate.
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.state import STATE_FILE
from webrl.data.replay import ReplayBuffer
from webrl.data.step_values import StepKey, read_step_values
from webrl.data.trajectory import Trajectory, is_success
from webrl.evaluation.breakdown import Rate
from webrl.run_layout import RunLayout
from webrl.run_state import STAGES

log = logging.getLogger(__name__)

LOSS_KEYS = ("critic/loss", "actor/loss")
"""The training curves drawn: the per-batch losses the critic and actor stages log to the metrics CSV."""
CRITIC_REASONS = ("critic_low", "critic_high")
"""The curriculum's rejection reasons of a task whose value fell outside `curriculum.value_window`."""


def rates_by_site(trajectories: list[Trajectory], key: str) -> dict[str, Rate]:
    """`all` and one Rate per site, counting `key` (>= 0.5 is a success); unlabelled and infra-failed are left out."""
    counts: dict[str, list[int]] = {}
    for trajectory in trajectories:
        value = getattr(trajectory, key)
        if trajectory.infra_error or value is None:
            continue
        hit = int(is_success(value))
        for site in ("all", trajectory.task.site):
            pair = counts.setdefault(site, [0, 0])
            pair[0] += hit
            pair[1] += 1
    ordered = sorted(counts.items(), key=lambda item: item[0] != "all")  # "all" first, then the sites
    return {site: Rate(site, n=pair[1], successes=pair[0]) for site, pair in ordered}


def orm_confusion(trajectories: list[Trajectory]) -> dict[str, int]:
    """ORM verdict against the evaluator's on the trajectories that have both: tp, fp, fn, tn."""
    out = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for trajectory in trajectories:
        if trajectory.orm_reward is None or trajectory.eval_reward is None:
            continue
        orm, evaluator = is_success(trajectory.orm_reward), is_success(trajectory.eval_reward)
        out[("t" if orm == evaluator else "f") + ("p" if orm else "n")] += 1
    return out


@dataclass
class PhaseFigures:
    """What one phase contributes to the report."""

    phase: int
    record: dict[str, Any] = field(default_factory=dict)
    """The phase's row of phases.csv (or its stage metrics when the phase has not closed yet)."""
    test: dict[str, Rate] = field(default_factory=dict)
    """Held-out success per site (`all` first), from the evaluation JSONL."""
    train: dict[str, Rate] = field(default_factory=dict)
    """Training-rollout success per site by the evaluators, from labelled.jsonl (else the raw rollouts)."""
    confusion: dict[str, int] = field(default_factory=dict)
    """ORM against the evaluators on the phase's labelled rollouts."""
    replay: dict[str, Any] = field(default_factory=dict)
    """The replay buffer's manifest entry for the phase (trajectories, steps, successes)."""
    replay_scores: dict[str, Any] = field(default_factory=dict)
    """The replay filter's window and every step it scored (`replay_scores.json`), empty when not recorded."""
    critic_values: dict[str, list[float]] = field(default_factory=dict)
    """The curriculum critic's P(success) of the tasks it kept (`kept`) and of those its window rejected."""
    step_values: dict[StepKey, dict[str, Any]] = field(default_factory=dict)
    """V(s), V(s') and advantage of each step the phase's actor stage trained on, by (trajectory_id, step_index)."""
    evaluations: list[Trajectory] = field(default_factory=list)
    rollouts: list[Trajectory] = field(default_factory=list)

    def metric(self, key: str) -> float | None:
        value = self.record.get(key)
        try:
            return float(value) if value not in (None, "") else None
        except (TypeError, ValueError):
            return None

    def stage_seconds(self) -> dict[str, float]:
        return {stage: s for stage in STAGES if (s := self.metric(f"time/{stage}_s")) is not None}


@dataclass
class RunFigures:
    """The figures of a whole run directory, phase by phase, plus the training curves."""

    root: Path
    phases: list[PhaseFigures]
    losses: dict[str, list[tuple[int, float]]]
    """Per loss key, (global step, value) in step order, over every launch's metrics CSV."""
    config: dict[str, Any]

    @classmethod
    def read(cls, root: str | Path) -> RunFigures:
        layout = RunLayout(root)
        records = _phase_rows(layout)
        numbers = sorted(set(records) | {int(p.name[6:]) for p in layout.root.glob("phase_[0-9][0-9][0-9]")})
        replay = _replay_stats(layout)
        phases = [_phase(layout, phase, records.get(phase), replay.get(phase, {})) for phase in numbers]
        config = _json(layout.config_path) or {}
        return cls(root=layout.root, phases=phases, losses=_losses(layout.root), config=config)

    def phase(self, number: int) -> PhaseFigures | None:
        return next((p for p in self.phases if p.phase == number), None)

    @property
    def held_out_tasks(self) -> set[str]:
        """Task ids of the last held-out evaluation: the tasks a baseline must have been evaluated on."""
        evaluated = [p for p in self.phases if p.evaluations]
        return {t.task.task_id for t in evaluated[-1].evaluations} if evaluated else set()

    @property
    def value_window(self) -> tuple[float, float]:
        """The curriculum critic's window as the run was configured (the default when the config lacks one)."""
        window = (self.config.get("curriculum") or {}).get("value_window") or CurriculumConfig().value_window
        return float(window[0]), float(window[1])

    @property
    def sites(self) -> list[str]:
        return sorted({site for p in self.phases for site in p.test if site != "all"})


def _phase(layout: RunLayout, phase: int, row: dict[str, Any] | None, replay: dict[str, Any]) -> PhaseFigures:
    record = row if row is not None else _stage_metrics(layout, phase)
    evaluations = _trajectories(lambda: layout.evaluations(phase))
    labelled = _trajectories(lambda: layout.labelled(phase)) if layout.labelled_path(phase).exists() else []
    rollouts = labelled or _trajectories(lambda: layout.rollouts(phase))
    return PhaseFigures(
        phase=phase,
        record=record,
        test=rates_by_site(evaluations, "eval_reward"),
        train=rates_by_site(rollouts, "eval_reward"),
        confusion=orm_confusion(labelled),
        replay=replay,
        replay_scores=_json(layout.replay_scores_path(phase)) or {},
        critic_values=critic_values(_json(layout.phase_dir(phase) / STATE_FILE)),
        step_values=_step_values(layout, phase),
        evaluations=evaluations,
        rollouts=rollouts,
    )


def critic_values(state: dict[str, Any] | None) -> dict[str, list[float]]:
    """From a phase's curriculum state: the critic's values of the kept tasks and of those outside its window.

    Tasks the window let through but the selection or the judge left out are in neither list: the
    histogram shows what the critic filter itself decided.
    """
    record = (state or {}).get("record") or {}
    kept = [task.get("curriculum", {}).get("critic_value") for task in record.get("kept", [])]
    rejected = [r.get("value") for r in record.get("rejected", []) if r.get("reason") in CRITIC_REASONS]
    out = {"kept": [v for v in kept if v is not None], "rejected": [v for v in rejected if v is not None]}
    return out if out["kept"] or out["rejected"] else {}


def _step_values(layout: RunLayout, phase: int) -> dict[StepKey, dict[str, Any]]:
    try:
        return read_step_values(layout.advantages_path(phase))
    except (OSError, ValueError, KeyError) as err:
        log.warning("report: cannot read the step values of phase %d (%s)", phase, err)
        return {}


def _trajectories(read: Any) -> list[Trajectory]:
    try:
        return read()
    except (OSError, ValueError) as err:
        log.warning("report: cannot read trajectories (%s)", err)
        return []


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _phase_rows(layout: RunLayout) -> dict[int, dict[str, Any]]:
    try:
        with layout.phases_csv.open(newline="", encoding="utf-8") as handle:
            return {int(row["phase"]): row for row in csv.DictReader(handle) if row.get("phase", "").isdigit()}
    except OSError:
        return {}


def _stage_metrics(layout: RunLayout, phase: int) -> dict[str, Any]:
    """An unfinished phase's record: the metrics of the stages it has done so far."""
    record: dict[str, Any] = {"phase": phase}
    for path in sorted(layout.metrics_dir(phase).glob("*.json")):
        record.update(_json(path) or {})
    return record


def _replay_stats(layout: RunLayout) -> dict[int, dict[str, Any]]:
    if not layout.replay_dir.exists():
        return {}
    try:
        return ReplayBuffer(layout.replay_dir).stats()
    except (OSError, ValueError) as err:
        log.warning("report: cannot read the replay buffer (%s)", err)
        return {}


def _losses(root: Path) -> dict[str, list[tuple[int, float]]]:
    """The loss columns of `metrics/version_*/metrics.csv` (one file per launch), merged and sorted by step.

    A phase's record is logged to the same CSV (at the end of the phase's step range, with its `phase` column
    set) and carries the stages' summary losses; drawn as a batch, it would stretch the axis past the batches
    and squeeze them into a vertical stroke, so those rows are left out.
    """
    out: dict[str, dict[int, float]] = {key: {} for key in LOSS_KEYS}
    for path in RunLayout(root).launch_logs():
        try:
            with path.open(newline="", encoding="utf-8") as handle:
                for row in csv.DictReader(handle):
                    if row.get("phase"):
                        continue
                    for key in LOSS_KEYS:
                        if row.get(key) and row.get("step", "").isdigit():
                            out[key][int(row["step"])] = float(row[key])
        except (OSError, ValueError) as err:
            log.warning("report: skipping %s (%s)", path, err)
    return {key: sorted(points.items()) for key, points in out.items() if points}
