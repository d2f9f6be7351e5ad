"""A fault at every stage boundary and inside every atomic write of a stubbed one-phase loop, each then resumed.

The fast counterpart of `tests/recipes/test_fault_resume.py`. The loop is PhaseLoop with its own stage
driver, checkpoint (phases.csv, history, run_state.json), replay buffer and writers, and stand-in stages:
tasks and labels go through the atomic writers, the replay stage adds the phase to the buffer after
reading the phases before it (as `PhaseLoop._replay` does); every figure is a function of the phase and
of what earlier stages wrote, so a resume that lost, duplicated or re-read anything ends with other
files. Each run is a forked child, so that `WEBRL_FAULT` can end it with `os._exit` as a crash would.
An uninterrupted run lists its fault points (`WEBRL_FAULT_LOG`); a second run directory faults at each
in turn, every start after the first resuming from the previous fault, then runs to the end; both
directories must then hold the same buffer, labels, phases.csv (wall-time columns aside), history and
run state.
"""

from __future__ import annotations

import csv
import json
import os
import traceback
from pathlib import Path

import pytest
from sample_records import build_trajectory

from tests.single_process import SingleProcess
from webrl.config import load_config
from webrl.data.atomic_io import FAULT_ENV, FAULT_EXIT_CODE, FAULT_LOG_ENV, write_json_atomic
from webrl.data.replay import ReplayBuffer
from webrl.data.trajectory import write_trajectories
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.run_layout import RunLayout
from webrl.run_state import STAGES, RunState


class TrackedProcess(SingleProcess):
    """One process whose metric loggers append each `log_dict` to `sent.jsonl` in the run directory, as a
    tracker (W&B, a launch's CSV) keeps what it was sent across a crash."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__()
        self.sent = run_dir / "sent.jsonl"

    def log_dict(self, metrics: dict[str, float], step: int) -> None:
        with self.sent.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"step": step, "phase": metrics.get("phase")}) + "\n")


def stub_loop(run_dir: Path) -> PhaseLoop:
    config = load_config(WebRLConfig, [f"output_dir={run_dir}", "phases=1"])
    loop = PhaseLoop(
        config, TrackedProcess(run_dir), None, None, sft_dir=run_dir / "sft", orm_dir=None, demonstrations=[]
    )
    layout = loop.layout

    def curriculum(phase: int) -> dict[str, float]:
        write_json_atomic(layout.tasks_path(phase), [{"task_id": f"{phase}-{i}", "intent": f"t{i}"} for i in range(3)])
        return {"curriculum/tasks": 3.0}

    def labels(phase: int) -> dict[str, float]:
        tasks = layout.tasks(phase)
        trajectories = [build_trajectory(t.task_id, num_steps=1 + i, outcome=float(i % 2)) for i, t in enumerate(tasks)]
        write_trajectories(layout.labelled_path(phase), trajectories)
        return {"train/success_rate": sum(t.outcome for t in trajectories) / len(trajectories)}

    def replay(phase: int) -> dict[str, float]:
        earlier = loop.replay.trajectories(before=phase)
        loop.replay.add_phase(phase, layout.labelled(phase), overwrite=True)
        earlier_steps = float(sum(len(t.steps) for t in earlier))
        return {"replay/earlier_steps": earlier_steps, "replay/size": float(len(loop.replay))}

    def other(stage: str):
        return lambda phase: {f"{stage}/value": float(10 * phase + len(stage))}

    stand_ins = {"curriculum": curriculum, "labels": labels, "replay": replay}
    loop.stages = tuple((name, stand_ins.get(name, other(name))) for name, _ in loop.stages)
    return loop


def _run(run_dir: Path, **env: str) -> int:
    """Run (or resume) the stubbed loop in a forked child with `env` set; its exit status."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            for name in (FAULT_ENV, FAULT_LOG_ENV):
                os.environ.pop(name, None)
            os.environ.update(env)
            stub_loop(run_dir).run()
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status)


def _results(run_dir: Path) -> dict[str, object]:
    layout = RunLayout(run_dir)
    with layout.phases_csv.open(newline="", encoding="utf-8") as handle:
        rows = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(handle)]
    state = RunState.load(layout.state_path)
    history = [{k: v for k, v in record.items() if not k.startswith("time/")} for record in state.history]
    buffer = ReplayBuffer(layout.replay_dir)
    return {
        "phases.csv": rows,
        "history": history,
        "state": (state.phase, state.done),
        "buffer": buffer.stats(),
        "buffer_ids": [t.task.task_id for t in buffer.trajectories()],
        "labels": [[(t.task.task_id, t.outcome) for t in layout.labelled(phase)] for phase in (0, 1)],
        "sent": [json.loads(line)["phase"] for line in (run_dir / "sent.jsonl").read_text().splitlines()],
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("reference")
    log = root / "points.txt"
    assert _run(root / "run", **{FAULT_LOG_ENV: str(log)}) == 0
    return root / "run", log.read_text().splitlines()


def test_the_reference_run_passes_every_stage_boundary(reference):
    run_dir, points = reference
    expected = [f"stage:{p}:{s}:{when}" for p in (0, 1) for s in STAGES for when in ("written", "marked")]
    assert [p for p in points if p.startswith("stage:")] == expected
    results = _results(run_dir)
    assert [row["phase"] for row in results["phases.csv"]] == ["0", "1"]
    assert results["buffer_ids"] == ["0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]
    assert [record["replay/earlier_steps"] for record in results["history"]] == [0.0, 6.0]


@pytest.mark.parametrize("kind", ["stage", "write"])
def test_a_fault_at_every_point_then_a_resume_ends_as_the_uninterrupted_run(tmp_path, reference, kind):
    reference_dir, points = reference
    run_dir = tmp_path / "run"
    chain = [p.replace(str(reference_dir), str(run_dir)) for p in points if p.startswith(f"{kind}:")]
    # 2 phases x 9 stages x (written, marked); per phase 24 writes: tasks, labels, the buffer's phase file
    # and manifest, phases.csv, report.html, the trackers' mark, 8 stages' metrics (the checkpoint has none)
    # and 9 marks in run_state.json.
    assert len(chain) == (36 if kind == "stage" else 48)
    for point in chain:
        assert _run(run_dir, **{FAULT_ENV: point}) == FAULT_EXIT_CODE, f"{point}: not reached"
    assert _run(run_dir) == 0
    results, expected = _results(run_dir), _results(reference_dir)
    # Each phase's record reaches the trackers once; only a crash inside the write of the mark that says it was
    # sent sends it again (a tracker and a file cannot change together).
    resent = [int(p.split("/phase_")[1][:3]) for p in chain if p.endswith("/tracked.json")]
    assert expected["sent"] == [0, 1] and sorted(results.pop("sent")) == sorted(expected.pop("sent") + resent)
    assert results == expected
