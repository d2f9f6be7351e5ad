"""A run directory's final held-out evaluation, read back for a comparison: per-task outcomes, from where, how long.

Two kinds of runs end in an evaluation. A WebRL run (`recipes.webrl`) evaluates after every phase into
`phase_NNN/eval.rankR.jsonl`; its result is the last phase's, once `run_state.json` marks that phase
checkpointed (its record, with its time, is written then). The SFT and Filtered BC recipes evaluate one
checkpoint through `recipes.evaluate` into `eval_<name>-<id>.json` (written last, so its presence means the
evaluation finished) beside the trajectories `.jsonl`; a run directory can hold evaluations made with other
settings, so the one read is the newest whose recorded settings (split, task count, seed, sampling:
`identity`) are the config's and whose checkpoint still holds the weights it evaluated.

The wall time comes from `launches.json`, which a comparison writes when it runs a method (every launch,
with its duration, resumed launches included); without it, a WebRL run's phase times are summed (they
leave out the cached SFT and ORM builds and the process start-up). A WebRL run that went past the phase
read (a comparison with fewer phases reusing a longer run) has its phase times up to that phase summed:
its launches timed the later phases too. So has one whose launches did not time all of it (started by
`recipes.webrl` itself and resumed by a comparison, or resumed by hand between two of its launches): each
launch records where the run stood before and after it, and those must join up from an empty directory.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webrl.data.trajectory import read_trajectories
from webrl.evaluation.breakdown import TaskOutcome
from webrl.evaluation.identity import CHECKPOINT_KEYS, weights_unchanged
from webrl.evaluation.outcomes import success_map, task_outcomes
from webrl.run_layout import RunLayout
from webrl.run_state import STAGES, RunState, write_json_atomic

LAUNCHES_FILE = "launches.json"
"""In a method's run directory: each launch a comparison made of it (command, seconds, exit status)."""
WALL_FROM_LAUNCHES, WALL_FROM_PHASES = "launches", "phases"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    """One method's final evaluation on the held-out tasks."""

    method: str
    outcomes: list[TaskOutcome]
    """Each evaluated task's site, template and success."""
    source: str
    """The file the outcomes were read from (for a sharded WebRL evaluation, its first rank's)."""
    suite: str
    split: str
    """The suite and split the tasks were drawn from: equal task ids of two splits are different tasks."""
    wall_s: float | None = None
    """Seconds the method's run took, when known."""
    wall_source: str = ""
    """Where `wall_s` comes from: `launches` (timed by the comparison), `phases` (the run's phase times), or ''."""
    attempted: frozenset[str] = frozenset()
    """Every task id evaluated, those a browser, site or engine failure left out of `outcomes` included (empty: as
    `outcomes`): methods must have attempted the same tasks, and pair on those both scored."""

    @property
    def tasks(self) -> frozenset[str]:
        return self.attempted or frozenset(outcome.task_id for outcome in self.outcomes)

    @property
    def successes(self) -> dict[str, bool]:
        """task id -> success, the form the paired test takes."""
        return success_map(self.outcomes, f"{self.method} ({self.source})")


def loop_result(method: str, run_dir: Path, phase: int, *, suite: str, split: str) -> RunResult | None:
    """The evaluation of `phase` of a WebRL run in `run_dir` (its last phase), or None until that phase is closed.

    Closed means checkpointed, not merely evaluated: a run killed between the two has no phase record (no
    time) yet, and must be resumed to finish it.
    """
    layout = RunLayout(run_dir)
    if not layout.state_path.exists():
        return None
    state = RunState.load(layout.state_path)
    if not state.is_done(phase, STAGES[-1]):
        return None
    wall_s, wall_source = loop_wall_seconds(run_dir, state, phase)
    episodes = layout.evaluations(phase)
    return RunResult(
        method,
        task_outcomes(episodes),
        str(layout.eval_path(phase, 0)),
        suite,
        split,
        wall_s,
        wall_source,
        frozenset(t.task.task_id for t in episodes),
    )


def loop_wall_seconds(run_dir: Path, state: RunState, phase: int) -> tuple[float | None, str]:
    """How long a WebRL run took up to `phase`, and where that comes from (`RunResult.wall_source`).

    The launches time the whole run; a run that went past `phase` (reused for a comparison with fewer phases)
    also spent them on its later phases, so its phases up to `phase` are summed instead.
    """
    launched = launch_seconds(run_dir)
    if launched is not None and not _went_past(state, phase) and _launches_cover_run(run_dir):
        return launched, WALL_FROM_LAUNCHES
    summed = phase_seconds(state.history, phase)
    return (summed, WALL_FROM_PHASES) if summed is not None else (None, "")


