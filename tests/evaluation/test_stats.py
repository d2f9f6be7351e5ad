"""Wilson intervals and the exact McNemar test against values worked out by hand (arithmetic in the comments)."""

from __future__ import annotations

import pytest

from webrl.evaluation.stats import exact_mcnemar_p, format_p, mcnemar, wilson_interval


def test_wilson_seven_of_forty():
    # p = 7/40 = 0.175, z^2 = 1.96^2 = 3.8416, z^2/n = 0.09604, so the shrink is 1.09604.
    # centre = (0.175 + 3.8416/80) / 1.09604 = 0.22302 / 1.09604 = 0.2034780
    # half = 1.96 * sqrt(0.175 * 0.825 / 40 + 3.8416 / 6400) / 1.09604
    #      = 1.96 * sqrt(0.003609375 + 0.00060025) / 1.09604 = 1.96 * 0.0648816 / 1.09604 = 0.1160249
    low, high = wilson_interval(7, 40)
    assert low == pytest.approx(0.2034780 - 0.1160249, abs=1e-6)  # 0.0874530
    assert high == pytest.approx(0.2034780 + 0.1160249, abs=1e-6)  # 0.3195029


def test_wilson_none_and_all_successes():
    # 0 of 10: p = 0, z^2/n = 0.38416; centre = 0.19208 / 1.38416 and half = 1.96 * sqrt(3.8416 / 400) / 1.38416
    # = 1.96 * 0.098 / 1.38416 = 0.19208 / 1.38416: equal, so low = 0 and high = 0.38416 / 1.38416 = 0.2775402.
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.38416 / 1.38416), abs=1e-9)
    # 10 of 10 mirrors it: low = 1 - 0.2775402 = 1 / 1.38416 = 0.7224598, high = 1.
    assert wilson_interval(10, 10) == pytest.approx((1 / 1.38416, 1.0), abs=1e-9)
    low, high = wilson_interval(0, 10)
    assert 0.0 <= low and high <= 1.0


def test_wilson_bounds_never_cross_the_rate_however_floats_round():
    # 0 of 6 computed low = 2.8e-17 and 10 of 10 high = 1 - 1.1e-16: the default run's report then failed,
    # because matplotlib refuses the negative error bars (rate - low, high - rate) this gave.
    for n in range(1, 301):
        for successes in range(n + 1):
            low, high = wilson_interval(successes, n)
            assert low <= successes / n <= high, (successes, n)
    assert wilson_interval(0, 6)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0


def test_wilson_without_trials_is_uninformative_and_bad_counts_are_errors():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="successes <= n"):
        wilson_interval(5, 4)
    with pytest.raises(ValueError, match="successes <= n"):
        wilson_interval(-1, 4)


def test_wider_z_gives_a_wider_interval():
    narrow, wide = wilson_interval(7, 40, z=1.0), wilson_interval(7, 40, z=2.576)
    assert wide[0] < narrow[0] and narrow[1] < wide[1]


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (5, 0, 2 / 32),  # X ~ Bin(5, 1/2): P[X <= 0] = 1/32, doubled = 0.0625
        (0, 5, 2 / 32),  # symmetric in b and c
        (6, 1, 2 * 8 / 128),  # Bin(7, 1/2): P[X <= 1] = (1 + 7)/128 = 8/128, doubled = 0.125
        (0, 0, 1.0),  # no discordant task: no evidence either way
        (3, 3, 1.0),  # Bin(6, 1/2): P[X <= 3] = (1 + 6 + 15 + 20)/64 = 42/64; doubled 84/64 > 1, capped at 1
        (10, 2, 2 * 79 / 4096),  # Bin(12, 1/2): P[X <= 2] = (1 + 12 + 66)/4096 = 79/4096; doubled = 0.0385742
    ],
)
def test_exact_mcnemar_p(b, c, expected):
    assert exact_mcnemar_p(b, c) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_counts_the_discordant_tasks():
    a = {"1": True, "2": True, "3": False, "4": False, "5": True, "6": True, "7": True, "8": True}
    b = {"1": True, "2": False, "3": False, "4": True, "5": False, "6": False, "7": False, "8": False}
    result = mcnemar(a, b)
    # both: task 1; only A: 2, 5, 6, 7, 8 (b = 5); only B: 4 (c = 1); neither: 3.
    # Bin(6, 1/2): P[X <= 1] = (1 + 6)/64 = 7/64, doubled = 14/64 = 0.21875
    assert (result.tasks, result.both, result.only_a, result.only_b) == (8, 1, 5, 1)
    assert result.p_value == pytest.approx(14 / 64)
    assert result.to_dict()["p_value"] == result.p_value


def test_mcnemar_on_different_tasks_names_them():
    with pytest.raises(ValueError, match=r"only in A: 3; only in B: 9, 10") as error:
        mcnemar({"1": True, "2": False, "3": True}, {"1": True, "2": False, "9": True, "10": False})
    assert "same tasks" in str(error.value)


@pytest.mark.parametrize(
    ("p", "shown"),
    [
        (0.125, "0.125"),
        (1.0, "1"),
        (0.04998, "0.04998"),
        (0.0500001, "0.05"),
        (0.00999, "0.00999"),
        (0.009996, "0.009996"),
        (0.0312, "0.0312"),
        (0.05, "0.05"),
    ],
)
def test_a_p_value_is_never_shown_on_the_other_side_of_5_or_1_percent(p, shown):
    """At 3 significant digits 0.04998 would print as 0.05 and 0.009996 as 0.01: not significant to a reader."""
    assert format_p(p) == shown
