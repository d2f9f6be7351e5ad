"""Durable curriculum state: what each phase drew, generated, kept and rejected, and every intent seen.

One JSON file per phase directory (`<phase_dir>/curriculum_state.json`), written atomically (temp file,
fsync, rename) so that a crash leaves either the old file or the new one. The file holds the
phase's full record (for inspection and for reusing the kept tasks after a crash later in the
phase) and the cumulative set of normalised intents seen so far, which is all that a resumed run
needs besides the config: every random stream derives from (seed, phase), so loading the state of
phase p-1 and running phase p again reproduces the first run's tasks exactly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webrl.curriculum.filters import dedupe_key
from webrl.data.atomic_io import write_json_atomic
from webrl.data.trajectory import Task

STATE_FILE = "curriculum_state.json"
STATE_SCHEMA = 1


@dataclass
class PhaseRecord:
    """What one phase of the curriculum did. Entries are plain dicts so that the JSON reads by itself.

    `seeds`: {task_id, site, intent} of the failed tasks used; `generated`: {intent, site, origin,
    source} of every candidate before the filters; `kept`: the kept tasks as WebArena-style configs;
    `rejected`: {intent, site, origin, reason, detail, and the critic's `value` where it scored one};
    `replies`: raw generator replies per call.
    """

    phase: int
    seeds: list[dict[str, Any]] = field(default_factory=list)
    generated: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    replies: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)

    def kept_tasks(self) -> list[Task]:
        return [Task.from_dict(config) for config in self.kept]


@dataclass
class CurriculumState:
    """The curriculum's memory across phases: intents seen (for dedupe) and the last phase's record."""

    seen: set[str] = field(default_factory=set)
    phase: int = -1
    """Last phase whose tasks were chosen; -1 before any."""
    record: PhaseRecord | None = None

    def mark_seen(self, intents: Iterable[str]) -> None:
        """Remember intents (training tasks, seeds, kept tasks) so that no later phase proposes them again."""
        self.seen.update(dedupe_key(intent) for intent in intents)

    def is_seen(self, intent: str) -> bool:
        return dedupe_key(intent) in self.seen

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": STATE_SCHEMA,
            "phase": self.phase,
            "seen": sorted(self.seen),
            "record": None if self.record is None else vars(self.record),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "curriculum state") -> CurriculumState:
        if data.get("schema") != STATE_SCHEMA:
            raise ValueError(f"{source}: unsupported schema {data.get('schema')!r} (this version reads {STATE_SCHEMA})")
        try:
            record = data["record"]
            return cls(
                seen=set(data["seen"]),
                phase=int(data["phase"]),
                record=None if record is None else PhaseRecord(**record),
            )
        except (KeyError, TypeError) as err:
            raise ValueError(f"{source}: not a curriculum state ({err})") from err

    def save(self, phase_dir: str | os.PathLike) -> Path:
        """Write `<phase_dir>/curriculum_state.json` atomically; return its path."""
        return write_json_atomic(Path(phase_dir) / STATE_FILE, self.to_dict(), indent=1, sort_keys=False)

    @classmethod
    def load(cls, phase_dir: str | os.PathLike) -> CurriculumState:
        """Read the state that `save` wrote in `phase_dir`; errors name the file."""
        path = Path(phase_dir) / STATE_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no curriculum state at {path}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from err
        return cls.from_dict(data, source=str(path))
