"""Where the browser environment's wall time goes: context creation, observation, actions, loop stalls, CPU.

bench/env_throughput.py reports that webrl's BrowserPool at concurrency 16 uses under one of the two
cores, as if its steps waited rather than computed (issue #13). This script runs the same workload
(its `run_webrl`: same tasks, seeds, limits and scripted policy) in this process with timers wrapped
around the environment's own calls, so that the split is read off rather than guessed:

- phases, nested as they are called: context creation; reset (the first navigation, the first
  observation); step (parse; action = perform, i.e. the element lookup then Playwright's click, fill or
  key press, and the wait for the page to settle; observation = the observation script's page.evaluate
  and its Python side; the task's done check); evaluation; context close. Each with calls, ms per call,
  ms per step, its share of the slot-time (wall x concurrency) and the share of the wall during which
  at least one was in flight (slot share x concurrency / in-flight share = how many overlapped);
- event-loop lag: a task sleeps 5 ms over and over and records how late it wakes, and the loop
  thread's CPU meanwhile: a late wake with CPU is Python work (ours, Playwright's message handling)
  holding the loop, one without is the loop waiting for a core;
- CPU: this process (the event-loop thread apart from the others: the MiniWoB file server, the parser),
  the Playwright driver, and Chromium by process type, read with psutil over the process tree before
  the browser shuts down. Processes that ended on the way (a closed context's renderer) count through
  their parent's reaped time, which getrusage(RUSAGE_CHILDREN) alone misses (env_throughput now reads
  the tree the same way); the machine's busy cores and other processes' share are given beside it;
- the concurrency achieved: the summed step (and episode) latencies over the wall, against the slots.

Only timers are added (monkeypatched here; nothing in webrl changes), a few microseconds a call.
Results go to bench/results/env_profile.json.

    python bench/env_profile.py
    python bench/env_profile.py --concurrency 1 4 16 --episodes 32
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import json
import os
import platform
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import psutil
from env_throughput import ROOT, TASKS, percentile, run_webrl, tree_cpu

from webrl.env import episode as episode_module
from webrl.env import executor, observation
from webrl.env.browser import BrowserPool
from webrl.env.chromium import find_chromium
from webrl.env.episode import Episode
from webrl.env.miniwob import MiniWoBBackend

TICK_S = 0.005
"""How long the lag monitor sleeps each time; a wake later than this is time the loop was held."""
STALL_S = 0.001
"""Lag above this counts as a stall (below it is the loop's own scheduling noise)."""
REST = "(rest)"
"""Name of the derived rows: a call's time outside the timed calls inside it."""
# (owner, attribute, name): the calls timed; a call made inside another is recorded under its path.
HOOKS = (
    (BrowserPool, "_new_context", "new context"),
    (Episode, "reset", "reset"),
    (MiniWoBBackend, "start", "navigation"),
    (episode_module, "observe", "observe"),
    (observation, "evaluate_settled", "page.evaluate"),
    (Episode, "step", "step"),
    (Episode, "_parse", "parse"),
    (episode_module, "execute_action", "action"),
    (executor, "_run", "perform"),
    (executor, "evaluate_settled", "inspect element"),
    (executor._NavigationWatch, "settle", "settle"),
    (MiniWoBBackend, "episode_done", "done check"),
    (Episode, "evaluate", "evaluate"),
    (Episode, "close", "close context"),
)
_PATH: contextvars.ContextVar[str] = contextvars.ContextVar("env_profile_path", default="")

Interval = tuple[float, float]


def union_seconds(intervals: Iterable[Interval]) -> float:
    """Seconds during which at least one interval was open (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def phase_rows(intervals: dict[str, list[Interval]], wall: float, concurrency: int, steps: int) -> dict[str, dict]:
    """Per call path: calls, seconds, ms per call and per step, slot share, share of wall in flight."""
    rows = {}
    for path, spans in intervals.items():
        durations = [stop - start for start, stop in spans]
        total = sum(durations)
        rows[path] = {
            "calls": len(spans),
            "total_s": round(total, 3),
            "p50_ms": round(1000 * percentile(durations, 0.5), 1),
            "p95_ms": round(1000 * percentile(durations, 0.95), 1),
            "ms_per_step": round(1000 * total / steps, 1) if steps else None,
            "slot_share": round(total / (wall * concurrency), 3) if wall > 0 else None,
            "in_flight_share": round(union_seconds(spans) / wall, 3) if wall > 0 else None,
        }
    return rows


def remainders(rows: dict[str, dict], wall: float, concurrency: int, steps: int) -> dict[str, dict]:
    """For each call with timed calls inside it, a row for its time outside them.

    Under an observation that is its Python side (post-processing, waiting for the loop); under a
    reset, the init scripts, the site guard's routes and the new page; under perform, Playwright's own
    click, fill or key press.
    """
    derived = {}
    for path, row in rows.items():
        inner = [other for name, other in rows.items() if name.rpartition("/")[0] == path]
        if not inner:
            continue
        total = row["total_s"] - sum(other["total_s"] for other in inner)
        derived[f"{path}/{REST}"] = {
            "calls": row["calls"],
            "total_s": round(total, 3),
            "ms_per_call": round(1000 * total / row["calls"], 2) if row["calls"] else None,
            "ms_per_step": round(1000 * total / steps, 1) if steps else None,
            "slot_share": round(total / (wall * concurrency), 3) if wall > 0 else None,
        }
    return derived


def lag_summary(ticks: list[tuple[float, float]], wall: float) -> dict:
    """How late the monitor woke: percentiles, the worst, and the seconds the loop was held in stalls.

    `ticks` are (lag, loop-thread CPU seconds during the tick). A stall whose tick used little CPU was
    the loop waiting for a core (the machine busy elsewhere), not Python work holding it.
    """
    lags = [lag for lag, _ in ticks]
    stalls = [lag for lag in lags if lag > STALL_S]
    stall_cpu = sum(cpu for lag, cpu in ticks if lag > STALL_S)
    return {
        "wakes": len(lags),
        "p50_ms": round(1000 * percentile(lags, 0.5), 2),
        "p95_ms": round(1000 * percentile(lags, 0.95), 2),
        "max_ms": round(1000 * max(lags), 1) if lags else None,
        "stalls": len(stalls),
        "stall_s": round(sum(stalls), 3),
        "stall_share_of_wall": round(sum(stalls) / wall, 3) if wall > 0 else None,
        "loop_cpu_in_stalled_ticks_s": round(stall_cpu, 3),
    }


def achieved_concurrency(rows: dict[str, dict], wall: float, concurrency: int) -> dict:
    """The steps (and whole episodes) in flight on average, against the slots open."""
    step_s = rows.get("step", {}).get("total_s", 0.0)
    episode_s = sum(row["total_s"] for path, row in rows.items() if "/" not in path)
    return {
        "step_latency_sum_s": round(step_s, 3),
        "episode_time_sum_s": round(episode_s, 3),
        "steps_in_flight": round(step_s / wall, 2) if wall > 0 else None,
        "episodes_in_flight": round(episode_s / wall, 2) if wall > 0 else None,
        "slots": concurrency,
        "slot_time_outside_env_calls": round(1 - episode_s / (wall * concurrency), 3) if wall > 0 else None,
    }


def own_cpu() -> tuple[float, float]:
    """This process's CPU seconds: all threads, and the event-loop (main) thread alone."""
    me = psutil.Process()
    times = me.cpu_times()
    main = threading.main_thread().native_id
    loop = sum(t.user_time + t.system_time for t in me.threads() if t.id == main)
    return times.user + times.system, loop


def cpu_split(before: dict, after: dict, wall: float) -> dict[str, dict]:
    """CPU seconds per group over the window (a snapshot's keys: "tree", "python", "loop"), and cores used."""
    seconds = {
        "python event-loop thread": after["loop"] - before["loop"],
        "python other threads": (after["python"] - after["loop"]) - (before["python"] - before["loop"]),
    }
    for pid, (group, own, reaped) in after["tree"].items():
        _, own_before, reaped_before = before["tree"].get(pid, (group, 0.0, 0.0))
        seconds[group] = seconds.get(group, 0.0) + own - own_before
        ended = f"{group}'s ended children"
        seconds[ended] = seconds.get(ended, 0.0) + reaped - reaped_before
    return {
        group: {"cpu_s": round(value, 3), "cores": round(value / wall, 3) if wall > 0 else None}
        for group, value in sorted(seconds.items(), key=lambda item: -item[1])
        if value >= 0.0005
    }


def machine_split(before: dict, after: dict, ours: float, wall: float) -> dict:
    """Cores the whole machine kept busy over the window, and how many of them went to other jobs."""
    busy = after["machine"] - before["machine"]
    cores = os.cpu_count() or 1
    return {
        "cores": cores,
        "busy_cores": round(busy / wall, 3) if wall > 0 else None,
        "other_processes_cores": round((busy - ours) / wall, 3) if wall > 0 else None,
    }


def machine_busy_s() -> float:
    """CPU seconds all processes on the machine have used since boot (idle and I/O wait left out)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def snapshot() -> dict:
    """The clock and the CPU counters that `cpu_split` compares between the window's start and end."""
    python, loop = own_cpu()
    tree = tree_cpu(psutil.Process())
    return {"time": time.perf_counter(), "python": python, "loop": loop, "tree": tree, "machine": machine_busy_s()}


async def watch_loop(ticks: list[tuple[float, float]], tick_s: float = TICK_S) -> None:
    """Sleep `tick_s` over and over, recording how late each wake is and the loop thread's CPU meanwhile."""
    while True:
        start, cpu = time.perf_counter(), time.thread_time()
        await asyncio.sleep(tick_s)
        ticks.append((time.perf_counter() - start - tick_s, time.thread_time() - cpu))


class Profiler:
    """Timers around the environment's calls, and the window from the browser's start to its close."""

    def __init__(self) -> None:
        self.intervals: dict[str, list[Interval]] = {}
        self.ticks: list[tuple[float, float]] = []
        self.before: dict = {}
        self.after: dict = {}
        self._monitor: asyncio.Task | None = None

    def timed(self, name: str, func: Callable) -> Callable:
        """`func` (a coroutine function) recording its interval under the caller's path plus `name`."""

        @functools.wraps(func)
        async def wrapper(*args, **kwargs):
            parent = _PATH.get()
            path = f"{parent}/{name}" if parent else name
            token = _PATH.set(path)
            start = time.perf_counter()
            try:
                return await func(*args, **kwargs)
            finally:
                self.intervals.setdefault(path, []).append((start, time.perf_counter()))
                _PATH.reset(token)

        return wrapper

    def window(self, start: Callable, close: Callable) -> tuple[Callable, Callable]:
        """BrowserPool.start and .close that open and shut the measured window (CPU snapshots, lag monitor)."""

        async def started(pool: BrowserPool) -> None:
            await start(pool)
            self.before = snapshot()
            self._monitor = asyncio.create_task(watch_loop(self.ticks))

        async def closing(pool: BrowserPool) -> None:
            if self._monitor is not None:
                self._monitor.cancel()
                self._monitor = None
                self.after = snapshot()
            await close(pool)

        return started, closing

    def patches(self, stack: ExitStack) -> None:
        for owner, attribute, name in HOOKS:
            stack.enter_context(mock.patch.object(owner, attribute, self.timed(name, getattr(owner, attribute))))
        started, closing = self.window(BrowserPool.start, BrowserPool.close)
        stack.enter_context(mock.patch.object(BrowserPool, "start", started))
        stack.enter_context(mock.patch.object(BrowserPool, "close", closing))


def profile_level(tasks: list[str], concurrency: int, episodes: int, chromium: str, reuse: bool = False) -> dict:
    """Run env_throughput's webrl workload once under the profiler (`reuse`: in reused contexts); return the split."""
    profiler = Profiler()
    with ExitStack() as stack:
        profiler.patches(stack)
        row = asyncio.run(run_webrl(tasks, concurrency, episodes, chromium, reuse))
    wall = profiler.after["time"] - profiler.before["time"]
    steps = row["steps"]
    rows = phase_rows(profiler.intervals, wall, concurrency, steps)
    cpu = cpu_split(profiler.before, profiler.after, wall)
    total_cpu = sum(group["cpu_s"] for group in cpu.values())
    return {
        # The window's own CPU split is below; run_webrl's start-up figure is this process's total so far.
        **{key: value for key, value in row.items() if key not in ("failures", "startup_cpu_s")},
        "failures": len(row["failures"]),
        "window_s": round(wall, 3),
        "phases": dict(sorted({**rows, **remainders(rows, wall, concurrency, steps)}.items(), key=call_order)),
        "loop_lag": lag_summary(profiler.ticks, wall),
        "cpu": cpu,
        "cpu_total_s": round(total_cpu, 3),
        "cores_used": round(total_cpu / wall, 3) if wall > 0 else None,
        "machine": machine_split(profiler.before, profiler.after, total_cpu, wall),
        "cpu_ms_per_step": round(1000 * total_cpu / steps, 1) if steps else None,
        "concurrency_achieved": achieved_concurrency(rows, wall, concurrency),
    }


def call_order(item: tuple[str, dict]) -> tuple:
    """Sort key: a path's parts in the order HOOKS lists the calls, so children follow their parent."""
    order = {name: index for index, (_, _, name) in enumerate(HOOKS)} | {REST: len(HOOKS)}
    return tuple(order.get(part, len(HOOKS)) for part in item[0].split("/"))


def print_level(result: dict) -> None:
    print(
        f"\nconcurrency {result['concurrency']}: {result['episodes']} episodes ({result['successes']} ok), "
        f"{result['steps']} steps, {result['steps_per_s']} steps/s, wall {result['window_s']} s, "
        f"step p50 {result['step_latency_p50_ms']} ms p95 {result['step_latency_p95_ms']} ms"
    )
    print(f"  {'phase':<40}{'calls':>6}{'total s':>9}{'p50 ms':>9}{'p95 ms':>9}{'ms/step':>9}{'slots':>8}{'wall':>7}")
    for path, row in result["phases"].items():
        depth = path.count("/")
        name = "  " * depth + path.rsplit("/", 1)[-1]
        p50 = row.get("p50_ms", row.get("ms_per_call"))
        in_flight = f"{100 * row['in_flight_share']:>6.0f}%" if "in_flight_share" in row else f"{'':>7}"
        print(
            f"  {name:<40}{row['calls']:>6}{row['total_s']:>9.3f}{p50:>9}{row.get('p95_ms', ''):>9}"
            f"{row['ms_per_step']:>9}{100 * row['slot_share']:>7.1f}%{in_flight}"
        )
    print(f"  ({REST}: a call's time outside the timed calls inside it; its p50 column is the mean)")
    lag = result["loop_lag"]
    print(
        f"  event-loop lag ({lag['wakes']} wakes of {1000 * TICK_S:g} ms): p50 {lag['p50_ms']} ms, "
        f"p95 {lag['p95_ms']} ms, max {lag['max_ms']} ms; {lag['stalls']} stalls > {1000 * STALL_S:g} ms "
        f"holding the loop {lag['stall_s']} s ({100 * lag['stall_share_of_wall']:.1f}% of the wall; "
        f"loop thread CPU in those ticks {lag['loop_cpu_in_stalled_ticks_s']} s)"
    )
    machine = result["machine"]
    print(
        f"  CPU {result['cpu_total_s']} s = {result['cores_used']} cores, {result['cpu_ms_per_step']} ms/step "
        f"(machine: {machine['busy_cores']} of {machine['cores']} cores busy, "
        f"{machine['other_processes_cores']} by other processes):"
    )
    for group, row in result["cpu"].items():
        print(f"    {group:<38}{row['cpu_s']:>8.2f} s {row['cores']:>7.3f} cores")
    achieved = result["concurrency_achieved"]
    print(
        f"  in flight on average: {achieved['steps_in_flight']} steps, {achieved['episodes_in_flight']} episodes "
        f"of {achieved['slots']} slots ({100 * achieved['slot_time_outside_env_calls']:.1f}% of slot-time "
        f"outside the environment's calls)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="where webrl.env's wall time goes, MiniWoB++ scripted")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--episodes", type=int, default=0, help="episodes per level (default: max(12, 4 x level))")
    parser.add_argument("--reuse-contexts", action="store_true", help="episodes in wiped reused contexts")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "env_profile.json")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    results: dict = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_start": os.getloadavg()},
        "tasks": args.tasks,
        "reuse_contexts": args.reuse_contexts,
        "levels": [],
    }
    for level in args.concurrency:
        episodes = args.episodes or max(12, 4 * level)
        results["levels"].append(profile_level(args.tasks, level, episodes, chromium, args.reuse_contexts))
        print_level(results["levels"][-1])
    results["machine"]["load_avg_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
