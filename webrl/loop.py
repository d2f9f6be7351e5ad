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
across engines (`webrl.engine_placement`: by default each rank runs its own browser and engine on its
share of the tasks and writes its own file); every collective (training, weight gathering) runs on all
ranks. A vLLM engine with `engines.sleep` sleeps through the stages that load models of their own.
The trained actor reaches the engines through its saved directory, or with `engines.weight_sync` in
memory: the tensors the actor stage saved are broadcast from rank 0 and pushed into every engine at
the sync stage; a process that did not train them (a resumed run) reloads the directory instead.

The loop says what runs when and from which checkpoint; the work lives beside it: the curriculum's
proposals in `webrl.curriculum.phase`, the replay scoring and critic/actor training in
`webrl.phase_training`, the stage and phase records in `webrl.phase_record`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from lightning.fabric import Fabric

from webrl.curriculum.phase import generator_engine, propose_phase_tasks, start_page_prompt
from webrl.data.atomic_io import write_json_atomic
from webrl.data.labels import label_with_orm, labelable
from webrl.data.replay import ReplayBuffer, select_successes
from webrl.data.steps import StepSample, write_samples
from webrl.data.trajectory import Task, Trajectory, sampled_copies, write_trajectories
from webrl.engine_link import EngineLink
from webrl.inference.engine import InferenceEngine
from webrl.inference.rollout_metrics import rollout_counts
from webrl.loop_config import RolloutConfig, WebRLConfig
from webrl.metrics import agreement, errored, infra_errors, success_by_site
from webrl.modules.orm import orm_scorer
from webrl.phase_record import close_phase, finish_stage, shared_state
from webrl.phase_training import critic_scorer, filter_replay, sample_by_steps, train_actor, train_critic
from webrl.run_config import effective_config
from webrl.run_layout import RunLayout
from webrl.run_state import seed_everything_for, stage_seed
from webrl.stage_attempts import StageAttempt, tally
from webrl.web_environment import WebEnvironment

GENERATING_STAGES = ("rollouts", "sync", "evaluate")
"""The stages that decode with the rollout engine; in the others a sleeping engine leaves the GPU to the models."""

log = logging.getLogger(__name__)


