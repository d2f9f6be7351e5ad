"""The model-side work of a phase: scoring the replay buffer, training the critic, training the actor.

`PhaseLoop` decides when each runs and which checkpoints it starts from; the functions here load the
models, build the data (`ReplayDataModule`) and train under Fabric, each writing where `RunLayout`
says. They take the run's config and those paths, never the loop, so a stage can be run on its own.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric

from webrl.data.atomic_io import atomic_write
from webrl.data.collate import StepTokenizer
from webrl.data.critic_values import read_critic_values, state_key, write_critic_values
from webrl.data.datamodule import ReplayDataModule, setup_loader
from webrl.data.prompts import uses_chat_template
from webrl.data.replay import filter_by_perplexity
from webrl.data.step_values import write_step_values
from webrl.data.steps import StepSample, read_samples
from webrl.data.trajectory import Trajectory
from webrl.evaluation.identity import file_sha256, weights_sha256
from webrl.inference.weight_sync import full_state_dict
from webrl.loop_config import WebRLConfig
from webrl.modules.actor import ActorModule
from webrl.modules.advantages import score_steps
from webrl.modules.critic import CriticModule
from webrl.modules.lm import actor_scorer, load_model_and_tokenizer
from webrl.run_layout import RunLayout
from webrl.run_state import PHASE_STEPS, stage_seed
from webrl.stage_checkpoint import StageCheckpoint
from webrl.stage_settings import StageSettings
from webrl.training import save_model_dir, setup_for_training, train_module


def load_actor_model(path: Path) -> tuple[Any, Any]:
    """The actor's model and tokenizer saved at `path` (an HF model directory)."""
    return load_model_and_tokenizer(path)


def load_critic(config: WebRLConfig, sft_dir: Path, path: Path | None, lr: float = 1e-6) -> CriticModule:
    """A critic on the SFT trunk with fresh heads, then the weights a critic stage saved at `path` if any."""
    settings, max_length = config.critic, config.model.max_length
    critic = CriticModule(
        sft_dir, lr=lr, max_length=max_length, lora=settings.lora.active(), head_init_std=settings.head_init_std
    )
    if path is not None:
        critic.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return critic


def critic_scorer(config: WebRLConfig, sft_dir: Path, path: Path) -> Callable[[list[str | StepSample]], list[float]]:
    """The values the critic saved at `path` gives states: the curriculum's estimate of a task's difficulty."""
    critic = load_critic(config, sft_dir, path)
    return lambda states: critic.values(states).tolist()


def replay_datamodule(
    config: WebRLConfig, layout: RunLayout, phase: int, tokenizer: Any, settings: StageSettings, *, target: str
) -> ReplayDataModule:
    """Phase `phase`'s training data for `target` ("critic" or "actor"): its labelled rollouts and kept replay."""
    replayed = read_samples(layout.replay_samples_path(phase))
    data = ReplayDataModule(
        tokenizer,
        current=layout.labelled(phase),
        replay=replayed,
        target=target,
        batch_size=settings.batch_size,
        max_length=config.model.max_length,
        gamma=config.actor.advantage.gamma,
        group_by_length=settings.group_by_length,
        seed=stage_seed(order_seed(config, target), phase, target),
    )
    data.setup()
    return data


def order_seed(config: WebRLConfig, target: str) -> int:
    """The seed `target`'s ("critic" or "actor") batch order derives from: its section's `order_seed`, else `seed`."""
    chosen = getattr(config, target).order_seed
    return config.seed if chosen is None else chosen


