"""`WebEnv`: webrl's browser episodes as a synchronous Gymnasium environment.

Agent projects meet web environments through Gymnasium's `reset`/`step`, while webrl's episodes are
async, so that many share one Chromium during training. `WebEnv` runs its own `BrowserPool` on an event
loop in a background thread and blocks on that loop in every call: a caller needs neither asyncio nor
context managers. Importing `webrl.env` registers three ids (nothing starts until the first reset):

- `webrl/embedded-v0`: the embedded sites' suite (`split="train"` or `"test"`). The sites start as a
  child process of the env unless `url_map` points at running ones.
- `webrl/miniwob-v0`: MiniWoB++ pages (`miniwob=[names]`, default: all), each reset seeded from the
  env's random generator.
- `webrl/webarena-v0`: WebArena-format configs (`config_files=` a directory, a file or a list of
  them) on deployed sites (`url_map={"__SHOPPING__": "http://...", ...}`).

    env = gymnasium.make("webrl/embedded-v0", split="test")
    observation, info = env.reset(seed=0, options={"task_id": "1000"})
    observation, reward, terminated, truncated, info = env.step('do(action="Click", element="3")')

An observation is the page's simplified HTML; `info["intent"]` is the task and `info["prompt"]` the
whole WebRL actor prompt for the next step (intent, earlier responses, page). An action is one raw
model response in WebRL's action language; an unparsable one is a recorded step with an error, as in
training. The reward is 0 until the episode ends, then the task evaluator's score (0 when it has none).
An episode that hits a limit imposed from outside the task (`max_steps`, the wall-clock timeout, a
browser failure) is truncated; any other end (the answer, the site ending it, repeated actions,
unparsable responses) terminates it. The last step's `info["trajectory"]` is the recorded Trajectory.

Both spaces are `UnicodeText`: pages and responses may hold any character, which Gymnasium's `Text`
charset cannot list, so membership accepts every string up to the length limit while sampling draws
from printable ASCII. `check_env`'s random actions are therefore unparsable responses: a valid step.
"""

from __future__ import annotations

import asyncio
import string
import threading
from collections.abc import Coroutine, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TypeVar

import gymnasium
from gymnasium.spaces import Text

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Task, Trajectory
from webrl.env.backend import WebArenaBackend
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.episode import Episode
from webrl.env.evaluators import Judge
from webrl.env.limits import EpisodeLimits
from webrl.env.miniwob import MiniWoBBackend, available_tasks, miniwob_tasks
from webrl.env.observation import ObservationConfig
from webrl.env.sites import EmbeddedSites, EmbeddedSitesBackend, load_suite
from webrl.env.tasks import load_tasks

SUITES = ("embedded", "miniwob", "webarena")
TRUNCATING_STATUSES = frozenset({"max_steps", "timeout", "error"})
MAX_RESPONSE_CHARS = 16_384
# cut_to_budget may append a one-line marker after max_chars.
_CUT_MARKER_CHARS = 100
# The sites server is a Python child process; on a loaded machine it needs longer than EmbeddedSites' default.
SITES_STARTUP_TIMEOUT_S = 120.0
_T = TypeVar("_T")


