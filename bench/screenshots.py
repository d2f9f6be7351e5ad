"""Cost of per-step screenshots: env steps/s of the reference solver with and without them.

The same tasks of the embedded sites run through the rollout driver twice per round, with screenshots
off and on (evaluation episodes: every one recorded), in alternating order so that a load change on a
shared machine hits both alike. Reported: steps/s each way, the overhead in % of rollout wall time,
the mean capture time per screenshot, and the mean and largest file size. Printed and written to
bench/results/screenshots.json. Target: overhead < 10 %.

    python bench/screenshots.py
    python bench/screenshots.py --tasks 20 --rounds 3 --concurrency 4 --quality 50 --scale 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from pathlib import Path

from webrl.data.prompts import actor_prompt_for_step
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.screenshots import ScreenshotConfig, ScreenshotRecorder
from webrl.env.sites import EmbeddedSites, load_suite
from webrl.inference.rollout import RolloutResult, collect_rollouts
from webrl.inference.scripted import ScriptedEngine

RESULTS = Path(__file__).resolve().parent / "results" / "screenshots.json"


def measure(sites: EmbeddedSites, tasks: list, concurrency: int, recorder: ScreenshotRecorder | None) -> dict:
    engine = ScriptedEngine.for_embedded_sites()

    async def rollouts() -> RolloutResult:
        async with BrowserPool(BrowserConfig(max_concurrency=concurrency)) as pool:
            pool.screenshots = recorder
            builder = engine.wrap(actor_prompt_for_step)
            return await collect_rollouts(
                engine, tasks, sites.backend(), pool, concurrency=concurrency, prompt_builder=builder, progress=False
            )

    started = time.perf_counter()
    result = asyncio.run(rollouts())
    seconds = time.perf_counter() - started
    steps = sum(len(t.steps) for t in result.trajectories)
    shots = [p for t in result.trajectories for p in t.metadata.get("screenshots", []) if p]
    capture = sum(t.metadata.get("screenshot_s", 0.0) for t in result.trajectories)
    sizes = [(recorder.directory / p).stat().st_size for p in shots] if recorder else []
    return {"seconds": seconds, "steps": steps, "shots": len(shots), "capture_s": capture, "sizes": sizes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20, help="test tasks per run")
    parser.add_argument("--rounds", type=int, default=2, help="off/on pairs, order alternating")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--quality", type=int, default=ScreenshotConfig.quality)
    parser.add_argument("--scale", type=float, default=ScreenshotConfig.scale)
    args = parser.parse_args()
    config = ScreenshotConfig(quality=args.quality, scale=args.scale)
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    with EmbeddedSites() as sites, tempfile.TemporaryDirectory() as scratch:
        tasks = load_suite("test", sites.url_map)[: args.tasks]
        for round_index in range(args.rounds):
            order = ["off", "on"] if round_index % 2 == 0 else ["on", "off"]
            for mode in order:
                directory = Path(scratch) / f"{mode}{round_index}"
                recorder = ScreenshotRecorder(config, directory, evaluation=True) if mode == "on" else None
                runs[mode].append(measure(sites, tasks, args.concurrency, recorder))
    totals = {
        mode: {k: sum(r[k] for r in rs) for k in ("seconds", "steps", "shots", "capture_s")}
        for mode, rs in runs.items()
    }
    sizes = [s for r in runs["on"] for s in r["sizes"]]
    rate = {mode: t["steps"] / t["seconds"] for mode, t in totals.items()}
    figures = {
        "steps_per_s_off": round(rate["off"], 2),
        "steps_per_s_on": round(rate["on"], 2),
        "overhead_pct": round(100 * (rate["off"] / rate["on"] - 1), 1),
        "capture_ms_mean": round(1000 * totals["on"]["capture_s"] / max(1, totals["on"]["shots"]), 1),
        "screenshots": totals["on"]["shots"],
        "bytes_mean": round(sum(sizes) / max(1, len(sizes))),
        "bytes_max": max(sizes, default=0),
        "settings": {**vars(args)},
        "machine": platform.platform(),
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(json.dumps(figures, indent=1))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