def filter_replay(
    fabric: Fabric,
    config: WebRLConfig,
    experience: list[Trajectory],
    *,
    actor_dir: Path,
    current_steps: int,
    scores_path: Path | None = None,
) -> list[StepSample]:
    """The steps of `experience` the actor at `actor_dir` finds neither too easy nor too hard (perplexity window),
    at most as many as the phase's `current_steps` allow (`webrl.data.replay.filter_by_perplexity`); every
    scored step's probability goes to `scores_path` for the run report's histogram.

    The scoring runs in the run's precision (`fabric.autocast()`), as the actor's training steps do;
    in fp32 it took SmolLM2 7 min a phase on a 2-core CPU (31 batches of 8 replayed steps). The actor loads on the
    CPU and scores on the rank's device: left there, a GPU run scored in fp32 on the host, an 8B copy per rank."""
    model, tokenizer = load_actor_model(actor_dir)
    score = actor_scorer(model.to(fabric.device), tokenizer, max_length=config.model.max_length)
    with fabric.autocast():
        return filter_by_perplexity(
            experience,
            score,
            current_steps=current_steps,
            scores_path=scores_path,
            config=config.replay.filter,
            gamma=config.actor.advantage.gamma,
            fabric=fabric,
            # The last step's next state is rebuilt here, in the chat form of the run's prompts (as in the datamodule).
            chat_template_tokenizer=tokenizer if uses_chat_template(tokenizer) else None,
            # Each action is scored after the prompt the actor's batches hold: an over-long one loses page, not history.
            fit_prompt=StepTokenizer(tokenizer, config.model.max_length).actor_prompt,
        )


def stage_inputs(config: WebRLConfig, section: str) -> dict[str, Any]:
    """What a critic or actor stage's result depends on beyond its optimiser settings and data: its config
    section (loss, advantage, LoRA, head), the seed, the token limit and the precision (`StageCheckpoint.inputs`)."""
    return {
        section: dataclasses.asdict(getattr(config, section)),
        "seed": config.seed,
        "model.max_length": config.model.max_length,
        "fabric.precision": config.fabric.precision,
    }


def train_critic(
    fabric: Fabric, config: WebRLConfig, layout: RunLayout, phase: int, *, sft_dir: Path, start_from: Path | None
) -> dict[str, float]:
    """Train phase `phase`'s critic from the one saved at `start_from` (None: fresh heads) and save it; its metrics."""
    settings = config.critic.train
    critic = load_critic(config, sft_dir, start_from, lr=settings.lr)
    data = replay_datamodule(config, layout, phase, critic.tokenizer, settings, target="critic")
    module, optimizer = setup_for_training(
        fabric, critic, activation_checkpointing=config.fabric.activation_checkpointing
    )
    minutes = config.resume.stage_checkpoint_minutes
    checkpoint = StageCheckpoint.beside(layout.critic_path(phase), minutes, stage_inputs(config, "critic"))
    metrics = train_module(
        fabric,
        module,
        optimizer,
        setup_loader(fabric, data.critic_dataloader()),
        settings,
        name="critic",
        step_offset=phase * PHASE_STEPS,
        checkpoint=checkpoint,
    )
    state = full_state_dict(module, merge_lora=False)  # a collective under sharding: every rank calls it
    if fabric.is_global_zero:
        atomic_write(layout.critic_path(phase), partial(torch.save, state))
    fabric.barrier()
    checkpoint.discard(fabric)
    return metrics


