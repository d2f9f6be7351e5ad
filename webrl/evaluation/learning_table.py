"""The learning table: each method's held-out success with its interval, paired against SFT on the same tasks.

A few dozen held-out tasks at 5-25% success cannot rank methods by their rates alone: one task is more
than a point. So each row carries the 95% Wilson interval of its rate and the exact McNemar test against
SFT (and, for an ablation or baseline, against the full WebRL it should fall below, the paper's Fig. 5
ordering), computed on the tasks both solved or failed, which only means something when every method
ran on the same tasks: differing task sets are an error naming the methods, never a silent comparison.
Success is also split by templates seen in training vs test-only, where generalisation and transfer part.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from webrl.evaluation.breakdown import SEEN, TEST_ONLY, Rate, breakdown
from webrl.evaluation.run_results import WALL_FROM_PHASES, RunResult
from webrl.evaluation.stats import McNemarResult, format_p, require_same_tasks, shared_mcnemar, task_order


@dataclass(frozen=True)
class Pairing:
    """A method against another on the same tasks: the difference of rates in points and the exact McNemar test."""

    against: str
    diff_points: float
    test: McNemarResult
    """A is the row's method, B the one it is compared with."""
    narrowed: bool = False
    """Whether either side scored tasks the other lost to a browser, site or engine failure: the difference and the
    test are then over fewer tasks than a success column, so the cell names how many were paired."""

    def to_dict(self) -> dict[str, object]:
        return {"against": self.against, "diff_points": self.diff_points, **self.test.to_dict()}

    def diff_cell(self) -> str:
        """The difference in points, with the paired task count when it is not both sides' n."""
        return _signed(self.diff_points) + (f" on {self.test.tasks} paired" if self.narrowed else "")


@dataclass(frozen=True)
class TableRow:
    """One method's line of the table."""

    method: str
    label: str
    source: str
    overall: Rate
    seen: Rate | None
    """Tasks of templates the train split has (None when the held-out tasks have none)."""
    test_only: Rate | None
    vs_baseline: Pairing | None
    vs_reference: Pairing | None
    """Against the full WebRL this method is an ablation or a baseline of (the paper ranks it below)."""
    paper: str
    wall_s: float | None
    wall_source: str

    def to_dict(self) -> dict[str, object]:
        def rate(value: Rate | None) -> dict[str, object] | None:
            return value.to_dict() if value is not None else None

        def pairing(value: Pairing | None) -> dict[str, object] | None:
            return value.to_dict() if value is not None else None

        return {
            "method": self.method,
            "label": self.label,
            "source": self.source,
            **self.overall.to_dict(),
            "seen_templates": rate(self.seen),
            "test_only_templates": rate(self.test_only),
            "vs_baseline": pairing(self.vs_baseline),
            "vs_reference": pairing(self.vs_reference),
            "paper": self.paper,
            "wall_s": self.wall_s,
            "wall_source": self.wall_source,
        }


