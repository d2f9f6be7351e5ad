"""Child of bench/env_throughput.py: BrowserGym's MiniWoB++ env with the same scripted policy.

Runs inside BrowserGym's own virtualenv (it pins playwright 1.44), never imports webrl, and writes
its figures as JSON. BrowserGym runs one sync gym env per process, so concurrency N is N worker
processes. Its env is used as shipped (task defaults: slow_mo 100 ms, 0.5 s pre-observation
delay, a browser launched per reset); the only change is that every Playwright launch, including
the one its chat window makes, is pointed at the given Chromium because no browser can be
downloaded here.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import multiprocessing
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


def _worker(args: tuple) -> dict:
    chromium, miniwob_url, jobs = args
    import os

    os.environ["MINIWOB_URL"] = miniwob_url
    _use_chromium(chromium)
    import browsergym.miniwob  # noqa: F401  (registers the envs)
    import gymnasium as gym

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
    # Stop the shared Playwright driver so it and its browsers are reaped: the parent measures the
    # CPU time of its descendants, which only counts processes that were waited for.
    from browsergym.core import _get_global_playwright

    _get_global_playwright().stop()
    return {"latencies": latencies, "steps": steps, "successes": successes, "episodes": len(jobs), "errors": errors}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def run_level(level: int, tasks: list[str], episodes: int, chromium: str, miniwob_url: str) -> dict:
    jobs = [(tasks[i % len(tasks)], i // len(tasks)) for i in range(max(episodes, level))]
    chunks = [jobs[w::level] for w in range(level)]
    start = time.perf_counter()
    pool = multiprocessing.get_context("spawn").Pool(level)
    parts = pool.map(_worker, [(chromium, miniwob_url, chunk) for chunk in chunks])
    pool.close()
    pool.join()  # workers exit on their own (not terminated), so their CPU time is accounted
    wall = time.perf_counter() - start
    latencies = [x for p in parts for x in p["latencies"]]
    steps = sum(p["steps"] for p in parts)
    return {
        "concurrency": level,
        "episodes": sum(p["episodes"] for p in parts),
        "steps": steps,
        "successes": sum(p["successes"] for p in parts),
        "wall_s": round(wall, 3),
        "steps_per_s": round(steps / wall, 3),
        "episodes_per_s": round(len(jobs) / wall, 3),
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
    parser.add_argument("--episodes", type=int, default=6, help="episodes per level (at least one per worker)")
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
