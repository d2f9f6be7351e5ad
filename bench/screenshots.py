"""Cost of per-step screenshots: steps/s of real rollouts with and without them, for two drivers.

`hf`: the embedded default's actor, the tiny Llama (factory sizes, its BPE trained on the tasks' text),
decoding through the HF engine at the default concurrency (8) and `rollout.max_tokens` (48) — a model
rollout as the loop runs it. `solver`: the reference solver, whose step costs no model time: the worst
case, where nothing hides the capture. The same test tasks of the embedded sites run with screenshots
off and on (evaluation episodes: every one recorded; training rollouts record `train_fraction` of them),
in alternating order so that a load change on a shared machine hits both alike. Reported per driver:
steps/s each way, the overhead in % of rollout wall time (and per round: on a machine shared with
other jobs the rounds scatter), CPU seconds per step of this process and its children (Chromium, the
sites server) each way, the figure contention distorts least, the mean capture time per screenshot
(taken while the model writes the next response, so hidden in a model rollout), the mean and largest
file size. Printed and written to bench/results/screenshots.json. Target: overhead < 10 %.

    python bench/screenshots.py
    python bench/screenshots.py --engines hf --tasks 16 --rounds 3 --max-steps 4 --quality 40 --scale 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from webrl.data.prompts import actor_prompt_for_step
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.limits import EpisodeLimits
from webrl.env.screenshots import ScreenshotConfig, ScreenshotRecorder
from webrl.env.sites import EmbeddedSites, load_suite
from webrl.inference.engine import InferenceEngine, SamplingParams
from webrl.inference.rollout import RolloutResult, collect_rollouts
from webrl.inference.scripted import ScriptedEngine
from webrl.loop_config import RolloutConfig

RESULTS = Path(__file__).resolve().parent / "results" / "screenshots.json"


def tree_cpu() -> float:
    """CPU seconds (user + system) of this process and its descendants, the live and the ended ones.

    An ended process's time is in its parent's children counters once the parent has reaped it: the
    renderers Chromium closes with each episode's context, and Chromium itself after the pool closes.
    """
    total = 0.0
    for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            total += sum(process.cpu_times()[:4])
        except psutil.NoSuchProcess:
            continue
    return total


def tiny_actor(directory: Path, tasks: list[Any], concurrency: int) -> InferenceEngine:
    """The embedded default's tiny Llama (build_tiny_model's default sizes) behind the HF engine."""
    from webrl.inference.hf import HFEngine
    from webrl.modules.lm import build_tiny_model

    corpus = [actor_prompt_for_step(t, [], t.intent) for t in tasks[:200]]
    corpus += ['# Element: Search\ndo(action="Search", argument="red mug", element="3")', 'exit(message="12")']
    engine = HFEngine(build_tiny_model(directory, corpus), batch_size=concurrency)
    engine.generate(["warm-up"], SamplingParams(max_tokens=4))  # first-call costs stay out of the figures
    return engine


def measure(
    engine: InferenceEngine, sites: EmbeddedSites, tasks: list, args, recorder: ScreenshotRecorder | None
) -> dict:
    scripted = isinstance(engine, ScriptedEngine)
    builder = engine.wrap(actor_prompt_for_step) if scripted else actor_prompt_for_step
    sampling = SamplingParams(temperature=1.0, max_tokens=RolloutConfig.max_tokens, seed=0)
    # The solver keeps the default step limit: it ends its episodes itself.
    max_steps = EpisodeLimits().max_steps if scripted else args.max_steps
    limits = EpisodeLimits(max_steps=max_steps, action_timeout_s=60.0, episode_timeout_s=3600.0)

    async def rollouts() -> RolloutResult:
        async with BrowserPool(BrowserConfig(max_concurrency=args.concurrency)) as pool:
            pool.screenshots = recorder
            return await collect_rollouts(
                engine,
                tasks,
                sites.backend(),
                pool,
                concurrency=args.concurrency,
                sampling=sampling,
                prompt_builder=builder,
                limits=limits,
                progress=False,
            )

    cpu_before, started = tree_cpu(), time.perf_counter()
    result = asyncio.run(rollouts())
    seconds, cpu = time.perf_counter() - started, tree_cpu() - cpu_before
    steps = sum(len(t.steps) for t in result.trajectories)
    shots = [p for t in result.trajectories for p in t.metadata.get("screenshots", []) if p]
    capture = sum(t.metadata.get("screenshot_s", 0.0) for t in result.trajectories)
    sizes = [(recorder.directory / p).stat().st_size for p in shots] if recorder else []
    return {"seconds": seconds, "cpu_s": cpu, "steps": steps, "shots": len(shots), "capture_s": capture, "sizes": sizes}


def figures(runs: dict[str, list[dict]]) -> dict:
    totals = {
        mode: {k: sum(r[k] for r in rs) for k in ("seconds", "cpu_s", "steps", "shots", "capture_s")}
        for mode, rs in runs.items()
    }
    sizes = [s for r in runs["on"] for s in r["sizes"]]
    rate = {mode: t["steps"] / t["seconds"] for mode, t in totals.items()}
    cpu = {mode: t["cpu_s"] / t["steps"] for mode, t in totals.items()}
    return {
        "steps_per_s_off": round(rate["off"], 2),
        "steps_per_s_on": round(rate["on"], 2),
        "overhead_pct": round(100 * (rate["off"] / rate["on"] - 1), 1),
        "cpu_s_per_step_off": round(cpu["off"], 3),
        "cpu_s_per_step_on": round(cpu["on"], 3),
        "cpu_overhead_pct": round(100 * (cpu["on"] / cpu["off"] - 1), 1),
        "capture_ms_mean": round(1000 * totals["on"]["capture_s"] / max(1, totals["on"]["shots"]), 1),
        "screenshots": totals["on"]["shots"],
        "steps": totals["on"]["steps"],
        "bytes_mean": round(sum(sizes) / max(1, len(sizes))),
        "bytes_max": max(sizes, default=0),
        "per_round_overhead_pct": [
            round(100 * ((off["steps"] / off["seconds"]) / (on["steps"] / on["seconds"]) - 1), 1)
            for off, on in zip(runs["off"], runs["on"], strict=True)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", nargs="+", default=["hf", "solver"], choices=["hf", "solver"])
    parser.add_argument("--tasks", type=int, default=16, help="test tasks per run")
    parser.add_argument("--rounds", type=int, default=2, help="off/on pairs, order alternating")
    parser.add_argument("--concurrency", type=int, default=RolloutConfig.concurrency)
    parser.add_argument("--max-steps", type=int, default=4, help="a random tiny model never exits: its episode length")
    parser.add_argument("--quality", type=int, default=ScreenshotConfig.quality)
    parser.add_argument("--scale", type=float, default=ScreenshotConfig.scale)
    args = parser.parse_args()
    config = ScreenshotConfig(quality=args.quality, scale=args.scale)
    # One entry per driver, each with its settings: a run of one driver keeps the other's last figures.
    out: dict[str, Any] = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.is_file() else {}
    with EmbeddedSites() as sites, tempfile.TemporaryDirectory() as scratch:
        tasks = load_suite("test", sites.url_map)[: args.tasks]
        for kind in args.engines:
            if kind == "hf":
                engine = tiny_actor(Path(scratch) / "tiny", load_suite("train", sites.url_map), args.concurrency)
            else:
                engine = ScriptedEngine.for_embedded_sites()
            runs: dict[str, list[dict]] = {"off": [], "on": []}
            for round_index in range(args.rounds):
                order = ["off", "on"] if round_index % 2 == 0 else ["on", "off"]
                for mode in order:
                    directory = Path(scratch) / f"{kind}-{mode}{round_index}"
                    recorder = ScreenshotRecorder(config, directory, evaluation=True) if mode == "on" else None
                    runs[mode].append(measure(engine, sites, tasks, args, recorder))
            engine.close()
            out[kind] = figures(runs) | {
                "settings": {**vars(args), "engines": [kind]},
                "machine": f"{platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end",
                "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            }
            print(kind, json.dumps(out[kind]), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
