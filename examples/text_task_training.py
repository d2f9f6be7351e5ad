"""Train WebRL's critic and actor on a text task of your own: no web page, no web prompt, a plain Trainer.

The task is "add two numbers": each episode has two steps (write the sum out, then answer), with prompts
this script builds itself. The trajectories become step samples with this project's prompt builder, the
replay DataModule batches them, and `lightning.Trainer` fits the critic, then the actor against it.
Both modules are saved by the Trainer and reloaded from their checkpoints alone.

    python examples/text_task_training.py --out /tmp/text_task
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

import lightning as L

from webrl.data import ReplayDataModule, Step, Task, Trajectory, trajectory_to_samples
from webrl.modules import ActorModule, CriticModule, build_tiny_model


def prompt(intent: str, history: Sequence[str], page: str) -> str:
    """This project's own prompt: the question, what was said so far, and the scratchpad."""
    return f"Question: {intent}\nSo far: {' | '.join(history) or '-'}\nScratchpad: {page}\nNext:"


def episode(a: int, b: int, answer: int) -> Trajectory:
    """Two steps: write the sum, then answer; the outcome is whether the answer is right."""
    task = Task(task_id=f"add-{a}-{b}", intent=f"add {a} and {b}", sites=["math"], start_url="")
    trajectory = Trajectory(task=task, outcome=float(answer == a + b), status="exit")
    responses = [f"{a} + {b}", f"answer {answer}"]
    for i, response in enumerate(responses):
        page = f"{a} {b}" if i == 0 else f"{a} + {b}"
        trajectory.steps.append(
            Step(index=i, prompt=prompt(task.intent, responses[:i], page), observation=page, response=response)
        )
    return trajectory


def trainer(out: Path, name: str) -> L.Trainer:
    return L.Trainer(
        max_steps=4,
        accelerator="cpu",
        default_root_dir=out / name,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for the model and checkpoints (a temp dir)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="text_task."))
    rng = random.Random(0)
    pairs = [(rng.randint(1, 9), rng.randint(1, 9)) for _ in range(8)]
    episodes = [episode(a, b, a + b if i % 2 == 0 else a + b + 1) for i, (a, b) in enumerate(pairs)]
    samples = [s for t in episodes for s in trajectory_to_samples(t, prompt_builder=prompt)]

    corpus = [step.prompt + " " + step.response for t in episodes for step in t.steps] * 10
    model_dir = build_tiny_model(out / "model", corpus, vocab_size=300, hidden_size=64, num_layers=1, num_heads=1)

    critic = CriticModule(model_dir, lr=1e-4)
    critic_data = ReplayDataModule(critic.tokenizer, current=samples, target="critic", batch_size=4, max_length=128)
    critic_trainer = trainer(out, "critic")
    critic_trainer.fit(critic, datamodule=critic_data)
    critic_ckpt = out / "critic.ckpt"
    critic_trainer.save_checkpoint(critic_ckpt)
    critic = CriticModule.load_from_checkpoint(critic_ckpt)  # the model comes back from its directory
    critic.requires_grad_(False)

    actor = ActorModule(model_dir, lr=1e-4, critic=critic)  # no `advantage` in the batches: the critic gives it
    actor_data = ReplayDataModule(actor.tokenizer, current=samples, target="actor", batch_size=4, max_length=128)
    actor_trainer = trainer(out, "actor")
    actor_trainer.fit(actor, datamodule=actor_data)
    actor_ckpt = out / "actor.ckpt"
    actor_trainer.save_checkpoint(actor_ckpt)
    reloaded = ActorModule.load_from_checkpoint(actor_ckpt)

    values = critic.values([samples[0].prompt, samples[1].next_prompt])
    print(f"critic V(s) of the first episode's states: {[round(v, 3) for v in values.tolist()]}")
    print(f"actor parameters: {sum(p.numel() for p in reloaded.parameters())} (the frozen reference not counted)")
    print(f"checkpoints: {critic_ckpt} {actor_ckpt}")


if __name__ == "__main__":
    main()
