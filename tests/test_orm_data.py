"""The ORM's data sources in a real Chromium on the embedded sites, labelled by the tasks' evaluators.

Five hand-picked train tasks whose answers are known: 0 "What is the price of Walnut Skillet?" ($105.25,
must_include), 15 "How many reviews does Amber Charger have?" (5, exact_match), 51 "Open the product
page of Slate Dumbbell." (url_match), 72 "Add Amber Yoga Mat to my cart." and 168 "Set the price of
Slate Towel to $243.99." (program_html). Episodes run through `WebEnvironment.run_episodes`; a label is
checked by replaying the recorded responses in a fresh context of the shared Chromium (tests/conftest.py)
and running the evaluator again on the state and answer they reach.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from pathlib import Path

import pytest
from lightning.fabric import Fabric

from webrl.config import load_config
from webrl.data.trajectory import Step, Task, Trajectory
from webrl.env.limits import EpisodeLimits
from webrl.inference.scripted import ScriptedEngine
from webrl.loop_config import WebRLConfig
from webrl.orm_data import (
    SOURCE_KEY,
    ORMDataBuilder,
    balance,
    final_answer,
    fresh_variants,
    source_counts,
    truncated_responses,
    wrong_answer_responses,
)
from webrl.starting_models import collect_demonstrations, orm_data_dir, orm_dir, orm_training_pairs
from webrl.web_environment import WebEnvironment

pytestmark = pytest.mark.timeout(900)
TASK_IDS = ("0", "15", "51", "72", "168")


class PatientEnvironment(WebEnvironment):
    """The run's environment with generous per-action limits: the 2 cores are shared, and a slow step must
    not read as a failed episode (as in tests/env/sites/helpers.py)."""

    def limits(self) -> EpisodeLimits:
        return EpisodeLimits(max_steps=self.config.env.max_steps, action_timeout_s=30.0, reset_timeout_s=120.0)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("orm_data")
    overrides = [f"output_dir={root / 'run'}", f"model.cache_dir={root / 'cache'}", "env.max_steps=10"]
    with PatientEnvironment(load_config(WebRLConfig, overrides)) as environment:
        yield environment


@pytest.fixture(scope="module")
def tasks(env: WebEnvironment) -> list[Task]:
    return [t for t in env.suite("train", 0, 0) if t.task_id in TASK_IDS]


@pytest.fixture(scope="module")
def demonstrations(env: WebEnvironment, tasks: list[Task]) -> list[Trajectory]:
    path = Path(env.config.output_dir) / "demos.jsonl"
    demos, _ = _episodes(env, ScriptedEngine.for_embedded_sites(), tasks, path)
    assert [t.eval_reward for t in demos] == [1.0] * len(TASK_IDS), "the reference solver solves the known tasks"
    return demos


def _episodes(env: WebEnvironment, engine, tasks: list[Task], path: Path):
    return env.run_episodes(engine, tasks, path, phase=-1, evaluation=True, seed=0, concurrency=5, progress=False)


def _responses(trajectory: Trajectory) -> list[str]:
    return [step.response for step in trajectory.steps]


def _re_evaluate(run, pool, env: WebEnvironment, trajectory: Trajectory) -> float | None:
    """The evaluator's verdict on the state and answer that replaying `trajectory`'s responses reaches."""

    async def replay() -> float | None:
        async with pool.episode(trajectory.task, env.backend, env.limits(), env.observation_config()) as episode:
            await episode.reset()
            for response in _responses(trajectory):
                await episode.step(response)
            assert episode.trajectory.status == trajectory.status, trajectory.task.task_id
            return await episode.evaluate()

    return run(replay())


def test_noise_zero_reproduces_the_reference_solver(env, tasks, demonstrations):
    path = Path(env.config.output_dir) / "noise0.jsonl"
    noisy, _ = _episodes(env, ScriptedEngine.noisy_embedded_sites(0.0, 0.0, seed=5), tasks, path)
    assert [t.eval_reward for t in noisy] == [1.0] * len(TASK_IDS)
    assert [_responses(t) for t in noisy] == [_responses(t) for t in demonstrations]


def test_noisy_labels_are_the_evaluators_verdicts_and_the_seed_fixes_the_episodes(env, tasks, run, pool):
    solver = ScriptedEngine.noisy_embedded_sites(0.5, 0.5, seed=0)
    noisy, _ = _episodes(env, solver, tasks, Path(env.config.output_dir) / "noise50-a.jsonl")
    labels = [t.eval_reward for t in noisy]
    assert {0.0, 1.0} <= set(labels), f"noise 0.5 should give both outcomes here: {labels}"
    assert labels == [_re_evaluate(run, pool, env, t) for t in noisy]
    again, _ = _episodes(env, solver, tasks, Path(env.config.output_dir) / "noise50-b.jsonl")
    assert [_responses(t) for t in again] == [_responses(t) for t in noisy]
    other = ScriptedEngine.noisy_embedded_sites(0.5, 0.5, seed=1)
    reseeded, _ = _episodes(env, other, tasks, Path(env.config.output_dir) / "noise50-c.jsonl")
    assert [_responses(t) for t in reseeded] != [_responses(t) for t in noisy]


def test_variants_of_known_demonstrations(demonstrations):
    demos = {t.task.task_id: t for t in demonstrations}
    assert final_answer(demos["0"]) == "$105.25" and final_answer(demos["51"]) == ""
    price = _responses(demos["0"])
    assert truncated_responses(demos["0"]) == [price[0], 'exit(message="")']  # on the result page, no answer
    product_page = _responses(demos["51"])
    assert len(product_page) == 3 and truncated_responses(demos["51"]) == [product_page[0], 'exit(message="")']
    answers = {101: ["$105.25", "$12.00"]}
    wrong = {wrong_answer_responses(demos["0"], answers, random.Random(s))[-1] for s in range(10)}
    assert 'exit(message="$12.00")' in wrong and len(wrong) > 2 and 'exit(message="$105.25")' not in wrong
    assert wrong_answer_responses(demos["51"], answers, random.Random(0)) is None


def test_truncated_and_wrong_answer_variants_score_zero(env, demonstrations, run, pool):
    builder = ORMDataBuilder(env.config, Fabric(accelerator="cpu", devices=1), env, _data_dir(env))
    variants = builder.hard_negatives(demonstrations)
    made = sorted((t.metadata[SOURCE_KEY], t.task.task_id) for t in variants)
    truncated = [("truncated", i) for i in sorted(TASK_IDS)]
    assert made == sorted([*truncated, ("wrong_answer", "0"), ("wrong_answer", "15")])
    assert [t.eval_reward for t in variants] == [0.0] * len(variants)
    assert all(t.status == "exit" for t in variants)
    answer = next(t for t in variants if t.metadata[SOURCE_KEY] == "wrong_answer" and t.task.task_id == "15")
    assert final_answer(answer) != "5" and _re_evaluate(run, pool, env, answer) == 0.0


def test_the_builder_balances_its_sources_and_counts_them(env, tasks, demonstrations):
    config = copy.deepcopy(env.config)
    config.orm.data.solver_noise = [0.5]
    config.orm.data.solver_tasks = len(TASK_IDS)
    builder = ORMDataBuilder(config, Fabric(accelerator="cpu", devices=1), env, _data_dir(env))
    kept, counts = builder.build(None, demonstrations)
    assert set(counts) == {"demonstrations", "solver_noise_0.5", "truncated", "wrong_answer"}
    assert counts["demonstrations"]["positives"] == 5 and counts["demonstrations"]["negatives"] == 0
    assert (counts["truncated"]["negatives"], counts["wrong_answer"]["negatives"]) == (5, 2)
    solver = counts["solver_noise_0.5"]
    assert solver["positives"] + solver["negatives"] + solver["unlabelled"] == 5
    kept_pos = sum(row["kept_positives"] for row in counts.values())
    kept_neg = sum(row["kept_negatives"] for row in counts.values())
    assert kept_pos == kept_neg == min(5 + solver["positives"], 7 + solver["negatives"]) == len(kept) // 2


def _data_dir(env: WebEnvironment) -> Path:
    return Path(env.config.output_dir) / "orm-data"


def _labelled(source: str, outcomes: list[float | None]) -> list[Trajectory]:
    out = []
    for i, outcome in enumerate(outcomes):
        task = Task(task_id=f"{source}-{i}", intent=f"{source} {i}?", sites=["shopping"], start_url="")
        steps = [Step(index=0, prompt="", observation="", response='exit(message="")')]
        out.append(Trajectory(task=task, steps=steps, eval_reward=outcome, metadata={SOURCE_KEY: source}))
    return out


@pytest.mark.parametrize(("fraction", "positives", "negatives"), [(0.5, 12, 12), (0.25, 4, 12), (0.75, 30, 10)])
def test_balance_gives_the_requested_share_of_positives(fraction, positives, negatives):
    made = _labelled("a", [1.0] * 20 + [0.0] * 4 + [None] * 3) + _labelled("b", [1.0] * 10 + [0.0] * 8)
    kept = balance(made, fraction, seed=0)
    assert sum(t.eval_reward == 1.0 for t in kept) == positives
    assert sum(t.eval_reward == 0.0 for t in kept) == negatives
    assert balance(made, fraction, seed=0) == kept
    counts = source_counts(made, kept)
    assert (counts["a"]["positives"], counts["a"]["negatives"], counts["a"]["unlabelled"]) == (20, 4, 3)
    assert counts["b"]["kept_negatives"] + counts["a"]["kept_negatives"] == negatives


def test_balance_counts_an_episode_repeated_by_another_source_once():
    """The noisy solver without a detour and an actor replaying its demonstration repeat it word for word."""
    demonstrations = _labelled("demonstrations", [1.0] * 4)
    repeats = [dataclasses.replace(t, metadata={SOURCE_KEY: "solver_noise_0.1"}) for t in demonstrations[:3]]
    made = demonstrations + repeats + _labelled("hard_negatives", [0.0] * 4)
    kept = balance(made, 0.5, seed=0)
    assert sorted(t.task.task_id for t in kept if t.eval_reward == 1.0) == [f"demonstrations-{i}" for i in range(4)]
    counts = source_counts(made, kept)
    assert counts["solver_noise_0.1"]["positives"] == 3 and counts["solver_noise_0.1"]["kept_positives"] == 0


def test_an_episode_scored_0_because_its_evaluator_could_not_run_is_no_orm_negative():
    """Its 0 keeps the task in the success rates; it says nothing of the agent, so the ORM data leave it out."""
    made = _labelled("a", [1.0, 1.0, 0.0, 0.0])
    broken = _labelled("a", [0.0])[0]
    broken.status, broken.metadata["eval_error"] = "error", "EvaluationError: no helper for func:get_order_url"
    made.append(dataclasses.replace(broken, task=dataclasses.replace(broken.task, task_id="a-broken")))
    kept = balance(made, 0.5, seed=0)
    assert sorted(t.task.task_id for t in kept) == ["a-0", "a-1", "a-2", "a-3"]
    assert source_counts(made, kept)["a"] == {
        "positives": 2,
        "negatives": 2,
        "unlabelled": 1,
        "kept_positives": 2,
        "kept_negatives": 2,
    }
    assert [label for _, label in orm_training_pairs(made, None)] == [1.0, 1.0, 0.0, 0.0]


def test_balance_needs_both_classes():
    with pytest.raises(ValueError, match="both classes: 3 successes, 0 failures"):
        balance(_labelled("a", [1.0, 1.0, 1.0, None]), 0.5, seed=0)


def test_the_orm_cache_dir_changes_with_its_data_settings():
    def key(**data) -> Path:
        config = WebRLConfig()
        for name, value in data.items():
            setattr(config.orm.data, name, value)
        return orm_dir(config, Path("/models/sft"))

    plain = key()
    assert key() == plain
    changed = [
        key(solver_noise=[0.2]),
        key(solver_answer_noise=0.0),
        key(truncated=False),
        key(wrong_answer=False),
        key(positive_fraction=0.4),
        key(hard_negative_tasks=16),
        key(actor_rollouts=False),
        key(actor_variants=1),
    ]
    assert len({plain, *changed}) == len(changed) + 1

    def built(section: str, name: str, value: object) -> tuple[Path, Path]:
        config = WebRLConfig()
        setattr(getattr(config, section), name, value)
        return orm_dir(config, Path("/models/sft")), orm_data_dir(config, Path("/models/sft"))

    base = built("rollout", "top_p", WebRLConfig().rollout.top_p)
    # The actor's rollouts are sampled with these: another value is other data, and another ORM.
    for section, name, value in (("rollout", "top_p", 1.0), ("rollout", "max_tokens", 64)):
        assert all(a != b for a, b in zip(built(section, name, value), base, strict=True)), name
    # The ORM cuts its training prompts to the token limit; its data is the same episodes.
    limit = built("model", "max_length", 512)
    assert limit[0] != base[0] and limit[1] == base[1]


def test_fresh_variants_never_repeat_a_train_validation_or_test_tasks_values():
    from webrl.env.splits import TRAIN_FIT, load_split, reinstantiate_for

    def values(tasks: list[Task]) -> set[tuple]:
        return {(t.intent_template_id, repr(sorted(t.instantiation_dict.items()))) for t in tasks}

    train, validation, test = load_split(TRAIN_FIT), load_split("validation"), load_split("test")
    seeds = random.Random(0).sample(train, 40)
    draw = lambda task, rng, n: reinstantiate_for(TRAIN_FIT, task, rng, n, {})  # noqa: E731
    variants = fresh_variants(seeds, draw, 2, seed=5, known=train)
    assert 40 <= len(variants) <= 80
    assert len(values(variants)) == len(variants) == len({t.task_id for t in variants})
    assert not values(variants) & (values(train) | values(validation) | values(test))
    assert {t.intent_template_id for t in variants} <= {t.intent_template_id for t in seeds}
    assert [t.task_id for t in fresh_variants(seeds, draw, 2, seed=5, known=train)] == [t.task_id for t in variants]


def test_cached_demonstrations_start_at_this_launchs_sites(env, tmp_path):
    # Collected in one launch of the sites (module fixture `env`), read and replayed as hard negatives in
    # another, whose server took another port: every variant must reach the sites and get a verdict.
    path = tmp_path / "demos.jsonl"
    first = collect_demonstrations(env, path, limit=3, concurrency=3, progress=False)
    second_config = copy.deepcopy(env.config)
    second_config.output_dir = str(tmp_path / "second")
    with PatientEnvironment(second_config) as second:
        assert second.url_map != env.url_map
        cached = collect_demonstrations(second, path, limit=3, concurrency=3, progress=False)
        assert [t.task.task_id for t in cached] == [t.task.task_id for t in first]
        here = {t.task_id: t.start_url for t in second.suite(second_config.env.train_split, 0, second_config.seed)}
        assert all(t.task.start_url == here[t.task.task_id] for t in cached)
        builder = ORMDataBuilder(second_config, Fabric(accelerator="cpu", devices=1), second, tmp_path / "orm-data")
        variants = builder.hard_negatives(cached)
    assert variants and all(t.eval_reward is not None and not t.infra_error for t in variants)
