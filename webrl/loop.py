"""PhaseLoop: WebRL's outer loop on Lightning Fabric, one resumable stage at a time.

Per phase (docs/method.md §2): curriculum → rollouts → ORM labels → replay filter →
critic → actor → weight sync → evaluation on held-out tasks (temperature 0) → checkpoint.
Phase 0 is the release's maintainers' phase 0 (docs/method.md §2.1): the SFT actor is rolled out
on the training tasks, rollouts are labelled, the replay buffer starts with the SFT demonstrations
and phase 0's successes, and its failures seed phase 1's curriculum; nothing is trained in it, and
its evaluation is the SFT baseline.

Every stage writes its outputs atomically (`webrl.data.atomic_io`: temp file, fsync, rename, directory
fsync) into `phase_NNN/` and only then is marked done in `run_state.json` (`webrl.run_state`), so after a
kill at any point the same command redoes at most the stage in flight; rollouts even keep the episodes
that had finished. A redone stage ends as the first attempt would have: the replay buffer and
`phases.csv` are keyed by phase (rewritten, never appended twice), and the replay filter reads only the
phases before its own. `WEBRL_FAULT` ends the process at a named stage boundary or inside a named
atomic write, for the crash tests (`webrl.data.atomic_io`). Rollouts are sharded
across ranks (each rank runs its own browser and engine on its share of the tasks and writes its
own file); every collective (training, weight gathering) runs on all ranks.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric

from webrl.curriculum.phase import generator_engine, needs_generator, phase_tasks, top_up
from webrl.data.atomic_io import atomic_write, fault_point, write_json_atomic
from webrl.data.datamodule import ReplayDataModule
from webrl.data.labels import label_with_orm
from webrl.data.prompts import uses_chat_template
from webrl.data.replay import ReplayBuffer, filter_by_perplexity
from webrl.data.step_values import write_step_values
from webrl.data.steps import StepSample, read_samples, write_samples
from webrl.data.trajectory import Task, Trajectory, write_trajectories
from webrl.inference.engine import InferenceEngine, ReloadableEngine
from webrl.inference.rollout_metrics import rollout_counts
from webrl.inference.weight_sync import full_state_dict
from webrl.loop_config import WebRLConfig
from webrl.metrics import agreement, errored, infra_errors, success_by_site
from webrl.modules.actor import ActorModule
from webrl.modules.advantages import score_steps
from webrl.modules.critic import CriticModule
from webrl.modules.lm import actor_scorer
from webrl.modules.orm import orm_scorer
from webrl.run_layout import RunLayout
from webrl.run_state import RunState, seed_everything_for, stage_seed
from webrl.tracking import log_phase_views, write_phase_row
from webrl.training import StageSettings, save_model_dir, setup_for_training, train_module
from webrl.web_environment import WebEnvironment

log = logging.getLogger(__name__)

PHASE_STEPS = 100_000
"""Width of a phase on the logged step axis: critic steps, then actor steps from the middle, then the record."""


class PhaseLoop:
    """Runs (or resumes) the phases of one WebRL run in `config.output_dir`.

    `sft_dir` is the starting actor (the SFT checkpoint); `orm_dir` the ORM (None when
    `reward.orm_labels` is off); `demonstrations` the SFT data, the replay buffer's first content.
    """

    def __init__(
        self,
        config: WebRLConfig,
        fabric: Fabric,
        env: WebEnvironment,
        engine: InferenceEngine,
        *,
        sft_dir: Path,
        orm_dir: Path | None,
        demonstrations: list[Trajectory],
    ) -> None:
        self.config = config
        self.fabric = fabric
        self.env = env
        self.engine = engine
        self.sft_dir = Path(sft_dir)
        self.orm_dir = orm_dir
        self.demonstrations = demonstrations
        self.layout = RunLayout(config.output_dir)
        self.state = RunState.load(self.layout.state_path)
        self.stages: tuple[tuple[str, Callable[[int], dict[str, float]]], ...] = (
            ("curriculum", self._curriculum),
            ("rollouts", self._rollouts),
            ("labels", self._labels),
            ("replay", self._replay),
            ("critic", self._critic),
            ("actor", self._actor),
            ("sync", self._sync),
            ("evaluate", self._evaluate),
        )
        """Each phase's stages in run order: `run_state.STAGES` less the checkpoint that closes the phase."""

    # ----------------------------------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        """Run every phase not yet completed; returns the per-phase records (also in run_state.json)."""
        for phase in range(self.state.phase, self.config.phases + 1):
            for stage, run_stage in self.stages:
                if self.state.is_done(phase, stage):
                    continue
                seed_everything_for(self.config.seed, phase, stage)
                self.fabric.print(f"[phase {phase}] {stage}")
                started = time.perf_counter()
                metrics = run_stage(phase) or {}
                metrics[f"time/{stage}_s"] = time.perf_counter() - started
                self._finish_stage(phase, stage, metrics)
            self._checkpoint(phase)
        return self.state.history

    @property
    def replay(self) -> ReplayBuffer:
        """The replay buffer as it is on disk now (rank 0 writes it; every rank reads it fresh)."""
        return ReplayBuffer(self.layout.replay_dir)

    # ---------------------------------------------------------------------------------------------- paths
    def actor_dir(self, phase: int) -> Path:
        """The actor that phase `phase` rolls out: the last trained one before it, else the SFT model."""
        for earlier in range(phase - 1, -1, -1):
            candidate = self.layout.actor_dir(earlier)
            if (candidate / "config.json").exists():
                return candidate
        return self.sft_dir

    def critic_path(self, phase: int) -> Path | None:
        for earlier in range(phase, 0, -1):
            candidate = self.layout.critic_path(earlier)
            if candidate.exists():
                return candidate
        return None

    # ---------------------------------------------------------------------------------------------- stages
    def _curriculum(self, phase: int) -> dict[str, float]:
        out = self.layout.tasks_path(phase)
        metrics: dict[str, float] = {}
        if self.fabric.is_global_zero:
            if phase == 0 or not self.config.curriculum_enabled:
                tasks = self.env.suite(self.config.env.train_split, self.config.env.train_tasks, self.config.seed)
            else:
                tasks, metrics = self._propose_tasks(phase)
            write_json_atomic(out, [task.to_dict() for task in tasks])
        self.fabric.barrier()
        return {**metrics, "curriculum/tasks": float(len(self.layout.tasks(phase)))}

    def _propose_tasks(self, phase: int) -> tuple[list[Task], dict[str, float]]:
        curriculum = self.config.curriculum
        generator = None
        if needs_generator(curriculum):
            generator = generator_engine(self.config.model.generator, self.config.model.cache_dir)
        tasks, metrics = phase_tasks(
            curriculum,
            phase,
            previous_dir=self.layout.phase_dir(phase - 1),
            phase_dir=self.layout.phase_dir(phase),
            first_tasks=self.layout.tasks(0),
            previous_labelled=self.layout.labelled(phase - 1),
            generator=generator,
            reinstantiate=self.env.reinstantiate,
            start_observation=self.env.start_observation,
            critic=self._critic_scorer(phase) if self.critic_path(phase - 1) is not None else None,
        )
        proposed = len(tasks)
        tasks = top_up(
            tasks,
            wanted=curriculum.tasks_per_phase,
            pool=self.env.suite(self.config.env.train_split, 0, self.config.seed),
            used={task.intent for earlier in range(phase) for task in self.layout.tasks(earlier)},
            seed=stage_seed(self.config.seed, phase, "curriculum"),
        )
        return tasks, {**metrics, "curriculum/topped_up": float(len(tasks) - proposed)}

    def _load_critic(self, path: Path | None, lr: float = 1e-6) -> CriticModule:
        """A critic on the SFT trunk with fresh heads, then the weights a critic stage saved at `path` if any."""
        config, max_length = self.config.critic, self.config.model.max_length
        critic = CriticModule(
            self.sft_dir, lr=lr, max_length=max_length, lora=config.lora.active(), head_init_std=config.head_init_std
        )
        if path is not None:
            critic.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        return critic

    def _critic_scorer(self, phase: int) -> Any:
        critic = self._load_critic(self.critic_path(phase - 1))
        return lambda prompts: critic.values(prompts).tolist()

    def _rollouts(self, phase: int) -> dict[str, float]:
        tasks = self.layout.tasks(phase)[self.fabric.global_rank :: self.fabric.world_size]
        self._sync_engine(self.actor_dir(phase))
        out = self.layout.rollouts_path(phase, self.fabric.global_rank)
        seed = stage_seed(self.config.seed, phase, "rollouts") + self.fabric.global_rank
        trajectories, metrics = self.env.run_episodes(
            self.engine, tasks, out, phase=phase, evaluation=False, seed=seed, prompt_builder=self._prompt_builder()
        )
        # Counts over every episode of the shard, those a crashed attempt had finished included.
        metrics = {**metrics, **rollout_counts(trajectories)}
        return {f"rollout/{k.split('/', 1)[-1]}": v for k, v in metrics.items()}

    def _labels(self, phase: int) -> dict[str, float]:
        rollouts = self.layout.rollouts(phase)
        # A browser or site failure (after its retry) is no evidence about the policy: no label, no training.
        trajectories = [trajectory for trajectory in rollouts if not trajectory.infra_error]
        if self.fabric.is_global_zero:
            if self.config.reward.orm_labels:
                if self.orm_dir is None:
                    raise ValueError("reward.orm_labels needs an ORM (model.orm, or let recipes.webrl train one)")
                score, chat = orm_scorer(self.orm_dir, batch_size=8, max_length=self.config.model.max_length)
                threshold = self.config.reward.threshold
                label_with_orm(trajectories, score, chat_template_tokenizer=chat, threshold=threshold)
            for trajectory in trajectories:
                source = trajectory.orm_reward if self.config.reward.source == "orm" else trajectory.eval_reward
                trajectory.outcome = float(source or 0.0)
            write_trajectories(self.layout.labelled_path(phase), trajectories)
        self.fabric.barrier()
        labelled = self.layout.labelled(phase)
        metrics = {f"train/{k}": v for k, v in success_by_site(labelled, key="outcome").items()}
        metrics.update({f"train_eval/{k}": v for k, v in success_by_site(labelled, key="eval_reward").items()})
        metrics.update(agreement(labelled))
        metrics["rollout/errors"] = errored(labelled)  # over every rank's rollouts
        metrics["rollout/infra_errors"] = infra_errors(rollouts)
        return metrics

    def _replay(self, phase: int) -> dict[str, float]:
        labelled = self.layout.labelled(phase)
        out = self.layout.replay_samples_path(phase)
        kept: list[StepSample] = []
        if self.config.replay.enabled and phase > 0:
            experience = sample_by_steps(
                list(self.demonstrations) + self.replay.trajectories(before=phase),
                self.config.replay.max_scored_steps,
                stage_seed(self.config.seed, phase, "replay"),
            )
            model, tokenizer = self._load_actor_model(self.actor_dir(phase))
            score = actor_scorer(model, tokenizer, max_length=self.config.model.max_length)
            kept = filter_by_perplexity(
                experience,
                score,
                current_steps=sum(len(t.steps) for t in labelled),
                scores_path=self.layout.replay_scores_path(phase),
                config=self.config.replay.filter,
                gamma=self.config.actor.advantage.gamma,
                fabric=self.fabric,
            )
        if self.fabric.is_global_zero:
            write_samples(out, kept)
            self.replay.add_phase(phase, labelled, overwrite=True)
        self.fabric.barrier()
        return {"replay/kept": float(len(kept)), "replay/buffer_trajectories": float(len(self.replay.trajectories()))}

    def _critic(self, phase: int) -> dict[str, float]:
        if phase == 0:
            return {}
        settings = self.config.critic.train
        critic = self._load_critic(self.critic_path(phase - 1), lr=settings.lr)
        data = self._datamodule(phase, critic.tokenizer, settings, phase_stage="critic")
        module, optimizer = setup_for_training(self.fabric, critic)
        metrics = train_module(
            self.fabric,
            module,
            optimizer,
            self.fabric.setup_dataloaders(data.critic_dataloader()),
            settings,
            name="critic",
            step_offset=phase * PHASE_STEPS,
        )
        state = full_state_dict(module, merge_lora=False)  # a collective under sharding: every rank calls it
        if self.fabric.is_global_zero:
            atomic_write(self.layout.critic_path(phase), partial(torch.save, state))
        self.fabric.barrier()
        return metrics

    def _actor(self, phase: int) -> dict[str, float]:
        if phase == 0:
            return {}
        settings = self.config.actor.train
        model, tokenizer = self._load_actor_model(self.actor_dir(phase))
        actor = ActorModule(
            model,
            tokenizer,
            loss=self.config.actor.loss,
            advantage=self.config.actor.advantage,
            lr=settings.lr,
            lora=self.config.actor.lora.active(),
        )
        data = self._datamodule(phase, tokenizer, settings, phase_stage="actor")
        scored = score_advantages(self.fabric, self._load_critic(self.critic_path(phase)), data, self.config)
        module, optimizer = setup_for_training(self.fabric, actor)
        metrics = scored | train_module(
            self.fabric,
            module,
            optimizer,
            self.fabric.setup_dataloaders(data.actor_dataloader()),
            settings,
            name="actor",
            step_offset=phase * PHASE_STEPS + PHASE_STEPS // 2,
        )
        save_model_dir(self.fabric, actor.model, tokenizer, self.layout.actor_dir(phase), {"metrics": metrics})
        return metrics

    def _sync(self, phase: int) -> dict[str, float]:
        started = time.perf_counter()
        self._sync_engine(self.actor_dir(phase + 1))
        return {"sync/seconds": time.perf_counter() - started}

    def _evaluate(self, phase: int) -> dict[str, float]:
        tasks = self.env.suite(self.config.env.test_split, self.config.env.test_tasks, self.config.seed)
        shard = tasks[self.fabric.global_rank :: self.fabric.world_size]
        self._sync_engine(self.actor_dir(phase + 1))
        out = self.layout.eval_path(phase, self.fabric.global_rank)
        self.env.run_episodes(
            self.engine,
            shard,
            out,
            phase=phase,
            evaluation=True,
            seed=self.config.seed,
            prompt_builder=self._prompt_builder(),
        )
        self.fabric.barrier()
        results = self.layout.evaluations(phase)
        metrics = {f"test/{k}": v for k, v in success_by_site(results, key="eval_reward").items()}
        return {**metrics, "eval/errors": errored(results), "eval/infra_errors": infra_errors(results)}

    # ---------------------------------------------------------------------------------------------- helpers
    def _prompt_builder(self) -> Any:
        if not isinstance(self.engine, ReloadableEngine) or not uses_chat_template(self.engine.tokenizer):
            return None
        tokenizer = self.engine.tokenizer
        from webrl.data.prompts import actor_prompt_for_step

        return lambda task, steps, html: actor_prompt_for_step(task, steps, html, chat_template_tokenizer=tokenizer)

    def _sync_engine(self, actor_dir: Path) -> None:
        """Point the engine at `actor_dir` unless it already serves it (a reload costs seconds)."""
        if not isinstance(self.engine, ReloadableEngine):
            raise ValueError(
                f"rollout.engine={self.config.rollout.engine} cannot load new actor weights: use hf or vllm for WebRL "
                "rollouts (an OpenAI-compatible server fits model.generator or evaluation)"
            )
        if Path(self.engine.model_path) != actor_dir:
            self.engine.reload(actor_dir)

    def _load_actor_model(self, path: Path) -> tuple[Any, Any]:
        from webrl.modules.lm import load_model_and_tokenizer

        return load_model_and_tokenizer(path)

    def _datamodule(self, phase: int, tokenizer: Any, settings: StageSettings, *, phase_stage: str) -> ReplayDataModule:
        replayed = read_samples(self.layout.replay_samples_path(phase))
        data = ReplayDataModule(
            tokenizer,
            current=self.layout.labelled(phase),
            replay=replayed,
            target=phase_stage,
            batch_size=settings.batch_size,
            max_length=self.config.model.max_length,
            gamma=self.config.actor.advantage.gamma,
            group_by_length=settings.group_by_length,
            seed=stage_seed(self.config.seed, phase, phase_stage),
        )
        data.setup()
        return data

    def _finish_stage(self, phase: int, stage: str, metrics: dict[str, float]) -> None:
        """Save the stage's metrics, then mark it done (rank 0), then let every rank see the new state."""
        if self.fabric.is_global_zero:
            write_json_atomic(self.layout.metrics_path(phase, stage), metrics)
            fault_point(f"stage:{phase}:{stage}:written")
            self.state.mark(phase, stage, self.layout.state_path)
            fault_point(f"stage:{phase}:{stage}:marked")
        self.fabric.barrier()
        self.state = RunState.load(self.layout.state_path)

    def _phase_record(self, phase: int) -> dict[str, Any]:
        record: dict[str, Any] = {"phase": phase}
        for path in sorted(self.layout.metrics_dir(phase).glob("*.json")):
            record.update(json.loads(path.read_text(encoding="utf-8")))
        return record

    def _checkpoint(self, phase: int) -> None:
        """Close the phase: its record goes to W&B, phases.csv and run_state.json, in that order.

        phases.csv and the history are keyed by phase, so a checkpoint redone after a crash between
        them replaces the phase's row and record instead of adding a second one.
        """
        record = self._phase_record(phase)
        record["time/phase_s"] = sum(v for k, v in record.items() if k.startswith("time/") and k.endswith("_s"))
        if self.fabric.is_global_zero:
            # Phase records sit after both training stages on the step axis, so W&B steps stay monotonic.
            numeric = {k: v for k, v in record.items() if isinstance(v, (int, float))}
            self.fabric.log_dict(numeric, step=phase * PHASE_STEPS + PHASE_STEPS - 1)
            write_phase_row(self.layout.phases_csv, record)
            log_phase_views(self.fabric.loggers, phase, self.layout, self.config.tracking.sample_trajectories)
            fault_point(f"stage:{phase}:checkpoint:written")
            self.state.history = [kept for kept in self.state.history if kept.get("phase") != phase] + [record]
            self.state.mark(phase, "checkpoint", self.layout.state_path)
            fault_point(f"stage:{phase}:checkpoint:marked")
        self.fabric.barrier()
        self.state = RunState.load(self.layout.state_path)


