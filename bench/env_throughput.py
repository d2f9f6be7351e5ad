"""Browser-environment throughput: webrl.env against BrowserGym's MiniWoB++ env, scripted policy, no model.

Measures environment steps per second (wall clock, resets included) and the p50/p95 latency of
one observe+act step at several concurrency levels, on the same MiniWoB++ tasks and seeds, for
webrl's BrowserPool (episodes as contexts of one Chromium, asyncio) and for BrowserGym (one gym env
per worker process, as it is designed to be run). BrowserGym pins playwright 1.44, so it runs in
its own virtualenv under .cache/ (created on first use with `pip install browsergym-miniwob`),
driving the same system Chromium; if that cannot be set up the comparison is skipped with the
reason printed. Each level runs in a subprocess whose CPU time (with its Chromium and driver) is
measured too, because on a machine shared with other jobs CPU seconds per step is the figure that
contention does not distort. On both sides the clock starts once the workers are up (webrl's browser
launched, BrowserGym's worker processes started and imported) and the CPU spent until then is reported
as `startup_cpu_s` and left out of the CPU per step; BrowserGym still launches a browser per reset,
inside the clock, as it is designed to. Results go to bench/results/env_throughput.json.

    python bench/env_throughput.py
    python bench/env_throughput.py --concurrency 1 4 16 --browsergym-concurrency 1 4 16
    python bench/env_throughput.py --skip-browsergym
    python bench/env_throughput.py --reuse-contexts   # webrl in wiped reused contexts
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from webrl.data.trajectory import is_full_score
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.chromium import find_chromium
from webrl.env.limits import EpisodeLimits
from webrl.env.miniwob import MiniWoBBackend, miniwob_html_dir, miniwob_tasks
from webrl.env.scripted_policy import MiniWoBScriptedPolicy

ROOT = Path(__file__).resolve().parent.parent
TASKS = ("click-test", "click-button", "click-link", "focus-text", "enter-text", "login-user")
VENV = ROOT / ".cache" / "browsergym-venv"
CHILD = Path(__file__).resolve().parent / "env_throughput_browsergym.py"
# Generous time limits: on a machine shared with other jobs a busy second must not turn into a failure.
POLL_S = 0.1
"""How often the worker's process tree is read for its CPU time."""
LIMITS = EpisodeLimits(max_steps=10, action_timeout_s=60.0, reset_timeout_s=120.0)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_webrl(
    tasks: list[str], concurrency: int, episodes: int, chromium: str, reuse_contexts: bool = False
) -> dict:
    """Run `episodes` scripted episodes with at most `concurrency` open at once; return the figures.

    `reuse_contexts` is BrowserConfig's: episodes in wiped reused contexts instead of fresh ones.
    """
    policy = MiniWoBScriptedPolicy()
    # Interleave tasks (seed-major) so that any episode count covers every task evenly.
    task_list = [task for seed in range(episodes) for task in miniwob_tasks(tasks, [seed])][:episodes]
    latencies: list[float] = []
    failures: list[dict] = []
    successes = 0
    steps = 0
    with MiniWoBBackend() as backend:
        config = BrowserConfig(max_concurrency=concurrency, executable_path=chromium, reuse_contexts=reuse_contexts)
        async with BrowserPool(config) as pool:

            async def one(task) -> None:
                nonlocal successes, steps
                async with pool.episode(task, backend, LIMITS) as episode:
                    observation = await episode.reset()
                    while not episode.done:
                        response = policy.act(episode.task, observation.html, len(episode.trajectory.steps))
                        observation = (await episode.step(response)).observation
                    trajectory = episode.trajectory
                    if is_full_score(await episode.evaluate() or 0.0):
                        successes += 1
                    else:
                        errors = [s.error for s in trajectory.steps if s.error]
                        failure = {"task": task.task_id, "status": trajectory.status, "error": trajectory.error}
                        failures.append({**failure, "step_errors": errors[:3]})
                    steps += len(trajectory.steps)
                    latencies.extend(s.timings["act"] + s.timings["observe"] for s in episode.trajectory.steps)

            startup_cpu = tree_cpu_total(os.getpid())
            start = time.perf_counter()
            await asyncio.gather(*(one(task) for task in task_list))
            wall = time.perf_counter() - start
    row = summary(concurrency, len(task_list), steps, successes, wall, latencies)
    return {**row, "startup_cpu_s": round(startup_cpu, 3), "failures": failures}


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


