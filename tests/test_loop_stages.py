"""PhaseLoop runs its stage table in `run_state.STAGES` order and skips, on resume, what run_state.json marks done.

The stages are stubbed on the instance: no browser, engine or model is started.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from webrl.config import load_config
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.run_state import STAGES, RunState


@dataclass
class SingleProcess:
    """The few Fabric attributes `PhaseLoop.run` reads, for one process."""

    is_global_zero: bool = True

    def barrier(self) -> None:
        return None

    def print(self, *args: object) -> None:
        return None


def stubbed_loop(tmp_path: Path, calls: list[tuple[int, str]]) -> PhaseLoop:
    """A one-phase loop whose stages only record (phase, stage) and whose checkpoint only marks the phase done."""
    config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", "phases=1"])
    loop = PhaseLoop(config, SingleProcess(), None, None, sft_dir=tmp_path / "sft", orm_dir=None, demonstrations=[])

    def stub(name: str):
        return lambda phase: calls.append((phase, name)) or {}

    def checkpoint(phase: int) -> None:
        calls.append((phase, "checkpoint"))
        loop.state.mark(phase, "checkpoint", loop.layout.state_path)

    loop.stages = tuple((name, stub(name)) for name, _ in loop.stages)
    loop._checkpoint = checkpoint
    return loop


def test_the_stage_table_follows_run_state_order(tmp_path):
    calls: list[tuple[int, str]] = []
    loop = stubbed_loop(tmp_path, calls)
    assert tuple(name for name, _ in loop.stages) == STAGES[:-1]
    loop.run()
    assert calls == [(phase, stage) for phase in (0, 1) for stage in STAGES]
    assert loop.layout.metrics_path(1, "evaluate").is_file()


def test_a_resumed_run_skips_the_stages_marked_done(tmp_path):
    layout_state = tmp_path / "run" / "run_state.json"
    RunState(phase=1, done=["curriculum", "rollouts", "labels"]).save(layout_state)
    calls: list[tuple[int, str]] = []
    stubbed_loop(tmp_path, calls).run()
    assert calls == [(1, stage) for stage in STAGES[3:]]
    assert RunState.load(layout_state).phase == 2
