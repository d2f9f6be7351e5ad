"""Two-process gloo worker for the data tests: sharded scoring and DataModule batches under DDP.

Run as `python tests/data/dist_worker.py OUT_DIR TOKENIZER_DIR`; Fabric(strategy="ddp") re-launches
the script for rank 1. Each rank writes `rank{r}.json` with what it saw; the test checks the files.
`build_trajectories` is imported by the test too, so both sides agree on the data.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Step, Task, Trajectory


def build_trajectories() -> list[Trajectory]:
    """Seven labelled trajectories of 1–3 steps with pages of different lengths (so padding shows)."""
    trajectories = []
    for t in range(7):
        task = Task(task_id=f"d{t}", intent=f"Open item {t}", sites=["shopping"], start_url="")
        trajectory = Trajectory(task=task, outcome=float(t % 2), status="exit", trajectory_id=f"traj{t}")
        for i in range(1 + t % 3):
            html = f"<a id={i}>item {t}</a>" + "<p>text</p>" * (t + i)
            prompt = actor_prompt_for_step(task, trajectory.steps, html)
            response = f'# Element: item {t}\ndo(action="Click", element="{i}")' if i < t % 3 else "exit(message=done)"
            trajectory.steps.append(Step(index=i, prompt=prompt, observation=html, response=response))
        trajectories.append(trajectory)
    return trajectories


def score_by_length(prompts: list[str], actions: list[str]) -> list[float]:
    """A deterministic stand-in probability, so gathered scores can be checked exactly."""
    return [len(p) % 97 / 100 + len(a) / 1000 for p, a in zip(prompts, actions, strict=True)]


def main(out_dir: Path, tokenizer_dir: Path) -> None:
    from lightning.fabric import Fabric
    from transformers import AutoTokenizer

    from webrl.data.datamodule import ReplayDataModule, setup_loader
    from webrl.data.replay import ReplayFilterConfig, filter_by_perplexity, score_samples
    from webrl.data.steps import trajectory_to_samples

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    trajectories = build_trajectories()
    samples = [s for t in trajectories for s in trajectory_to_samples(t)]
    scored_here: list[str] = []

    def recording_scorer(prompts: list[str], actions: list[str]) -> list[float]:
        scored_here.extend(actions)
        return score_by_length(prompts, actions)

    scores = score_samples(samples, recording_scorer, batch_size=2, fabric=fabric)
    # Without a Fabric the initialised torch.distributed group is used directly.
    scores_dist = score_samples(samples, score_by_length, batch_size=4)
    kept = filter_by_perplexity(
        trajectories, score_by_length, current_steps=2, config=ReplayFilterConfig(low=0.0, high=1.0), fabric=fabric
    )

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    dm = ReplayDataModule(tokenizer, current=trajectories, batch_size=3, max_length=512, seed=1)
    dm.setup()
    seen = {}
    for name, loader in (("critic", dm.critic_dataloader()), ("actor", dm.actor_dataloader())):
        # Fabric must keep the DataModule's DistributedSampler rather than replace it.
        wrapped = fabric.setup_dataloaders(loader, move_to_device=False)
        batches = [{k: v.tolist() for k, v in batch.items()} for batch in wrapped]
        seen[name] = {"indices": list(loader.sampler), "batches": batches, "sampler": type(loader.sampler).__name__}
    # Length-grouped batches slice their own share per rank: set up as the stages set them up.
    grouped = ReplayDataModule(
        tokenizer, current=trajectories, batch_size=3, max_length=512, seed=1, group_by_length=True
    )
    grouped.setup()
    batches = list(setup_loader(fabric, grouped.actor_dataloader()))
    seen["grouped"] = {
        "batches": [{k: v.tolist() for k, v in b.items() if k.endswith("_ids") or k.endswith("mask")} for b in batches]
    }
    record = {
        "rank": fabric.global_rank,
        "scores": scores,
        "scores_dist": scores_dist,
        "scored_here": len(scored_here),
        "kept": [(s.trajectory_id, s.step_index, s.score) for s in kept],
        "loaders": seen,
    }
    (out_dir / f"rank{fabric.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
