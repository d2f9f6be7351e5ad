"""Where a rollout's wall-clock time goes, and the summary metrics a rollout run reports.

With N episodes in flight the engine and the browser overlap, so summing per-step times says little
about the bottleneck. `ActivityClock` instead splits the wall clock into four exclusive buckets
from the moments the engine starts/stops a call and browser work starts/stops: engine only,
browser only (the engine waits for the browser: the browser is the bottleneck), both, and
neither. `rollout_sums` reads that and the engine's counters as figures that add up over runs, and
`rollout_metrics` turns them and the finished trajectories into namespaced figures.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from webrl.data.trajectory import Trajectory

Tally = Callable[[dict[str, Any]], None]
"""Receives a rollout run's figures so far as each episode ends: its `rollout_sums` under "sums", and under
"latencies" the step latencies measured since the previous call (`webrl.inference.rollout.collect_rollouts`)."""


class ActivityClock:
    """Accumulates wall time by which of engine / browser were busy (single event loop, no locks)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self._last = self.started
        self._engine = 0
        self._browser = 0
        self.buckets = {"engine_only": 0.0, "browser_only": 0.0, "both": 0.0, "idle": 0.0}
        self.engine_calls = 0
        self.engine_prompts = 0

    def _advance(self) -> None:
        now = time.perf_counter()
        key = {(True, True): "both", (True, False): "engine_only", (False, True): "browser_only"}.get(
            (self._engine > 0, self._browser > 0), "idle"
        )
        self.buckets[key] += now - self._last
        self._last = now

    @contextlib.contextmanager
    def engine(self, prompts: int) -> Iterator[None]:
        self._advance()
        self._engine += 1
        self.engine_calls += 1
        self.engine_prompts += prompts
        try:
            yield
        finally:
            self._advance()
            self._engine -= 1

    @contextlib.contextmanager
    def browser(self) -> Iterator[None]:
        self._advance()
        self._browser += 1
        try:
            yield
        finally:
            self._advance()
            self._browser -= 1

    def wall(self) -> float:
        self._advance()
        return self._last - self.started


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rollout_sums(clock: ActivityClock, generated_tokens: int) -> dict[str, float]:
    """What a rollout run's engine and browser have done so far, as figures that add up over runs.

    Its wall time split by the clock's buckets, its engine calls and the prompts in them, and the tokens generated:
    a rollouts stage resumed after a crash adds those of each attempt (`add_sums`, `webrl.stage_attempts`), while
    ratios and means would not add.
    """
    wall = clock.wall()
    return {
        "wall_s": wall,
        **{f"{bucket}_s": seconds for bucket, seconds in clock.buckets.items()},
        "engine_calls": clock.engine_calls,
        "engine_prompts": clock.engine_prompts,
        "generated_tokens": generated_tokens,
    }


def add_sums(runs: list[dict[str, float]]) -> dict[str, float]:
    """The `rollout_sums` of several runs as one: each figure summed."""
    return {key: sum(run[key] for run in runs) for key in runs[0]}


def engine_browser_figures(sums: dict[str, float], step_latencies: list[float]) -> dict[str, float]:
    """The engine's and the browser's figures under `rollout/` keys, from `sums` (`rollout_sums`, of one run or
    `add_sums` of several) and the latencies of the steps they measured: busy seconds, the wall time's split and
    fractions, engine calls, batch size, tokens and their speed, and the step latency's mean and percentiles.

    Computed from sums and every latency rather than from each run's figures, so that runs of different lengths
    weigh as their seconds, calls and steps do, and a percentile is one over all the steps.
    """
    wall, calls, tokens = sums["wall_s"], sums["engine_calls"], sums["generated_tokens"]
    engine_busy = sums["engine_only_s"] + sums["both_s"]
    browser_busy = sums["browser_only_s"] + sums["both_s"]
    return {
        "rollout/generated_tokens": tokens,
        "rollout/gen_tokens_per_s": tokens / engine_busy if engine_busy > 0 else 0.0,
        "rollout/engine_calls": calls,
        "rollout/mean_batch_size": sums["engine_prompts"] / calls if calls else 0.0,
        "rollout/step_latency_mean_s": statistics.fmean(step_latencies) if step_latencies else 0.0,
        "rollout/step_latency_p50_s": _quantile(step_latencies, 0.5),
        "rollout/step_latency_p95_s": _quantile(step_latencies, 0.95),
        "rollout/engine_busy_s": engine_busy,
        "rollout/browser_busy_s": browser_busy,
        "rollout/engine_only_s": sums["engine_only_s"],
        "rollout/browser_only_s": sums["browser_only_s"],
        "rollout/overlap_s": sums["both_s"],
        "rollout/idle_s": sums["idle_s"],
        "rollout/engine_busy_frac": engine_busy / wall if wall > 0 else 0.0,
        "rollout/browser_only_frac": sums["browser_only_s"] / wall if wall > 0 else 0.0,
    }