def _went_past(state: RunState, phase: int) -> bool:
    """Whether the run did work after `phase`: a later phase's record, or a later phase begun (a stage done)."""
    later_record = any(record.get("phase", 0) > phase for record in state.history)
    return later_record or state.phase > phase + 1 or (state.phase == phase + 1 and bool(state.done))


def phase_seconds(history: list[dict[str, Any]], phase: int) -> float | None:
    """The summed `time/phase_s` of the history's phases 0 to `phase` (each record names its `phase`), or None when
    one of them has no record or it lacks the time: a partial sum would pass for the whole run's time."""
    times = {record.get("phase", 0): record.get("time/phase_s") for record in history}
    needed = [times.get(number) for number in range(phase + 1)]
    if all(isinstance(value, (int, float)) for value in needed):
        return float(sum(needed))
    return None


def recipe_result(method: str, run_dir: Path, name: str, settings: dict[str, Any]) -> RunResult | None:
    """The newest finished `eval_<name>-<id>` evaluation in `run_dir` made with `settings`, or None if there is none.

    `settings` is `webrl.evaluation.identity.evaluation_settings` of the method's config: an evaluation
    recorded with other settings (another split, task count, seed or sampling) is never read, nor one whose
    checkpoint no longer holds the weights it evaluated (`weights_unchanged`).
    """
    matching = []
    for path in Path(run_dir).glob(f"eval_{name}-*.json"):
        identity = json.loads(path.read_text(encoding="utf-8")).get("identity", {})
        recorded = {key: value for key, value in identity.items() if key not in CHECKPOINT_KEYS}
        if recorded != settings or not path.with_suffix(".jsonl").is_file():
            continue
        if weights_unchanged(identity):
            matching.append(path)
        else:
            log.warning("%s: %s no longer holds the weights it evaluated; not reused", path, identity.get("checkpoint"))
    if not matching:
        return None
    path = max(matching, key=lambda candidate: candidate.stat().st_mtime)
    trajectories = path.with_suffix(".jsonl")
    episodes = read_trajectories(trajectories)
    wall_s = launch_seconds(run_dir)
    return RunResult(
        method,
        task_outcomes(episodes),
        str(trajectories),
        str(settings["suite"]),
        str(settings["split"]),
        wall_s,
        WALL_FROM_LAUNCHES if wall_s is not None else "",
        frozenset(t.task.task_id for t in episodes),
    )


def launch_seconds(run_dir: Path) -> float | None:
    """The summed duration of the launches recorded in `run_dir/launches.json`, or None without that file."""
    launches = _launches(run_dir)
    return None if launches is None else float(sum(launch["seconds"] for launch in launches))


def _launches(run_dir: Path) -> list[dict[str, Any]] | None:
    path = Path(run_dir) / LAUNCHES_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _launches_cover_run(run_dir: Path) -> bool:
    """Whether the launches of a WebRL run timed all of it: the first began in a directory without a run state,
    and each began where the one before left the run (`run_progress`). Launches recorded before they held their
    progress are trusted, as they were then."""
    launches = _launches(run_dir) or []
    if not all("progress" in launch for launch in launches):
        return True
    progress = [launch["progress"] for launch in launches]
    joined = all(before == previous[1] for previous, (before, _) in zip(progress, progress[1:], strict=False))
    return not progress or (progress[0][0] is None and joined)


def run_progress(run_dir: Path) -> list[Any] | None:
    """Where a WebRL run stands: its phase and the stages of it done, as JSON holds them; None without a run state
    (a new run directory, or one of a recipe that keeps none)."""
    path = RunLayout(run_dir).state_path
    if not path.is_file():
        return None
    state = RunState.load(path)
    return [state.phase, list(state.done)]


def record_launch(
    run_dir: Path,
    command: list[str],
    seconds: float,
    returncode: int | None,
    progress: tuple[list[Any] | None, list[Any] | None] | None = None,
) -> None:
    """Append one launch of a method (its command, how long it ran, its exit status: None when the comparison was
    interrupted while it ran) to `run_dir/launches.json`, with `progress`, the run's `run_progress` before and
    after it when given: the wall time counts the launches only while they join up."""
    path = Path(run_dir) / LAUNCHES_FILE
    launches = _launches(run_dir) or []
    launch = {"command": command, "seconds": seconds, "returncode": returncode, "ended": time.strftime("%FT%T%z")}
    if progress is not None:
        launch["progress"] = list(progress)
    write_json_atomic(path, [*launches, launch])
