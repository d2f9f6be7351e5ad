"""Task, Step and Trajectory records and their durable JSONL storage.

Every part of webrl speaks these records: the browser environment fills steps, the ORM and the
evaluators fill rewards, the replay buffer stores trajectories, the DataModule turns steps into
training examples. They are plain dataclasses (no torch) so that `webrl.env` can import them.

Storage is JSONL, one trajectory per line, each line carrying `schema`. Appends are flushed and
fsynced per line, so a process killed mid-write leaves at most one torn last line; readers
drop that line with a warning and keep every earlier one (`webrl.data.atomic_io.read_jsonl`). Any
other bad line is an error that names the file and the line number, because silently skipping data
would bias training.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from webrl.data.atomic_io import JsonlError, fsync_dir, make_dirs, read_jsonl, repair_jsonl_tail, write_jsonl_atomic

SCHEMA_VERSION = 1

SUCCESS_THRESHOLD = 0.5
"""A 0/1 label (training outcome, evaluator verdict, ORM verdict, a judge's verdict) at or above this is a success."""

FULL_SCORE = 1.0
"""A graded score (MiniWoB's raw reward) is a success only at this: partial credit is not a success."""


def is_success(label: float, threshold: float = SUCCESS_THRESHOLD) -> bool:
    """Whether a 0/1 label counts as a success; `threshold` is `replay.filter.success_threshold` where configured."""
    return label >= threshold


def is_full_score(score: float) -> bool:
    """Whether a graded score earned full marks; 0.99 from MiniWoB is not a success."""
    return score >= FULL_SCORE


def orm_accepts(p_yes: float, threshold: float) -> bool:
    """Whether the ORM's P(YES) says success: at or above `threshold`, the run's `reward.threshold`.

    `threshold` has no default so that every caller passes the configured value.
    """
    return p_yes >= threshold


# Fields of a WebArena task config that Task models explicitly; any other key is kept in `extra`
# so that a config survives a load/save round trip unchanged.
_TASK_FIELDS = (
    "task_id",
    "intent",
    "sites",
    "start_url",
    "eval",
    "intent_template",
    "instantiation_dict",
    "intent_template_id",
    "require_login",
    "storage_state",
    "geolocation",
    "require_reset",
)


def phase_name(phase: int) -> str:
    """`phase_NNN`: the one spelling of a phase's directory (run directory, replay buffer), sorting in phase order."""
    return f"phase_{phase:03d}"


class TrajectoryFileError(JsonlError):
    """A trajectory file line that cannot be read; the message names the file and line."""


@dataclass
class Task:
    """One instruction to carry out on a website, in WebArena's task-config vocabulary.

    `eval` is WebArena's evaluation block; it is None for tasks without a programmatic evaluator
    (curriculum-generated tasks), whose reward then comes from the ORM.
    """

    task_id: str
    intent: str
    sites: list[str]
    start_url: str
    eval: dict[str, Any] | None = None
    intent_template: str = ""
    instantiation_dict: dict[str, Any] = field(default_factory=dict)
    intent_template_id: int | None = None
    require_login: bool = False
    storage_state: str | None = None
    geolocation: Any = None
    require_reset: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def site(self) -> str:
        """The first site: the key used for per-site metrics and curriculum grouping."""
        return self.sites[0] if self.sites else "unknown"

    @property
    def has_evaluator(self) -> bool:
        return bool(self.eval and self.eval.get("eval_types"))

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in _TASK_FIELDS}
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> Task:
        """Build a Task from a WebArena-style dict; `task_id` is normalised to a string."""
        known = {k: v for k, v in config.items() if k in _TASK_FIELDS}
        extra = {k: v for k, v in config.items() if k not in _TASK_FIELDS}
        missing = [k for k in ("task_id", "intent") if k not in known]
        if missing:
            raise ValueError(f"task config is missing {missing} (keys present: {sorted(config)})")
        known["task_id"] = str(known["task_id"])
        known.setdefault("sites", [])
        known.setdefault("start_url", "")
        return cls(**known, extra=extra)


def sampled_copies(tasks: Iterable[Task], samples: int) -> list[Task]:
    """Each task `samples` times in a row: itself, then copies `ID~1` … `ID~(samples-1)` (`rollout.samples_per_task`).

    A copy is its own episode: its own id keeps it apart wherever episodes are keyed by task (a resumed rollout
    file, the per-request sampling seed), so the copies draw different actions, and the critic sees the same
    task both solved and failed. The first keeps the task's id, so one sample is the tasks themselves.
    """
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    return [
        task if k == 0 else Task.from_dict({**task.to_dict(), "task_id": f"{task.task_id}~{k}"})
        for task in tasks
        for k in range(samples)
    ]


def sampled_origin(task_id: str) -> str:
    """The id of the task a `sampled_copies` copy was made from (`ID~k` -> `ID`); any other id is its own."""
    base, sep, k = task_id.rpartition("~")
    return base if sep and k.isdigit() else task_id


@dataclass
class Step:
    """One agent turn: what the model saw, what it said, what happened.

    `prompt` is the exact string given to the model, so training on this step re-uses it byte for
    byte. `observation` is the simplified page HTML before the action; `action` is the parsed
    action as a dict (None when the response did not parse, with the reason in `error`).
    `truncated` says the engine cut the response at its token budget (`rollout.max_tokens`): the model never
    emitted its end-of-sequence token, so training must not score one after it (`webrl.data.collate.action_token_ids`).
    """

    index: int
    prompt: str
    observation: str
    response: str
    action: dict[str, Any] | None = None
    url: str = ""
    error: str | None = None
    reward: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    response_token_ids: list[int] | None = None
    response_logprobs: list[float] | None = None
    truncated: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        return cls(**_only_fields(cls, data))