@dataclass(frozen=True)
class LearningTable:
    """Rows in the order given, the baseline they are paired with, the held-out tasks, methods without a result."""

    rows: list[TableRow]
    baseline: str
    suite: str
    split: str
    task_ids: list[str]
    missing: list[str] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        results: list[RunResult],
        seen_templates: Collection[int],
        *,
        baseline: str = "sft",
        labels: Mapping[str, str] | None = None,
        references: Mapping[str, str] | None = None,
        paper: Mapping[str, str] | None = None,
        missing: Collection[str] = (),
        unshown: Sequence[RunResult] = (),
    ) -> LearningTable:
        """The table of `results` (at least one), each paired with `baseline` and with its reference when present.

        `references` maps a method to the one the paper ranks above it (an ablation to full WebRL);
        `paper` holds each method's note on that ordering. `unshown`: results that get no row but are paired
        with (a reference run only because a shown method reads it). Raises ValueError naming the methods when
        the results were evaluated on different tasks.
        """
        if not results:
            raise ValueError("no method has a finished evaluation to put in the table")
        require_same_task_sets([*results, *unshown])
        labels, references, paper = labels or {}, references or {}, paper or {}
        by_method = {result.method: result for result in [*unshown, *results]}
        rows = []
        for result in results:
            rates = breakdown(result.outcomes, seen_templates)
            by_seen = {rate.label: rate for rate in rates.by_seen}
            reference = by_method.get(references.get(result.method, ""))
            rows.append(
                TableRow(
                    method=result.method,
                    label=labels.get(result.method, result.method),
                    source=result.source,
                    overall=rates.overall,
                    seen=by_seen.get(SEEN),
                    test_only=by_seen.get(TEST_ONLY),
                    vs_baseline=_pair(result, by_method.get(baseline)),
                    vs_reference=_pair(result, reference),
                    paper=paper.get(result.method, ""),
                    wall_s=result.wall_s,
                    wall_source=result.wall_source,
                )
            )
        first = results[0]
        task_ids = sorted(first.tasks, key=task_order)
        present = {result.method for result in results}
        return cls(
            rows, baseline, first.suite, first.split, task_ids, [name for name in missing if name not in present]
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "baseline": self.baseline,
            "held_out": {
                "suite": self.suite,
                "split": self.split,
                "tasks": len(self.task_ids),
                "task_ids": self.task_ids,
            },
            "methods": [row.to_dict() for row in self.rows],
            "missing": self.missing,
        }

    def to_markdown(self) -> str:
        """The table, then what its columns mean."""
        labels = {row.method: row.label for row in self.rows}
        baseline = labels.get(self.baseline, self.baseline)
        header = ["method", "success %", "95% Wilson %", "n", f"Δ vs {baseline} (points)", f"McNemar p vs {baseline}"]
        header += ["seen templates %", "test-only templates %", "vs WebRL here", "paper", "wall min"]
        lines = [
            f"# Learning table: {len(self.task_ids)} held-out tasks ({self.split} split, {self.suite} suite)",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "|".join([":--"] + ["--:"] * 8 + [":--", "--:"]) + "|",
        ]
        for row in self.rows:
            low, high = row.overall.interval
            cells = [
                row.label,
                f"{_pct(row.overall.rate)} ({row.overall.successes}/{row.overall.n})",
                f"[{_pct(low)}, {_pct(high)}]",
                str(row.overall.n),
                row.vs_baseline.diff_cell() if row.vs_baseline and row.method != self.baseline else "",
                _p_cell(row.vs_baseline) if row.vs_baseline and row.method != self.baseline else "",
                _rate_cell(row.seen),
                _rate_cell(row.test_only),
                f"{row.vs_reference.diff_cell()} (p {format_p(row.vs_reference.test.p_value)})"
                if row.vs_reference
                else "",
                row.paper,
                _wall_cell(row),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        notes = [
            "",
            f"McNemar: exact two-sided test on the same tasks; b = tasks only the method solved, c = only {baseline}. "
            "Δ and McNemar pair the tasks both methods scored; 'on N paired' where a browser, site or engine failure "
            "left fewer than a success column's n. "
            "vs WebRL here: points against the full WebRL with the same reward source (its exact McNemar p). "
            "Wall: the method's launches by the comparison (the first to need a cached SFT or ORM includes building "
            "it); * = the sum of its phase times (cached builds left out), up to the table's phases for a longer run "
            "reused, or where the comparison's launches did not run all of it.",
        ]
        unshown = sorted({row.vs_reference.against for row in self.rows if row.vs_reference} - set(labels))
        if unshown:
            notes.append(f"vs WebRL here pairs with {', '.join(unshown)}: run for the methods that read it, not shown.")
        if self.missing:
            notes.append(f"No finished evaluation yet: {', '.join(self.missing)}.")
        return "\n".join(lines + notes) + "\n"


def require_same_task_sets(results: list[RunResult]) -> None:
    """Raise ValueError naming the methods unless every result attempted the same tasks of the same suite and split
    (`RunResult.tasks`: a task a browser failure kept out of one method's outcomes is still the same task)."""
    first = results[0]
    for result in results[1:]:
        if (result.suite, result.split) != (first.suite, first.split):
            raise ValueError(
                f"methods evaluated on different held-out tasks: {first.method} on the {first.split} split of "
                f"{first.suite}, {result.method} on the {result.split} split of {result.suite}"
            )
        try:
            require_same_tasks(result.tasks, first.tasks)
        except ValueError as err:
            raise ValueError(
                f"methods evaluated on different held-out tasks: {result.method} ({len(result.tasks)} tasks) vs "
                f"{first.method} ({len(first.tasks)} tasks): {err} (A = {result.method}, B = {first.method})"
            ) from None


def _pair(result: RunResult, other: RunResult | None) -> Pairing | None:
    """`result` against `other` on the tasks both scored (`shared_mcnemar`), marked narrowed when that is fewer than
    either side's scored tasks."""
    if other is None:
        return None
    test = shared_mcnemar(result.successes, other.successes)
    diff = (test.only_a - test.only_b) / test.tasks if test.tasks else 0.0
    narrowed = test.tasks != len(result.outcomes) or test.tasks != len(other.outcomes)
    return Pairing(other.method, 100 * diff, test, narrowed)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _signed(points: float) -> str:
    return f"{points:+.1f}"


def _p_cell(pairing: Pairing) -> str:
    return f"{format_p(pairing.test.p_value)} (b {pairing.test.only_a}, c {pairing.test.only_b})"


def _rate_cell(rate: Rate | None) -> str:
    return f"{_pct(rate.rate)} ({rate.successes}/{rate.n})" if rate is not None else "-"


def _wall_cell(row: TableRow) -> str:
    if row.wall_s is None:
        return "-"
    return f"{row.wall_s / 60:.1f}" + ("*" if row.wall_source == WALL_FROM_PHASES else "")