def measured(command: list[str]) -> tuple[dict | None, float, str]:
    """Run a worker; return its JSON, the CPU seconds of its process tree, and its stderr tail.

    CPU time is the contention-proof figure on a shared machine: wall-clock rates fall when other
    jobs take the cores, CPU seconds per step do not. It is read from the worker's process tree
    every POLL_S while it runs, each process's own time plus what it reaped: Chromium's renderers
    end with their contexts and are reaped by its zygote, not by the worker, so
    getrusage(RUSAGE_CHILDREN) alone misses about half of the cost (bench/env_profile.py).
    """
    out = ROOT / ".cache" / f"env_throughput_{os.getpid()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile("w+") as stderr:
        worker = subprocess.Popen([*command, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        tree_peak = 0.0
        while worker.poll() is None:
            tree_peak = max(tree_peak, tree_cpu_total(worker.pid))
            time.sleep(POLL_S)
        stderr.seek(0)
        tail = " | ".join(stderr.read().strip().splitlines()[-5:])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cpu = max(tree_peak, reaped)
    if worker.returncode != 0 or not out.exists():
        return None, cpu, f"exit {worker.returncode}: {tail}"
    result = json.loads(out.read_text())
    out.unlink()
    return result, cpu, tail


def process_group(cmdline: list[str]) -> str:
    """Which part of the stack a child process is: the Playwright driver or a Chromium process type."""
    if any(arg.endswith("cli.js") or arg == "run-driver" for arg in cmdline):
        return "playwright driver"
    kind = next((arg.split("=", 1)[1] for arg in cmdline if arg.startswith("--type=")), None)
    return f"chromium {kind}" if kind else "chromium browser"


def tree_cpu(root: psutil.Process) -> dict[int, tuple[str, float, float]]:
    """pid -> (group, own CPU s, CPU s of its ended children that it reaped) for every descendant of `root`."""
    found = {}
    for process in root.children(recursive=True):
        try:
            with process.oneshot():
                times = process.cpu_times()
                group = process_group(process.cmdline())
        except psutil.Error:
            continue
        found[process.pid] = (group, times.user + times.system, times.children_user + times.children_system)
    return found


def tree_cpu_total(pid: int) -> float:
    """CPU seconds so far of process `pid` and its descendants, each with what it reaped (0 once it is gone)."""
    try:
        root = psutil.Process(pid)
        times = root.cpu_times()
        descendants = tree_cpu(root)
    except psutil.Error:
        return 0.0
    own = times.user + times.system + times.children_user + times.children_system
    return own + sum(cpu + reaped for _, cpu, reaped in descendants.values())


def with_cpu(row: dict, cpu: float) -> dict:
    """`row` with the worker tree's CPU seconds, and CPU per step over the timed window.

    The wall clock of either side starts once its workers are up, so the CPU they spent getting there
    (interpreters, imports, webrl's one browser launch: the row's `startup_cpu_s`) is left out of the
    per-step figure as well; BrowserGym's 16 workers start 16 interpreters for 16 episodes.
    """
    steps = cpu - row.get("startup_cpu_s", 0.0)
    per_step = round(1000 * steps / row["steps"], 1) if row["steps"] else None
    return {**row, "cpu_s": round(cpu, 2), "cpu_ms_per_step": per_step}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="webrl.env vs BrowserGym MiniWoB++ throughput")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--episodes", type=int, default=0, help="episodes per level (default: max(12, 4 x level))")
    parser.add_argument("--browsergym-concurrency", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument(
        "--browsergym-episodes",
        type=int,
        default=6,
        help="BrowserGym episodes per level (rounded up to a multiple of the level: as many per worker)",
    )
    parser.add_argument("--skip-browsergym", action="store_true")
    parser.add_argument(
        "--reuse-contexts", action="store_true", help="webrl episodes in wiped reused contexts (BrowserConfig)"
    )
    parser.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "env_throughput.json")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if args.worker:
        row = asyncio.run(run_webrl(args.tasks, args.worker, args.episodes, chromium, args.reuse_contexts))
        args.out.write_text(json.dumps(row))
        return

    results: dict = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_start": os.getloadavg()},
        "tasks": args.tasks,
        "reuse_contexts": args.reuse_contexts,
        "settings": {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
        "chromium": chromium,
        "webrl": [],
        "browsergym": {"levels": []},
    }
    results["webrl"] = webrl_levels(args)
    results["browsergym"]["levels"], how = browsergym_levels(args, chromium)
    results["browsergym"]["venv"] = how
    if not results["browsergym"]["levels"]:
        print(f"browsergym  skipped: {how}")
    results["ratios"] = ratios(results)
    for level, ratio in results["ratios"].items():
        print(
            f"webrl vs browsergym at c={level}: {ratio['steps_per_s']}x steps/s, {ratio['cpu_per_step']}x less CPU/step"
        )
    results["machine"]["load_avg_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")


def webrl_levels(args: argparse.Namespace) -> list[dict]:
    """Each webrl level in a worker process of its own, with the CPU of its process tree."""
    rows = []
    for level in args.concurrency:
        episodes = args.episodes or max(12, 4 * level)
        command = [sys.executable, __file__, "--worker", str(level), "--episodes", str(episodes)]
        command += ["--tasks", *args.tasks, *(["--reuse-contexts"] if args.reuse_contexts else [])]
        row, cpu, error = measured(command)
        if row is None:
            raise SystemExit(f"webrl worker at concurrency {level} failed: {error}")
        rows.append(with_cpu(row, cpu))
        print(f"webrl       c={level:<3} {fmt(rows[-1])}", flush=True)
    return rows


def browsergym_levels(args: argparse.Namespace, chromium: str) -> tuple[list[dict], str]:
    """Each BrowserGym level in its virtualenv's child process; the rows and how the virtualenv came to be (or not)."""
    python, how = (None, "--skip-browsergym") if args.skip_browsergym else ensure_browsergym_venv()
    rows: list[dict] = []
    for level in args.browsergym_concurrency if python else []:
        command = [str(python), str(CHILD), "--miniwob-dir", str(miniwob_html_dir()), "--chromium", chromium]
        command += ["--tasks", *args.tasks, "--concurrency", str(level), "--episodes", str(args.browsergym_episodes)]
        row, cpu, error = measured(command)
        if row is None:
            return rows, f"BrowserGym child failed at concurrency {level}: {error}"
        rows.append(with_cpu(row, cpu))
        print(f"browsergym  c={level:<3} {fmt(rows[-1])}", flush=True)
    return rows, how


def fmt(row: dict) -> str:
    return (
        f"{row['steps_per_s']:>7} steps/s  {row['episodes']:>3} episodes ({row['successes']} ok)  "
        f"step p50 {row['step_latency_p50_ms']} ms  p95 {row['step_latency_p95_ms']} ms  "
        f"CPU {row['cpu_ms_per_step']} ms/step  wall {row['wall_s']} s"
    )


def ratios(results: dict) -> dict:
    theirs = {row["concurrency"]: row for row in results["browsergym"]["levels"]}
    out = {}
    for row in results["webrl"]:
        other = theirs.get(row["concurrency"])
        if other and other["steps_per_s"] and row["cpu_ms_per_step"]:
            out[row["concurrency"]] = {
                "steps_per_s": round(row["steps_per_s"] / other["steps_per_s"], 1),
                "cpu_per_step": round(other["cpu_ms_per_step"] / row["cpu_ms_per_step"], 1),
            }
    return out


if __name__ == "__main__":
    main()
