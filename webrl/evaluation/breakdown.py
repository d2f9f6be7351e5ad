"""Success per site and per template, each with its Wilson interval, templates split by whether training saw them.

A held-out split mixes two questions: new values of templates the agent trained on (does it
generalise within a task family?) and templates it never saw (does it transfer?). Reporting the two
apart, and each template with its own interval, shows which one an improvement comes from.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from webrl.evaluation.stats import wilson_interval

SEEN, TEST_ONLY = "seen", "test-only"


@dataclass(frozen=True)
class TaskOutcome:
    """One evaluated task: what the breakdown groups by, and whether the episode succeeded."""

    task_id: str
    site: str
    template: int | None
    success: bool


@dataclass(frozen=True)
class Rate:
    """Successes out of n for one group of tasks, with the rate and its 95% Wilson interval."""

    label: str
    n: int
    successes: int

    @property
    def rate(self) -> float:
        return self.successes / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.n)

    def to_dict(self) -> dict[str, object]:
        low, high = self.interval
        return {"n": self.n, "successes": self.successes, "rate": self.rate, "low": low, "high": high}

    def text(self) -> str:
        """`8.3 % (5/60) [3.6, 18.1]`: the form the README, the recipes and the run report print."""
        low, high = self.interval
        return f"{100 * self.rate:.1f} % ({self.successes}/{self.n}) [{100 * low:.1f}, {100 * high:.1f}]"


@dataclass(frozen=True)
class TemplateRate:
    """One template's rate, its site, and whether the template also occurs in the train split."""

    template: int | None
    site: str
    seen: bool
    rate: Rate

    def to_dict(self) -> dict[str, object]:
        return {"template": self.template, "site": self.site, "seen": self.seen, **self.rate.to_dict()}


@dataclass(frozen=True)
class Breakdown:
    """All of an evaluation's rates: overall, per site, seen vs test-only templates, per template."""

    overall: Rate
    by_site: list[Rate]
    by_seen: list[Rate]
    """`seen` and `test-only` (each only when some task falls in it)."""
    by_template: list[TemplateRate]
    """Seen templates first, then test-only ones, each in template order."""

    def to_dict(self) -> dict[str, object]:
        return {
            "overall": self.overall.to_dict(),
            "by_site": {rate.label: rate.to_dict() for rate in self.by_site},
            "by_seen": {rate.label: rate.to_dict() for rate in self.by_seen},
            "by_template": [template.to_dict() for template in self.by_template],
        }


def rate_of(label: str, outcomes: Iterable[TaskOutcome]) -> Rate:
    hits = [outcome.success for outcome in outcomes]
    return Rate(label, len(hits), sum(hits))


def breakdown(outcomes: list[TaskOutcome], seen_templates: Collection[int]) -> Breakdown:
    """Rates of `outcomes` overall, per site, per seen/test-only group and per template.

    `seen_templates` are the template ids of the train split. A task without a template id counts
    as test-only: nothing shows that training saw its template.
    """

    def is_seen(outcome: TaskOutcome) -> bool:
        return outcome.template is not None and outcome.template in seen_templates

    sites: dict[str, list[TaskOutcome]] = defaultdict(list)
    templates: dict[int | None, list[TaskOutcome]] = defaultdict(list)
    for outcome in outcomes:
        sites[outcome.site].append(outcome)
        templates[outcome.template].append(outcome)
    groups = {SEEN: [o for o in outcomes if is_seen(o)], TEST_ONLY: [o for o in outcomes if not is_seen(o)]}
    by_template = [
        TemplateRate(template, members[0].site, is_seen(members[0]), rate_of(str(template), members))
        for template, members in templates.items()
    ]
    by_template.sort(key=lambda row: (not row.seen, row.template is None, row.template or 0))
    return Breakdown(
        overall=rate_of("all", outcomes),
        by_site=[rate_of(site, members) for site, members in sorted(sites.items())],
        by_seen=[rate_of(label, members) for label, members in groups.items() if members],
        by_template=by_template,
    )
