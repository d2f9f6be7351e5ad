"""Child of bench/env_throughput.py: BrowserGym's MiniWoB++ env with the same scripted policy.

Runs inside BrowserGym's own virtualenv (it pins playwright 1.44), never imports webrl, and writes
its figures as JSON. BrowserGym runs one sync gym env per process, so concurrency N is N worker
processes. Its env is used as shipped (task defaults: slow_mo 100 ms, 0.5 s pre-observation
delay, a browser launched per reset); the only change is that every Playwright launch, including
the one its chat window makes, is pointed at the given Chromium because no browser can be
downloaded here.

The clock runs as webrl's does: from the moment every worker has started and imported BrowserGym
(a barrier) to the end of the last episode, so process start-up is not counted as steps' time; the
CPU seconds the workers spent starting up are reported apart (`startup_cpu_s`) for the parent to
leave out of its CPU per step.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import multiprocessing
import multiprocessing.synchronize
import re
import statistics
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class _QuietHandler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        return


def _use_chromium(path: str) -> None:
    from playwright.sync_api._generated import BrowserType

    launch = BrowserType.launch

    def launch_with_system_chromium(self, *args, **kwargs):
        kwargs.setdefault("executable_path", path)
        return launch(self, *args, **kwargs)

    BrowserType.launch = launch_with_system_chromium


def _elements(obs) -> list[tuple[str, str, str, str]]:
    """(tag, bid, attrs, direct text) of the elements of BrowserGym's pruned html."""
    from browsergym.utils.obs import flatten_dom_to_str, prune_html

    html = prune_html(flatten_dom_to_str(obs["dom_object"]))
    return [(t, b, a, " ".join(x.split())) for t, b, a, x in re.findall(r'<(\w+) bid="([^"]+)"([^>]*)>([^<]*)', html)]


def _act(task: str, goal: str, obs, step: int) -> str:
    """The same decisions as webrl's MiniWoBScriptedPolicy, in BrowserGym's action language."""
    elements = _elements(obs)
    quoted = re.findall(r'"([^"]*)"', goal)
    buttons = [e for e in elements if e[0] == "button"]
    inputs = [e for e in elements if e[0] == "input"]
    if task == "click-test":
        return f'click("{buttons[0][1]}")'
    if task == "click-button":
        return f'click("{next(e[1] for e in buttons if e[3] == quoted[0])}")'
    if task == "click-link":
        return f'click("{next(e[1] for e in elements if e[0] == "span" and e[3] == quoted[0])}")'
    if task == "focus-text":
        return f'click("{inputs[0][1]}")'
    if task == "enter-text":
        if step == 0:
            return f'fill("{inputs[0][1]}", "{quoted[0]}")'
        return f'click("{next(e[1] for e in buttons if e[3] == "Submit")}")'
    if task == "login-user":
        if step < 2:
            return f'fill("{inputs[step][1]}", "{quoted[step]}")'
        return f'click("{next(e[1] for e in buttons if e[3] == "Login")}")'
    raise ValueError(f"no BrowserGym script for {task!r}")


_START: multiprocessing.synchronize.Barrier | None = None
"""Set in each pool worker: the barrier all of them pass once started, so that the clock starts together."""


def _join(barrier: multiprocessing.synchronize.Barrier) -> None:
    """Pool initializer: a barrier cannot travel in a task's arguments, only to a starting worker."""
    global _START
    _START = barrier


def _worker(args: tuple) -> dict:
    """Run this worker's episodes; its timings are monotonic (system-wide) so that the parent can compare them."""
    chromium, miniwob_url, jobs = args
    import os

    os.environ["MINIWOB_URL"] = miniwob_url
    try:
        _use_chromium(chromium)
        import browsergym.miniwob  # noqa: F401  (registers the envs)
        import gymnasium as gym
    except BaseException:
        _START.abort()  # the others would wait for this worker at the barrier for ever
        raise
    startup_cpu = time.process_time()
    _START.wait()
    started = time.monotonic()
    row = _episodes(gym, jobs)
    done = time.monotonic()
    # Stop the shared Playwright driver so it and its browsers are reaped: the parent measures the
    # CPU time of its descendants, which only counts processes that were waited for.
    from browsergym.core import _get_global_playwright

    _get_global_playwright().stop()
    return {**row, "episodes": len(jobs), "started": started, "done": done, "startup_cpu_s": startup_cpu}


