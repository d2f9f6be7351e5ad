"""PhaseLoop runs its stage table in `run_state.STAGES` order and skips, on resume, what run_state.json marks done.

The stages are stubbed on the instance: no browser, engine or model is started.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from sample_records import build_trajectory

from tests.single_process import SingleProcess
from webrl.config import load_config
from webrl.data.atomic_io import write_json_atomic
from webrl.data.trajectory import write_trajectories
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.run_state import STAGES, RunState


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


@dataclass
class LoggingProcess(SingleProcess):
    """SingleProcess recording what `_checkpoint` logs through Fabric."""

    logged: list[tuple[dict[str, float], int]] = field(default_factory=list)

    def log_dict(self, metrics: dict[str, float], step: int) -> None:
        self.logged.append((metrics, step))


def test_a_checkpoint_redone_after_a_crash_rewrites_its_row_instead_of_adding_one(tmp_path):
    """The window of issue #17: phases.csv written, the checkpoint not yet marked done; the resume redoes it."""
    config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", "phases=1"])
    fabric = LoggingProcess()
    loop = PhaseLoop(config, fabric, None, None, sft_dir=tmp_path / "sft", orm_dir=None, demonstrations=[])
    layout = loop.layout
    write_trajectories(layout.labelled_path(0), [build_trajectory("a")])
    write_json_atomic(layout.metrics_path(0, "labels"), {"train/success_rate": 0.5, "time/labels_s": 2.0})
    crashed = RunState(phase=0, done=list(STAGES[:-1]))
    crashed.save(layout.state_path)
    loop.state = RunState.load(layout.state_path)
    loop._checkpoint(0)
    crashed.save(layout.state_path)  # as if the process died after phases.csv, before run_state.json
    write_json_atomic(layout.metrics_path(0, "labels"), {"train/success_rate": 0.75, "time/labels_s": 3.0})
    PhaseLoop(config, fabric, None, None, sft_dir=tmp_path / "sft", orm_dir=None, demonstrations=[])._checkpoint(0)

    with layout.phases_csv.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["phase"], row["train/success_rate"], row["time/phase_s"]) for row in rows] == [("0", "0.75", "3.0")]
    state = RunState.load(layout.state_path)
    assert state.phase == 1 and state.done == []
    assert [record["train/success_rate"] for record in state.history] == [0.75]
    assert [step for _, step in fabric.logged] == [99_999]  # the trackers got the phase once (tracked.json)
