"""WebEnv through Gymnasium: real sites, real Chromium, the reference solver and Gymnasium's own checker."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import gymnasium
import psutil
import pytest
from gymnasium.utils.env_checker import check_env

import webrl.env  # noqa: F401 - registers the ids
from webrl.env import MiniWoBScriptedPolicy
from webrl.env.sites import EmbeddedSites, ReferenceSolver

TASK_ID = "1000"  # test split: "What is the price of Bamboo Teddy Bear?", answer 139.25


@pytest.fixture(scope="module")
def url_map() -> Iterator[dict[str, str]]:
    """Running sites for every env here; a generous start-up limit, since the 2 cores are shared."""
    with EmbeddedSites(startup_timeout_s=180) as sites:
        yield sites.url_map


@pytest.fixture(scope="module")
def env(url_map: dict[str, str]) -> Iterator[gymnasium.Env]:
    made = gymnasium.make("webrl/embedded-v0", split="test", url_map=url_map)
    yield made
    made.close()


def _descendants() -> dict[int, str]:
    return {p.pid: p.name() for p in psutil.Process().children(recursive=True) if p.is_running()}


def test_ids_are_registered_on_import():
    for suite in ("embedded", "miniwob", "webarena"):
        assert f"webrl/{suite}-v0" in gymnasium.registry


def test_reference_solution_earns_reward_one_at_the_end(env):
    observation, info = env.reset(seed=0, options={"task_id": TASK_ID})
    assert info["intent"] == "What is the price of Bamboo Teddy Bear?"
    assert info["status"] == "running" and info["step"] == 0
    assert "Bamboo Teddy Bear" in info["prompt"] and observation in info["prompt"]
    solver = ReferenceSolver(env.unwrapped.task)
    rewards, terminated, truncated = [], False, False
    while not (terminated or truncated):
        observation, reward, terminated, truncated, info = env.step(solver.act(observation))
        rewards.append(reward)
    assert terminated and not truncated
    assert rewards[-1] == 1.0 and all(r == 0.0 for r in rewards[:-1])
    assert info["status"] == "exit" and info["action"]["name"] == "exit"
    trajectory = info["trajectory"]
    assert trajectory.eval_reward == 1.0 and len(trajectory.steps) == len(rewards)
    assert trajectory.steps[0].prompt and trajectory.task.task_id == TASK_ID


def test_wrong_answer_earns_zero(env):
    env.reset(options={"task_id": TASK_ID})
    _, reward, terminated, truncated, info = env.step('exit(message="$99.99")')
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["trajectory"].eval_reward == 0.0 and info["trajectory"].answer == "$99.99"


def test_unparsable_response_is_a_step_with_an_error(env):
    env.reset(options={"task_id": TASK_ID})
    _, reward, terminated, truncated, info = env.step("click the search box please")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["action"] is None and info["error"].startswith("invalid action")
    assert "click the search box please" in info["prompt"]


def test_unknown_task_id_names_it(env):
    with pytest.raises(ValueError, match="no task 'nope'"):
        env.reset(options={"task_id": "nope"})


def test_gymnasium_check_env_passes(env):
    check_env(env.unwrapped, skip_render_check=True)


def test_gymnasium_check_env_passes_on_miniwob():
    env = gymnasium.make("webrl/miniwob-v0", miniwob=["click-button", "enter-text"])
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_max_steps_truncates_and_close_leaves_no_process(url_map):
    before = _descendants()
    env = gymnasium.make("webrl/embedded-v0", split="test", url_map=url_map, max_steps=2)
    env.reset(options={"task_id": TASK_ID})
    started = set(_descendants()) - set(before)
    assert any("chrom" in name for pid, name in _descendants().items() if pid in started)
    _, _, terminated, truncated, _ = env.step('do(action="Wait")')
    assert not (terminated or truncated)
    _, reward, terminated, truncated, info = env.step('do(action="Wait")')
    assert (reward, terminated, truncated) == (0.0, False, True) and info["status"] == "max_steps"
    env.close()
    env.close()
    deadline = time.monotonic() + 10
    while set(_descendants()) & started and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(_descendants()) & started, "Chromium or Playwright's driver outlived close()"


def test_webarena_format_configs_run_on_the_sites_they_name(url_map, tmp_path):
    """A WebArena config file of one's own, its `__SHOPPING__` start page served by the embedded storefront."""
    config = {
        "sites": ["shopping"],
        "task_id": 7,
        "require_login": False,
        "storage_state": None,
        "start_url": "__SHOPPING__",
        "intent": "What is the price of Bamboo Teddy Bear?",
        "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["139.25"]}},
    }
    (tmp_path / "7.json").write_text(json.dumps(config))
    env = gymnasium.make("webrl/webarena-v0", config_files=tmp_path, url_map=url_map)
    try:
        assert env.unwrapped.task_ids == ["7"]
        observation, info = env.reset(options={"task_id": "7"})
        assert info["url"].startswith(url_map["__SHOPPING__"]) and "Bamboo Teddy Bear" in info["prompt"]
        _, reward, terminated, _, info = env.step('exit(message="It costs $139.25")')
        assert (reward, terminated, info["status"]) == (1.0, True, "exit")
        env.reset(options={"task_id": "7"})
        _, reward, terminated, _, _ = env.step('exit(message="It costs $99.99")')
        assert (reward, terminated) == (0.0, True)
    finally:
        env.close()


def test_miniwob_episode_ends_on_the_site_with_reward_one():
    env = gymnasium.make("webrl/miniwob-v0", miniwob=["click-button", "enter-text"])
    try:
        observation, info = env.reset(seed=3, options={"task_id": "enter-text"})
        assert info["intent"].startswith("Enter") and env.unwrapped.task.extra["miniwob_task"] == "enter-text"
        policy, terminated, truncated = MiniWoBScriptedPolicy(), False, False
        while not (terminated or truncated):
            response = policy.act(env.unwrapped.task, observation, info["step"])
            observation, reward, terminated, truncated, info = env.step(response)
        assert (reward, terminated, truncated) == (1.0, True, False) and info["status"] == "site_done"
        again, _ = env.reset(seed=3, options={"task_id": "enter-text"})
        first, _ = env.reset(seed=3, options={"task_id": "enter-text"})
        assert again == first
    finally:
        env.close()