class UnicodeText(Text):
    """A Text space of any Unicode string up to `max_length`; samples are printable ASCII."""

    def __init__(self, max_length: int, min_length: int = 0) -> None:
        super().__init__(max_length, min_length=min_length, charset=string.printable)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class _BackgroundLoop:
    """An asyncio event loop on a daemon thread; `run` blocks the caller until a coroutine finishes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="webrl-env-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.run(self.loop.shutdown_asyncgens())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class WebEnv(gymnasium.Env[str, str]):
    """One browser episode at a time on a task suite, behind Gymnasium's synchronous API.

    Args:
        suite: "embedded", "miniwob" or "webarena" (see the module docstring).
        split: the embedded suite's split, "train" or "test".
        tasks: Task objects to draw from instead of the suite's (embedded or webarena).
        miniwob: MiniWoB++ task names to draw from (default: every page the package ships).
        config_files: WebArena-format configs for "webarena": a directory, a file, or a list of files.
        url_map: placeholder -> URL; for "embedded", running sites (none: the env starts its own).
        task_id: the task every reset without `options["task_id"]` opens (default: a random one).
        max_steps: agent steps before the episode is truncated (WebRL: 30).
        limits: every other episode limit; its `max_steps` is replaced by `max_steps`.
        browser: how Chromium is launched.
        observation: how pages are rendered as text.
        judge: LLM judge for WebArena fuzzy_match references.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        suite: str = "embedded",
        *,
        split: str = "train",
        tasks: Sequence[Task] | None = None,
        miniwob: Sequence[str] | None = None,
        config_files: str | Path | Sequence[str | Path] | None = None,
        url_map: dict[str, str] | None = None,
        task_id: str | None = None,
        max_steps: int = 30,
        limits: EpisodeLimits | None = None,
        browser: BrowserConfig | None = None,
        observation: ObservationConfig | None = None,
        judge: Judge | None = None,
    ) -> None:
        if suite not in SUITES:
            raise ValueError(f"suite must be one of {SUITES}, got {suite!r}")
        if suite == "webarena" and tasks is None and config_files is None:
            raise ValueError("suite='webarena' needs config_files= (or tasks=) and url_map=")
        if suite == "webarena" and url_map is None:
            raise ValueError("suite='webarena' needs url_map= (placeholder -> deployed site URL)")
        self.suite = suite
        self.split = split
        self.task_id = task_id
        self.url_map = url_map
        self.judge = judge
        self.limits = EpisodeLimits(**{**vars(limits or EpisodeLimits()), "max_steps": max_steps})
        self.browser_config = browser or BrowserConfig(max_concurrency=1)
        self.observation_config = observation or ObservationConfig()
        self.observation_space = UnicodeText(self.observation_config.max_chars + _CUT_MARKER_CHARS)
        self.action_space = UnicodeText(MAX_RESPONSE_CHARS)
        self._given_tasks = list(tasks) if tasks is not None else None
        self._config_files = config_files
        self._miniwob = list(miniwob) if miniwob is not None else None
        self._tasks: dict[str, Task] = {}
        self._loop: _BackgroundLoop | None = None
        self._pool: BrowserPool | None = None
        self._backend: Any = None
        self._sites: Any = None
        self._episode: Episode | None = None
        self._episode_stack: AsyncExitStack | None = None
        self._prompt = ""

    @property
    def task(self) -> Task | None:
        """The current episode's task (with per-episode fields such as MiniWoB's intent filled in)."""
        return self._episode.task if self._episode else None

    @property
    def trajectory(self) -> Trajectory | None:
        """The current episode's record so far."""
        return self._episode.trajectory if self._episode else None

    @property
    def task_ids(self) -> list[str]:
        """The ids `options["task_id"]` accepts (MiniWoB++ task names for "miniwob"); starts the sites."""
        self._start()
        return list(self._tasks) if self.suite != "miniwob" else list(self._miniwob or [])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Open a task's start page in a fresh browser context; `options`: "task_id" or "task" (a Task)."""
        super().reset(seed=seed)
        self._start()
        task = self._choose(options or {})
        self._loop.run(self._open(task))
        episode = self._episode
        if episode.done:
            raise RuntimeError(f"reset of task {task.task_id} failed: {episode.trajectory.error}")
        self._prompt = actor_prompt_for_step(episode.task, [], episode.observation.html)
        return episode.observation.html, self._info(None, None)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Act on one model response; the reward is the evaluator's score on the last step, else 0."""
        if self._episode is None:
            raise RuntimeError("call reset() before step()")
        result = self._loop.run(self._episode.step(action, prompt=self._prompt))
        episode = self._episode
        reward = 0.0
        info = self._info(result.action.to_dict() if result.action else None, result.error)
        if result.done:
            reward = float(self._loop.run(episode.evaluate()) or 0.0)
            info.update(status=episode.trajectory.status, eval_reward=episode.trajectory.eval_reward)
            info["trajectory"] = episode.trajectory
            info["prompt"] = None  # no next step
        else:
            self._prompt = actor_prompt_for_step(episode.task, episode.trajectory.steps, result.observation.html)
            info["prompt"] = self._prompt
        # The status the episode ended with, before an evaluator that cannot run marks it "error".
        truncated = result.done and result.status in TRUNCATING_STATUSES
        return result.observation.html, reward, result.done and not truncated, truncated, info

    def close(self) -> None:
        """Close the episode, Chromium, Playwright's driver and any server this env started; safe twice."""
        loop, self._loop = self._loop, None
        if loop is not None:
            try:
                loop.run(self._shutdown())
            finally:
                loop.stop()
        if isinstance(self._backend, MiniWoBBackend):
            self._backend.close()
        if self._sites is not None:
            self._sites.stop()
            self._sites, self.url_map = None, None
        self._backend = None
        super().close()

    def _info(self, action: dict[str, Any] | None, error: str | None) -> dict[str, Any]:
        episode = self._episode
        return {
            "task_id": episode.task.task_id,
            "intent": episode.task.intent,
            "url": episode.observation.url,
            "status": episode.trajectory.status,
            "step": len(episode.trajectory.steps),
            "action": action,
            "error": error,
            "prompt": self._prompt,
        }

    def _start(self) -> None:
        """Start the loop, the sites and the task list on first use, so that constructing an env is cheap."""
        if self._loop is not None:
            return
        if self._backend is None:
            self._backend = self._make_backend()
        pool = BrowserPool(self.browser_config)
        loop = _BackgroundLoop()
        try:
            loop.run(pool.start())
        except BaseException:
            # A Chromium that does not start leaves nothing running, and the next reset tries again.
            loop.run(pool.close())
            loop.stop()
            raise
        self._loop, self._pool = loop, pool

    def _make_backend(self) -> Any:
        if self.suite == "miniwob":
            known = available_tasks()
            unknown = sorted(set(self._miniwob or []) - set(known))
            if unknown:
                raise ValueError(f"unknown MiniWoB++ tasks {unknown}; see webrl.env.miniwob.available_tasks()")
            self._miniwob = self._miniwob or known
            return MiniWoBBackend()
        if self.suite == "embedded":
            if self.url_map is None:
                self._sites = EmbeddedSites(startup_timeout_s=SITES_STARTUP_TIMEOUT_S).start()
                self.url_map = self._sites.url_map
            tasks = self._given_tasks or load_suite(self.split, self.url_map)
            backend = EmbeddedSitesBackend(self.url_map, self.judge)
        else:
            tasks = self._given_tasks or _load_configs(self._config_files, self.url_map)
            backend = WebArenaBackend(self.url_map, self.judge)
        self._tasks = {task.task_id: task for task in tasks}
        return backend

    def _choose(self, options: dict[str, Any]) -> Task:
        if isinstance(options.get("task"), Task):
            return options["task"]
        wanted = options.get("task_id", self.task_id)
        if self.suite == "miniwob":
            names = self._miniwob or []
            name = wanted if wanted is not None else names[int(self.np_random.integers(len(names)))]
            if name not in names:
                raise ValueError(f"MiniWoB++ task {name!r} is not among this env's tasks")
            return miniwob_tasks([name], [int(self.np_random.integers(2**31 - 1))])[0]
        if wanted is None:
            ids = sorted(self._tasks)
            return self._tasks[ids[int(self.np_random.integers(len(ids)))]]
        if wanted not in self._tasks:
            raise ValueError(f"no task {wanted!r} in this env's {len(self._tasks)} tasks")
        return self._tasks[wanted]

    async def _open(self, task: Task) -> None:
        await self._close_episode()
        self._episode_stack = AsyncExitStack()
        self._episode = await self._episode_stack.enter_async_context(
            self._pool.episode(task, self._backend, self.limits, self.observation_config)
        )
        await self._episode.reset()

    async def _close_episode(self) -> None:
        stack, self._episode_stack = self._episode_stack, None
        if stack is not None:
            await stack.aclose()

    async def _shutdown(self) -> None:
        await self._close_episode()
        self._episode = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def _load_configs(config_files: str | Path | Sequence[str | Path], url_map: dict[str, str]) -> list[Task]:
    """WebArena configs from a directory or file, or from a list of files (each loaded, bad ones skipped)."""
    if isinstance(config_files, (str, Path)):
        return load_tasks(Path(config_files), url_map)
    return [task for path in config_files for task in load_tasks(Path(path), url_map)]
