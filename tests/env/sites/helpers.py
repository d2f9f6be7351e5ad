"""Task selections, test policies and the driver call shared by the embedded-sites tests."""

from __future__ import annotations

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Task, Trajectory
from webrl.env.limits import EpisodeLimits
from webrl.env.sites import respond
from webrl.env.sites.templates import plan_for, template_of
from webrl.env.sites.templates.base import base_view
from webrl.env.tasks import load_tasks
from webrl.inference.rollout import collect_rollouts
from webrl.inference.scripted import ScriptedEngine

# Generous per-action limits: the 2 cores are shared, and a slow step must not read as a failed task.
LIMITS = EpisodeLimits(action_timeout_s=30.0)


def one_per_template(tasks: list[Task]) -> list[Task]:
    """The first task of every template, in template order."""
    first: dict[int, Task] = {}
    for task in tasks:
        first.setdefault(task.intent_template_id, task)
    return [first[k] for k in sorted(first)]


def _answers(task: Task) -> list[str]:
    refs = (task.eval or {}).get("reference_answers") or {}
    values = [refs["exact_match"]] if "exact_match" in refs else refs.get("must_include", [])
    return [v.lower() for v in values]


def sibling(task: Task, url_map: dict[str, str]) -> Task | None:
    """A task of the same template, same start page, whose solution must fail `task`'s evaluator.

    Its values differ, its evaluator differs, and none of `task`'s reference answers is contained
    in the sibling's (so answering the sibling's question cannot pass `task`'s string check).
    None when the template has no such instantiation (e.g. one value per start page).
    """
    template = template_of(task)
    mine = _answers(task)
    for values, block in template.instances(base_view()):
        if values == task.instantiation_dict or block == task.eval:
            continue
        other = template.task(f"sibling-of-{task.task_id}", values, block)
        if other.start_url != template.start_template.format(**task.instantiation_dict):
            continue
        theirs = _answers(other)
        if any(m in t for m in mine for t in theirs):
            continue
        return load_tasks([other.to_dict()], url_map)[0]
    return None


def sibling_solver(url_map: dict[str, str]) -> ScriptedEngine:
    """A test policy that solves another instantiation of each task's template: a wrong solution."""
    siblings: dict[str, Task] = {}

    def policy(task: Task, history: list[str], html: str) -> str:
        if task.task_id not in siblings:
            other = sibling(task, url_map)
            if other is None:
                raise ValueError(f"task {task.task_id}: no sibling instantiation")
            siblings[task.task_id] = other
        other = siblings[task.task_id]
        return respond(other, plan_for(other), history, html)

    return ScriptedEngine(policy)


async def run_engine(engine: ScriptedEngine, tasks: list[Task], backend, pool) -> list[Trajectory]:
    """Episodes of `engine` on `tasks` through the rollout driver, completion-form prompts, generous limits."""
    result = await collect_rollouts(
        engine,
        tasks,
        backend,
        pool,
        concurrency=6,
        prompt_builder=engine.wrap(actor_prompt_for_step),
        limits=LIMITS,
        progress=False,
    )
    return result.trajectories
