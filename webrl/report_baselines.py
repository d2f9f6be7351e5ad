"""Baselines for the report's success plot: other runs' held-out success, read from their run directories.

A run made by `python -m recipes.compare` sits in `<output-root>/<method>` beside the other methods'
runs (SFT, Filtered BC, the ablations, WebRL with the other reward source), so the report looks at its
run directory's siblings; `--baseline RUN_DIR` names more. Two kinds of run hold a held-out evaluation:
a WebRL run evaluates after every phase (`phase_NNN/eval.rankR.jsonl`), drawn as a series per phase;
the SFT and Filtered BC recipes evaluate one checkpoint (`eval_<name>-<id>.json` beside its `.jsonl`),
drawn as a level line. A sibling is drawn only when the comparison launched it (it holds the
comparison's `launches.json`: an unrelated run that happens to sit beside this one is no baseline)
and it was evaluated on the run's own held-out tasks with the run's evaluation settings (a rate over
other tasks, or over the same tasks with other steps, sampling or page budget, is no comparison;
`resume.allow_changes` can change those settings for a run's later evaluations only); a baseline named
on the command line is always drawn, and the table says when its tasks differ.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webrl.data.trajectory import Trajectory, read_trajectories
from webrl.report_data import Rate, rates_by_site
from webrl.run_config import changed_keys, describe_changes
from webrl.run_layout import RunLayout
from webrl.run_state import RunState

log = logging.getLogger(__name__)


@dataclass
class Baseline:
    """One other run's held-out success: per phase (a WebRL run) or of one checkpoint (an SFT or BC recipe)."""

    name: str
    """The run directory's name (the method's, in a comparison)."""
    source: Path
    per_phase: dict[int, Rate] = field(default_factory=dict)
    checkpoint: Rate | None = None
    tasks: frozenset[str] = frozenset()
    """Task ids of the evaluation compared (a WebRL run's last evaluated phase)."""
    same_tasks: bool = True
    """Whether `tasks` are the report's run's held-out tasks."""
    settings: dict[str, Any] | None = None
    """The evaluation settings (`webrl.evaluation.identity.evaluation_settings`) of that evaluation; None where the
    run directory does not record them (a WebRL run without config.json, an evaluation JSON without its identity)."""

    @property
    def label(self) -> str:
        return self.name if self.per_phase else f"{self.name} (one checkpoint)"


def read_baseline(run_dir: Path) -> Baseline | None:
    """The held-out success recorded in `run_dir`, or None when it holds no finished evaluation."""
    layout = RunLayout(run_dir)
    state = RunState.load(layout.state_path) if layout.state_path.is_file() else None
    per_phase: dict[int, Rate] = {}
    last: list[Trajectory] = []
    for phase_dir in sorted(run_dir.glob("phase_[0-9][0-9][0-9]")):
        phase = int(phase_dir.name[6:])
        if state is not None and not state.is_done(phase, "evaluate"):
            continue  # an evaluation in flight holds only the episodes done so far
        evaluations = layout.evaluations(phase)
        rate = rates_by_site(evaluations, "eval_reward").get("all")
        if rate is not None:
            per_phase[phase], last = rate, evaluations
    if per_phase:
        settings = _loop_settings(run_dir, max(per_phase))
        return Baseline(run_dir.name, run_dir, per_phase=per_phase, tasks=_task_ids(last), settings=settings)
    finished = [p for p in run_dir.glob("eval_*-*.json") if p.with_suffix(".jsonl").is_file()]
    if not finished:
        return None
    newest = max(finished, key=lambda path: path.stat().st_mtime)
    evaluations = read_trajectories(newest.with_suffix(".jsonl"))
    rate = rates_by_site(evaluations, "eval_reward").get("all")
    if rate is None:
        return None
    settings = _recorded_settings(newest)
    return Baseline(run_dir.name, newest, checkpoint=rate, tasks=_task_ids(evaluations), settings=settings)


def find_baselines(root: Path, tasks: set[str], *, named: Sequence[Path] = (), siblings: bool = True) -> list[Baseline]:
    """The `named` runs, then the siblings of `root` a comparison launched and evaluated on `tasks` (task ids) with
    the evaluation settings of `root`'s own held-out evaluation (`_comparable`)."""
    out: list[Baseline] = []
    seen = {root.resolve()}
    for run_dir in named:
        if not Path(run_dir).is_dir():
            raise ValueError(f"report.baselines: {run_dir} is not a directory")
        baseline = _read(Path(run_dir))
        if baseline is None:
            raise ValueError(f"report.baselines: {run_dir} holds no finished held-out evaluation")
        baseline.same_tasks = baseline.tasks == tasks
        out.append(baseline)
        seen.add(Path(run_dir).resolve())
    # Imported here: the evaluation package reads the run config, whose tracking section writes this report.
    from webrl.evaluation.run_results import LAUNCHES_FILE

    if siblings and tasks:
        launched = [path.parent for path in sorted(root.resolve().parent.glob(f"*/{LAUNCHES_FILE}"))]
        found = [_read(run_dir) for run_dir in launched if run_dir not in seen]
        same_tasks = [baseline for baseline in found if baseline is not None and baseline.tasks == tasks]
        own = _read(root) if same_tasks else None
        out.extend(baseline for baseline in same_tasks if _comparable(baseline, own))
    return out


def _comparable(sibling: Baseline, own: Baseline | None) -> bool:
    """Whether `sibling`'s evaluation was made with the evaluation settings of the run's own (`own`), logging why not.

    The same task ids are not enough: a sibling evaluated with other steps or sampling (a comparison relaunched
    with `env.max_steps=6 resume.allow_changes=[env.max_steps]` evaluates its recipes again, not this run) scores
    other episodes. Where the run's own settings are unknown (no config.json), the task ids alone decide.
    """
    if own is None or own.settings is None:
        return True
    if sibling.settings is None:
        log.info("report: %s is no baseline: its evaluation records no settings to compare", sibling.source)
        return False
    differing = changed_keys(sibling.settings, own.settings, {})
    if differing:
        log.info(
            "report: %s is no baseline: evaluated with other settings than this run's held-out evaluation (its → "
            "this run's: %s)",
            sibling.source,
            describe_changes(differing),
        )
    return not differing


def _read(run_dir: Path) -> Baseline | None:
    try:
        return read_baseline(run_dir)
    except (OSError, ValueError, KeyError) as err:
        log.warning("report: cannot read a baseline from %s (%s)", run_dir, err)
        return None


def _loop_settings(run_dir: Path, phase: int) -> dict[str, Any] | None:
    """The evaluation settings of a WebRL run's phase-`phase` evaluation, from the settings it kept (config.json)."""
    # Imported here, as LAUNCHES_FILE is: the comparison imports the run config, whose tracking section writes this
    # report.
    from webrl.comparison import evaluated_settings

    return evaluated_settings(run_dir, phase)


def _recorded_settings(evaluation: Path) -> dict[str, Any] | None:
    """The evaluation settings a recipe's `eval_<name>-<id>.json` records: its identity without the checkpoint."""
    from webrl.evaluation.identity import CHECKPOINT_KEYS

    identity = json.loads(evaluation.read_text(encoding="utf-8")).get("identity")
    return None if identity is None else {key: value for key, value in identity.items() if key not in CHECKPOINT_KEYS}


def _task_ids(trajectories: list[Trajectory]) -> frozenset[str]:
    return frozenset(trajectory.task.task_id for trajectory in trajectories)