class PhaseLoop:
    """Runs (or resumes) the phases of one WebRL run in `config.output_dir`.

    `sft_dir` is the starting actor (the SFT checkpoint); `orm_dir` the ORM (None when
    `reward.orm_labels` is off); `demonstrations` the SFT data, the replay buffer's first content;
    `orm_threshold` the ORM's calibrated threshold (`webrl.orm_threshold`; None: `reward.threshold`).
    """

    def __init__(
        self,
        config: WebRLConfig,
        fabric: Fabric,
        env: WebEnvironment,
        engine: InferenceEngine | None,
        *,
        sft_dir: Path,
        orm_dir: Path | None,
        demonstrations: list[Trajectory],
        orm_threshold: float | None = None,
    ) -> None:
        self.config = config
        self.fabric = fabric
        self.env = env
        self.engine = engine
        self.sft_dir = Path(sft_dir)
        self.orm_dir = orm_dir
        self.orm_threshold = config.reward.threshold if orm_threshold is None else orm_threshold
        self.demonstrations = demonstrations
        self.layout = RunLayout(config.output_dir)
        self.state = shared_state(fabric, self.layout)
        self.engine_link = EngineLink(config, engine)
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
                self.engine_link.set_awake(stage in GENERATING_STAGES)
                self.fabric.print(f"[phase {phase}] {stage}")
                metrics = StageAttempt(self.layout, phase, stage, keep=self.fabric.is_global_zero).run(run_stage)
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
            config = self.config
            if phase == 0 or not config.curriculum_enabled:
                tasks = self.env.suite(config.env.train_split, config.env.train_tasks, config.seed)
            else:
                trained = self.critic_path(phase - 1)
                # The critic judges a task by the prompt its first step would get, built as the rollouts it was
                # trained on built theirs: by the rollout engine's builder (the chat form for a chat-template actor).
                rollout_prompt = WebEnvironment.actor_prompt_builder(self.engine)
                tasks, metrics = propose_phase_tasks(
                    config.curriculum,
                    phase,
                    self.layout,
                    generator=partial(generator_engine, config.model.generator, config.model.cache_dir),
                    pool=self.env.suite(config.env.train_split, 0, config.seed),
                    reinstantiate=self.env.reinstantiate,
                    start_observation=self.env.start_observation,
                    critic=partial(critic_scorer, config, self.sft_dir, trained) if trained else None,
                    critic_prompt=start_page_prompt(rollout_prompt),
                    seed=stage_seed(config.seed, phase, "curriculum"),
                    held_out=self.env.held_out_tasks(),
                    resolve=self.env.resolve,
                )
            write_json_atomic(out, self.env.portable(tasks))
        self.fabric.barrier()
        return {**metrics, "curriculum/tasks": float(len(self.layout.tasks(phase)))}

    def _rollouts(self, phase: int) -> dict[str, float]:
        tasks = sampled_copies(
            self._shard(self.env.resolve(self.layout.tasks(phase))), self.config.rollout.samples_per_task
        )
        self.engine_link.serve(self.actor_dir(phase))
        out = self.layout.rollouts_path(phase, self.fabric.global_rank)
        seed = stage_seed(self.config.seed, phase, "rollouts") + self.fabric.global_rank
        # Rank 0's figures, the ones saved, go to its attempt's record as each episode ends: a kill keeps them.
        figures = tally(self.layout, phase, "rollouts") if self.fabric.is_global_zero else None
        _, metrics = self.env.run_episodes(
            self.engine, tasks, out, phase=phase, evaluation=False, seed=seed, tally=figures
        )
        # Every rank's episodes are written before the stage is marked done, or a crash would leave it "done" with
        # a shard missing. Counts are over all of them, those a crashed attempt had finished included.
        self.fabric.barrier()
        metrics = {**metrics, **rollout_counts(self.layout.rollouts(phase, self._rollout_ids(phase)))}
        return {f"rollout/{k.split('/', 1)[-1]}": v for k, v in metrics.items()}

    def _rollout_ids(self, phase: int) -> set[str]:
        """The episodes the phase's rollouts ran: each task's copies, as many as `_samples_per_task_ran` says."""
        samples = _samples_per_task_ran(self.layout.root, phase, self.config)
        return {task.task_id for task in sampled_copies(self.layout.tasks(phase), samples)}

    def _labels(self, phase: int) -> dict[str, float]:
        rollouts = self.layout.rollouts(phase, self._rollout_ids(phase))
        # Infrastructure failures, and with evaluator rewards unjudged episodes, get no label and no training.
        trajectories, _ = labelable(rollouts, by_evaluator=self.config.reward.source == "evaluator")
        if self.fabric.is_global_zero:
            if self.config.reward.orm_labels:
                if self.orm_dir is None:
                    raise ValueError("reward.orm_labels needs an ORM (model.orm, or let recipes.webrl train one)")
                score, chat = orm_scorer(
                    self.orm_dir, batch_size=8, max_length=self.config.model.max_length, device=self.fabric.device
                )
                label_with_orm(trajectories, score, chat_template_tokenizer=chat, threshold=self.orm_threshold)
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
        metrics["rollout/unlabelled"] = float(len(rollouts) - len(labelled))
        return metrics

    def _replay(self, phase: int) -> dict[str, float]:
        labelled = self.layout.labelled(phase)
        out = self.layout.replay_samples_path(phase)
        kept: list[StepSample] = []
        if self.config.replay.enabled and phase > 0:
            # Successes first (the first per intent, in stored order), then the sample: a budget spent on failures,
            # or a later success drawn before the first, would undo the filter's rule.
            rule = self.config.replay.filter
            successes = select_successes(
                [*self.demonstrations, *self.replay.trajectories(before=phase)],
                threshold=rule.success_threshold,
                first_per_task=rule.first_success_per_task,
            )
            experience = sample_by_steps(
                successes, self.config.replay.max_scored_steps, stage_seed(self.config.seed, phase, "replay")
            )
            current_steps = sum(len(t.steps) for t in labelled)
            kept = filter_replay(
                self.fabric,
                self.config,
                experience,
                actor_dir=self.actor_dir(phase),
                current_steps=current_steps,
                scores_path=self.layout.replay_scores_path(phase),
            )
        if self.fabric.is_global_zero:
            write_samples(out, kept)
            self.replay.add_phase(phase, labelled, overwrite=True)
        self.fabric.barrier()
        return {"replay/kept": float(len(kept)), "replay/buffer_trajectories": float(len(self.replay.trajectories()))}

    def _critic(self, phase: int) -> dict[str, float]:
        if phase == 0:
            return {}
        start_from = self.critic_path(phase - 1)
        return train_critic(self.fabric, self.config, self.layout, phase, sft_dir=self.sft_dir, start_from=start_from)

    def _actor(self, phase: int) -> dict[str, float]:
        if phase == 0:
            return {}
        metrics, weights = train_actor(
            self.fabric,
            self.config,
            self.layout,
            phase,
            actor_dir=self.actor_dir(phase),
            sft_dir=self.sft_dir,
            critic_path=self.critic_path(phase),
        )
        self.engine_link.keep_for_sync(self.layout.actor_dir(phase), weights)
        return metrics

    def _sync(self, phase: int) -> dict[str, float]:
        started = time.perf_counter()
        in_memory = self.engine_link.fresh_actor is not None
        self.engine_link.serve(self.actor_dir(phase + 1))
        return {"sync/seconds": time.perf_counter() - started, "sync/in_memory": float(in_memory)}

    def _evaluate(self, phase: int) -> dict[str, float]:
        tasks = self.env.suite(self.config.env.test_split, self.config.env.test_tasks, self.config.seed)
        shard = self._shard(tasks)
        if self.fabric.global_rank == 0:
            self.layout.record_eval_tasks(phase, [task.task_id for task in tasks])
        self.engine_link.serve(self.actor_dir(phase + 1))
        out = self.layout.eval_path(phase, self.fabric.global_rank)
        self.env.run_episodes(
            self.engine,
            shard,
            out,
            phase=phase,
            evaluation=True,
            seed=self.config.seed,
        )
        self.fabric.barrier()
        results = self.layout.evaluations(phase, {task.task_id for task in tasks})
        metrics = {f"test/{k}": v for k, v in success_by_site(results, key="eval_reward").items()}
        return {**metrics, "eval/errors": errored(results), "eval/infra_errors": infra_errors(results)}

    # ---------------------------------------------------------------------------------------------- helpers
    def _shard(self, tasks: list[Task]) -> list[Task]:
        """This rank's tasks: its engine's share (`engines.placement`), none on a rank without an engine."""
        return self.config.engines.shard(tasks, self.fabric, self.config.fabric)

    def _finish_stage(self, phase: int, stage: str, metrics: dict[str, float]) -> None:
        """Save the stage's metrics and mark it done (`webrl.phase_record`); every rank then holds the new state."""
        self.state = finish_stage(self.fabric, self.state, self.layout, phase, stage, metrics)

    def _checkpoint(self, phase: int) -> None:
        """Close the phase: its record to W&B, phases.csv and run_state.json (`webrl.phase_record.close_phase`)."""
        sample_trajectories = self.config.tracking.sample_trajectories
        self.state = close_phase(self.fabric, self.state, self.layout, phase, sample_trajectories)


def _samples_per_task_ran(run_dir: Path, phase: int, config: WebRLConfig) -> int:
    """`rollout.samples_per_task` as phase `phase`'s rollouts stage ran it.

    A relaunch may change the key after that stage (`resume.allow_changes`), and the readers of the rollouts (the
    labels) must take the copies that ran, not those the new value would have run. The run's settings in force at
    the stage (`effective_config`: config.json and the changes accepted before the stage) say which, a key config.json
    lacks at its default; `config`, the loop's own, stands in for a run directory without config.json (a loop
    driven without a recipe).
    """
    settings = effective_config(run_dir, (phase, "rollouts"))
    if settings is None:
        return config.rollout.samples_per_task
    return settings.get("rollout", {}).get("samples_per_task", RolloutConfig.samples_per_task)
