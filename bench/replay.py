"""Replay-filter throughput: how many replayed steps per second the current actor scores.

Stage 2 of every phase scores each step of every earlier success under the current actor (the
geometric-mean action-token probability of the experience filter), so its cost grows with the
replay buffer. This bench builds the project's tiny Llama offline, fills a buffer with synthetic
successful trajectories whose pages have a realistic size, and times `filter_by_perplexity` with
the real scorer (`webrl.modules.lm.action_logprobs`). It prints the figures and writes them to
bench/results/replay.json.

    .venv/bin/python bench/replay.py                              # defaults: 96 steps, 1500-char pages
    .venv/bin/python bench/replay.py --steps 480 --html-chars 4000 --batch-size 16 --hidden-size 128
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.replay import ReplayBuffer, ReplayFilterConfig, filter_by_perplexity
from webrl.data.trajectory import Step, Task, Trajectory

RESULTS = Path(__file__).parent / "results" / "replay.json"


def synthetic_page(task: int, step: int, chars: int) -> str:
    """Simplified HTML in the release's observation style, `chars` characters long."""
    rows = []
    i = 0
    while sum(len(r) for r in rows) < chars:
        rows.append(f'<a id="{i}" data-bbox="{10 * i},{20 + step},80,24">Item {task}-{step}-{i}</a>\n')
        i += 1
    return "".join(rows)[:chars]


def synthetic_trajectories(num_steps: int, steps_per_trajectory: int, html_chars: int) -> list[Trajectory]:
    trajectories = []
    for t in range(-(-num_steps // steps_per_trajectory)):
        task = Task(task_id=str(t), intent=f"Report the price of item {t}", sites=["shopping"], start_url="")
        trajectory = Trajectory(task=task, outcome=1.0, status="exit", trajectory_id=f"bench{t}")
        for i in range(steps_per_trajectory):
            html = synthetic_page(t, i, html_chars)
            response = (
                f'# Note: item {t} costs ${t}.99\nexit(message="${t}.99")'
                if i == steps_per_trajectory - 1
                else f'# Element: the link to item {t}-{i}\ndo(action="Click", element="{i}")'
            )
            prompt = actor_prompt_for_step(task, trajectory.steps, html)
            trajectory.steps.append(Step(index=i, prompt=prompt, observation=html, response=response))
        trajectories.append(trajectory)
    return trajectories


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=96, help="replayed steps to score")
    parser.add_argument("--steps-per-trajectory", type=int, default=3)
    parser.add_argument("--html-chars", type=int, default=1500, help="characters of page HTML per step")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    figures = measure(args)
    print(
        f"replay filter: {figures['steps_scored']} steps scored in {figures['score_seconds']:.2f} s = "
        f"{figures['steps_per_s']} steps/s ({figures['tokens_per_s']} tokens/s, {figures['mean_tokens_per_step']} "
        f"tokens/step; {figures['score_cpu_seconds']:.2f} CPU s = {figures['steps_per_cpu_s']} steps per "
        f"CPU-second); buffer write+read {figures['buffer_write_read_seconds'] * 1000:.0f} ms"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2))
    print(f"wrote {RESULTS}")


def measure(args: argparse.Namespace) -> dict:
    """Build the model, fill the buffer, time the filter; the figures. torch is imported here, not for --help."""
    import torch

    from webrl.modules.lm import actor_scorer, load_model_and_tokenizer
    from webrl.modules.model_factory import build_tiny_model

    if args.threads:
        torch.set_num_threads(args.threads)
    trajectories = synthetic_trajectories(args.steps, args.steps_per_trajectory, args.html_chars)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = [s.prompt + s.response for t in trajectories[:20] for s in t.steps]
        model_dir = build_tiny_model(
            Path(tmp) / "tiny", corpus, hidden_size=args.hidden_size, num_layers=args.layers, num_heads=4
        )
        model, tokenizer = load_model_and_tokenizer(model_dir)
        buffer = ReplayBuffer(Path(tmp) / "replay")
        start = time.perf_counter()
        buffer.add_phase(0, trajectories)
        stored = buffer.trajectories()
        io_s = time.perf_counter() - start

        scorer = actor_scorer(model, tokenizer, batch_size=args.batch_size)
        config = ReplayFilterConfig(low=0.0, high=1.0, cap_ratio=None)
        scorer(["warm-up"], ["up"])
        start, cpu_start = time.perf_counter(), time.process_time()
        kept = filter_by_perplexity(stored, scorer, current_steps=args.steps, config=config, batch_size=args.batch_size)
        score_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start

    scored = len(kept)
    tokens = sum(len(tokenizer(s.prompt)["input_ids"]) + len(tokenizer(s.action)["input_ids"]) for s in kept)
    return {
        "bench": "replay_filter",
        "steps_scored": scored,
        "steps_per_s": round(scored / score_s, 2),
        "tokens_per_s": round(tokens / score_s, 1),
        "mean_tokens_per_step": round(tokens / scored, 1),
        "score_seconds": round(score_s, 3),
        # CPU seconds of this process (all threads): on a shared machine wall time also counts waiting.
        "score_cpu_seconds": round(cpu_s, 3),
        "steps_per_cpu_s": round(scored / cpu_s, 2),
        "buffer_write_read_seconds": round(io_s, 3),
        "buffer_steps_per_s_io": round(scored / io_s, 1),
        "config": vars(args),
        "model_params": sum(p.numel() for p in model.parameters()),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
    }


if __name__ == "__main__":
    main()
