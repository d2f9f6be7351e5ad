"""Success per site, per seen/test-only group and per template on a handful of fake task records."""

from __future__ import annotations

import pytest

from webrl.evaluation.breakdown import TaskOutcome, breakdown
from webrl.evaluation.stats import wilson_interval

SEEN_TEMPLATES = {101, 401, 999}  # 999: a train template with no task here
OUTCOMES = [
    TaskOutcome("1", "shopping", 101, True),
    TaskOutcome("2", "shopping", 101, False),
    TaskOutcome("3", "shopping", 104, False),
    TaskOutcome("4", "reddit", 401, True),
    TaskOutcome("5", "reddit", 409, True),
    TaskOutcome("6", "reddit", 409, False),
    TaskOutcome("7", "map", None, False),
]


def _counts(rates):
    return {rate.label: (rate.n, rate.successes) for rate in rates}


def test_overall_and_per_site():
    result = breakdown(OUTCOMES, SEEN_TEMPLATES)
    assert (result.overall.n, result.overall.successes) == (7, 3)  # tasks 1, 4, 5
    assert result.overall.rate == pytest.approx(3 / 7)
    assert _counts(result.by_site) == {"map": (0 + 1, 0), "reddit": (3, 2), "shopping": (3, 1)}
    assert [rate.label for rate in result.by_site] == ["map", "reddit", "shopping"]


def test_seen_and_test_only_templates():
    result = breakdown(OUTCOMES, SEEN_TEMPLATES)
    # seen: tasks 1, 2 (template 101) and 4 (401): 2 of 3. test-only: 3 (104), 5, 6 (409), 7 (no template): 1 of 4.
    assert _counts(result.by_seen) == {"seen": (3, 2), "test-only": (4, 1)}
    test_only = result.by_seen[1]
    # Wilson for 1 of 4: p = 0.25, z^2/n = 3.8416/4 = 0.9604, shrink 1.9604;
    # centre = (0.25 + 0.4802) / 1.9604 = 0.3724750; half = 1.96 * sqrt(0.046875 + 0.060025) / 1.9604 = 0.3268889
    assert test_only.interval == pytest.approx((0.3724750 - 0.3268889, 0.3724750 + 0.3268889), abs=1e-6)


def test_per_template_rows_seen_first():
    rows = breakdown(OUTCOMES, SEEN_TEMPLATES).by_template
    assert [(row.template, row.site, row.seen, row.rate.n, row.rate.successes) for row in rows] == [
        (101, "shopping", True, 2, 1),
        (401, "reddit", True, 1, 1),
        (104, "shopping", False, 1, 0),
        (409, "reddit", False, 2, 1),
        (None, "map", False, 1, 0),
    ]
    first = rows[0].to_dict()
    assert first["rate"] == 0.5 and (first["low"], first["high"]) == wilson_interval(1, 2)


def test_a_group_without_tasks_is_left_out():
    only_seen = [outcome for outcome in OUTCOMES if outcome.template in SEEN_TEMPLATES]
    result = breakdown(only_seen, SEEN_TEMPLATES)
    assert [rate.label for rate in result.by_seen] == ["seen"]
    assert breakdown([], SEEN_TEMPLATES).overall.interval == (0.0, 1.0)
