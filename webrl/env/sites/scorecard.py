"""How a policy's episodes on the embedded tasks ended: a summary to print, and the failures by task.

The sites command line (`check`, `demos`) and the sites bench print these after a run. A task
counts as solved only at evaluator reward 1; a failure names its task, template, status and
errors, so a solver that fails says where.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from webrl.data.trajectory import Trajectory


def solved(trajectory: Trajectory) -> bool:
    return (trajectory.eval_reward or 0.0) >= 1.0


def summary(trajectories: list[Trajectory], seconds: float) -> dict[str, Any]:
    """Episodes, successes (overall and per site), throughput, steps per episode and end statuses."""
    by_site: dict[str, list[bool]] = {}
    for t in trajectories:
        by_site.setdefault(t.task.site, []).append(solved(t))
    successes = sum(solved(t) for t in trajectories)
    return {
        "episodes": len(trajectories),
        "successes": successes,
        "success_rate": round(successes / len(trajectories), 4) if trajectories else 0.0,
        "seconds": round(seconds, 2),
        "episodes_per_min": round(60 * len(trajectories) / max(seconds, 1e-9), 1),
        "success_by_site": {site: f"{sum(v)}/{len(v)}" for site, v in sorted(by_site.items())},
        "steps": dict(sorted(Counter(len(t.steps) for t in trajectories).items())),
        "statuses": dict(Counter(t.status for t in trajectories)),
    }


def failures(trajectories: list[Trajectory]) -> list[str]:
    """One line per unsolved task: its id, template, status, reward, and the errors of its episode and steps."""
    return [
        f"task {t.task.task_id} (template {t.task.intent_template_id}): status {t.status}, reward {t.eval_reward}, "
        f"{t.error or t.metadata.get('eval') or ''}"
        + "".join(f"; step {s.index} error: {s.error} (response {s.response[:300]!r})" for s in t.steps if s.error)
        for t in trajectories
        if not solved(t)
    ]
