"""The ORM's training set: episodes of several policies, each labelled by its task's evaluator, balanced.

Trained only on the SFT actor's rollouts, the ORM sees few successes and one policy's failures. The
sources here (`orm.data`) widen both classes:

- `actor`: the SFT actor's sampled rollouts (the trajectories the ORM will judge);
- `actor_variants`: its rollouts on fresh-value variants of those tasks, where a fitted actor makes its mistakes;
- `demonstrations`: the reference solver's evaluator-scored successes;
- `solver_noise_<p>`: the reference solver with random detours and wrong answers at noise p
  (`webrl.env.noisy_solver`), successes and failures from the same states;
- `truncated`: demonstrations cut before their last action (or answer), then an empty exit;
- `wrong_answer`: demonstrations whose answer is another task's answer of the template, or a
  perturbed value.

Every episode runs in the browser through `WebEnvironment.run_episodes`, the driver of rollouts, and
its label is the evaluator's verdict on its final page and answer: a variant meant as a negative
that the evaluator accepts is a positive. The hard negatives are scripts (a demonstration's
responses, changed) that a `ScriptedEngine` replays. Each source's file is appended as episodes end,
so an interrupted build resumes. `balance` then subsamples the larger class to `positive_fraction`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lightning.fabric import Fabric

from webrl.data.prompts import trajectory_orm_prompt
from webrl.data.trajectory import Task, Trajectory, is_success
from webrl.distributed import gather_objects
from webrl.env.actions import ActionParseError, parse_action
from webrl.env.evaluators import clean_answer
from webrl.env.noisy_solver import GIVE_UP, exit_response, perturb_answer
from webrl.env.splits import values_key
from webrl.inference.engine import InferenceEngine
from webrl.inference.scripted import ScriptedEngine
from webrl.loop_config import WebRLConfig
from webrl.web_environment import WebEnvironment

ACTOR_SOURCES = ("actor", "actor_variants")
"""The sources the SFT actor itself runs, at the rollouts' concurrency (the others run at `orm.data.concurrency`)."""
SOURCE_KEY = "orm_source"
"""The trajectory metadata key naming the source a training trajectory came from."""


def final_answer(trajectory: Trajectory) -> str | None:
    """The message of the trajectory's closing exit; None when it did not close with one."""
    if not trajectory.steps:
        return None
    try:
        action = parse_action(trajectory.steps[-1].response)
    except ActionParseError:
        return None
    return action.message if action.name == "exit" else None


def truncated_responses(demonstration: Trajectory) -> list[str] | None:
    """The demonstration's responses cut before its last action, then an empty exit; None if nothing is left to cut.

    For a question the last action is the answer, so the episode stops on the answer's page without
    giving it; for a navigation or a change of state it is the last click, so the episode claims to
    be done one step short.
    """
    answer = final_answer(demonstration)
    if answer is None:
        return None
    responses = [step.response for step in demonstration.steps]
    if not answer.strip() and len(responses) < 2:
        return None
    return [*responses[: -1 if answer.strip() else -2], GIVE_UP]


def wrong_answer_responses(
    demonstration: Trajectory, answers: dict[Any, list[str]], rng: random.Random
) -> list[str] | None:
    """The demonstration with its answer replaced by another of its template's answers or a perturbed one.

    `answers` maps a template id to the answers of its demonstrations. Either kind is drawn with
    equal chance where the template has another answer; None for a demonstration with no answer.
    """
    answer = final_answer(demonstration)
    if not answer or not answer.strip():
        return None
    others = sorted(
        {a for a in answers.get(demonstration.task.intent_template_id, []) if clean_answer(a) != clean_answer(answer)}
    )
    wrong = rng.choice(others) if others and rng.random() < 0.5 else perturb_answer(answer, rng, others)
    return [*[step.response for step in demonstration.steps[:-1]], exit_response(wrong)]