def train_actor(
    fabric: Fabric,
    config: WebRLConfig,
    layout: RunLayout,
    phase: int,
    *,
    actor_dir: Path,
    sft_dir: Path,
    critic_path: Path | None,
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Train phase `phase`'s actor from the one at `actor_dir`, on advantages from the critic at `critic_path`,
    and save it as an HF model directory; returns its metrics and the weights saved (on rank 0; {} elsewhere)."""
    settings = config.actor.train
    model, tokenizer = load_actor_model(actor_dir)
    actor = ActorModule(
        model,
        tokenizer,
        loss=config.actor.loss,
        advantage=config.actor.advantage,
        lr=settings.lr,
        lora=config.actor.lora.active(),
    )
    data = replay_datamodule(config, layout, phase, tokenizer, settings, target="actor")
    # The scoring critic is whole on every rank: it must be gone before the actor and its pi_ref are set up.
    kept = (layout.critic_values_path(phase), critic_values_key(config, sft_dir, critic_path)) if critic_path else None
    scored = score_advantages(
        fabric,
        load_critic(config, sft_dir, critic_path),
        data,
        config,
        values_path=layout.advantages_path(phase),
        kept_values=kept,
    )
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    module, optimizer = setup_for_training(
        fabric, actor, activation_checkpointing=config.fabric.activation_checkpointing
    )
    minutes = config.resume.stage_checkpoint_minutes
    checkpoint = StageCheckpoint.beside(layout.actor_dir(phase), minutes, stage_inputs(config, "actor"))
    metrics = scored | train_module(
        fabric,
        module,
        optimizer,
        setup_loader(fabric, data.actor_dataloader()),
        settings,
        name="actor",
        step_offset=phase * PHASE_STEPS + PHASE_STEPS // 2,
        checkpoint=checkpoint,
    )
    state = full_state_dict(actor.model)  # a collective under sharding: every rank calls it
    save_model_dir(fabric, actor.model, tokenizer, layout.actor_dir(phase), {"metrics": metrics}, state=state)
    checkpoint.discard(fabric)
    return metrics, state


def score_advantages(
    fabric: Fabric,
    critic: CriticModule,
    data: ReplayDataModule,
    config: WebRLConfig,
    *,
    values_path: Path | None = None,
    kept_values: tuple[Path, dict[str, Any]] | None = None,
) -> dict[str, float]:
    """Give every step of the actor's `data` its advantage from the frozen `critic`; returns their mean and std.

    The critic does not change during the actor stage, so each distinct state is scored once here
    (`webrl.modules.advantages`) rather than twice per actor step inside it; the actor batches then carry
    the advantages and no critic runs while the actor trains. Rank 0 keeps each step's V(s), V(s') and
    advantage in `values_path` (the phase's `advantages.jsonl`), for the run report. `kept_values`, a path and
    the key of this critic's values (`critic_values_key`), keeps the values of the states there and takes those
    kept by an earlier start of the stage instead of scoring them again (`webrl.data.critic_values`).
    """
    samples = data.dataset.samples
    known = read_critic_values(*kept_values) if kept_values else {}
    scores = score_steps(
        critic.requires_grad_(False).to(fabric.device),
        samples,
        config.actor.advantage,
        max_length=config.model.max_length,
        autocast=fabric.autocast(),
        progress=fabric.is_global_zero,
        known=known,
    )
    if kept_values is not None and fabric.is_global_zero:
        kept = {state_key(text): value for text, value in scores.states.items()}
        if not kept.keys() <= known.keys():  # a state was scored now: a start that found them all rewrites nothing
            write_critic_values(*kept_values, kept)
    if values_path is not None and fabric.is_global_zero:
        columns = (scores.value.tolist(), scores.next_value.tolist(), scores.advantage.tolist())
        write_step_values(values_path, samples, *columns)
    return {
        "actor/advantage_all_mean": scores.advantage.mean().item(),
        "actor/advantage_all_std": scores.advantage.std(correction=0).item(),
    }


def critic_values_key(config: WebRLConfig, sft_dir: Path, critic_path: Path) -> dict[str, Any]:
    """What the critic saved at `critic_path` makes of a state (`webrl.data.critic_values`): its weights and the
    trunk's (a LoRA critic saves its adapters and heads only), how a state is cut and the precision of the forwards."""
    return {
        "critic_sha256": file_sha256(critic_path),
        "trunk_sha256": weights_sha256(sft_dir),
        "critic.lora": dataclasses.asdict(config.critic.lora),
        "model.max_length": config.model.max_length,
        "fabric.precision": config.fabric.precision,
    }


def sample_by_steps(trajectories: list[Trajectory], max_steps: int, seed: int) -> list[Trajectory]:
    """A seeded random subset of whole trajectories holding at most `max_steps` steps (all when 0), in input order.

    Scoring every stored step under the current actor is the replay filter's cost; on a CPU run a
    sample keeps it bounded while the kept steps still come from the whole buffer.
    """
    if not max_steps or sum(len(t.steps) for t in trajectories) <= max_steps:
        return trajectories
    order = list(range(len(trajectories)))
    random.Random(seed).shuffle(order)
    chosen, total = set(), 0
    for index in order:
        if total + len(trajectories[index].steps) > max_steps:
            continue
        chosen.add(index)
        total += len(trajectories[index].steps)
    return [trajectory for index, trajectory in enumerate(trajectories) if index in chosen]
