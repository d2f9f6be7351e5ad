"""MiniWoB++ through the episode interface: seeded tasks, utterance as intent, raw-reward success."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from webrl.env.miniwob import MiniWoBBackend, available_tasks, miniwob_tasks
from webrl.env.scripted_policy import MiniWoBScriptedPolicy, page_elements

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def miniwob() -> Iterator[MiniWoBBackend]:
    with MiniWoBBackend() as backend:
        yield backend


def _play(run, pool, backend, task, responses_for):
    """Reset, then answer with `responses_for(episode)` until it returns None or the episode ends."""

    async def scenario():
        async with pool.episode(task, backend) as ep:
            first = await ep.reset()
            while not ep.done:
                response = responses_for(ep)
                if response is None:
                    break
                await ep.step(response)
            reward = await ep.evaluate()
            return first, reward, ep.trajectory

    return run(scenario())


def test_the_utterance_becomes_the_intent_and_seeds_are_reproducible(run, pool, miniwob):
    task_a, task_b, task_c = miniwob_tasks(["click-button"], [3, 3, 4])
    first_a, _, traj_a = _play(run, pool, miniwob, task_a, lambda ep: None)
    first_b, _, traj_b = _play(run, pool, miniwob, task_b, lambda ep: None)
    first_c, _, traj_c = _play(run, pool, miniwob, task_c, lambda ep: None)
    assert re.fullmatch(r'Click on the "[^"]+" button\.', traj_a.task.intent)
    assert task_a.intent == ""  # the shared task is not modified; the episode has its own copy
    assert (traj_a.task.intent, first_a.html) == (traj_b.task.intent, first_b.html)
    assert first_a.html != first_c.html
    # The reward HUD and start cover are hidden; the query and the task area are visible.
    assert "Last reward" not in first_a.html and "START" not in first_a.html
    assert traj_a.task.intent in first_a.html


def test_right_action_scores_one(run, pool, miniwob):
    policy = MiniWoBScriptedPolicy()
    for task in miniwob_tasks(["click-button", "enter-text"], [0]):
        _, reward, traj = _play(run, pool, miniwob, task, lambda ep: policy.act(ep.task, ep.observation.html, 0))
        assert reward == 1.0
        assert traj.status == "site_done"
        assert traj.metadata["eval"]["raw_reward"] == 1


def test_wrong_action_scores_zero(run, pool, miniwob):
    def wrong_button(ep):
        wanted = re.search(r'"([^"]+)"', ep.task.intent).group(1)
        others = [e for e in page_elements(ep.observation.html) if e.tag == "button" and e.text != wanted]
        return f'do(action="Click", element="{others[0].id}")' if others else 'exit(message="")'

    # Seed 4's page has buttons other than the wanted one (the status below checks one was clicked).
    (task,) = miniwob_tasks(["click-button"], [4])
    _, reward, traj = _play(run, pool, miniwob, task, wrong_button)
    assert traj.status == "site_done"
    assert reward == 0.0 and traj.metadata["eval"]["raw_reward"] == -1


def test_giving_up_or_a_partial_reward_is_not_a_success(run, pool, miniwob):
    (task,) = miniwob_tasks(["click-button"], [2])
    _, reward, traj = _play(run, pool, miniwob, task, lambda ep: 'exit(message="done")')
    assert traj.status == "exit" and reward == 0.0 and traj.metadata["eval"]["done"] is False

    async def partial():
        async with pool.episode(task, miniwob) as ep:
            await ep.reset()
            await ep.page.evaluate("() => core.endEpisode(0.5)")
            return await ep.evaluate(), ep.trajectory.metadata["eval"]

    reward, detail = run(partial())
    assert reward == 0.0 and detail["raw_reward"] == 0.5 and detail["done"] is True


def test_unknown_task_names_are_rejected():
    assert {"click-button", "enter-text", "choose-list"} <= set(available_tasks())
    with pytest.raises(ValueError, match="unknown MiniWoB\\+\\+ task 'click-buton'"):
        miniwob_tasks(["click-buton"], [0])
