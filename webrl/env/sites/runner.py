"""Run a scripted policy over many tasks in the real browser, concurrently, and keep the trajectories.

This is how the reference solver proves every task solvable, how SFT demonstrations are made, and
how the exit-at-once baseline shows that no evaluator passes without work. A policy is anything
with `act(observation_html) -> response`; each episode gets a fresh one from `make_policy(task)`.
Every step records the exact actor prompt (`webrl.data.prompts.build_actor_prompt`), so the
trajectories train a model on the same strings it will see in rollouts.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from webrl.data.prompts import build_actor_prompt
from webrl.data.trajectory import Task, Trajectory, TrajectoryWriter
from webrl.env.backend import SiteBackend
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.episode import EpisodeLimits
from webrl.env.observation import ObservationConfig
from webrl.env.sites.solver import ReferenceSolver, SolverError


class Policy(Protocol):
    def act(self, observation: str) -> str: ...


class ExitAtOnce:
    """The do-nothing baseline: answers with an empty exit on the first page."""

    def __init__(self, task: Task | None = None) -> None:
        self.task = task

    def act(self, observation: str) -> str:
        return 'exit(message="")'


POLICIES: dict[str, Callable[[Task], Policy]] = {"reference": ReferenceSolver, "exit": ExitAtOnce}


@dataclass
class RunResult:
    """The trajectories of a run (in task order) and a summary of how they ended."""

    trajectories: list[Trajectory]
    seconds: float
    failures: list[str] = field(default_factory=list)

    @property
    def successes(self) -> int:
        return sum(1 for t in self.trajectories if (t.eval_reward or 0.0) >= 1.0)

    @property
    def success_rate(self) -> float:
        return self.successes / len(self.trajectories) if self.trajectories else 0.0

    def summary(self) -> dict[str, Any]:
        by_site: dict[str, list[int]] = {}
        for t in self.trajectories:
            by_site.setdefault(t.task.site, []).append(int((t.eval_reward or 0.0) >= 1.0))
        return {
            "episodes": len(self.trajectories),
            "successes": self.successes,
            "success_rate": round(self.success_rate, 4),
            "seconds": round(self.seconds, 2),
            "episodes_per_min": round(60 * len(self.trajectories) / max(self.seconds, 1e-9), 1),
            "success_by_site": {site: f"{sum(v)}/{len(v)}" for site, v in sorted(by_site.items())},
            "steps": dict(sorted(Counter(len(t.steps) for t in self.trajectories).items())),
            "statuses": dict(Counter(t.status for t in self.trajectories)),
        }


PromptBuilder = Callable[[Task, list[str], str], str]


def default_prompt(task: Task, history: list[str], html: str) -> str:
    """The completion-form actor prompt (no chat template, default character budget)."""
    return build_actor_prompt(task.intent, history, html)


async def _episode(
    pool: BrowserPool,
    task: Task,
    policy: Policy,
    backend: SiteBackend,
    limits: EpisodeLimits | None,
    observation_config: ObservationConfig | None,
    prompt_builder: PromptBuilder,
) -> Trajectory:
    async with pool.episode(task, backend, limits, observation_config) as episode:
        observation = await episode.reset()
        history: list[str] = []
        try:
            while not episode.done:
                response = policy.act(observation.html)
                prompt = prompt_builder(task, list(history), observation.html)
                result = await episode.step(response, prompt=prompt)
                history.append(response)
                observation = result.observation
        except SolverError as err:
            episode.trajectory.metadata["policy_error"] = str(err)
        if episode.trajectory.status == "exit":
            await episode.evaluate()
        trajectory = episode.trajectory
    reward = trajectory.eval_reward or 0.0
    trajectory.outcome = reward
    for step in trajectory.steps:
        step.reward = reward  # WebRL copies the outcome onto every step of the trajectory
    return trajectory


async def run_policy(
    tasks: Sequence[Task],
    make_policy: Callable[[Task], Policy],
    backend: SiteBackend,
    *,
    pool: BrowserPool | None = None,
    concurrency: int = 8,
    limits: EpisodeLimits | None = None,
    observation: ObservationConfig | None = None,
    prompt_builder: PromptBuilder = default_prompt,
    writer: TrajectoryWriter | None = None,
) -> RunResult:
    """Run one episode per task with `make_policy(task)`, `concurrency` at a time; evaluate each.

    `observation` and `prompt_builder` should match what the model will see in rollouts (the
    recorded Step.prompt is `prompt_builder(task, earlier responses, page html)`). Trajectories are
    written to `writer` as they finish. A task that does not reach reward 1 is listed in
    `failures` with its status and errors, so a failing solver names its task.
    """
    if pool is None:
        async with BrowserPool(BrowserConfig(max_concurrency=concurrency)) as own_pool:
            return await run_policy(
                tasks,
                make_policy,
                backend,
                pool=own_pool,
                concurrency=concurrency,
                limits=limits,
                observation=observation,
                prompt_builder=prompt_builder,
                writer=writer,
            )
    slots = asyncio.Semaphore(concurrency)
    start = time.perf_counter()

    async def one(task: Task) -> Trajectory:
        async with slots:
            trajectory = await _episode(pool, task, make_policy(task), backend, limits, observation, prompt_builder)
        if writer is not None:
            writer.write(trajectory)
        return trajectory

    # Wait for every episode even when one raises, so none is left running on a pool the caller closes.
    outcomes = await asyncio.gather(*(one(task) for task in tasks), return_exceptions=True)
    errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if errors:
        raise errors[0]
    trajectories = list(outcomes)
    failures = [
        f"task {t.task.task_id} (template {t.task.intent_template_id}): status {t.status}, reward {t.eval_reward}, "
        f"{t.metadata.get('policy_error') or t.error or t.metadata.get('eval') or ''}"
        + "".join(f"; step {s.index} error: {s.error}" for s in t.steps if s.error)
        for t in trajectories
        if (t.eval_reward or 0.0) < 1.0
    ]
    return RunResult(list(trajectories), time.perf_counter() - start, failures)
