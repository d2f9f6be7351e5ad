"""`rollout_counts`: the rollout figures a resumed stage recomputes over every episode, the earlier ones too; and
`rollout_metrics`' time split and step latencies on a hand-driven clock."""

from __future__ import annotations

import types

import pytest
from sample_records import build_trajectory

from webrl.inference import rollout_metrics as metrics_module
from webrl.inference.rollout_metrics import ActivityClock, rollout_counts, rollout_metrics, rollout_sums


def test_counts_depend_only_on_the_trajectories():
    trajectories = [
        build_trajectory("a", num_steps=2, outcome=1.0),
        build_trajectory("b", num_steps=3, outcome=0.0),
        build_trajectory("c", num_steps=1, outcome=1.0),
        build_trajectory("d", num_steps=1, outcome=0.0),
    ]
    trajectories[1].status = "max_steps"
    # A fuzzy_match task with no judge configured: counted as unjudged.
    trajectories[1].metadata["eval"] = {"per_type": {"string_match": 0.0}, "needs_judge": True}
    # A browser failure that its retry did not cure: counted, but left out of the success rates.
    trajectories[3].status = "error"
    trajectories[3].metadata.update(infra_error=True, attempts=2)
    assert rollout_counts(trajectories) == {
        "rollout/episodes": 4,
        "rollout/steps": 7,
        "rollout/infra_errors": 1,
        "rollout/retried": 1,
        "rollout/unjudged": 1,
        "rollout/success_rate": 2 / 3,
        "rollout/success_rate/shopping": 2 / 3,
        "rollout/status/error": 1,
        "rollout/status/exit": 2,
        "rollout/status/max_steps": 1,
    }
    assert rollout_counts([]) == {
        "rollout/episodes": 0,
        "rollout/steps": 0,
        "rollout/infra_errors": 0,
        "rollout/retried": 0,
        "rollout/unjudged": 0,
    }


def test_the_clock_splits_the_wall_time_and_the_latencies_are_summarised(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(metrics_module, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    clock = ActivityClock()
    engine, browser = clock.engine(prompts=4), clock.browser()
    engine.__enter__()  # engine busy 0-3 s, browser 1-5 s: their intervals overlap without nesting
    now[0] = 1.0
    browser.__enter__()
    now[0] = 3.0
    engine.__exit__(None, None, None)
    now[0] = 5.0
    browser.__exit__(None, None, None)
    now[0] = 6.0
    figures = rollout_metrics([], rollout_sums(clock, generated_tokens=30), [10.0, 1.0, 3.0, 2.0])
    # 0-1 engine only, 1-3 both, 3-5 browser only, 5-6 neither
    assert (figures["rollout/wall_s"], figures["rollout/engine_only_s"], figures["rollout/overlap_s"]) == (6, 1, 2)
    assert (figures["rollout/browser_only_s"], figures["rollout/idle_s"]) == (2, 1)
    assert (figures["rollout/engine_busy_s"], figures["rollout/browser_busy_s"]) == (3, 4)
    assert figures["rollout/gen_tokens_per_s"] == 10  # 30 tokens over the engine's 3 busy seconds
    assert figures["rollout/browser_only_frac"] == pytest.approx(2 / 6)
    assert (figures["rollout/engine_calls"], figures["rollout/mean_batch_size"]) == (1, 4)
    # Latencies sorted 1, 2, 3, 10: mean 16/4 = 4. A quantile q is the sorted value at index floor(q * n), capped at
    # n - 1 (no interpolation): p50 index 2 -> 3 (not the interpolated median 2.5), p95 index floor(3.8) = 3 -> 10.
    assert figures["rollout/step_latency_mean_s"] == 4
    assert (figures["rollout/step_latency_p50_s"], figures["rollout/step_latency_p95_s"]) == (3, 10)