def rollout_metrics(
    trajectories: list[Trajectory], sums: dict[str, float], step_latencies: list[float]
) -> dict[str, float]:
    """Throughput, latency, time split and success figures under `rollout/` keys, of a run that did `sums`
    (`rollout_sums`) and measured `step_latencies`.

    Success rates leave out `infra_error` trajectories; `rollout/infra_errors` counts them and
    `rollout/retried` the tasks run a second time.
    """
    counts = rollout_counts(trajectories)
    return {**rollout_rates(counts, sums["wall_s"]), **engine_browser_figures(sums, step_latencies), **counts}


def rollout_rates(counts: dict[str, float], wall_s: float) -> dict[str, float]:
    """`rollout/wall_s`, and the episodes per minute and steps per second of `counts` (`rollout_counts`) over it.

    One formula for a rollout run (`rollout_metrics`) and for a whole rollouts stage, which
    `webrl.stage_attempts` rates over every episode on disk and the rollout time of every attempt: a stage resumed
    after a crash ran its episodes in more than one launch, and the figures of the last launch alone describe only
    the episodes it ran.
    """
    return {
        "rollout/wall_s": wall_s,
        "rollout/episodes_per_min": 60.0 * counts["rollout/episodes"] / wall_s if wall_s > 0 else 0.0,
        "rollout/steps_per_s": counts["rollout/steps"] / wall_s if wall_s > 0 else 0.0,
    }


def rollout_counts(trajectories: list[Trajectory]) -> dict[str, float]:
    """The figures that depend only on the trajectories (episodes, steps, success, statuses), not on the process.

    A rollout stage resumed after a crash keeps the episodes that had finished and runs only the rest;
    these figures are then recomputed over all of them, so they equal an uninterrupted run's.
    """
    metrics: dict[str, float] = {
        "rollout/episodes": len(trajectories),
        "rollout/steps": sum(len(t.steps) for t in trajectories),
    }
    # A browser, site or engine failure that a retry did not cure says nothing about the agent: not in the rates.
    counted = [t for t in trajectories if not t.infra_error]
    metrics["rollout/infra_errors"] = len(trajectories) - len(counted)
    metrics["rollout/retried"] = sum(t.metadata.get("attempts", 1) > 1 for t in trajectories)
    # A fuzzy_match with no judge configured: no evaluator verdict, so not an evaluator success or failure.
    metrics["rollout/unjudged"] = sum(bool(t.metadata.get("eval", {}).get("needs_judge")) for t in trajectories)
    if counted:
        metrics["rollout/success_rate"] = sum(t.succeeded for t in counted) / len(counted)
    by_site: dict[str, list[bool]] = defaultdict(list)
    for trajectory in counted:
        by_site[trajectory.task.site].append(trajectory.succeeded)
    for site, outcomes in sorted(by_site.items()):
        metrics[f"rollout/success_rate/{site}"] = sum(outcomes) / len(outcomes)
    for status, count in sorted(Counter(t.status for t in trajectories).items()):
        metrics[f"rollout/status/{status}"] = count
    return metrics
