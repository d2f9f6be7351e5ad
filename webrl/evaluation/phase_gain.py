"""What a WebRL run gained: its last phase's held-out evaluation against phase 0's (the starting actor), paired.

The phase table shows each phase's success rate, and on a few hundred tasks two rates a few points apart can be
noise. The run therefore ends with the paired answer: each side's successes with a 95 % Wilson interval, the tasks
only the last phase solved (gained) and only phase 0 solved (lost), and the exact McNemar p on them. Episodes a
browser, site or engine failure ended are left out of both sides' outcomes and so of the pairing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webrl.data.atomic_io import write_json_atomic
from webrl.evaluation.outcomes import success_map, task_outcomes
from webrl.evaluation.stats import format_p, shared_mcnemar, wilson_interval
from webrl.run_layout import RunLayout

GAIN_FILE = "gain.json"
"""In the run directory: the last `phase_gain` the run printed."""


def phase_gain(run_dir: Path, last_phase: int) -> dict[str, Any] | None:
    """Phase `last_phase` against phase 0 on the tasks both evaluated, or None when there is nothing to pair.

    Nothing pairs when `last_phase` is 0, when either phase has no scored evaluation, or when the two evaluated
    different tasks (a seeded subset per phase): then the gain is the learning table's to measure, not this one's.
    """
    if last_phase < 1:
        return None
    layout = RunLayout(run_dir)
    start, end = layout.evaluations(0), layout.evaluations(last_phase)
    if {t.task.task_id for t in start} != {t.task.task_id for t in end}:
        return None
    before, after = success_map(task_outcomes(start)), success_map(task_outcomes(end))
    if not before or not after:
        return None
    paired = shared_mcnemar(after, before)
    return {
        "phases": [0, last_phase],
        "tasks": paired.tasks,
        "start": _rate(paired.both + paired.only_b, paired.tasks),
        "end": _rate(paired.both + paired.only_a, paired.tasks),
        "gained": paired.only_a,
        "lost": paired.only_b,
        "p_value": paired.p_value,
    }


def _rate(successes: int, tasks: int) -> dict[str, Any]:
    low, high = wilson_interval(successes, tasks)
    return {"successes": successes, "rate": successes / tasks, "wilson_95": [low, high]}


def format_phase_gain(gain: dict[str, Any], split: str) -> str:
    """One line: both phases' successes and intervals, the tasks gained and lost, and the exact McNemar p."""
    first, last = gain["phases"]

    def side(rate: dict[str, Any]) -> str:
        low, high = rate["wilson_95"]
        return f"{rate['successes']} ({100 * rate['rate']:.1f} %, 95 % Wilson [{100 * low:.1f}, {100 * high:.1f}])"

    return (
        f"held-out {split} ({gain['tasks']} tasks): phase {first} {side(gain['start'])} -> phase {last} "
        f"{side(gain['end'])}; {gain['gained']} gained, {gain['lost']} lost, "
        f"exact McNemar p = {format_p(gain['p_value'])}"
    )


def write_phase_gain(run_dir: Path, gain: dict[str, Any]) -> Path:
    """`gain` as `<run_dir>/gain.json`, for a script or a report to read."""
    path = Path(run_dir) / GAIN_FILE
    write_json_atomic(path, gain)
    return path
