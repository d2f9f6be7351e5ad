"""Where a rollout's wall-clock time goes, and the summary metrics a rollout run reports.

With N episodes in flight the engine and the browser overlap, so summing per-step times says little
about the bottleneck. `ActivityClock` instead splits the wall clock into four exclusive buckets
from the moments the engine starts/stops a call and browser work starts/stops: engine only,
browser only (the engine waits for the browser: the browser is the bottleneck), both, and
neither. `rollout_metrics` turns that and the finished trajectories into namespaced figures.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterator

from webrl.data.trajectory import Trajectory


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


def rollout_metrics(
    trajectories: list[Trajectory], clock: ActivityClock, step_latencies: list[float], generated_tokens: int
) -> dict[str, float]:
    """Throughput, latency, time split and success figures under `rollout/` keys.

    Success rates leave out `infra_error` trajectories; `rollout/infra_errors` counts them and
    `rollout/retried` the tasks run a second time.
    """
    wall = clock.wall()
    buckets = clock.buckets
    engine_busy = buckets["engine_only"] + buckets["both"]
    browser_busy = buckets["browser_only"] + buckets["both"]
    counts = rollout_counts(trajectories)
    metrics: dict[str, float] = {
        **rollout_rates(counts, wall),
        "rollout/generated_tokens": generated_tokens,
        "rollout/gen_tokens_per_s": generated_tokens / engine_busy if engine_busy > 0 else 0.0,
        "rollout/engine_calls": clock.engine_calls,
        "rollout/mean_batch_size": clock.engine_prompts / clock.engine_calls if clock.engine_calls else 0.0,
        "rollout/step_latency_mean_s": statistics.fmean(step_latencies) if step_latencies else 0.0,
        "rollout/step_latency_p50_s": _quantile(step_latencies, 0.5),
        "rollout/step_latency_p95_s": _quantile(step_latencies, 0.95),
        "rollout/engine_busy_s": engine_busy,
        "rollout/browser_busy_s": browser_busy,
        "rollout/engine_only_s": buckets["engine_only"],
        "rollout/browser_only_s": buckets["browser_only"],
        "rollout/overlap_s": buckets["both"],
        "rollout/idle_s": buckets["idle"],
        "rollout/engine_busy_frac": engine_busy / wall if wall > 0 else 0.0,
        "rollout/browser_only_frac": buckets["browser_only"] / wall if wall > 0 else 0.0,
    }
    return {**metrics, **counts}


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
