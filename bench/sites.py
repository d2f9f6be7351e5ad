"""Embedded sites: server requests/s, episode reset time, observation sizes and solver throughput.

Three measurements on the real stack (sites subprocess, real Chromium, the project's observation):
1. Server requests/s and latency with concurrent keep-alive HTTP clients on loopback, a bounded
   number of requests and a time cap per level (a mix of list, detail and search pages, each
   client with its own episode cookie).
2. Episode reset time: new browser context + episode cookie + start page + first observation.
3. The reference solver over a task split at a given concurrency, through the rollout driver:
   episodes/min, steps per task, and the observation length in characters (median, p95) of every
   page the agent read.
Figures are printed and written to bench/results/sites.json.

    python bench/sites.py
    python bench/sites.py --clients 1 4 16 --requests 4000 --resets 40 --split train --episodes 0
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import statistics
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from webrl.data.prompts import actor_prompt_for_step
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.sites import EmbeddedSites, load_suite
from webrl.env.sites.scorecard import failures, summary
from webrl.env.sites.server import EPISODE_COOKIE
from webrl.inference.rollout import collect_rollouts_sync
from webrl.inference.scripted import ScriptedEngine

RESULTS = Path(__file__).resolve().parent / "results" / "sites.json"
PATHS = [
    "/shopping/",
    "/shopping/search?q=mug",
    "/shopping/product/3",
    "/shopping/category/kitchen",
    "/shopping/orders?page=2",
    "/admin/products?q=blue",
    "/admin/reports",
    "/forum/f/books",
    "/forum/post/10",
    "/gitlab/",
    "/map/?q=cafe",
    "/map/directions?from=Riverside+Cafe&to=Maple+Park",
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def http_load(base_url: str, clients: int, requests: int, time_cap_s: float) -> dict:
    """`clients` threads share a budget of `requests` GETs (or stop at the time cap); one connection each.

    A request answered other than 200, or that fails, is counted in `errors` and left out of the rate
    and the latencies; its client goes on (on a new connection after a failure), so that one bad answer
    neither stops a client nor disappears from the figures.
    """
    parts = urlsplit(base_url)
    latencies: list[float] = []
    errors: list[str] = []
    budget = iter(range(requests))
    lock = threading.Lock()
    deadline = time.perf_counter() + time_cap_s

    def client(index: int) -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        headers = {"Cookie": f"{EPISODE_COOKIE}=bench-{index}"}
        mine, failed = [], []
        while time.perf_counter() < deadline:
            with lock:
                n = next(budget, None)
            if n is None:
                break
            path = PATHS[n % len(PATHS)]
            start = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException) as err:
                failed.append(f"GET {path}: {type(err).__name__}: {err}")
                conn.close()
                continue
            if response.status != 200:
                failed.append(f"GET {path} answered {response.status}")
                continue
            mine.append(time.perf_counter() - start)
        conn.close()
        with lock:
            latencies.extend(mine)
            errors.extend(failed)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    return {
        "clients": clients,
        "requests": len(latencies),
        "errors": len(errors),
        "first_errors": errors[:3],
        "seconds": round(seconds, 3),
        "requests_per_s": round(len(latencies) / seconds, 1),
        "p50_ms": round(1000 * percentile(latencies, 0.5), 2) if latencies else None,
        "p95_ms": round(1000 * percentile(latencies, 0.95), 2) if latencies else None,
    }


async def reset_times(sites: EmbeddedSites, resets: int) -> dict:
    """Time episode resets one after another: context + cookie + start page + observation."""
    tasks = load_suite("train", sites.url_map)
    backend = sites.backend()
    times: list[float] = []
    async with BrowserPool(BrowserConfig(max_concurrency=1)) as pool:
        for i in range(resets):
            task = tasks[(i * 37) % len(tasks)]
            start = time.perf_counter()
            async with pool.episode(task, backend) as episode:
                await episode.reset()
                times.append(time.perf_counter() - start)
                await episode.step('exit(message="")')
    return {
        "resets": len(times),
        "p50_ms": round(1000 * percentile(times, 0.5), 1),
        "p95_ms": round(1000 * percentile(times, 0.95), 1),
        "mean_ms": round(1000 * statistics.mean(times), 1),
    }


def solver_run(sites: EmbeddedSites, split: str, episodes: int, concurrency: int) -> dict:
    tasks = load_suite(split, sites.url_map)
    tasks = tasks[:episodes] if episodes else tasks
    solver = ScriptedEngine.for_embedded_sites()
    result = collect_rollouts_sync(
        solver,
        tasks,
        sites.backend(),
        concurrency=concurrency,
        prompt_builder=solver.wrap(actor_prompt_for_step),
        progress=False,
    )
    trajectories, seconds = result.trajectories, result.metrics["rollout/wall_s"]
    lengths = [len(step.observation) for t in trajectories for step in t.steps]
    report = summary(trajectories, seconds)
    report.update(
        split=split,
        concurrency=concurrency,
        steps_per_s=round(sum(len(t.steps) for t in trajectories) / seconds, 2),
        observation_chars={
            "pages": len(lengths),
            "median": statistics.median(lengths),
            "p95": percentile(lengths, 0.95),
            "max": max(lengths),
        },
        failures=failures(trajectories)[:10],
    )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16], help="HTTP client threads per level")
    parser.add_argument("--requests", type=int, default=3000, help="requests per level (upper bound)")
    parser.add_argument("--time-cap", type=float, default=15.0, help="seconds per level (upper bound)")
    parser.add_argument("--resets", type=int, default=30, help="episode resets to time")
    parser.add_argument("--split", default="train", choices=["train", "test"])
    parser.add_argument("--episodes", type=int, default=0, help="solver episodes (0 = the whole split)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent solver episodes")
    args = parser.parse_args()
    report: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "settings": vars(args)}
    with EmbeddedSites() as sites:
        report["server"] = [http_load(sites.base_url, c, args.requests, args.time_cap) for c in args.clients]
        for level in report["server"]:
            print(
                f"server  clients={level['clients']:>3}  {level['requests_per_s']:>8.1f} req/s  "
                f"p50 {level['p50_ms']} ms  p95 {level['p95_ms']} ms  errors {level['errors']}"
            )
        report["reset"] = asyncio.run(reset_times(sites, args.resets))
        print(
            f"reset   p50 {report['reset']['p50_ms']} ms  p95 {report['reset']['p95_ms']} ms"
            "  (new context + cookie + start page + observation)"
        )
        report["solver"] = solver_run(sites, args.split, args.episodes, args.concurrency)
    solver = report["solver"]
    print(
        f"solver  {solver['successes']}/{solver['episodes']} solved on {args.split} in {solver['seconds']} s "
        f"({solver['episodes_per_min']} episodes/min, {solver['steps_per_s']} steps/s, concurrency {args.concurrency})"
    )
    print(f"steps per task {solver['steps']}")
    obs = solver["observation_chars"]
    print(f"observation chars over {obs['pages']} pages: median {obs['median']}, p95 {obs['p95']}, max {obs['max']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
