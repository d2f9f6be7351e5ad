"""WebEnvironment: which tasks a suite holds, how its settings reach the driver, and resumable episodes.

The suites are the shipped embedded ones (no server needed to list them); the episodes run the
reference solver on two embedded tasks in a real Chromium against the real sites server.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from webrl.config import load_config
from webrl.data.atomic_io import write_json_atomic
from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Task, read_trajectories
from webrl.env.limits import EpisodeLimits
from webrl.env.splits import VALIDATION_SIZE
from webrl.inference.rollout import RolloutResult
from webrl.inference.scripted import ScriptedEngine
from webrl.loop_config import WebRLConfig
from webrl.run_layout import RunLayout
from webrl.web_environment import WebEnvironment

pytestmark = pytest.mark.timeout(300)
EPISODE_TASKS = ("0", "15")
"""Two train tasks the reference solver is known to solve (as in tests/test_orm_data.py)."""


def _environment(*overrides: str) -> WebEnvironment:
    return WebEnvironment(load_config(WebRLConfig, list(overrides)))


class PatientEnvironment(WebEnvironment):
    """Generous per-action limits: the 2 cores are shared, and a slow step must not read as a failed episode."""

    def limits(self) -> EpisodeLimits:
        return EpisodeLimits(max_steps=self.config.env.max_steps, action_timeout_s=30.0, reset_timeout_s=120.0)


def _ids(tasks: list[Task]) -> list[str]:
    return [task.task_id for task in tasks]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("web_environment")
    overrides = [f"output_dir={root}", "env.max_steps=10", "rollout.concurrency=2"]
    with PatientEnvironment(load_config(WebRLConfig, overrides)) as environment:
        yield environment


def test_a_limited_suite_is_a_seeded_sample_in_task_id_order(env: WebEnvironment):
    train = env.suite("train", 0, 0)
    sample = env.suite("train", 5, 3)
    assert len(sample) == 5 and set(_ids(sample)) <= set(_ids(train))
    assert _ids(sample) == sorted(_ids(sample))
    assert _ids(env.suite("train", 5, 3)) == _ids(sample)
    assert _ids(env.suite("train", 5, 4)) != _ids(sample)
    assert _ids(env.suite("train", len(train) + 10, 3)) == _ids(train), "a limit above the suite's size takes all"


def test_train_fit_and_validation_partition_train(env: WebEnvironment):
    train, fit, validation = (set(_ids(env.suite(split, 0, 0))) for split in ("train", "train_fit", "validation"))
    assert len(validation) == VALIDATION_SIZE
    assert fit.isdisjoint(validation)
    assert fit | validation == train
    assert train.isdisjoint(_ids(env.suite("test", 0, 0)))


def test_sampling_follows_the_rollout_or_the_evaluation_settings():
    env = _environment("rollout.temperature=0.7", "rollout.top_p=0.9", "rollout.eval_temperature=0.0")
    rollout, evaluation = env.sampling(evaluation=False, seed=5), env.sampling(evaluation=True, seed=6)
    assert (rollout.temperature, rollout.top_p, rollout.seed) == (0.7, 0.9, 5)
    assert (evaluation.temperature, evaluation.top_p, evaluation.seed) == (0.0, 1.0, 6)
    assert rollout.max_tokens == evaluation.max_tokens == env.config.rollout.max_tokens


def test_episode_settings_come_from_the_env_and_rollout_sections():
    env = _environment("env.max_steps=7", "env.html_chars=1234", "env.observe_region=viewport", "rollout.concurrency=3")
    assert env.limits().max_steps == 7
    assert env.observation_config().max_chars == 1234
    assert env.observation_config().region == "viewport"
    assert _environment().observation_config().region == "from_viewport"
    assert env.browser_config().max_concurrency == 3
    assert env.browser_config(concurrency=2).max_concurrency == 2
    assert not env.browser_config().reuse_contexts
    assert _environment("env.reuse_contexts=true").browser_config().reuse_contexts


def test_the_env_episode_limits_reach_the_rollouts_and_evaluations(monkeypatch, tmp_path):
    """`env.max_repeated_actions`, `env.max_parse_failures` and `env.episode_timeout_s` are the limits that the rollout
    driver gets, for training rollouts and evaluations alike; left out, they are the values once fixed in code."""
    used: list[EpisodeLimits] = []

    class NoBrowser:
        def __init__(self, config: object) -> None:
            pass

        async def __aenter__(self) -> NoBrowser:
            return self

        async def __aexit__(self, *exc: object) -> None:
            pass

    async def record_limits(engine, tasks, backend, pool, **options) -> RolloutResult:
        used.append(options["limits"])
        return RolloutResult([])

    monkeypatch.setattr("webrl.web_environment.BrowserPool", NoBrowser)
    monkeypatch.setattr("webrl.web_environment.collect_rollouts", record_limits)
    overrides = ["env.max_repeated_actions=3", "env.max_parse_failures=2", "env.episode_timeout_s=900"]
    env = _environment("env.max_steps=7", *overrides)
    task = Task(task_id="t", intent="Find the price", sites=["shopping"], start_url="")
    for evaluation in (False, True):
        out = tmp_path / f"episodes-{evaluation}.jsonl"
        env.run_episodes(ScriptedEngine.exit_at_once(), [task], out, phase=1, evaluation=evaluation, seed=0)
    wanted = EpisodeLimits(max_steps=7, max_repeated_actions=3, max_parse_failures=2, episode_timeout_s=900.0)
    assert used == [wanted, wanted]
    assert _environment("env.max_steps=7").limits() == EpisodeLimits(max_steps=7)


def test_an_engine_without_a_chat_template_gets_the_completion_form():
    task = Task(task_id="t", intent="Find the price", sites=["shopping"], start_url="")
    build = WebEnvironment.actor_prompt_builder(ScriptedEngine.exit_at_once())
    assert build(task, [], "<p>hi</p>") == actor_prompt_for_step(task, [], "<p>hi</p>", chat_template_tokenizer=None)


def test_run_episodes_resumes_from_its_file_and_returns_task_order(env: WebEnvironment):
    """The first call runs task 15 alone; the second is asked for [15, 0] and runs only 0; the third runs nothing."""
    first, second = (t for t in env.suite("train", 0, 0) if t.task_id in EPISODE_TASKS)
    assert (first.task_id, second.task_id) == EPISODE_TASKS
    out = Path(env.config.output_dir) / "episodes.jsonl"
    solver = ScriptedEngine.for_embedded_sites()
    done, metrics = env.run_episodes(solver, [second], out, phase=2, evaluation=True, seed=0, progress=False)
    assert [(t.task.task_id, t.eval_reward, t.phase) for t in done] == [("15", 1.0, 2)]
    assert metrics, "a call that ran episodes reports their metrics"
    both, _ = env.run_episodes(solver, [second, first], out, phase=2, evaluation=True, seed=0, progress=False)
    assert [(t.task.task_id, t.eval_reward) for t in both] == [("15", 1.0), ("0", 1.0)]
    assert both[0].to_dict() == done[0].to_dict(), "the finished episode is read back, not run again"
    assert sorted(_ids([t.task for t in read_trajectories(out)])) == ["0", "15"]
    # Every task is in the file: nothing runs, so an engine that would fail every task changes nothing.
    again, metrics = env.run_episodes(
        ScriptedEngine.exit_at_once(), [first, second], out, phase=2, evaluation=True, seed=0, progress=False
    )
    assert [t.to_dict() for t in again] == [both[1].to_dict(), both[0].to_dict()]
    assert metrics == {}
    assert len(read_trajectories(out)) == 2


def test_a_start_page_is_cut_as_the_runs_episodes_cut_it(env: WebEnvironment):
    """The curriculum's critic filter and page-fact check read start pages as the run's episodes see them."""
    task = next(t for t in env.suite("train", 0, 0) if t.task_id == EPISODE_TASKS[0])
    whole = env.start_observation(task)
    env.config.env.html_chars = 120
    try:
        cut = env.start_observation(task)
    finally:
        env.config.env.html_chars = WebRLConfig().env.html_chars
    assert len(whole) > 200 and len(cut) < 200 and cut[:60] == whole[:60], (len(whole), cut)


def test_a_phases_stored_tasks_follow_the_sites_to_the_next_launchs_port(tmp_path):
    """A resume starts another sites server on another port: stored tasks must not point at the old one."""
    config = load_config(WebRLConfig, [])
    layout = RunLayout(tmp_path / "run")
    with WebEnvironment(config) as first:
        write_json_atomic(layout.tasks_path(0), first.portable(first.suite("train", 3, 0)))
    stored = layout.tasks_path(0).read_text(encoding="utf-8")
    assert "127.0.0.1" not in stored and "__" in stored, stored[:400]
    with WebEnvironment(config) as second:
        resolved = second.resolve(layout.tasks(0))
        assert [task.to_dict() for task in resolved] == [task.to_dict() for task in second.suite("train", 3, 0)]
        with urllib.request.urlopen(resolved[0].start_url, timeout=60) as response:
            assert response.status == 200


def test_held_out_tasks_are_every_split_training_does_not_draw_from(env: WebEnvironment):
    def held_out(*overrides: str) -> list[str]:
        with _environment(*overrides) as environment:
            return sorted(_ids(environment.held_out_tasks()))

    test, validation = (_ids(env.suite(split, 0, 0)) for split in ("test", "validation"))
    assert held_out("env.train_split=train", "env.test_split=test") == sorted(test)
    assert held_out("env.train_split=train_fit", "env.test_split=validation") == sorted(test + validation)
    assert held_out("env.train_split=train_fit", "env.test_split=test") == sorted(test + validation)


@pytest.mark.parametrize("keys", [("SHOPPING", "SHOPPING_ADMIN"), ("shopping", "shopping_admin")])
def test_stored_tasks_of_a_url_map_keyed_by_bare_site_names_come_back_unchanged(keys):
    """README lets env.url_map say `SHOPPING` for `__SHOPPING__`: a stored task must still keep placeholders, so that
    resolving it touches neither `SHOPPING_ADMIN` nor a word of the intent."""
    config = load_config(WebRLConfig, [])
    config.env.url_map = {keys[0]: "http://h:7770", keys[1]: "http://h:7780/admin/"}
    environment = WebEnvironment(config)
    task = Task(
        task_id="1",
        intent="Add the http://h:7770 bag to the SHOPPING cart, then check SHOPPING_ADMIN and shopping_admin",
        sites=["shopping_admin", "shopping"],
        start_url="http://h:7780/admin/dashboard",
        eval={"eval_types": ["url_match"], "reference_url": "http://h:7770/checkout"},
    )
    (record,) = environment.portable([task])
    assert record["start_url"] == "__SHOPPING_ADMIN__/dashboard"
    assert record["intent"].startswith("Add the __SHOPPING__ bag to the SHOPPING cart")
    (resolved,) = environment.resolve([Task.from_dict(record)])
    assert resolved.to_dict() == task.to_dict()
