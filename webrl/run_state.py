"""Durable progress of a run: which stages of which phase are done, and the RNG state to resume with.

The phase loop is a sequence of stages per phase (curriculum, rollouts, labels, replay, critic, actor,
sync, evaluate, checkpoint). A stage's outputs are written first, atomically, and only then is the stage
marked done in `run_state.json`; so after a kill at any point, the same command redoes at most the stage
that was in flight, and never sees half-written outputs. Each phase's RNG seeds derive from
(seed, phase, stage), never from global state, so a resumed stage draws the same numbers.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from webrl.config_checks import ConfigError, read_run_file
from webrl.data.atomic_io import write_json_atomic

STAGES = ("curriculum", "rollouts", "labels", "replay", "critic", "actor", "sync", "evaluate", "checkpoint")

PHASE_STEPS = 100_000
"""Width of a phase on the logged step axis: critic steps, then actor steps from the middle, then the record."""


def stage_seed(seed: int, phase: int, stage: str) -> int:
    """A seed for one stage of one phase, stable across processes and resumes."""
    return (seed * 1_000_003 + phase * 10_007 + STAGES.index(stage) * 101) % (2**31 - 1)


def seed_everything_for(seed: int, phase: int, stage: str) -> int:
    """Seed python, numpy and torch (when importable) for a stage; returns the seed used."""
    value = stage_seed(seed, phase, stage)
    random.seed(value)
    try:
        import numpy as np

        np.random.seed(value)
    except ImportError:
        pass
    try:
        import torch

        torch.manual_seed(value)
    except ImportError:
        pass
    return value


def _is_phase(value: Any) -> bool:
    """A phase number as run_state.json holds it: a whole number >= 0 (a JSON true is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass
class RunState:
    """What has been completed. `phase` is the phase in progress; `done` the stages finished in it."""

    phase: int = 0
    done: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    """One metrics record per finished phase (what the final table is printed from)."""

    @classmethod
    def load(cls, path: str | os.PathLike) -> RunState:
        """The state in `path` (a fresh one where there is none); a file that does not hold one is a one-line
        ConfigError naming it: the run writes it atomically, so only a hand edit leaves it unreadable."""
        path = Path(path)
        if not path.exists():
            return cls()
        data = read_run_file(path, dict)
        phase, done, history = data.get("phase", 0), data.get("done", []), data.get("history", [])
        if not _is_phase(phase):
            raise ConfigError(f"{path}: phase must be a whole number >= 0, got {phase!r}; fix or restore the file")
        if not isinstance(done, list) or not isinstance(history, list):
            raise ConfigError(f"{path}: done and history must be JSON arrays; fix or restore the file")
        unknown = [stage for stage in done if stage not in STAGES]
        if unknown:
            raise ConfigError(f"{path}: unknown stages {unknown} (known: {list(STAGES)}); fix or restore the file")
        # Checked here, not when the phase closes and replaces its record by phase: hours of stages later.
        records = [r for r in history if not (isinstance(r, dict) and _is_phase(r.get("phase")))]
        if records:
            raise ConfigError(f"{path}: history entry {records[0]!r} is not a phase record; fix or restore the file")
        return cls(phase=phase, done=list(done), history=history)

    def save(self, path: str | os.PathLike) -> None:
        write_json_atomic(path, asdict(self))

    def is_done(self, phase: int, stage: str) -> bool:
        return phase < self.phase or (phase == self.phase and stage in self.done)

    def mark(self, phase: int, stage: str, path: str | os.PathLike) -> None:
        """Record `stage` of `phase` as complete; the last stage moves the run to the next phase."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        if phase != self.phase:
            raise ValueError(f"marking phase {phase} while the run is in phase {self.phase}")
        if stage not in self.done:
            self.done.append(stage)
        if stage == STAGES[-1]:
            self.phase += 1
            self.done = []
        self.save(path)
