"""The tasks in the real browser: the reference solver solves them, doing nothing or the wrong thing fails.

Every episode runs in real Chromium against the real sites subprocess, scored by the project's
WebArena evaluators. The fast suite uses one task per template; the `slow` tests run every task.
"""

from __future__ import annotations

import random

import pytest

from webrl.env.sites import load_suite, reinstantiate
from webrl.env.sites.scorecard import failures
from webrl.inference.scripted import ScriptedEngine

from .helpers import one_per_template, run_engine, sibling, sibling_solver

pytestmark = pytest.mark.timeout(600)


def test_reference_solver_solves_one_task_per_template(run, pool, sites, backend):
    tasks = one_per_template(load_suite("test", sites.url_map))
    trajectories = run(run_engine(ScriptedEngine.for_embedded_sites(), tasks, backend, pool))
    assert failures(trajectories) == []
    assert len(tasks) == len({t.intent_template_id for t in load_suite("test")})
    trajectory = trajectories[0]
    step = trajectory.steps[0]
    assert step.prompt.startswith(f"Task Instruction: {trajectory.task.intent}") and step.observation in step.prompt
    assert step.action["name"] and step.url == trajectory.task.start_url
    assert trajectory.status == "exit" and trajectory.metadata["blocked_requests"] == 0


def test_exit_at_once_scores_zero_on_every_template(run, pool, sites, backend):
    tasks = one_per_template(load_suite("test", sites.url_map))
    trajectories = run(run_engine(ScriptedEngine.exit_at_once(), tasks, backend, pool))
    assert {t.task.task_id: t.eval_reward for t in trajectories} == {t.task_id: 0.0 for t in tasks}


def test_solving_another_instantiation_fails_the_evaluator(run, pool, sites, backend):
    """Right answers pass (above); here each site's string, url and program_html checks see wrong ones."""
    tasks, covered = [], set()
    for task in one_per_template(load_suite("train", sites.url_map)):
        kinds = {(task.site, e) for e in task.eval["eval_types"]}
        if not kinds <= covered and sibling(task, sites.url_map) is not None:
            tasks.append(task)
            covered |= kinds
    assert {site for site, _ in covered} == {"shopping", "shopping_admin", "reddit", "gitlab", "map"}
    assert {e for _, e in covered} == {"string_match", "url_match", "program_html"}
    trajectories = run(run_engine(sibling_solver(sites.url_map), tasks, backend, pool))
    assert {t.task.task_id: (t.status, t.eval_reward) for t in trajectories} == {
        t.task_id: ("exit", 0.0) for t in tasks
    }


def test_reinstantiated_tasks_are_solved(run, pool, sites, backend):
    seeds = [t for t in one_per_template(load_suite("train", sites.url_map)) if t.intent_template_id % 100 == 5]
    tasks = [new for task in seeds for new in reinstantiate(task, random.Random(7), 2)]
    assert len(tasks) == 2 * len(seeds) == 10
    assert failures(run(run_engine(ScriptedEngine.for_embedded_sites(), tasks, backend, pool))) == []


@pytest.mark.slow
@pytest.mark.timeout(3600)  # hundreds of episodes; on a loaded 2-core machine this takes tens of minutes
@pytest.mark.parametrize("split", ["train", "test"])
def test_reference_solver_solves_every_task(run, pool, sites, backend, split):
    tasks = load_suite(split, sites.url_map)
    trajectories = run(run_engine(ScriptedEngine.for_embedded_sites(), tasks, backend, pool))
    assert failures(trajectories) == [] and len(trajectories) == len(tasks)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # hundreds of episodes; on a loaded 2-core machine this takes tens of minutes
@pytest.mark.parametrize("split", ["train", "test"])
def test_exit_at_once_scores_zero_on_every_task(run, pool, sites, backend, split):
    tasks = load_suite(split, sites.url_map)
    trajectories = run(run_engine(ScriptedEngine.exit_at_once(), tasks, backend, pool))
    assert all(t.status == "exit" and t.eval_reward == 0.0 for t in trajectories)
