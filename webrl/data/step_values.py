"""The critic's view of each trained step, and the replay filter's scores, kept in the phase directory.

The actor stage scores every step once before it trains (`webrl.modules.advantages`); those numbers
are what the actor's update was weighted by, so the run report shows them beside each step of a
trajectory. They are written once per phase, atomically, as one JSON record per step:

    {"trajectory_id": ..., "step_index": 0, "phase": 1, "task_id": ..., "value": V(s),
     "next_value": V(s'), "advantage": A}

`phase` there is the phase whose rollout the step came from: a replayed step of phase 0 is scored
again in every later phase that trains on it, each time in that phase's file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from webrl.data.atomic_io import read_jsonl, write_jsonl_atomic
from webrl.data.steps import StepSample

StepKey = tuple[str, int]
"""(trajectory_id, step_index): a step of a recorded trajectory."""


def write_step_values(
    path: str | os.PathLike,
    samples: Sequence[StepSample],
    value: Sequence[float],
    next_value: Sequence[float],
    advantage: Sequence[float],
) -> Path:
    """Write one record per sample (in sample order) with its V(s), V(s') and advantage."""
    if not len(samples) == len(value) == len(next_value) == len(advantage):
        raise ValueError(
            f"{len(samples)} samples but {len(value)} values, {len(next_value)} next values, "
            f"{len(advantage)} advantages"
        )
    records = (
        {
            "trajectory_id": sample.trajectory_id,
            "step_index": sample.step_index,
            "phase": sample.phase,
            "task_id": sample.task_id,
            "value": float(v),
            "next_value": float(nv),
            "advantage": float(a),
        }
        for sample, v, nv, a in zip(samples, value, next_value, advantage, strict=True)
    )
    return write_jsonl_atomic(path, records)


def read_step_values(path: str | os.PathLike) -> dict[StepKey, dict[str, Any]]:
    """The records of `write_step_values` keyed by (trajectory_id, step_index); an absent file gives {}."""
    if not Path(path).is_file():
        return {}
    records, _ = read_jsonl(path)
    return {(record["trajectory_id"], int(record["step_index"])): record for _, record in records}


def replay_scores_record(
    samples: Sequence[StepSample],
    scores: Sequence[float],
    kept: Sequence[StepSample],
    window: dict[str, Any],
) -> dict[str, Any]:
    """What the replay filter saw: each scored step's probability, whether it was kept, and the window.

    A step in the window can still be dropped by the cap, so `in_window` and `kept` are both recorded.
    """
    chosen = {id(sample) for sample in kept}
    return {
        "window": window,
        "steps": [
            {
                "trajectory_id": sample.trajectory_id,
                "step_index": sample.step_index,
                "phase": sample.phase,
                "score": float(score),
                "kept": id(sample) in chosen,
            }
            for sample, score in zip(samples, scores, strict=True)
        ],
    }
