"""One phase's curriculum step as the loop runs it: load the state, propose, save, top up.

Kept out of `PhaseLoop` so that the loop only says where things live; everything here takes the
pieces it needs (the run's layout, task lists, callables), not the loop or the run's config.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from webrl.curriculum.config import CurriculumConfig, template_full
from webrl.curriculum.curriculum import Critic, CriticPrompt, Curriculum, Reinstantiate
from webrl.curriculum.filters import dedupe_key
from webrl.curriculum.page_facts import HeldOutFacts
from webrl.curriculum.state import STATE_FILE, CurriculumState
from webrl.data.steps import StepSample
from webrl.data.trajectory import Step, Task, Trajectory, sampled_origin
from webrl.inference.engine import InferenceEngine, build_engine
from webrl.run_layout import RunLayout

log = logging.getLogger(__name__)


def needs_generator(config: CurriculumConfig) -> bool:
    """Whether the phase needs a generator engine: to write tasks and judge them (llm/mixed modes)."""
    return config.mode != "template"


def generator_engine(generator: str, cache_dir: str | Path) -> InferenceEngine:
    """The curriculum's task generator / judge engine, from `model.generator`: an OpenAI-compatible URL,
    "smollm2" (converted once into `cache_dir`), or a Hugging Face model path or name."""
    if generator.startswith(("http://", "https://")):
        return build_engine("openai", None, base_url=generator, mode="chat")
    if generator == "smollm2":
        from webrl.modules.model_factory import SMOLLM2_DIR_NAME, convert_smollm2

        return build_engine("hf", convert_smollm2(Path(cache_dir) / SMOLLM2_DIR_NAME))
    return build_engine("hf", generator)


def top_up(
    tasks: list[Task], *, wanted: int, pool: Sequence[Task], used: set[str], seed: int, max_per_template: int = 0
) -> tuple[list[Task], int]:
    """Fill a phase the curriculum left short (few failures to grow from) with unused tasks of `pool`.

    A phase with no tasks could not train; topping up from the training split keeps the phase size
    at `wanted`. `used` holds the intents of earlier phases; the tasks' own intents are added here.
    Intents are compared by `dedupe_key`, as the curriculum's dedupe compares them, so
    a pool task that differs from a used one only in case, spacing or end punctuation is not taken, nor
    a second pool task of an intent the pool already offers (a task set may repeat an intent).
    With `max_per_template` > 0 no template may pass that many tasks in the phase: a drawn task of a
    full template is skipped and a replacement drawn, so a cap that never binds draws exactly the
    uncapped sample. Returns the tasks and the number skipped for the cap.
    """
    missing = wanted - len(tasks)
    if missing <= 0:
        return tasks, 0
    taken = {dedupe_key(intent) for intent in used} | {dedupe_key(task.intent) for task in tasks}
    fresh = _unused(pool, taken)
    rng = random.Random(seed)
    per_template = Counter(task.intent_template for task in tasks)
    added: list[Task] = []
    skipped = 0
    while len(added) < missing and fresh:
        drawn = rng.sample(range(len(fresh)), min(missing - len(added), len(fresh)))
        for task in (fresh[index] for index in drawn):
            if template_full(per_template, task.intent_template, max_per_template):
                skipped += 1
                continue
            per_template[task.intent_template] += 1
            added.append(task)
        chosen = set(drawn)
        fresh = [task for index, task in enumerate(fresh) if index not in chosen]
    return tasks + added, skipped


def _unused(pool: Sequence[Task], taken: set[str]) -> list[Task]:
    """The tasks of `pool` whose `dedupe_key` is not in `taken`, the first of each intent, in pool order."""
    fresh = []
    for task in pool:
        key = dedupe_key(task.intent)
        if key not in taken:
            taken.add(key)
            fresh.append(task)
    return fresh


def with_stored_tasks(trajectories: Sequence[Trajectory], stored: Sequence[Task]) -> list[Trajectory]:
    """`trajectories` with each task replaced by its record in `stored` (a copy `ID~k` keeps its own id).

    A trajectory holds its task and page URLs as the launch that ran it saw them; the embedded sites take a
    new port at each launch, so a task grown from it (a page fact's start page and fact page, an LLM task's
    site start page) would point a resumed run at a closed port. `stored` is the phase's task list resolved
    for this launch; the pages' URLs move from the old task's origin to the stored one's.
    """
    by_id = {task.task_id: task for task in stored}
    missing = sorted({t.task.task_id for t in trajectories if sampled_origin(t.task.task_id) not in by_id})
    if missing:
        raise ValueError(f"trajectories of tasks the phase's tasks.json does not hold: {missing[:5]} ({len(missing)})")
    return [_rebased(t, by_id[sampled_origin(t.task.task_id)]) for t in trajectories]


def _rebased(trajectory: Trajectory, stored: Task) -> Trajectory:
    task = dataclasses.replace(stored, task_id=trajectory.task.task_id)
    old, new = _origin(trajectory.task.start_url), _origin(stored.start_url)
    if old == new:
        return dataclasses.replace(trajectory, task=task)

    def move(url: str) -> str:
        return new + url[len(old) :] if url.startswith(old) else url

    steps = [dataclasses.replace(step, url=move(step.url)) for step in trajectory.steps]
    return dataclasses.replace(trajectory, task=task, steps=steps, final_url=move(trajectory.final_url))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def phase_tasks(
    config: CurriculumConfig,
    phase: int,
    *,
    previous_dir: Path,
    phase_dir: Path,
    first_tasks: Sequence[Task],
    previous_labelled: Sequence[Trajectory],
    generator: InferenceEngine | None,
    reinstantiate: Reinstantiate | None,
    start_observation: Callable[[Task], str] | None,
    critic: Critic | None,
    held_out: Sequence[Task] = (),
    critic_prompt: CriticPrompt | None = None,
    earlier_tasks: Sequence[Task] = (),
) -> tuple[list[Task], dict[str, float]]:
    """Phase `phase`'s proposed tasks and metrics; saves the curriculum state into `phase_dir`.

    The state comes from `previous_dir`; without one (the first curriculum phase) the seen set starts
    from `first_tasks`, the training tasks of phase 0. `earlier_tasks` (every earlier phase's tasks as
    stored) are marked seen as well: the tasks a phase was topped up with are chosen after its state is
    saved, so only the stored task lists keep them from being proposed again. `held_out` are the tasks
    whose intents no proposed task and whose facts no page-fact task may ask (the evaluation's).
    `critic_prompt(task, html)` is the critic's input for a task on its start page (`start_page_prompt`);
    None keeps `Curriculum`'s default.
    """
    state = CurriculumState.load(previous_dir) if (previous_dir / STATE_FILE).exists() else None
    curriculum = Curriculum(
        config,
        generator_engine=generator,
        generator_tokenizer=getattr(generator, "tokenizer", None),
        reinstantiate=reinstantiate,
        start_observation=start_observation,
        critic_prompt=critic_prompt,
        state=state,
        held_out=HeldOutFacts(held_out),
    )
    if state is None:
        curriculum.register_tasks(first_tasks)
    curriculum.register_tasks(earlier_tasks)
    result = curriculum.propose(phase, previous_labelled, critic=critic)
    curriculum.state.save(phase_dir)
    return result.tasks, result.metrics


def propose_phase_tasks(
    config: CurriculumConfig,
    phase: int,
    layout: RunLayout,
    *,
    generator: Callable[[], InferenceEngine],
    pool: Sequence[Task],
    reinstantiate: Reinstantiate | None,
    start_observation: Callable[[Task], str] | None,
    critic: Callable[[], Critic] | None,
    seed: int,
    held_out: Sequence[Task] = (),
    resolve: Callable[[list[Task]], list[Task]],
    critic_prompt: CriticPrompt | None = None,
) -> tuple[list[Task], dict[str, float]]:
    """Phase `phase`'s tasks (phase 1 on) and metrics: proposed from phase `phase - 1`'s run, topped up from `pool`.

    `generator` and `critic` build the generator engine and the critic's scorer (None: no critic trained
    yet); the generator is built only when the curriculum's mode or judge needs one, loading a model
    costs seconds to minutes. `critic_prompt` is what the critic scores a task by (`start_page_prompt` of
    the rollouts' prompt builder, so the critic sees the prompt form it was trained on). `pool` is the
    whole training split, `seed` the top-up's, `held_out` the tasks no proposed task may ask.
    `resolve` points the stored phase tasks at this launch's sites (`WebEnvironment.resolve`); the previous
    phase's trajectories get those task records (`with_stored_tasks`). Every earlier phase's tasks count as
    seen, by the proposal and the top-up alike; a phase left short of `tasks_per_phase` is logged as a warning.
    """
    engine = generator() if needs_generator(config) else None
    earlier = [task for index in range(phase) for task in layout.tasks(index)]
    tasks, metrics = phase_tasks(
        config,
        phase,
        previous_dir=layout.phase_dir(phase - 1),
        phase_dir=layout.phase_dir(phase),
        first_tasks=layout.tasks(0),
        previous_labelled=with_stored_tasks(layout.labelled(phase - 1), resolve(layout.tasks(phase - 1))),
        generator=engine,
        reinstantiate=reinstantiate,
        start_observation=start_observation,
        critic=critic() if critic is not None else None,
        held_out=held_out,
        critic_prompt=critic_prompt,
        earlier_tasks=earlier,
    )
    proposed = len(tasks)
    used = {task.intent for task in earlier}
    tasks, skipped = top_up(
        tasks, wanted=config.tasks_per_phase, pool=pool, used=used, seed=seed, max_per_template=config.max_per_template
    )
    metrics = {
        **metrics,
        "curriculum/topped_up": float(len(tasks) - proposed),
        "curriculum/top_up_template_cap": float(skipped),
    }
    _warn_if_short(phase, len(tasks), config.tasks_per_phase, metrics)
    return tasks, metrics


def _warn_if_short(phase: int, size: int, wanted: int, metrics: dict[str, float]) -> None:
    """Log a warning when phase `phase` holds fewer than `wanted` tasks, with the counts that say why.

    A short phase (few failures to grow from, candidates filtered away, the training pool used up) still
    trains, on less than the run asked for, and an empty one trains on nothing: both must show in the log,
    not only in the phase's metrics.
    """
    if size >= wanted:
        return
    log.warning(
        "curriculum phase %d has %d of the %d tasks wanted (curriculum.tasks_per_phase): %d failed seeds, %d "
        "proposed tasks kept, %d topped up from unused training tasks",
        phase,
        size,
        wanted,
        int(metrics.get("curriculum/seeds", 0)),
        int(metrics.get("curriculum/kept", 0)),
        int(metrics.get("curriculum/topped_up", 0)),
    )


def start_page_prompt(prompt_builder: Callable[[Task, Sequence[Step], str], str]) -> CriticPrompt:
    """The critic's input for a task: its first step's state, with the prompt `prompt_builder` gives that step on
    the start page.

    Pass the builder the phase's rollouts record their prompts with (`WebEnvironment.actor_prompt_builder` of
    the rollout engine). The critic is trained on those recorded prompts and judges a task only in their
    form: for an actor with a chat template (SmolLM2) that is the chat form, where the completion form of
    `Curriculum`'s default gives values that say nothing about the task. The state keeps the page apart from
    the prompt, so that `CriticModule.values` cuts a page too long for `model.max_length` as critic training
    cuts it; a prompt alone could only be cut from the left, losing the instruction.
    """

    def state(task: Task, html: str) -> StepSample:
        return _first_state(task, prompt_builder(task, [], html), html)

    return state


def _first_state(task: Task, prompt: str, html: str) -> StepSample:
    """`task`'s first state as a training sample holds one: `prompt` on the page `html`, no history yet.

    Only the state's own fields are read (`StepTokenizer.fit_state`); no action has been taken, so the next
    state, the action and the returns are left empty.
    """
    return StepSample(
        task_id=task.task_id,
        intent=task.intent,
        trajectory_id="",
        phase=0,
        step_index=0,
        num_steps=0,
        prompt=prompt,
        next_prompt="",
        action="",
        history=[],
        html=html,
        next_html="",
        reward=0.0,
        mc_return=0.0,
        done=False,
        trajectory_reward=0.0,
    )
