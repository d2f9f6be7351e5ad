"""Offline baselines WebRL is compared with: Filtered BC's choice of trajectories to clone, and what it cloned."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any

from webrl.cache_builds import DONE_MARKER
from webrl.data.trajectory import SUCCESS_THRESHOLD, Trajectory, read_trajectories
from webrl.run_config import change_records, changed_keys, describe_changes
from webrl.run_layout import RunLayout

INPUTS_KEY = "inputs"
"""The key of the Filtered BC actor's done marker that holds what it was trained on (`recipes.filtered_bc`)."""
ROLLOUTS_KEY = "rollouts_sha256"
"""The key of those inputs that holds `rollouts_sha256` of the source rollouts it was trained on."""


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100) of `values`, interpolating linearly between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of an empty list")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def top_scored(trajectories: list[Trajectory], q: float) -> tuple[list[Trajectory], float]:
    """The trajectories whose ORM score reaches the q-th percentile of all their scores, and that threshold."""
    unscored = [t.task.task_id for t in trajectories if t.orm_score is None]
    if unscored:
        raise ValueError(
            f"{len(unscored)} trajectories have no ORM score (e.g. {unscored[0]}): Filtered BC needs a run "
            "labelled by the ORM (reward.orm_labels=true, the default), or filtered_bc.score=outcome"
        )
    threshold = percentile([t.orm_score for t in trajectories], q)
    return [t for t in trajectories if t.orm_score >= threshold], threshold


def successful(trajectories: list[Trajectory]) -> tuple[list[Trajectory], float]:
    """The trajectories whose training outcome is a success, and that threshold.

    For a run rewarded by the evaluators without ORM labels (`reward.orm_labels=false`, as the SmolLM2 runs
    save the ORM's 38 minutes) the outcome is 0 or 1; a percentile of such labels keeps every rollout once
    fewer than 30 % succeed, so the successes themselves are what is cloned.
    """
    unlabelled = [t.task.task_id for t in trajectories if t.outcome is None]
    if unlabelled:
        raise ValueError(
            f"{len(unlabelled)} trajectories have no training outcome (e.g. {unlabelled[0]}): "
            "filtered_bc.score=outcome needs a run whose labels stage finished"
        )
    return [t for t in trajectories if t.succeeded], SUCCESS_THRESHOLD


def phase_rollouts(run_dir: Path, phase: int) -> list[Trajectory]:
    """The ORM-labelled rollouts of `phase` in a WebRL run directory; a clear error when the run lacks them."""
    path = RunLayout(run_dir).labelled_path(phase)
    if not path.exists():
        raise FileNotFoundError(
            f"filtered_bc.source_run={str(run_dir)!r}: {path} does not exist; run `python -m recipes.webrl` "
            f"(output_dir={run_dir}) through phase {phase} first"
        )
    trajectories = read_trajectories(path)
    if not trajectories:
        raise ValueError(f"{path} holds no trajectory")
    return trajectories


def rollouts_sha256(run_dir: Path, phase: int) -> str:
    """SHA-256 of the bytes of `phase`'s labelled rollouts in a WebRL run directory.

    The content, not the path: a WebRL run removed and run again in the same directory writes new rollouts under
    the same name, and an actor cloned from the old ones must not pass for one cloned from the new.
    """
    return hashlib.sha256(RunLayout(run_dir).labelled_path(phase).read_bytes()).hexdigest()


def recorded_inputs(actor: Path) -> dict[str, Any] | None:
    """The inputs a trained Filtered BC actor's done marker records (None for an actor trained before they were)."""
    return json.loads((Path(actor) / DONE_MARKER).read_text(encoding="utf-8")).get(INPUTS_KEY)


def trained_settings(filtered_bc: Any, seed: int, sft: Path | None = None) -> dict[str, Any]:
    """The settings a Filtered BC actor's done marker records it was trained with, as the marker holds them (tuples
    become lists): the `filtered_bc` section, the seed and, when given, the SFT actor it started from."""
    settings = {"filtered_bc": dataclasses.asdict(filtered_bc), "seed": seed}
    if sft is not None:
        settings["sft"] = str(sft)
    return json.loads(json.dumps(settings))


def settings_change(actor: Path, settings: dict[str, Any], run_dir: Path) -> str:
    """Why the Filtered BC actor at `actor` was not trained with `settings` (`trained_settings`; only the keys given
    are compared), '' when it was.

    The recipe, which knows the SFT actor, decides by this whether to train again; the comparison, which does not,
    whether the result is stale: one answer for both, so that a result the comparison runs again is one the recipe
    trains again. An actor recorded before its settings were is taken as trained with the run's settings while
    the run (`run_dir`) has accepted no change (config_changes.json): they are then those of every launch.
    """
    recorded = recorded_inputs(actor)
    if recorded is None:
        accepted = change_records(run_dir)
        return "it records no settings, and the run has accepted changes since its first launch" if accepted else ""
    changes = changed_keys({key: recorded.get(key) for key in settings}, settings, {})
    return f"it was trained with other settings ({describe_changes(changes)})" if changes else ""


def rollouts_change(actor: Path, run_dir: Path, phase: int) -> str:
    """Why the Filtered BC actor at `actor` was not trained on the current phase-`phase` rollouts of `run_dir`; ''
    when it was.

    An actor recorded before the digest was (`ROLLOUTS_KEY` absent) is taken as trained on the rollouts when they
    are older than its done marker: rollouts written after the actor was trained cannot be those it cloned, while
    the others are those every launch of that run read.
    """
    labelled = RunLayout(run_dir).labelled_path(phase)
    if not labelled.is_file():
        return f"the phase-{phase} rollouts of {run_dir} it was trained on are gone ({labelled} does not exist)"
    recorded = (recorded_inputs(actor) or {}).get(ROLLOUTS_KEY)
    if recorded is None:
        same = labelled.stat().st_mtime <= (Path(actor) / DONE_MARKER).stat().st_mtime
    else:
        same = recorded == rollouts_sha256(run_dir, phase)
    return "" if same else f"it was trained on other phase-{phase} rollouts of {run_dir} than those it holds now"