def balance(trajectories: Sequence[Trajectory], positive_fraction: float, seed: int) -> list[Trajectory]:
    """Every evaluator-labelled trajectory of the smaller class and a seeded sample of the larger, shuffled.

    The larger class keeps as many as make positives `positive_fraction` of the whole (rounded).
    Trajectories without a verdict or without steps are left out, and so is one whose ORM prompt an earlier
    one already has: the noisy solver without a detour, or the actor replaying a demonstration word for word,
    repeats that episode, and copies would weigh it several times over in a class that looks more varied than
    it is. Both classes must be present.
    """
    labelled, prompts = [], set()
    for trajectory in trajectories:
        if not trajectory.judged_by_evaluator or not trajectory.steps:
            continue
        prompt = trajectory_orm_prompt(trajectory)
        if prompt not in prompts:
            prompts.add(prompt)
            labelled.append(trajectory)
    positives = [t for t in labelled if is_success(t.eval_reward)]
    negatives = [t for t in labelled if not is_success(t.eval_reward)]
    if not positives or not negatives:
        raise ValueError(f"ORM data needs both classes: {len(positives)} successes, {len(negatives)} failures")
    rng = random.Random(seed)
    ratio = positive_fraction / (1 - positive_fraction)
    if len(positives) > len(negatives) * ratio:
        positives = rng.sample(positives, max(1, round(len(negatives) * ratio)))
    else:
        negatives = rng.sample(negatives, max(1, min(len(negatives), round(len(positives) / ratio))))
    kept = positives + negatives
    rng.shuffle(kept)
    return kept


def source_counts(available: Sequence[Trajectory], kept: Sequence[Trajectory]) -> dict[str, dict[str, int]]:
    """Per source: positives, negatives and unlabelled episodes made, and the positives and negatives kept."""
    counts: dict[str, dict[str, int]] = {}
    zero = dict.fromkeys(("positives", "negatives", "unlabelled", "kept_positives", "kept_negatives"), 0)
    for prefix, group in (("", available), ("kept_", kept)):
        for t in group:
            row = counts.setdefault(t.metadata.get(SOURCE_KEY, "?"), dict(zero))
            if not t.judged_by_evaluator or not t.steps:
                row["unlabelled"] += not prefix
            else:
                row[prefix + ("positives" if is_success(t.eval_reward) else "negatives")] += 1
    return counts


def format_counts(counts: dict[str, dict[str, int]]) -> str:
    """One line per source: made positives/negatives (unlabelled), kept positives/negatives."""
    lines = [f"{'source':<20} {'made +/-':>12} {'unlabelled':>10} {'kept +/-':>12}"]
    for name, row in counts.items():
        made = f"{row['positives']}/{row['negatives']}"
        kept = f"{row['kept_positives']}/{row['kept_negatives']}"
        lines.append(f"{name:<20} {made:>12} {row['unlabelled']:>10} {kept:>12}")
    return "\n".join(lines)


def actor_rollout_tasks(config: WebRLConfig, env: WebEnvironment) -> list[Task]:
    """The train tasks the `actor` source rolls the SFT actor out on (`orm.rollout_tasks`, a seeded sample)."""
    return env.suite(config.env.train_split, config.orm.rollout_tasks, config.seed + 1)


def fresh_variants(
    tasks: Sequence[Task],
    reinstantiate: Callable[[Task, random.Random, int], list[Task]],
    n: int,
    seed: int,
    known: Sequence[Task] = (),
) -> list[Task]:
    """Up to `n` variants of each task (`reinstantiate(task, rng, n)`), none with the values of a `known` task.

    `known` is the train split: a variant that repeats a train task's values would be a rollout of a task the
    actor was trained on (or the threshold is calibrated on), which is what the variants are there to avoid.
    Variants drawn twice (two tasks of a template can draw the same values) are kept once.
    """
    rng = random.Random(seed)
    seen = {_values_of(task) for task in known}
    variants = []
    for task in tasks:
        for variant in reinstantiate(task, rng, n):
            values = _values_of(variant)
            if values not in seen:
                seen.add(values)
                variants.append(variant)
    return variants


def _values_of(task: Task) -> tuple[Any, str]:
    return task.intent_template_id, values_key(task)


