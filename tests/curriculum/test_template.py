"""Template mode on the embedded sites: re-instantiated failures keep complete evaluators and are solvable.

The fast checks use the shipped task suites only; the browser test starts the real sites server and
Chromium, reads each start page through a real episode (the critic's input), scores it with a real
`CriticModule` on a tiny model, and has the reference solver solve every kept task.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from sample_records import URL_MAP

from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.curriculum import Curriculum
from webrl.data.prompts import actor_prompt_for_step, build_actor_prompt
from webrl.data.trajectory import Task, Trajectory
from webrl.env.sites import load_suite, reinstantiate
from webrl.inference.engine import Completion


def failures(train: list[Task], per_site: int) -> list[Trajectory]:
    """`per_site` failed tasks of distinct templates on every site."""
    chosen: dict[str, dict[int, Task]] = {}
    for task in train:
        templates = chosen.setdefault(task.site, {})
        if len(templates) < per_site:
            templates.setdefault(task.intent_template_id, task)
    return [Trajectory(task=t, outcome=0.0) for by_template in chosen.values() for t in by_template.values()]


def assert_complete_evaluator(task: Task) -> None:
    kinds = task.eval["eval_types"]
    assert kinds and set(kinds) <= {"string_match", "url_match", "program_html"}, task.task_id
    if "string_match" in kinds:
        assert any(task.eval["reference_answers"].values()), task.task_id
    if "url_match" in kinds:
        assert task.eval["reference_url"].startswith("http"), task.task_id
    if "program_html" in kinds:
        targets = task.eval["program_html"]
        assert targets and all(t["url"] and any(t["required_contents"].values()) for t in targets), task.task_id


def test_template_mode_gives_new_instantiations_with_their_evaluators():
    train = load_suite("train", URL_MAP)
    test_intents = {t.intent for t in load_suite("test", URL_MAP)}
    trajectories = failures(train, per_site=2)
    seeds = {t.task.task_id: t.task for t in trajectories}
    config = CurriculumConfig(mode="template", tasks_per_phase=10, variants_per_seed=2, seed=4)
    curriculum = Curriculum(config, reinstantiate=reinstantiate)
    curriculum.register_tasks(train)
    result = curriculum.propose(1, trajectories)
    assert len(result.tasks) == 10
    assert sorted(t.site for t in result.tasks) == sorted(["shopping", "shopping_admin", "reddit", "gitlab", "map"] * 2)
    for task in result.tasks:
        seed = seeds[task.extra["curriculum"]["source"]]
        assert task.extra["curriculum"]["origin"] == "template"
        assert task.extra["curriculum"]["template_task_id"].startswith(f"re-{seed.intent_template_id}-")
        assert task.intent_template_id == seed.intent_template_id
        assert task.instantiation_dict != seed.instantiation_dict
        assert task.intent not in {t.intent for t in train} | test_intents
        assert task.start_url.startswith("http://127.0.0.1:9/")
        assert_complete_evaluator(task)
    assert result.metrics["curriculum/generated"] == 2 * len(seeds)

    again = Curriculum(config, reinstantiate=reinstantiate)
    again.register_tasks(train)
    assert [t.to_dict() for t in again.propose(1, trajectories).tasks] == [t.to_dict() for t in result.tasks]


def test_mixed_mode_pools_llm_and_template_candidates():
    class OneTaskPerCall:
        """TEST DOUBLE of the engine protocol: one fixed new task per site prompt."""

        def generate(self, prompts, params):
            return [Completion(f"- `Show the newest item on site number {i} please`", []) for i in range(len(prompts))]

        def close(self):
            pass

    train = load_suite("train", URL_MAP)
    config = CurriculumConfig(mode="mixed", tasks_per_phase=100, variants_per_seed=1, generation_turns=1)
    curriculum = Curriculum(config, generator_engine=OneTaskPerCall(), reinstantiate=reinstantiate)
    result = curriculum.propose(1, failures(train, per_site=1))
    origins = [t.extra["curriculum"]["origin"] for t in result.tasks]
    assert origins.count("template") == 5 and origins.count("llm") == 5
    for task in result.tasks:
        assert task.has_evaluator == (task.extra["curriculum"]["origin"] == "template")


@pytest.mark.timeout(600)
def test_kept_template_tasks_are_solved_in_the_browser_after_a_real_critic_filter(tmp_path):
    from webrl.env.browser import BrowserConfig, BrowserPool
    from webrl.env.limits import EpisodeLimits
    from webrl.env.sites import EmbeddedSites, scorecard
    from webrl.inference.rollout import collect_rollouts
    from webrl.inference.scripted import ScriptedEngine
    from webrl.modules.critic import CriticModule
    from webrl.modules.model_factory import build_tiny_model

    corpus = [build_actor_prompt("Find the price of the mug", [], "<a id='1'> Home </a>")] * 4
    tiny = build_tiny_model(tmp_path / "tiny", corpus, vocab_size=400, hidden_size=64, num_layers=1)
    critic = CriticModule(tiny, max_length=2048)
    loop = asyncio.new_event_loop()
    try:
        with EmbeddedSites() as sites:
            backend = sites.backend()
            pool = BrowserPool(BrowserConfig(max_concurrency=5))
            loop.run_until_complete(pool.start())
            try:

                async def start_page(task: Task) -> str:
                    async with pool.episode(task, backend) as episode:
                        return (await episode.reset()).html

                fetched: list[str] = []

                def start_observation(task: Task) -> str:
                    fetched.append(task.start_url)
                    return loop.run_until_complete(start_page(task))

                config = CurriculumConfig(mode="template", tasks_per_phase=5, value_window=(0.0, 1.0), seed=2)
                curriculum = Curriculum(config, reinstantiate=reinstantiate, start_observation=start_observation)
                result = curriculum.propose(1, failures(load_suite("train", sites.url_map), 1), critic=critic.values)
                assert len(result.tasks) == 5 and len({t.site for t in result.tasks}) == 5
                assert len(fetched) == len(set(fetched))  # each start page is opened once
                for task in result.tasks:
                    html = loop.run_until_complete(start_page(task))
                    assert re.search(r'id="\d+"', html), html[:200]
                    expected = float(critic.values([build_actor_prompt(task.intent, [], html)])[0])
                    assert task.extra["curriculum"]["critic_value"] == pytest.approx(expected, abs=1e-5)
                solver = ScriptedEngine.for_embedded_sites()
                run = collect_rollouts(
                    solver,
                    result.tasks,
                    backend,
                    pool,
                    concurrency=5,
                    prompt_builder=solver.wrap(actor_prompt_for_step),
                    limits=EpisodeLimits(action_timeout_s=30.0),
                    progress=False,
                )
                assert scorecard.failures(loop.run_until_complete(run).trajectories) == []
            finally:
                loop.run_until_complete(pool.close())
    finally:
        loop.close()
