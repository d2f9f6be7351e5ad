"""The Wilson score interval of a success rate and the exact McNemar test of paired outcomes.

The Wilson interval stays inside [0, 1] and keeps a sensible width at 0 or n successes, where the
normal approximation collapses to a point; at the low success rates of small web agents that is
the usual case. McNemar's test compares two methods on the same tasks using only the tasks where
they disagree, which is far more sensitive than comparing two independent rates.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction

Z_95 = 1.96


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval (low, high) of `successes` out of `n` trials (z=1.96: 95%).

    With no trials every rate is possible, so n=0 gives (0.0, 1.0) rather than an error: a site
    or template that was not evaluated shows as uninformative instead of stopping a report.
    """
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return 0.0, 1.0
    rate = successes / n
    shrink = 1 + z * z / n
    centre = (rate + z * z / (2 * n)) / shrink
    half_width = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / shrink
    # At 0 or n successes the bound equals the rate exactly, but float rounding can put it 1e-17 past it
    # (0 of 6: low = 2.8e-17), and a plot's error bar (rate - low) must not be negative.
    return min(rate, max(0.0, centre - half_width)), max(rate, min(1.0, centre + half_width))


def exact_mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b (`only_a`) and c (`only_b`).

    Under the null hypothesis each discordant task is equally likely to favour either method, so
    b ~ Bin(b + c, 1/2); p = min(1, 2 P[X <= min(b, c)]), and 1 when there is no discordant task.
    """
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={only_a}, c={only_b}")
    trials = only_a + only_b
    if trials == 0:
        return 1.0
    tail = sum(math.comb(trials, k) for k in range(min(only_a, only_b) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**trials)))


SIGNIFICANCE_LEVELS = (0.05, 0.01)
"""The levels a reader compares a printed p-value with: `format_p` never rounds one across them."""


def format_p(p: float, digits: int = 3) -> str:
    """`p` to `digits` significant digits, or as many more as keep it on its side of each significance level.

    At 3 digits an exact p of 0.04998 prints as 0.05, which reads as not significant at 5 %; tables and reports that
    judge a method by p < 0.05 must not be told the other side of the line.
    """
    for width in range(digits, 17):
        shown = f"{p:.{width}g}"
        if all((float(shown) < level) == (p < level) for level in SIGNIFICANCE_LEVELS):
            return shown
    return repr(p)


@dataclass(frozen=True)
class McNemarResult:
    """Two methods A and B on the same tasks: the discordant counts and the exact two-sided p-value."""

    tasks: int
    """Tasks both methods were evaluated on."""
    both: int
    """Tasks both succeeded on (so A's successes are both + only_a, B's both + only_b)."""
    only_a: int
    """McNemar's b: tasks only A succeeded on."""
    only_b: int
    """McNemar's c: tasks only B succeeded on."""
    p_value: float

    def to_dict(self) -> dict[str, float | int]:
        return {
            "tasks": self.tasks,
            "both": self.both,
            "only_a": self.only_a,
            "only_b": self.only_b,
            "p_value": self.p_value,
        }


def mcnemar(outcomes_a: Mapping[str, bool], outcomes_b: Mapping[str, bool]) -> McNemarResult:
    """The exact McNemar test of A's and B's successes (task id -> success) on the same tasks.

    A pairing is only meaningful on identical task sets, so differing sets are an error naming the
    task ids each side lacks (a different split or sample would otherwise be compared silently).
    """
    require_same_tasks(outcomes_a, outcomes_b)
    only_a = sum(1 for task, success in outcomes_a.items() if success and not outcomes_b[task])
    only_b = sum(1 for task, success in outcomes_a.items() if not success and outcomes_b[task])
    both = sum(1 for task, success in outcomes_a.items() if success and outcomes_b[task])
    return McNemarResult(len(outcomes_a), both, only_a, only_b, exact_mcnemar_p(only_a, only_b))


def shared_mcnemar(outcomes_a: Mapping[str, bool], outcomes_b: Mapping[str, bool]) -> McNemarResult:
    """`mcnemar` on the tasks both sides scored: a task one side lost to a browser, site or engine failure (left out
    of its outcomes) has nothing to pair with. Callers check first that both attempted the same tasks
    (`recipes.evaluate` before it runs, the learning table on `RunResult.tasks`), so another split or sample is
    refused, not narrowed."""
    shared = [task for task in outcomes_a if task in outcomes_b]
    return mcnemar({task: outcomes_a[task] for task in shared}, {task: outcomes_b[task] for task in shared})


def require_same_tasks(tasks_a: Collection[str], tasks_b: Collection[str]) -> None:
    """Raise ValueError naming the task ids only A has and only B has, unless the two sets are equal."""
    only_in_a = sorted(set(tasks_a) - set(tasks_b), key=task_order)
    only_in_b = sorted(set(tasks_b) - set(tasks_a), key=task_order)
    if only_in_a or only_in_b:
        raise ValueError(
            f"paired outcomes need the same tasks: only in A: {_preview(only_in_a)}; only in B: {_preview(only_in_b)}"
        )


def _preview(task_ids: list[str], limit: int = 20) -> str:
    """The ids, or the first `limit` of them and how many more, so a split mix-up stays one readable line."""
    if not task_ids:
        return "none"
    shown = ", ".join(task_ids[:limit])
    return f"{shown} (+{len(task_ids) - limit} more)" if len(task_ids) > limit else shown


def task_order(task_id: str) -> tuple[int, int | str]:
    """Numeric ids in numeric order, then any others by name, so lists of ids read like the suite."""
    return (0, int(task_id)) if task_id.isdigit() else (1, task_id)
