"""An evaluation's statistics as markdown (for the terminal and the README) and as a JSON record.

The JSON keeps every task's outcome, and every task attempted (`task_ids`: those a browser, site or engine
failure left without an outcome included), so that any later evaluation on the same tasks can be paired
with this one (`recipes.evaluate --baseline`), and one on other tasks refused.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from webrl.data.trajectory import Trajectory
from webrl.evaluation.breakdown import Breakdown, Rate, breakdown
from webrl.evaluation.outcomes import Baseline, attempted_ids, success_map, task_outcomes
from webrl.evaluation.stats import McNemarResult, format_p, shared_mcnemar, task_order
from webrl.metrics import errored, infra_errors


def evaluation_statistics(
    trajectories: list[Trajectory], seen_templates: Collection[int], title: str, baseline: Baseline | None = None
) -> tuple[dict[str, object], str]:
    """The JSON record and the markdown of an evaluation's trajectories, paired with `baseline` when given."""
    outcomes = task_outcomes(trajectories)
    rates = breakdown(outcomes, seen_templates)
    successes = success_map(outcomes, title)
    comparison = shared_mcnemar(successes, baseline.outcomes) if baseline is not None else None
    source = baseline.source if baseline is not None else ""
    errors = ErrorCounts.of(trajectories)
    record = {
        **statistics_record(rates, successes, comparison, source),
        "task_ids": sorted(attempted_ids(trajectories), key=task_order),
        "errors": errors.to_dict(),
    }
    return record, format_statistics(title, rates, comparison, source, errors)


@dataclass(frozen=True)
class ErrorCounts:
    """Episodes that ended in an error: all of them, and those the browser, the site or the engine failed
    (`infra_error`).

    The latter are left out of every rate, so a reader needs their count to see the rate's denominator
    shrink; the others (the agent's action or output, or the task's evaluator, failed) are scored 0
    (`Episode.evaluate`) and count as failures.
    """

    errored: int
    infra: int

    @classmethod
    def of(cls, trajectories: list[Trajectory]) -> ErrorCounts:
        return cls(int(errored(trajectories)), int(infra_errors(trajectories)))

    def to_dict(self) -> dict[str, int]:
        return {"errored": self.errored, "infra_errors": self.infra}

    def sentence(self) -> str:
        """One line for the markdown; says so when there were none, so that a missing line is never ambiguous."""
        return (
            f"Errored episodes: {self.errored} ({self.infra} browser, site or engine failures left out of every rate, "
            f"{self.errored - self.infra} counted as failures)."
        )


def statistics_record(
    breakdown: Breakdown, outcomes: dict[str, bool], comparison: McNemarResult | None = None, baseline: str = ""
) -> dict[str, object]:
    """The JSON part of an evaluation beside its flat metrics: rates with intervals, outcomes, the paired test."""
    low, high = breakdown.overall.interval
    record: dict[str, object] = {
        "success_interval": [low, high],
        "breakdown": breakdown.to_dict(),
        "outcomes": dict(sorted(outcomes.items(), key=lambda item: task_order(item[0]))),
    }
    if comparison is not None:
        record["comparison"] = {"baseline": baseline, **comparison.to_dict()}
    return record


def format_statistics(
    title: str,
    breakdown: Breakdown,
    comparison: McNemarResult | None = None,
    baseline: str = "",
    errors: ErrorCounts | None = None,
) -> str:
    """Markdown: the overall rate and interval, errored episodes, tables per site, seen/test-only and template,
    the paired test."""
    overall = breakdown.overall
    success = (
        f"Success: {_pct(overall.rate)}% ({overall.successes} of {overall.n} tasks), "
        f"95% Wilson interval {_interval(overall)}%"
    )
    sections = [
        f"# {title}",
        success if errors is None else f"{success}\n\n{errors.sentence()}",
        "## By site",
        _rate_table("site", breakdown.by_site),
        "## Templates seen in training vs test-only",
        _rate_table("templates", breakdown.by_seen),
        "## By template",
        _table(
            ["template", "site", "seen", "tasks", "successes", "success %", "95% interval %"],
            [
                [row.rate.label, row.site, "yes" if row.seen else "no", *_rate_cells(row.rate)]
                for row in breakdown.by_template
            ],
            left=3,
        ),
    ]
    if comparison is not None:
        sections += ["## Paired comparison", format_comparison(comparison, baseline)]
    return "\n\n".join(sections) + "\n"


def format_comparison(comparison: McNemarResult, baseline: str) -> str:
    """The exact McNemar test in words: both sides' successes on the shared tasks, b, c and p."""
    mine, theirs = comparison.both + comparison.only_a, comparison.both + comparison.only_b
    return (
        f"Baseline: {baseline}\n\n"
        f"On the {comparison.tasks} tasks both evaluated: this checkpoint {mine} successes, the baseline {theirs}. "
        f"Only this checkpoint succeeded on {comparison.only_a} (b), only the baseline on {comparison.only_b} (c); "
        f"exact McNemar two-sided p = {format_p(comparison.p_value, 4)}."
    )


def _rate_table(label: str, rates: list[Rate]) -> str:
    return _table(
        [label, "tasks", "successes", "success %", "95% interval %"], [[r.label, *_rate_cells(r)] for r in rates]
    )


def _rate_cells(rate: Rate) -> list[str]:
    return [str(rate.n), str(rate.successes), _pct(rate.rate), _interval(rate)]


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """A markdown table whose first `left` columns are left-aligned and the others right-aligned."""
    rule = [":--" if i < left else "--:" for i in range(len(header))]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [header, rule, *rows])


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _interval(rate: Rate) -> str:
    low, high = rate.interval
    return f"[{_pct(low)}, {_pct(high)}]"
