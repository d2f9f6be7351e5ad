"""A browser failure is not the agent's: the episode is retried once, and a second failure is left out and counted.

The failure is made on purpose, not raced: the site's backend closes the episode's browser context
after the first action of its first `failures` episodes, so the next action finds the page gone.
Tasks end by answering "shipped" on page2.html, which the evaluator scores 1.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Error as PlaywrightError

from webrl.data.trajectory import Task, read_trajectories
from webrl.env.backend import WebArenaBackend
from webrl.env.limits import EpisodeLimits
from webrl.env.login import LoginStateError, StorageStates
from webrl.env.static_server import StaticServer
from webrl.env.tasks import load_tasks
from webrl.inference.engine import Completion
from webrl.inference.rollout import collect_rollouts
from webrl.metrics import success_by_site

pytestmark = pytest.mark.timeout(180)

PAGES = Path(__file__).parents[1] / "env" / "pages"
FAST = EpisodeLimits(action_timeout_s=5.0, wait_action_s=0.05)
ANSWERS = ('do(action="Wait")', 'do(action="Scroll Down")', 'exit(message="shipped")')


class _ContextClosingBackend(WebArenaBackend):
    """The test pages' backend, except that its first `failures` episodes lose their context after one action."""

    def __init__(self, url_map: dict[str, str], failures: int) -> None:
        super().__init__(url_map)
        self.failures = failures
        self.closed = 0

    async def episode_done(self, page: Any, task: Task) -> bool:
        if self.closed < self.failures:
            self.closed += 1
            await page.context.close()
        return False


class _ThreeSteps:
    """Answers by step number (the prompt is the number of steps so far): Wait, Scroll Down, then the answer."""

    def generate(self, prompts, params):
        return [Completion(ANSWERS[min(int(p), len(ANSWERS) - 1)], [], None, "stop") for p in prompts]

    def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def pages() -> Iterator[StaticServer]:
    with StaticServer(PAGES) as server:
        yield server


def _tasks(pages: StaticServer, count: int) -> list[Task]:
    block = {"eval_types": ["string_match"], "reference_answers": {"must_include": ["shipped"]}}
    configs = [
        Task(task_id=str(i), intent="status?", sites=["pages"], start_url="__PAGES__/page2.html", eval=block).to_dict()
        for i in range(count)
    ]
    return load_tasks(configs, {"__PAGES__": pages.url})


def _rollouts(run, pool, backend, tasks, out: Path, *, engine=None, prompt_builder=None, limits=FAST):
    """One episode at a time of `engine` (three steps, then an answer), each step's prompt its step count."""
    return run(
        collect_rollouts(
            engine or _ThreeSteps(),
            tasks,
            backend,
            pool,
            concurrency=1,
            prompt_builder=prompt_builder or (lambda task, steps, html: str(len(steps))),
            writer=out,
            limits=limits,
            progress=False,
        )
    )


def test_an_episode_whose_context_dies_is_retried_once_on_a_fresh_one(run, pool, pages, tmp_path):
    backend = _ContextClosingBackend({"__PAGES__": pages.url}, failures=1)
    result = _rollouts(run, pool, backend, _tasks(pages, 2), tmp_path / "rollouts.jsonl")
    first, second = result.trajectories
    assert backend.closed == 1
    assert (first.status, first.eval_reward, len(first.steps)) == ("exit", 1.0, 3)
    assert first.metadata["attempts"] == 2 and first.metadata["first_error"].startswith("browser failed during step 1")
    assert not first.infra_error and "attempts" not in second.metadata and second.eval_reward == 1.0
    assert result.metrics["rollout/retried"] == 1 and result.metrics["rollout/infra_errors"] == 0
    assert result.metrics["rollout/success_rate"] == 1.0
    # Only the kept try is written: one line per task.
    assert [t.task.task_id for t in read_trajectories(tmp_path / "rollouts.jsonl")] == ["0", "1"]


def test_an_episode_failing_twice_is_kept_out_of_rates_and_counted(run, pool, pages, tmp_path):
    backend = _ContextClosingBackend({"__PAGES__": pages.url}, failures=2)
    result = _rollouts(run, pool, backend, _tasks(pages, 3), tmp_path / "rollouts.jsonl")
    failed, *rest = result.trajectories
    assert backend.closed == 2
    assert failed.status == "error" and failed.infra_error and failed.metadata["attempts"] == 2
    assert failed.eval_reward is None and failed.error.startswith("browser failed during step 1")
    assert [t.eval_reward for t in rest] == [1.0, 1.0] and not any(t.infra_error for t in rest)
    metrics = result.metrics
    assert (metrics["rollout/infra_errors"], metrics["rollout/retried"], metrics["rollout/status/error"]) == (1, 1, 1)
    # 2 of 2 countable episodes succeeded, not 2 of 3.
    assert metrics["rollout/success_rate"] == 1.0 and metrics["rollout/success_rate/pages"] == 1.0
    # The run's success figures (training outcome, evaluator reward) leave it out the same way.
    for trajectory in result.trajectories:
        trajectory.outcome = float(trajectory.eval_reward or 0.0)
    by_site = success_by_site(result.trajectories, key="outcome")
    assert by_site == {"success_rate": 1.0, "episodes": 2.0, "success_rate/pages": 1.0, "infra_errors": 1.0}