def score_advantages(
    fabric: Fabric, critic: CriticModule, data: ReplayDataModule, config: WebRLConfig
) -> dict[str, float]:
    """Give every step of the actor's `data` its advantage from the frozen `critic`; returns their mean and std.

    The critic does not change during the actor stage, so each distinct state is scored once here
    (`webrl.modules.advantages`) rather than twice per actor step inside it; the actor batches then carry
    the advantages and no critic runs while the actor trains. Rank 0 keeps each step's V(s), V(s') and
    advantage in the phase in progress's `advantages.jsonl`, for the run report.
    """
    samples = data.dataset.samples
    scores = score_steps(
        critic.requires_grad_(False).to(fabric.device),
        samples,
        config.actor.advantage,
        max_length=config.model.max_length,
        autocast=fabric.autocast(),
    )
    if fabric.is_global_zero:
        layout = RunLayout(config.output_dir)
        phase = RunState.load(layout.state_path).phase  # the actor stage runs inside the phase in progress
        columns = (scores.value.tolist(), scores.next_value.tolist(), scores.advantage.tolist())
        write_step_values(layout.advantages_path(phase), samples, *columns)
    advantages = scores.advantage
    return {
        "actor/advantage_all_mean": advantages.mean().item(),
        "actor/advantage_all_std": advantages.std(correction=0).item(),
    }


def sample_by_steps(trajectories: list[Trajectory], max_steps: int, seed: int) -> list[Trajectory]:
    """A seeded random subset of whole trajectories holding at most `max_steps` steps (all when 0).

    Scoring every stored step under the current actor is the replay filter's cost; on a CPU run a
    sample keeps it bounded while the kept steps still come from the whole buffer.
    """
    if not max_steps or sum(len(t.steps) for t in trajectories) <= max_steps:
        return trajectories
    order = list(trajectories)
    random.Random(seed).shuffle(order)
    chosen, total = [], 0
    for trajectory in order:
        if total + len(trajectory.steps) > max_steps:
            continue
        chosen.append(trajectory)
        total += len(trajectory.steps)
    return chosen
