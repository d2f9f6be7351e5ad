"""Browser-environment throughput: webrl.env against BrowserGym's MiniWoB++ env, scripted policy, no model.

Measures environment steps per second (wall clock, resets included) and the p50/p95 latency of
one observe+act step at several concurrency levels, on the same MiniWoB++ tasks and seeds, for
webrl's BrowserPool (episodes as contexts of one Chromium, asyncio) and for BrowserGym (one gym env
per worker process, as it is designed to be run). BrowserGym pins playwright 1.44, so it runs in
its own virtualenv under .cache/ (created on first use with `pip install browsergym-miniwob`),
driving the same system Chromium; if that cannot be set up the comparison is skipped with the
reason printed. Results go to bench/results/env_throughput.json.

    python bench/env_throughput.py
    python bench/env_throughput.py --concurrency 1 4 16 --browsergym-concurrency 1 4 16
    python bench/env_throughput.py --skip-browsergym
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.chromium import find_chromium
from webrl.env.episode import EpisodeLimits
from webrl.env.miniwob import MiniWoBBackend, miniwob_tasks
from webrl.env.scripted_policy import MiniWoBScriptedPolicy

ROOT = Path(__file__).resolve().parent.parent
TASKS = ("click-test", "click-button", "click-link", "focus-text", "enter-text", "login-user")
VENV = ROOT / ".cache" / "browsergym-venv"
CHILD = Path(__file__).resolve().parent / "env_throughput_browsergym.py"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_webrl(tasks: list[str], concurrency: int, episodes: int, chromium: str) -> dict:
    """Run `episodes` scripted episodes with at most `concurrency` open at once; return the figures."""
    policy = MiniWoBScriptedPolicy()
    # Interleave tasks (seed-major) so that any episode count covers every task evenly.
    task_list = [task for seed in range(episodes) for task in miniwob_tasks(tasks, [seed])][:episodes]
    latencies: list[float] = []
    failures: list[dict] = []
    successes = 0
    steps = 0
    with MiniWoBBackend() as backend:
        config = BrowserConfig(max_concurrency=concurrency, executable_path=chromium)
        async with BrowserPool(config) as pool:

            async def one(task) -> None:
                nonlocal successes, steps
                async with pool.episode(task, backend, EpisodeLimits(max_steps=10)) as episode:
                    observation = await episode.reset()
                    while not episode.done:
                        response = policy.act(episode.task, observation.html, len(episode.trajectory.steps))
                        observation = (await episode.step(response)).observation
                    trajectory = episode.trajectory
                    if (await episode.evaluate() or 0.0) >= 1.0:
                        successes += 1
                    else:
                        errors = [s.error for s in trajectory.steps if s.error]
                        failures.append({"task": task.task_id, "status": trajectory.status, "errors": errors[:3]})
                    steps += len(trajectory.steps)
                    latencies.extend(s.timings["act"] + s.timings["observe"] for s in episode.trajectory.steps)

            start = time.perf_counter()
            await asyncio.gather(*(one(task) for task in task_list))
            wall = time.perf_counter() - start
    return {**summary(concurrency, len(task_list), steps, successes, wall, latencies), "failures": failures}


def summary(concurrency: int, episodes: int, steps: int, successes: int, wall: float, latencies: list[float]) -> dict:
    return {
        "concurrency": concurrency,
        "episodes": episodes,
        "steps": steps,
        "successes": successes,
        "wall_s": round(wall, 3),
        "steps_per_s": round(steps / wall, 3) if wall > 0 else None,
        "episodes_per_s": round(episodes / wall, 3) if wall > 0 else None,
        "step_latency_p50_ms": round(1000 * percentile(latencies, 0.5), 1),
        "step_latency_p95_ms": round(1000 * percentile(latencies, 0.95), 1),
        "step_latency_mean_ms": round(1000 * statistics.fmean(latencies), 1) if latencies else None,
    }


def ensure_browsergym_venv() -> tuple[Path | None, str]:
    """The virtualenv's python with browsergym-miniwob installed, or None and the reason."""
    python = VENV / "bin" / "python"
    check = [str(python), "-c", "import browsergym.miniwob"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python, "present"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, capture_output=True, text=True)
        install = [str(python), "-m", "pip", "install", "-q", "browsergym-miniwob"]
        subprocess.run(install, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as err:
        tail = (err.stderr or err.stdout or "").strip().splitlines()[-3:]
        return None, f"could not build {VENV} with browsergym-miniwob: {' | '.join(tail)}"
    return python, "installed"


def run_browsergym(tasks: list[str], levels: list[int], episodes_per_worker: int, chromium: str) -> dict:
    """Run the BrowserGym child in its own virtualenv; returns its figures or a skip reason."""
    python, how = ensure_browsergym_venv()
    if python is None:
        return {"skipped": how}
    with MiniWoBBackend() as backend:
        out = ROOT / ".cache" / "browsergym_result.json"
        command = [
            str(python),
            str(CHILD),
            "--miniwob-url",
            f"{backend.url_map['__MINIWOB__']}/miniwob/",
            "--chromium",
            chromium,
            "--tasks",
            *tasks,
            "--concurrency",
            *map(str, levels),
            "--episodes-per-worker",
            str(episodes_per_worker),
            "--out",
            str(out),
        ]
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-5:]
        return {"skipped": f"BrowserGym child failed (exit {done.returncode}): {' | '.join(tail)}"}
    result = json.loads(out.read_text())
    result["venv"] = how
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="webrl.env vs BrowserGym MiniWoB++ throughput")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--episodes", type=int, default=0, help="episodes per level (default: max(12, 4 x level))")
    parser.add_argument("--browsergym-concurrency", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--browsergym-episodes-per-worker", type=int, default=2)
    parser.add_argument("--skip-browsergym", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "env_throughput.json")
    args = parser.parse_args(argv)
    chromium = find_chromium()

    results: dict = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_start": os.getloadavg()},
        "tasks": args.tasks,
        "webrl": [],
    }
    for level in args.concurrency:
        episodes = args.episodes or max(12, 4 * level)
        row = asyncio.run(run_webrl(args.tasks, level, episodes, chromium))
        results["webrl"].append(row)
        print(f"webrl       c={level:<3} {fmt(row)}", flush=True)
    if args.skip_browsergym:
        results["browsergym"] = {"skipped": "--skip-browsergym"}
    else:
        results["browsergym"] = run_browsergym(
            args.tasks, args.browsergym_concurrency, args.browsergym_episodes_per_worker, chromium
        )
        for row in results["browsergym"].get("levels", []):
            print(f"browsergym  c={row['concurrency']:<3} {fmt(row)}", flush=True)
        if "skipped" in results["browsergym"]:
            print(f"browsergym  skipped: {results['browsergym']['skipped']}")
    results["ratios"] = ratios(results)
    for level, ratio in results["ratios"].items():
        print(f"steps/s ratio webrl/browsergym at c={level}: {ratio}x")
    results["machine"]["load_avg_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")


def fmt(row: dict) -> str:
    return (
        f"{row['steps_per_s']:>7} steps/s  {row['episodes']:>3} episodes ({row['successes']} ok)  "
        f"step p50 {row['step_latency_p50_ms']} ms  p95 {row['step_latency_p95_ms']} ms  wall {row['wall_s']} s"
    )


def ratios(results: dict) -> dict:
    theirs = {row["concurrency"]: row["steps_per_s"] for row in results.get("browsergym", {}).get("levels", [])}
    return {
        row["concurrency"]: round(row["steps_per_s"] / theirs[row["concurrency"]], 1)
        for row in results["webrl"]
        if theirs.get(row["concurrency"])
    }


if __name__ == "__main__":
    main()
