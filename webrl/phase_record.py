"""What a phase leaves behind besides its outputs: each stage's metrics, marked done, and the phase's record.

Kept apart from `PhaseLoop` (which decides what runs) because this is the part a crash must not tear:
each writer saves first and marks done after (`run_state.json`), with a `WEBRL_FAULT` point between the
two for the crash tests (`webrl.data.atomic_io.fault_point`). Both run on rank 0 and end with rank 0's new state
sent to every rank (`shared_state`), so both return that state.
"""

from __future__ import annotations

import json
from typing import Any

from lightning.fabric import Fabric

from webrl.data.atomic_io import fault_point, write_json_atomic
from webrl.run_layout import RunLayout
from webrl.run_report import write_run_report
from webrl.run_state import PHASE_STEPS, RunState
from webrl.stage_attempts import attempts_path
from webrl.tracking import log_phase_views, write_phase_row


def finish_stage(
    fabric: Fabric, state: RunState, layout: RunLayout, phase: int, stage: str, metrics: dict[str, float]
) -> RunState:
    """Save the stage's metrics, then mark it done (rank 0), then let every rank see the new state.

    The record of the stage's attempts (`webrl.stage_attempts`) goes once the stage is marked: a stage done is never
    run again, and its metrics hold what the record said.
    """
    if fabric.is_global_zero:
        write_json_atomic(layout.metrics_path(phase, stage), metrics)
        fault_point(f"stage:{phase}:{stage}:written")
        state.mark(phase, stage, layout.state_path)
        attempts_path(layout, phase, stage).unlink(missing_ok=True)
        fault_point(f"stage:{phase}:{stage}:marked")
    return shared_state(fabric, layout)


def shared_state(fabric: Fabric, layout: RunLayout) -> RunState:
    """`run_state.json` as rank 0 reads it, on every rank, once rank 0 has written all it wrote before this call.

    The state decides which stage each rank runs next, so the ranks must share one reading. Were each rank to read
    the file after a barrier, a rank that read late (descheduled, a slow shared filesystem) could find a stage that
    rank 0 has meanwhile run and marked (phase 0's critic and actor have no collective to hold rank 0 back), skip
    it, and from then on meet rank 0's collectives one stage apart. The broadcast is also the barrier.
    """
    if fabric.world_size == 1:
        return RunState.load(layout.state_path)
    return fabric.broadcast(RunState.load(layout.state_path) if fabric.is_global_zero else None, src=0)


def phase_record(layout: RunLayout, phase: int) -> dict[str, Any]:
    """The phase's number and every metric its stages saved, in stage-file name order."""
    record: dict[str, Any] = {"phase": phase}
    for path in sorted(layout.metrics_dir(phase).glob("*.json")):
        record.update(json.loads(path.read_text(encoding="utf-8")))
    return record


def close_phase(fabric: Fabric, state: RunState, layout: RunLayout, phase: int, sample_trajectories: int) -> RunState:
    """Close the phase: its record goes to phases.csv, the run report, the trackers and run_state.json, in that order.

    phases.csv and the history are keyed by phase, so a checkpoint redone after a crash between
    them replaces the phase's row and record instead of adding a second one. The trackers (W&B, the
    launch's CSV) only append, so the phase is sent once: `tracked.json` marks it sent, and a checkpoint
    redone after that skips the sending (only a crash inside that file's own write sends it twice).
    `sample_trajectories` is how many of the phase's trajectories the tracker shows.
    """
    record = phase_record(layout, phase)
    record["time/phase_s"] = sum(v for k, v in record.items() if k.startswith("time/") and k.endswith("_s"))
    if fabric.is_global_zero:
        write_phase_row(layout.phases_csv, record)
        report = write_run_report(layout.root)
        if not layout.tracked_path(phase).exists():
            # Phase records sit after both training stages on the step axis, so W&B steps stay monotonic.
            numeric = {k: v for k, v in record.items() if isinstance(v, (int, float))}
            fabric.log_dict(numeric, step=phase * PHASE_STEPS + PHASE_STEPS - 1)
            log_phase_views(fabric.loggers, phase, layout, report, sample_trajectories)
            write_json_atomic(layout.tracked_path(phase), {"phase": phase})
        fault_point(f"stage:{phase}:checkpoint:written")
        state.history = [kept for kept in state.history if kept.get("phase") != phase] + [record]
        state.mark(phase, "checkpoint", layout.state_path)
        fault_point(f"stage:{phase}:checkpoint:marked")
    return shared_state(fabric, layout)
