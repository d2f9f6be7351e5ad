"""RunBranch: a new run directory that starts where a finished stage of another run ended.

An experiment that changes one setting from phase N's actor on (another learning rate, another KL
weight) need not redo the curriculum, rollouts, labels and critic that come before it, the expensive
part of a phase. A branch copies the files those stages wrote (through `RunLayout`, stage by stage,
so nothing of a later stage comes along), the replay buffer's phases that existed at that point,
`config.json`, the records of the phases already closed and of the config changes in force at the
branch point (a change the source accepted later, even within phase N, ran none of the copied
stages), and marks the stages done in its own `run_state.json`. Its `config.json` names the branch
as `output_dir`, so that `--config` on it relaunches the branch, never the source. Relaunching
`recipes.webrl` on it then runs the stages after the branch point only; a changed key goes through
`resume.allow_changes`, which records it in `config_changes.json` from the next stage of phase N,
as in any run directory.

Everything is copied, never linked: the source may be resumed, pruned or deleted afterwards.
`branched_from.json` names the source (absolute path), the phase, the stage, the time and the
source's W&B run; the W&B id file and the `wandb/` directory are not copied, so the branch logs to a
W&B run of its own. The launch logs (`metrics/version_N/metrics.csv`) keep their rows from the copied
stages, so the branch's report draws those losses too. The branch is assembled in a hidden sibling
directory and renamed into place when complete, so an interrupted branch leaves no half-run behind.
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from webrl.config_checks import ConfigError, read_run_file
from webrl.curriculum.state import STATE_FILE
from webrl.data.atomic_io import publish_dir, write_json_atomic, write_text_atomic
from webrl.data.replay import ReplayBuffer
from webrl.data.trajectory import read_trajectories
from webrl.run_config import change_records, effective_config, in_force
from webrl.run_layout import RunLayout
from webrl.run_state import PHASE_STEPS, STAGES, RunState
from webrl.tracking import csv_text, write_phase_row


def read_branch_point(path: Path) -> dict[str, Any]:
    """`branched_from.json` as `RunBranch.provenance` wrote it, with the source and the point every reader names;
    a file that is not JSON, or lacks one of them, is one ConfigError naming the file and the first key missing."""
    point = read_run_file(path, dict)
    missing = next((key for key in ("source", "phase", "after") if key not in point), None)
    if missing is not None:
        raise ConfigError(
            f"{path}: no {missing!r} entry (a branch names its source and its point); fix or restore the file"
        )
    return point


class RunBranch:
    """The run directory `source` as it stood once phase `phase`'s stage `after` was done.

    Raises ValueError naming the problem when `after` is not a stage, or when the source is not a run
    directory or has not completed that stage yet.
    """

    def __init__(self, source: str | Path, phase: int, after: str) -> None:
        if after not in STAGES:
            raise ValueError(f"--after {after!r}: not a stage (stages: {', '.join(STAGES)})")
        if phase < 0:
            raise ValueError(f"--phase {phase}: must be >= 0")
        self.source = RunLayout(Path(source).resolve())
        if not self.source.config_path.is_file() or not self.source.state_path.is_file():
            raise ValueError(f"{self.source.root}: not a run directory (no config.json and run_state.json)")
        self.source_state = RunState.load(self.source.state_path)
        if not self.source_state.is_done(phase, after):
            state = self.source_state
            raise ValueError(
                f"{self.source.root} has not completed stage {after} of phase {phase} "
                f"(it is in phase {state.phase}, done: {', '.join(state.done) or 'nothing yet'})"
            )
        self.phase = phase
        self.after = after
        self._refuse_changes_held_by_config()
        self.done = list(STAGES[: STAGES.index(after) + 1])
        """The stages of `phase` the branch has done."""
        self.closed = phase + 1 if after == STAGES[-1] else phase
        """Phases before this one are closed (recorded in history and phases.csv)."""

    def _refuse_changes_held_by_config(self) -> None:
        """Refuse a branch of a branch before a change that the source branch's config.json already holds.

        A branch writes the settings in force at its branch point into its config.json (so that `--config` on it
        relaunches with them) and keeps their records; `effective_config` applies records, it cannot undo one. Taken
        before such a change, a branch would start from values its kept stages never ran with; the source of the
        branch holds the settings from before the change.
        """
        if not self.source.branch_path.is_file():
            return
        point = read_branch_point(self.source.branch_path)
        held = [
            record for record in change_records(self.source.root) if in_force(record, point["phase"], point["after"])
        ]
        undone = [record for record in held if not in_force(record, self.phase, self.after)]
        if undone:
            keys = ", ".join(key for record in undone for key in record["changes"])
            raise ValueError(
                f"{self.source.root} is a branch whose config.json holds changes of {keys} that came after phase "
                f"{self.phase}'s {self.after}; branch its source {point['source']} at that point instead"
            )

    def files(self) -> list[Path]:
        """The stage outputs the branch copies, relative to the run directory (run-level records aside)."""
        out: list[Path] = []
        for phase in range(self.phase + 1):
            for stage in STAGES if phase < self.phase else self.done:
                out.extend(path.relative_to(self.source.root) for path in self.stage_files(phase, stage))
        return sorted(out)

    def stage_files(self, phase: int, stage: str) -> list[Path]:
        """The files of the source that `stage` of `phase` wrote (what it did not write is left out)."""
        layout = self.source
        if stage == "curriculum":
            files = [layout.tasks_path(phase), layout.phase_dir(phase) / STATE_FILE]
        elif stage == "rollouts":
            files = [*layout.rollouts_paths(phase), *_screenshots(layout.rollouts_paths(phase))]
        elif stage == "labels":
            files = [layout.labelled_path(phase)]
        elif stage == "replay":
            files = [layout.replay_samples_path(phase), layout.replay_scores_path(phase)]
        elif stage == "critic":
            # The actor stage writes the critic's values of the phase's states, but they are the critic's alone (keyed
            # by its weights): a branch that reruns the actor on this critic takes them instead of scoring again.
            files = [layout.critic_path(phase), layout.critic_values_path(phase)]
        elif stage == "actor":
            files = [layout.advantages_path(phase), *layout.actor_dir(phase).rglob("*")]
        elif stage == "evaluate":
            files = [layout.eval_tasks_path(phase), *layout.eval_paths(phase), *_screenshots(layout.eval_paths(phase))]
        elif stage == "checkpoint":  # the run-level records aside, it marks the phase's record sent to the trackers
            files = [layout.tracked_path(phase)]
        else:  # sync writes only its metrics
            files = []
        if stage != "checkpoint":
            files.append(layout.metrics_path(phase, stage))
        return [path for path in files if path.is_file()]

    def replay_phases(self) -> list[int]:
        """The replay buffer's phases at the branch point: those before it, and its own once replay is done."""
        if not self.source.replay_dir.is_dir():
            return []
        last = self.phase if "replay" in self.done else self.phase - 1
        return [phase for phase in ReplayBuffer(self.source.replay_dir).phases() if phase <= last]

    def write(self, destination: str | Path) -> RunLayout:
        """Copy the branch into `destination`, which must not exist yet; returns its layout."""
        target = Path(destination).resolve()
        if target.exists():
            raise ValueError(f"{target} already exists: a branch goes into a new directory")
        staging = target.with_name(f".{target.name}.branching")
        if staging.exists():
            shutil.rmtree(staging)  # left by a branch that was interrupted: never a run of its own
        staging.mkdir(parents=True)
        out = RunLayout(staging)
        # The settings the source ran with at the branch point, so that the printed relaunch (--config this file)
        # goes on with them, in the branch; the records of the changes are copied too (`_write_records`).
        settings = effective_config(self.source.root, (self.phase, self.after))
        write_json_atomic(out.config_path, {**settings, "output_dir": str(target)})
        for relative in self.files():
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.source.root / relative, staging / relative)
        self._write_replay(out)
        self._write_records(out)
        self._write_launch_logs(out)
        write_json_atomic(out.branch_path, self.provenance())
        publish_dir(staging, target)
        return RunLayout(target)

    def provenance(self) -> dict[str, Any]:
        """What `branched_from.json` holds: the source run, the branch point and when it was taken."""
        wandb_id = self.source.wandb_run_id_path
        return {
            "source": str(self.source.root),
            "phase": self.phase,
            "after": self.after,
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "source_wandb_run_id": wandb_id.read_text(encoding="utf-8").strip() if wandb_id.is_file() else None,
        }

    def _write_replay(self, out: RunLayout) -> None:
        """The buffer's phases as they were at the branch point, each written whole with its manifest entry."""
        source = ReplayBuffer(self.source.replay_dir)
        target = ReplayBuffer(out.replay_dir)
        for phase in self.replay_phases():
            target.add_phase(phase, source.trajectories(phase))

    def _write_records(self, out: RunLayout) -> None:
        """run_state.json with the branch's stages done, and the records of the closed phases and changes."""
        history = [record for record in self.source_state.history if record["phase"] < self.closed]
        state = RunState(phase=self.phase, history=history)
        for stage in self.done:
            state.mark(self.phase, stage, out.state_path)
        if self.source.phases_csv.is_file():
            with self.source.phases_csv.open(newline="", encoding="utf-8") as handle:
                for row in csv.DictReader(handle):
                    if int(row["phase"]) < self.closed:
                        write_phase_row(out.phases_csv, {key: value for key, value in row.items() if value != ""})
        kept = [record for record in change_records(self.source.root) if in_force(record, self.phase, self.after)]
        if kept:
            write_json_atomic(out.config_changes_path, kept)

    def _write_launch_logs(self, out: RunLayout) -> None:
        """Each launch's CSV log, cut to the steps the copied stages logged."""
        limit = self._step_limit()
        for path in self.source.launch_logs():
            with path.open(newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                rows = [row for row in reader if row.get("step", "").isdigit() and int(row["step"]) < limit]
                header = list(reader.fieldnames or [])
            if rows:
                write_text_atomic(out.root / path.relative_to(self.source.root), csv_text(header, rows))

    def _step_limit(self) -> int:
        """The first logged step the branch does not keep.

        On the step axis (`webrl.run_state.PHASE_STEPS`) phase p's critic logs from p * PHASE_STEPS,
        its actor from the middle of the phase, and its record at the phase's last step.
        """
        start = self.phase * PHASE_STEPS
        if "critic" not in self.done:
            return start
        if "actor" not in self.done:
            return start + PHASE_STEPS // 2
        return start + PHASE_STEPS if self.after == STAGES[-1] else start + PHASE_STEPS - 1


def _screenshots(paths: Iterable[Path]) -> list[Path]:
    """The screenshots the trajectories of these JSONL files list (their paths are relative to the file)."""
    out = []
    for path in paths:
        for trajectory in read_trajectories(path):
            shots = trajectory.metadata.get("screenshots") or []
            out.extend(path.parent / shot for shot in shots if shot)
    return out