@dataclass
class Trajectory:
    """A whole episode of one task, with its outcome labels.

    `status` says how it ended: "exit" (the agent answered), "max_steps", "repeated_action",
    "parse_failures", "timeout", "site_done" (the site ended the episode itself, as MiniWoB++ does)
    or "error" (the browser, the site or the engine failed, `infra_error`; or the task's evaluator could not
    run; see `error`).
    `eval_reward` comes from the task's programmatic evaluator, `orm_score`/`orm_reward` from the
    ORM; `outcome` is the reward training uses, chosen by the labelling stage.
    """

    task: Task
    steps: list[Step] = field(default_factory=list)
    answer: str | None = None
    final_url: str = ""
    final_observation: str = ""
    status: str = "running"
    error: str | None = None
    eval_reward: float | None = None
    orm_score: float | None = None
    orm_reward: float | None = None
    outcome: float | None = None
    phase: int = 0
    trajectory_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def success_label(self) -> float | None:
        """The label success is judged on: the training outcome, else the evaluator's reward, else the ORM's."""
        return next((v for v in (self.outcome, self.eval_reward, self.orm_reward) if v is not None), None)

    @property
    def succeeded(self) -> bool:
        """`succeeded_at` the default threshold; an unlabelled trajectory has not succeeded."""
        return self.succeeded_at(SUCCESS_THRESHOLD)

    def succeeded_at(self, threshold: float) -> bool:
        """Whether `success_label` reaches `threshold`; False when the trajectory has no label."""
        label = self.success_label
        return label is not None and is_success(label, threshold)

    @property
    def infra_error(self) -> bool:
        """Whether it ended in "error" because the browser, the site or the engine failed, not the agent or the task.

        Such an episode says nothing about the policy: it is kept out of training labels and success rates.
        """
        return self.status == "error" and bool(self.metadata.get("infra_error"))

    @property
    def judged_by_evaluator(self) -> bool:
        """Whether the evaluators' reward is evidence about the episode: there is one, and its evaluator ran.

        An evaluator that could not run (`eval_error`: a WebArena helper webrl lacks, a broken task config) scores
        its episode 0 so that the success rates keep the task, but that 0 says nothing of what the agent did, so
        the ORM's training and calibration data and, with evaluator rewards, the phase's labels leave it out, as
        they leave out episodes with no reward.
        """
        return self.eval_reward is not None and "eval_error" not in self.metadata

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["task"] = self.task.to_dict()
        return {"schema": SCHEMA_VERSION, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        schema = data.get("schema", SCHEMA_VERSION)
        if schema != SCHEMA_VERSION:
            raise ValueError(f"unsupported trajectory schema {schema!r} (this version reads {SCHEMA_VERSION})")
        body = _only_fields(cls, data)
        body["task"] = Task.from_dict(data["task"])
        body["steps"] = [Step.from_dict(s) for s in data.get("steps", [])]
        return cls(**body)


def _only_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


class TrajectoryWriter:
    """Append trajectories to a JSONL file, one flushed (and fsynced) line each.

    On open, a torn last line left by an earlier crash is truncated away, so that new lines never
    follow a partial one; a whole last record that lost only its newline gets it back and is kept.
    """

    def __init__(self, path: str | os.PathLike, fsync: bool = True) -> None:
        self.path = Path(path)
        make_dirs(self.path.parent)
        repair_jsonl_tail(self.path)
        created = not self.path.exists()
        self._file = self.path.open("a", encoding="utf-8")
        self._fsync = fsync
        if fsync and created:
            fsync_dir(self.path.parent)  # the new file's directory entry survives a power loss too

    def write(self, trajectory: Trajectory) -> None:
        self._file.write(json.dumps(trajectory.to_dict(), ensure_ascii=False) + "\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_trajectories(path: str | os.PathLike) -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file; a torn last line is dropped with a warning (`read_jsonl`)."""
    yield from read_trajectories_counted(path)[0]


def read_trajectories_counted(path: str | os.PathLike) -> tuple[list[Trajectory], int]:
    """The trajectories of a JSONL file and the number of torn lines dropped from its end (0 or 1)."""
    try:
        records, dropped = read_jsonl(path)
    except JsonlError as err:
        raise TrajectoryFileError(str(err)) from err
    out = []
    for number, data in records:
        try:
            out.append(Trajectory.from_dict(data))
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            raise TrajectoryFileError(f"{path}:{number}: not a trajectory record ({err})") from err
    return out, dropped


def read_trajectories(path: str | os.PathLike) -> list[Trajectory]:
    """Every trajectory of a JSONL file, in file order; a torn last line is dropped with a warning."""
    return read_trajectories_counted(path)[0]


def write_trajectories(path: str | os.PathLike, trajectories: Iterable[Trajectory]) -> None:
    """Write a whole file atomically (temp file, fsync, rename, directory fsync), replacing any earlier content."""
    write_jsonl_atomic(path, (trajectory.to_dict() for trajectory in trajectories))
