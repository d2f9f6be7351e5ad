"""RunLayout: where everything of one WebRL run lives in its directory, named in this one place.

The loop writes these files, and the dry-run plan, the baselines, the recipes and the tests read
them; they all go through a RunLayout, so a file's name cannot drift between its writer and its readers.

    <run>/config.json, config_changes.json, run_state.json, phases.csv, replay/, wandb_run_id.txt,
          metrics/version_N/metrics.csv (one per launch), branched_from.json (`webrl.run_branch`)
    <run>/phase_NNN/tasks.json, rollouts.rankR.jsonl, labelled.jsonl, replay_samples.jsonl, replay_scores.json,
                    critic.pt, critic_values.json, advantages.jsonl, actor/, eval_tasks.json, eval.rankR.jsonl,
                    metrics/<stage>.json
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from pathlib import Path

from webrl.data.atomic_io import write_json_atomic
from webrl.data.trajectory import Task, Trajectory, phase_name, read_trajectories

__all__ = ["RunLayout", "phase_name"]


class RunLayout:
    """The paths of the run directory `root`, and readers of the files the loop writes into them."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    # ---------------------------------------------------------------------------------------------- run files
    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def config_changes_path(self) -> Path:
        return self.root / "config_changes.json"

    @property
    def state_path(self) -> Path:
        return self.root / "run_state.json"

    @property
    def phases_csv(self) -> Path:
        return self.root / "phases.csv"

    @property
    def replay_dir(self) -> Path:
        return self.root / "replay"

    @property
    def wandb_run_id_path(self) -> Path:
        """The W&B run id, saved by the first launch so that a resume logs to the same W&B run."""
        return self.root / "wandb_run_id.txt"

    @property
    def launch_logs_dir(self) -> Path:
        """Fabric's CSV logger: `version_N/metrics.csv` per launch, the training stages' step-wise metrics."""
        return self.root / "metrics"

    def launch_logs(self) -> list[Path]:
        """Each launch's `metrics.csv`, in launch order: by the number of its `version_N`, so that version_10 comes
        after version_9 (a reader that keeps the last value of a step must see the latest launch last)."""
        paths = self.launch_logs_dir.glob("version_*/metrics.csv")
        return sorted(paths, key=lambda path: (_version_number(path.parent.name), path.parent.name))

    @property
    def branch_path(self) -> Path:
        """Where a branched run names the run and the stage it was branched from (`webrl.run_branch`)."""
        return self.root / "branched_from.json"

    # ---------------------------------------------------------------------------------------------- phase files
    def phase_dir(self, phase: int) -> Path:
        return self.root / phase_name(phase)

    def phases(self) -> list[int]:
        """The numbers of the phase directories present, in order; a directory such as `phase_old` that a user
        left beside them is not a phase and is skipped, not an error."""
        numbers = (path.name.removeprefix("phase_") for path in self.root.glob("phase_*") if path.is_dir())
        return sorted(int(number) for number in numbers if number.isdigit())

    def tasks_path(self, phase: int) -> Path:
        return self.phase_dir(phase) / "tasks.json"

    def rollouts_path(self, phase: int, rank: int) -> Path:
        return self.phase_dir(phase) / f"rollouts.rank{rank}.jsonl"

    def eval_path(self, phase: int, rank: int) -> Path:
        return self.phase_dir(phase) / f"eval.rank{rank}.jsonl"

    def eval_tasks_path(self, phase: int) -> Path:
        """The task ids the phase's held-out evaluation ran on, written before its episodes (`record_eval_tasks`)."""
        return self.phase_dir(phase) / "eval_tasks.json"

    def rollouts_paths(self, phase: int) -> list[Path]:
        """Every rank's rollouts file of `phase` (as many as the world size that ran it)."""
        return sorted(self.phase_dir(phase).glob("rollouts.rank*.jsonl"))

    def eval_paths(self, phase: int) -> list[Path]:
        return sorted(self.phase_dir(phase).glob("eval.rank*.jsonl"))

    def labelled_path(self, phase: int) -> Path:
        return self.phase_dir(phase) / "labelled.jsonl"

    def replay_samples_path(self, phase: int) -> Path:
        return self.phase_dir(phase) / "replay_samples.jsonl"

    def replay_scores_path(self, phase: int) -> Path:
        """Every replayed step the filter scored, kept or not, and the filter's window (`ReplayScores`)."""
        return self.phase_dir(phase) / "replay_scores.json"

    def advantages_path(self, phase: int) -> Path:
        """V(s), V(s') and the advantage of every step the actor stage trained on (`webrl.data.step_values`)."""
        return self.phase_dir(phase) / "advantages.jsonl"

    def critic_path(self, phase: int) -> Path:
        return self.phase_dir(phase) / "critic.pt"

    def critic_values_path(self, phase: int) -> Path:
        """The phase critic's value of each state the actor stage scored (`webrl.data.critic_values`)."""
        return self.phase_dir(phase) / "critic_values.json"

    def actor_dir(self, phase: int) -> Path:
        return self.phase_dir(phase) / "actor"

    def tracked_path(self, phase: int) -> Path:
        """Present once the phase's record was sent to the trackers, which only append (`close_phase`)."""
        return self.phase_dir(phase) / "tracked.json"

    def metrics_dir(self, phase: int) -> Path:
        return self.phase_dir(phase) / "metrics"

    def metrics_path(self, phase: int, stage: str) -> Path:
        return self.metrics_dir(phase) / f"{stage}.json"

    # ---------------------------------------------------------------------------------------------- readers
    def tasks(self, phase: int) -> list[Task]:
        data = json.loads(self.tasks_path(phase).read_text(encoding="utf-8"))
        return [Task.from_dict(item) for item in data]

    def rollouts(self, phase: int, task_ids: Collection[str] | None = None) -> list[Trajectory]:
        """Every rank's rollouts of `phase`, each task once, in task order (the shards' split depends on the world
        size); with `task_ids`, only those tasks (see `_read_ranks`)."""
        return self._read_ranks(self.rollouts_paths(phase), task_ids)

    def evaluations(self, phase: int, task_ids: Collection[str] | None = None) -> list[Trajectory]:
        """Every rank's held-out episodes of `phase`, each task once, in task order; without `task_ids`, those of
        the tasks the evaluation recorded (`eval_tasks_path`), so that a reader after the run (a report, a
        comparison) never counts the shard of an earlier launch's tasks; all of them for a run that recorded none."""
        if task_ids is None:
            task_ids = self.recorded_eval_tasks(phase)
        return self._read_ranks(self.eval_paths(phase), task_ids)

    def record_eval_tasks(self, phase: int, task_ids: Collection[str]) -> None:
        """Record the task ids of `phase`'s evaluation (rank 0, before the episodes: a relaunch records its own)."""
        write_json_atomic(self.eval_tasks_path(phase), sorted(task_ids))

    def recorded_eval_tasks(self, phase: int) -> frozenset[str] | None:
        """The task ids `record_eval_tasks` recorded for `phase`, or None where the evaluation recorded none."""
        path = self.eval_tasks_path(phase)
        if not path.is_file():
            return None
        return frozenset(str(task) for task in json.loads(path.read_text(encoding="utf-8")))

    def labelled(self, phase: int) -> list[Trajectory]:
        return read_trajectories(self.labelled_path(phase))

    @staticmethod
    def _read_ranks(paths: list[Path], task_ids: Collection[str] | None = None) -> list[Trajectory]:
        """The episodes of `paths`, the first file's per task; with `task_ids`, only the stage's own tasks.

        A stage relaunched with another world size or task set (`resume.allow_changes`) leaves files of the
        earlier sharding beside the new: their other tasks must not count, nor a task twice.
        """
        first: dict[str, Trajectory] = {}
        for path in paths:
            for trajectory in read_trajectories(path):
                if task_ids is None or trajectory.task.task_id in task_ids:
                    first.setdefault(trajectory.task.task_id, trajectory)
        return sorted(first.values(), key=lambda t: t.task.task_id)


def _version_number(name: str) -> int:
    """N of a logger directory `version_N`; -1 for a name without a number (sorted first, by name)."""
    suffix = name.removeprefix("version_")
    return int(suffix) if suffix.isdigit() else -1