def _episodes(gym, jobs: list[tuple[str, int]]) -> dict:
    """Each (task, seed) as one episode of the scripted policy; a failed episode is counted, not raised."""
    latencies, steps, successes, errors = [], 0, 0, []
    for task, seed in jobs:
        env = gym.make(f"browsergym/miniwob.{task}")
        try:
            obs, _ = env.reset(seed=seed)
            for step in range(10):
                action = _act(task, obs["goal"], obs, step)
                start = time.perf_counter()
                obs, reward, terminated, truncated, _ = env.step(action)
                latencies.append(time.perf_counter() - start)
                steps += 1
                if terminated or truncated:
                    successes += int(reward > 0)
                    break
        except Exception as err:  # a failed episode is a result here, not a crash
            errors.append(f"{task}.{seed}: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
        finally:
            with contextlib.suppress(Exception):
                env.close()
    return {"latencies": latencies, "steps": steps, "successes": successes, "errors": errors}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def run_level(level: int, tasks: list[str], episodes: int, chromium: str, miniwob_url: str) -> dict:
    """Run `episodes`, rounded up to a multiple of `level`, over `level` workers; the level's figures.

    Each worker runs an equal share: with 6 episodes over 4 workers, two would run alone at the end
    while the clock still ran, and the level would measure less than its concurrency.
    """
    count = level * -(-max(episodes, 1) // level)
    jobs = [(tasks[i % len(tasks)], i // len(tasks)) for i in range(count)]
    chunks = [jobs[w::level] for w in range(level)]
    context = multiprocessing.get_context("spawn")
    launched = time.monotonic()
    # One chunk per worker, each held at the barrier until all have started: none can take a second chunk.
    pool = context.Pool(level, initializer=_join, initargs=(context.Barrier(level),))
    parts = pool.map(_worker, [(chromium, miniwob_url, chunk) for chunk in chunks])
    pool.close()
    pool.join()  # workers exit on their own (not terminated), so their CPU time is accounted
    return level_row(level, parts, time.monotonic() - launched)


def level_row(level: int, parts: list[dict], wall_with_startup: float) -> dict:
    """The level's figures from its workers' results; the wall runs from the barrier to the last episode's end."""
    wall = max(p["done"] for p in parts) - min(p["started"] for p in parts)
    latencies = [x for p in parts for x in p["latencies"]]
    steps = sum(p["steps"] for p in parts)
    episodes = sum(p["episodes"] for p in parts)
    return {
        "concurrency": level,
        "episodes": episodes,
        "steps": steps,
        "successes": sum(p["successes"] for p in parts),
        "wall_s": round(wall, 3),
        "wall_with_startup_s": round(wall_with_startup, 3),
        "startup_cpu_s": round(sum(p["startup_cpu_s"] for p in parts), 3),
        "steps_per_s": round(steps / wall, 3) if wall > 0 else None,
        "episodes_per_s": round(episodes / wall, 3) if wall > 0 else None,
        "step_latency_p50_ms": round(1000 * _percentile(latencies, 0.5), 1),
        "step_latency_p95_ms": round(1000 * _percentile(latencies, 0.95), 1),
        "step_latency_mean_ms": round(1000 * statistics.fmean(latencies), 1) if latencies else None,
        "failures": [error for p in parts for error in p["errors"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--miniwob-dir", required=True, help="the miniwob package's html/ directory")
    parser.add_argument("--chromium", required=True)
    parser.add_argument("--tasks", nargs="+", required=True)
    parser.add_argument("--concurrency", type=int, required=True, help="worker processes")
    parser.add_argument("--episodes", type=int, default=6, help="episodes per level (rounded up to equal shares)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    # Served over http from this process, as webrl serves it, so both sides pay for their server.
    handler = functools.partial(_QuietHandler, directory=args.miniwob_dir)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    miniwob_url = f"http://127.0.0.1:{server.server_address[1]}/miniwob/"
    try:
        row = run_level(args.concurrency, args.tasks, args.episodes, args.chromium, miniwob_url)
    finally:
        server.shutdown()
    with open(args.out, "w") as handle:
        json.dump(row, handle, indent=2)


if __name__ == "__main__":
    main()
