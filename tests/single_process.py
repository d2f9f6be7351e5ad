"""SingleProcess: the Fabric members the phase loop's stages and records use, for one process without loggers.

Tests that drive `PhaseLoop` stages directly, without launching Fabric, hand it this instead: one rank
(global zero, world size 1), barriers that return at once, no printing and no metric loggers.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field


@dataclass
class SingleProcess:
    """One process's Fabric as the loop sees it; `log_dict` drops the metrics (subclass it to record them)."""

    global_rank: int = 0
    node_rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    is_global_zero: bool = True
    device: str = "cpu"
    loggers: list[object] = field(default_factory=list)

    def barrier(self) -> None:
        return None

    def print(self, *args: object) -> None:
        return None

    def log_dict(self, metrics: dict[str, float], step: int) -> None:
        return None

    def autocast(self) -> AbstractContextManager:
        """Full precision, as Fabric's `32-true`."""
        return nullcontext()