class _PoolFailingItsFirstContexts:
    """The real pool, except that opening its first `failures` contexts fails as a dead Chromium's would."""

    def __init__(self, pool: Any, failures: int) -> None:
        self._pool, self.failures = pool, failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def episode(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            return _FailingToOpen()
        return self._pool.episode(*args, **kwargs)


class _FailingToOpen:
    async def __aenter__(self) -> Any:
        raise PlaywrightError("Browser.new_context: Target page, context or browser has been closed")

    async def __aexit__(self, *exc: object) -> None:
        return None


def test_a_context_that_cannot_be_opened_fails_its_episode_alone(run, pool, pages, tmp_path):
    backend = WebArenaBackend({"__PAGES__": pages.url})
    failing = _PoolFailingItsFirstContexts(pool, failures=2)
    result = _rollouts(run, failing, backend, _tasks(pages, 3), tmp_path / "rollouts.jsonl")
    failed, *rest = result.trajectories
    assert failed.status == "error" and failed.infra_error and failed.metadata["attempts"] == 2
    assert failed.error.startswith("no browser context: Error: Browser.new_context")
    assert [t.eval_reward for t in rest] == [1.0, 1.0] and result.metrics["rollout/infra_errors"] == 1


class _Hanging(_ThreeSteps):
    """The engine of a hung server: each call answers long after the episode's hard limit."""

    def generate(self, prompts, params):
        time.sleep(3.0)
        return super().generate(prompts, params)


def test_an_episode_past_its_hard_limit_is_the_engines_or_pages_failure(run, pool, pages, tmp_path):
    """The hard limit is a backstop for a hung page or engine: such an episode is retried, then left out and counted."""
    tight = EpisodeLimits(episode_timeout_s=0.5, reset_timeout_s=0.5, action_timeout_s=0.5, wait_action_s=0.05)
    backend = WebArenaBackend({"__PAGES__": pages.url})
    result = _rollouts(
        run, pool, backend, _tasks(pages, 1), tmp_path / "rollouts.jsonl", engine=_Hanging(), limits=tight
    )
    (trajectory,) = result.trajectories
    assert trajectory.metadata["attempts"] == 2 and "hard limit of 2s" in trajectory.metadata["first_error"]
    assert trajectory.infra_error and trajectory.eval_reward is None
    assert result.metrics["rollout/infra_errors"] == 1


def test_an_episode_ended_by_an_error_of_its_own_is_scored_a_failure(run, pool, pages, tmp_path):
    """An error that is not the browser's, the site's or the engine's is not retried, and scores 0: the task stays in
    the success rate (1 of 2), not dropped from it."""

    def prompt(task: Task, steps: list, html: str) -> str:
        if task.task_id == "0" and steps:
            raise ValueError("no prompt for this page")
        return str(len(steps))

    backend = WebArenaBackend({"__PAGES__": pages.url})
    result = _rollouts(run, pool, backend, _tasks(pages, 2), tmp_path / "rollouts.jsonl", prompt_builder=prompt)
    failed, solved = result.trajectories
    assert (failed.status, failed.error, failed.infra_error) == ("error", "ValueError: no prompt for this page", False)
    assert failed.eval_reward == 0.0 and "attempts" not in failed.metadata and solved.eval_reward == 1.0
    assert result.metrics["rollout/success_rate"] == 0.5 and result.metrics["rollout/infra_errors"] == 0


def test_a_missing_login_state_stops_the_run_naming_the_file(run, pool, pages, tmp_path):
    """Not a browser failure to retry and leave out of the rates: every episode of that task would run logged out."""
    backend = WebArenaBackend({"__PAGES__": pages.url}, storage_states=StorageStates(tmp_path / "auth"))
    logged_in = Task("1", "my orders?", ["gitlab"], "__PAGES__/page2.html", require_login=True)
    tasks = [*_tasks(pages, 1), logged_in]
    with pytest.raises(LoginStateError, match=r"task 1 needs a logged-in gitlab session but .*gitlab_state\.json"):
        _rollouts(run, pool, backend, tasks, tmp_path / "rollouts.jsonl")
    assert [t.task.task_id for t in read_trajectories(tmp_path / "rollouts.jsonl")] == ["0"]