class ORMDataBuilder:
    """Runs each source of `config.orm.data` through the episode driver into `data_dir`, then balances them.

    `tokenizer` is the actor's (None for the completion form): scripted sources record the prompts
    that actor would see, as demonstrations do. Under several processes each rank runs its share of
    every source and all ranks receive the whole set.
    """

    def __init__(
        self, config: WebRLConfig, fabric: Fabric, env: WebEnvironment, data_dir: Path, tokenizer: Any = None
    ) -> None:
        self.config = config
        self.fabric = fabric
        self.env = env
        self.data_dir = data_dir
        self.tokenizer = tokenizer

    def build(
        self, actor: InferenceEngine | None, demonstrations: list[Trajectory]
    ) -> tuple[list[Trajectory], dict[str, dict[str, int]]]:
        """The balanced training trajectories (each tagged with its source) and the per-source counts."""
        data, seed = self.config.orm.data, self.config.seed
        made: list[Trajectory] = []
        # A rank that `engines.placement` gives no engine still joins the episodes' gather, with no tasks.
        engineless = self.config.engines.engine_index(self.fabric) is None
        actor_runs = actor is not None or engineless
        if data.actor_rollouts and actor_runs:
            made += self.run("actor", actor, actor_rollout_tasks(self.config, self.env), evaluation=False)
        if data.actor_variants and actor_runs:
            made += self.actor_variants(actor)
        if data.demonstrations:
            made += _tagged(demonstrations, "demonstrations")
        solver_noise = data.solver_noise if self.config.env.suite == "embedded" else []
        if data.solver_noise and not solver_noise:
            self.fabric.print("[orm] the noisy solver needs the embedded sites' plans; its sources are left out")
        for level, noise in enumerate(solver_noise):
            tasks = self.env.suite(self.config.env.train_split, data.solver_tasks, seed + 2 + level)
            solver = ScriptedEngine.noisy_embedded_sites(noise, data.solver_answer_noise, seed, self.tokenizer)
            made += self.run(f"solver_noise_{noise:g}", solver, tasks)
        made += self.hard_negatives(demonstrations)
        kept = balance(made, data.positive_fraction, seed)
        return kept, source_counts(made, kept)

    def actor_variants(self, actor: InferenceEngine | None) -> list[Trajectory]:
        """The actor's rollouts on `orm.data.actor_variants` fresh-value variants of each of its rollout tasks."""
        if self.config.env.suite != "embedded":
            self.fabric.print(
                "[orm] fresh-value variants need the embedded sites' templates; actor_variants is left out"
            )
            return []
        tasks = fresh_variants(
            actor_rollout_tasks(self.config, self.env),
            self.env.reinstantiate,
            self.config.orm.data.actor_variants,
            self.config.seed + 4,
            known=self.env.suite(self.config.env.train_split, 0, self.config.seed),
        )
        return self.run("actor_variants", actor, tasks, evaluation=False)

    def hard_negatives(self, demonstrations: list[Trajectory]) -> list[Trajectory]:
        """The truncated and wrong-answer variants of a seeded sample of demonstrations, replayed and scored."""
        data = self.config.orm.data
        if not (data.truncated or data.wrong_answer) or not demonstrations:
            return []
        rng = random.Random(self.config.seed + 3)
        sample = list(demonstrations)
        if data.hard_negative_tasks and data.hard_negative_tasks < len(sample):
            sample = sorted(rng.sample(sample, data.hard_negative_tasks), key=lambda t: t.task.task_id)
        answers: dict[Any, list[str]] = {}
        for demonstration in demonstrations:
            answers.setdefault(demonstration.task.intent_template_id, []).append(final_answer(demonstration) or "")
        made: list[Trajectory] = []
        kinds = [("truncated", data.truncated), ("wrong_answer", data.wrong_answer)]
        for name, enabled in kinds:
            if not enabled:
                continue
            scripts: dict[str, list[str]] = {}
            for demonstration in sample:
                if name == "truncated":
                    script = truncated_responses(demonstration)
                else:
                    script = wrong_answer_responses(demonstration, answers, rng)
                if script is not None:
                    scripts[demonstration.task.task_id] = script
            tasks = [d.task for d in sample if d.task.task_id in scripts]
            made += self.run(name, ScriptedEngine.replay(scripts, self.tokenizer), tasks)
        return made

    def run(
        self, name: str, engine: InferenceEngine, tasks: list[Task], *, evaluation: bool = True
    ) -> list[Trajectory]:
        """This rank's share of `tasks` run by `engine` into `<data_dir>/<name>.rank<r>.jsonl`; every rank's, tagged."""
        fabric = self.fabric
        shard = self.config.engines.shard(tasks, fabric, self.config.fabric)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / f"{name}.rank{fabric.global_rank}.jsonl"
        fabric.print(f"[orm] {name}: {len(tasks)} episodes")
        concurrency = None if name in ACTOR_SOURCES else self.config.orm.data.concurrency
        trajectories, _ = self.env.run_episodes(
            engine,
            shard,
            path,
            phase=-1,
            evaluation=evaluation,
            seed=self.config.seed,
            concurrency=concurrency,
            progress=fabric.is_global_zero,  # a bar on a terminal, a periodic line elsewhere
        )
        return _tagged(gather_objects(fabric, trajectories), name)


def _tagged(trajectories: list[Trajectory], source: str) -> list[Trajectory]:
    """Copies of `trajectories` whose metadata names `source` (the originals, e.g. demonstrations, stay as they are)."""
    return [dataclasses.replace(t, metadata={**t.metadata, SOURCE_KEY: source}) for t in trajectories]
