"""Concurrent browser rollouts driven by one inference engine: `collect_rollouts`.

N episodes run at once, each in its own browser context. Every step, the prompts of all live
episodes go to the engine in ONE `generate` call (batched decoding is where vLLM's speed comes
from), and the actions then run in the browser concurrently. The batch forms at a soft step
barrier: the engine waits until every live episode has a prompt ready, or `max_batch_wait_s`
after the first one, so one slow page never stalls the others for long. A finished episode frees
its slot at once and the next task starts.

Every step records the exact prompt, the raw response, and the response's token ids and
log-probabilities when the engine returns them. Finished trajectories stream to the writer
(`TrajectoryWriter`, one fsynced JSONL line each) as they end, so a crash loses only the episodes
in flight. Nothing an episode does stops the run: a dead browser, a hung page (per-episode
timeout), an engine call that fails for the episode's prompt or an evaluator that cannot run (a
WebArena `func:` helper) ends that episode with status "error" or "timeout" and the reason recorded; an
"error" that is not an infrastructure failure (below) is scored 0, a failure, like any other of the agent's.
Only an engine that fails every prompt of 3 calls in a row stops the run (`EngineDownError`: it is down), and so
does a task whose logged-in session has no storage state (`LoginStateError`, naming the file): every episode of
it would run logged out and fail, scored as the agent's failure or, retried, left out of the success rates.

An episode that ends in "error" because the browser, the site or the engine failed
(`Trajectory.infra_error`) is not the agent's failure: its task is run once more, from the start, in
a fresh context (a dead Chromium is relaunched by the pool). The second try's trajectory is the one
kept, with `attempts` = 2 and the first error in its metadata; if it fails the same way too, it stays
marked, and the labels and success rates leave it out (`rollout/infra_errors` counts it). The engine's
failure is told from the agent's by where it is raised: only the engine call for the episode's prompt
counts; a response that does not parse or an action that fails is a step of the agent's, recorded by
the episode without raising. One refusal of that call is the agent's too: a prompt the model has no room
for (`PromptTooLongError`, from the hf and vllm engines, and the openai one where it can count). The prompt
is the episode's own page and history, so a retry would fail the same way, and leaving the episode out
would raise the success rate of an agent whose histories outgrow its model: the episode ends in "error"
with the prompt's length in its reason, scored 0, not retried, and counted. Nor does such a refusal count
toward, or break, an engine's run of failed calls: it says nothing about whether the engine is up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Step, Task, Trajectory, TrajectoryWriter
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.episode import Episode
from webrl.env.limits import EpisodeLimits
from webrl.env.login import LoginStateError
from webrl.env.observation import ObservationConfig
from webrl.inference.engine import Completion, InferenceEngine, PromptTooLongError, SamplingParams, digest_seed
from webrl.inference.rollout_metrics import ActivityClock, Tally, rollout_metrics, rollout_sums
from webrl.progress import progress_bar

log = logging.getLogger(__name__)

PromptBuilder = Callable[[Task, Sequence[Step], str], str]
"""(task as the episode sees it, steps so far, current page html) -> the exact prompt string."""


# An engine that fails every prompt of this many calls in a row (each prompt of a batch retried alone)
# is down; a prompt it rejects among others only ends its own episode, and one too long for the model
# (`PromptTooLongError`) is no evidence either way.
MAX_FAILED_ENGINE_CALLS = 3


class EngineDownError(RuntimeError):
    """The engine failed every prompt of several calls in a row: it is not usable."""


class _EngineFailed(Exception):
    """The engine call for one episode's prompt raised `cause`: the engine's failure, not the agent's.

    It is raised only around that call, so that `_Rollout._run` can tell an engine outage (an infrastructure
    error, retried and kept out of the labels) from any other exception while the episode runs.
    """

    def __init__(self, cause: Exception) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


@dataclass
class RolloutResult:
    """The trajectories in task order, and the run's metrics (see `rollout_metrics`)."""

    trajectories: list[Trajectory]
    metrics: dict[str, float] = field(default_factory=dict)


def request_seed(seed: int | None, episode: str, attempt: int, step: int) -> int | None:
    """The sampling seed of one model call: a digest of the rollout's `seed`, the episode's key (its task id,
    and which occurrence of that id in the call), the attempt and the step (None when the rollout is unseeded).

    Every request gets its own random stream, so that episodes batched together do not draw the same noise;
    a step's sample depends on what the episode saw, not on which other episodes shared its batch; and a
    resumed rollout, which runs only the tasks still missing, draws what the uninterrupted one would have.
    """
    return None if seed is None else digest_seed(seed, episode, attempt, step)


def episode_keys(tasks: Sequence[Task]) -> list[str]:
    """`task_id#n` for the n-th occurrence of each task id in `tasks`: a name per episode that does not depend
    on the other tasks of the call."""
    seen: dict[str, int] = {}
    keys = []
    for task in tasks:
        occurrence = seen.get(task.task_id, 0)
        seen[task.task_id] = occurrence + 1
        keys.append(f"{task.task_id}#{occurrence}")
    return keys


class _Batcher:
    """Collects prompts from live episodes and answers them with one engine call per step."""

    def __init__(self, engine: InferenceEngine, sampling: SamplingParams, clock: ActivityClock, max_wait_s: float):
        self.engine = engine
        self.sampling = sampling
        self.clock = clock
        self.max_wait_s = max_wait_s
        self.live = 0
        self.generated_tokens = 0
        self.failed_calls = 0
        self._pending: list[tuple[str, int | None, asyncio.Future]] = []
        self._changed = asyncio.Event()

    def set_live(self, delta: int) -> None:
        self.live += delta
        self._changed.set()

    async def request(self, prompt: str, seed: int | None) -> Completion:
        """The completion of `prompt`, sampled with its own `seed` (None: the call's sampling seed)."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((prompt, seed, future))
        self._changed.set()
        return await future

    async def run(self) -> None:
        while True:
            await self._gather_batch()
            batch = [(p, s, f) for p, s, f in self._pending if not f.done()]
            self._pending = []
            if batch:
                await self._answer(batch)

    async def _gather_batch(self) -> None:
        """Wait for a first prompt, then until every live episode has one (or the wait runs out)."""
        while not any(not f.done() for _, _, f in self._pending):
            self._changed.clear()
            await self._changed.wait()
        deadline = time.monotonic() + self.max_wait_s
        while self._unanswered() < self.live and (left := deadline - time.monotonic()) > 0:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=left)
            except asyncio.TimeoutError:
                return

    def _unanswered(self) -> int:
        """The prompts still waiting for an answer: one whose episode was cancelled (its hard limit) has no live
        episode behind it, and counting it would send the batch off before a live episode's prompt joins it."""
        return sum(not future.done() for _, _, future in self._pending)

    async def _generate(self, prompts: list[str], seeds: list[int | None]) -> list[Completion]:
        """One engine call, timed; a reply without exactly one completion per prompt is that call's failure."""
        with self.clock.engine(len(prompts)):
            completions = list(await asyncio.to_thread(self.engine.generate, prompts, self._sampling(seeds)))
        if len(completions) != len(prompts):
            raise RuntimeError(f"{self.engine!r} returned {len(completions)} completions for {len(prompts)} prompts")
        return completions

    async def _answer(self, batch: list[tuple[str, int | None, asyncio.Future]]) -> None:
        prompts = [p for p, _, _ in batch]
        seeds = [s for _, s, _ in batch]
        try:
            results: list[Completion | BaseException] = list(await self._generate(prompts, seeds))
        except Exception as err:  # noqa: BLE001 - isolate the prompt(s) the engine rejects
            if len(prompts) == 1:
                results = [err]
            else:
                log.warning("engine failed on a batch of %d prompts (%s); retrying them one by one", len(prompts), err)
                # A prompt whose episode has gone (its hard limit) keeps the batch's error: no one waits for a retry.
                results = [err if f.done() else await self._one(p, s) for p, s, f in batch]
        # A prompt too long for the model is refused by any engine, up or down: the call tells nothing of the engine.
        telling = [r for r in results if not isinstance(r, PromptTooLongError)]
        if telling:
            self.failed_calls = self.failed_calls + 1 if all(isinstance(r, BaseException) for r in telling) else 0
        if self.failed_calls >= MAX_FAILED_ENGINE_CALLS:
            error = EngineDownError(
                f"the engine failed every prompt of {self.failed_calls} calls in a row: {telling[0]}"
            )
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(error)
            raise error
        for (_, _, future), result in zip(batch, results, strict=True):
            if isinstance(result, Completion):
                self.generated_tokens += len(result.token_ids)
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    def _sampling(self, seeds: list[int | None]) -> SamplingParams:
        """The call's sampling with each prompt's own seed, when every prompt has one."""
        if None in seeds:
            return self.sampling
        return replace(self.sampling, seeds=cast(list[int], seeds))

    async def _one(self, prompt: str, seed: int | None) -> Completion | BaseException:
        try:
            return (await self._generate([prompt], [seed]))[0]
        except Exception as err:  # noqa: BLE001 - returned to the one episode that sent it
            return err


class _Rollout:
    """State of one `collect_rollouts` call."""

    def __init__(self, batcher: _Batcher, pool: BrowserPool, backend: Any, prompt_builder: PromptBuilder, **opts: Any):
        self.batcher = batcher
        self.clock = batcher.clock
        self.pool = pool
        self.backend = backend
        self.prompt_builder = prompt_builder
        self.limits: EpisodeLimits = opts["limits"]
        self.observation: ObservationConfig | None = opts["observation"]
        self.phase: int = opts["phase"]
        self.tally: Tally | None = opts.get("tally")
        self.step_latencies: list[float] = []
        self._reported = 0

    async def episode(self, task: Task, key: str) -> Trajectory:
        """Run `task` (`key` names the episode, see `request_seed`); once more in a fresh context if the browser,
        the site or the engine failed it."""
        trajectory = await self._attempt(task, (key, 0))
        if not trajectory.infra_error:
            return trajectory
        log.warning(
            "task %s: the browser, site or engine failed (%s); retrying it once", task.task_id, trajectory.error
        )
        retried = await self._attempt(task, (key, 1))
        retried.metadata.update(attempts=2, first_error=trajectory.error)
        return retried

    async def _attempt(self, task: Task, attempt: tuple[str, int]) -> Trajectory:
        """One try at `task`. A context that cannot be opened (Chromium gone and not relaunched, the outside proxy
        not started) fails this episode alone, as the browser's failure; one that fails to close after the episode
        ended leaves the episode as it ended. A missing login state stops the run: no retry would find it."""
        episode: Episode | None = None
        try:
            async with self.pool.episode(task, self.backend, self.limits, self.observation) as episode:
                await self._run(episode, attempt)
        except (EngineDownError, LoginStateError):
            raise
        except Exception as err:  # noqa: BLE001 - one episode's browser must not stop the others
            if episode is None:
                trajectory = Trajectory(
                    task=task, status="error", error=f"no browser context: {type(err).__name__}: {err}"
                )
                trajectory.metadata["infra_error"] = True
                trajectory.phase = self.phase
                return trajectory
            log.warning("task %s: closing its browser context failed: %s: %s", task.task_id, type(err).__name__, err)
        trajectory = episode.trajectory
        trajectory.phase = self.phase
        return trajectory

    async def _run(self, episode: Episode, attempt: tuple[str, int]) -> None:
        """Drive and score one episode; a hard limit ends one whose page or engine hung, and an engine call that fails
        ends it too: both are infrastructure errors, not the agent's. A prompt too long for the model ends it as the
        agent's failure (the module docstring)."""
        limits = self.limits
        hard_limit = limits.episode_timeout_s + limits.reset_timeout_s + 2 * limits.action_timeout_s
        try:
            await asyncio.wait_for(self._drive(episode, attempt), timeout=hard_limit)
        except asyncio.TimeoutError:
            self._end(episode, "error", f"episode exceeded the hard limit of {hard_limit:g}s: its page or engine hung")
            episode.trajectory.metadata["infra_error"] = True
        except EngineDownError:
            raise
        except PromptTooLongError as err:
            step = len(episode.trajectory.steps)
            reason = f"{err.tokens} tokens; the model takes fewer than {err.limit}"
            self._end(episode, "error", f"{type(err).__name__}: the prompt of step {step} has {reason}")
        except _EngineFailed as failed:
            # Not the agent's doing: the retry and the labels treat it as the browser's failure.
            self._end(episode, "error", f"the engine failed on this episode's prompt: {failed}")
            episode.trajectory.metadata["infra_error"] = True
        except Exception as err:  # noqa: BLE001 - one episode's failure must not stop the others
            self._end(episode, "error", f"{type(err).__name__}: {err}")
        with self.clock.browser():
            # An evaluator that fails marks this episode "error" alone; one that ended in error is scored without
            # its page (0, or none for an infra error).
            await episode.evaluate()
            await episode.close()

    async def _drive(self, episode: Episode, attempt: tuple[str, int]) -> None:
        # Live from the start: the first batch then waits for episodes still opening their page.
        self.batcher.set_live(+1)
        shot: asyncio.Task | None = None
        try:
            with self.clock.browser():
                observation = await episode.reset()
            shot = self._shoot(episode)
            while not episode.done:
                prompt = self.prompt_builder(episode.task, episode.trajectory.steps, observation.html)
                asked = time.perf_counter()
                seed = request_seed(self.batcher.sampling.seed, *attempt, len(episode.trajectory.steps))
                completion = await self._ask(prompt, seed)
                answered = time.perf_counter()
                with self.clock.browser():
                    if shot is not None:
                        await shot  # the page must not change while it is photographed
                    result = await episode.step(completion.text, prompt=prompt)
                shot = self._shoot(episode)
                self.step_latencies.append(time.perf_counter() - asked)
                step = episode.trajectory.steps[-1]
                step.timings["engine"] = round(answered - asked, 4)
                step.response_token_ids = completion.token_ids or None
                step.response_logprobs = completion.logprobs
                step.truncated = completion.finish_reason == "length"
                observation = result.observation
            if shot is not None:
                with self.clock.browser():
                    await shot
        finally:
            if shot is not None and not shot.done():
                shot.cancel()
            if self.pool.screenshots is not None:
                self.pool.screenshots.finish(episode.trajectory)
            self.batcher.set_live(-1)

    async def _ask(self, prompt: str, seed: int | None) -> Completion:
        """The engine's completion of `prompt`; a failure of that call is raised as `_EngineFailed` (the engine's, not
        the agent's), except `EngineDownError`, which stops the whole run, and `PromptTooLongError`, the agent's."""
        try:
            return await self.batcher.request(prompt, seed)
        except (EngineDownError, PromptTooLongError):
            raise
        except Exception as err:
            raise _EngineFailed(err) from err

    def _shoot(self, episode: Episode) -> asyncio.Task | None:
        """A screenshot of the page just observed, if the pool records this task; none after exit (no new page).

        It runs while the model writes the next response: the driver waits for it only before acting.
        """
        recorder = self.pool.screenshots
        if recorder is None or episode.trajectory.status in ("exit", "error") or not recorder.wants(episode.task):
            return None
        return asyncio.create_task(recorder.capture(episode.page, episode.trajectory))

    def report(self) -> dict[str, Any]:
        """The run's figures so far, given to `tally`: its sums (`rollout_sums`) and the step latencies not given yet.

        Reported as each episode ends, they are what a run killed before its end leaves of its engine's and
        browser's figures (`webrl.stage_attempts`): the latencies come in parts, lest every report repeat them all.
        """
        record = {
            "sums": rollout_sums(self.clock, self.batcher.generated_tokens),
            "latencies": self.step_latencies[self._reported :],
        }
        self._reported = len(self.step_latencies)
        if self.tally is not None:
            self.tally(record)
        return record

    def metrics(self, trajectories: list[Trajectory]) -> dict[str, float]:
        """The finished run's metrics, from the sums of its last report: its attempt's record and its own figures
        then hold the same numbers."""
        return rollout_metrics(trajectories, self.report()["sums"], self.step_latencies)

    @staticmethod
    def _end(episode: Episode, status: str, error: str) -> None:
        """End an episode the runner had to stop (the episode's own limits did not fire)."""
        if episode.done:
            return
        trajectory = episode.trajectory
        trajectory.status, trajectory.error = status, error
        trajectory.final_url = episode.observation.url
        trajectory.final_observation = episode.observation.html


async def collect_rollouts(
    engine: InferenceEngine,
    tasks: Sequence[Task],
    backend: Any,
    pool: BrowserPool,
    *,
    concurrency: int = 8,
    sampling: SamplingParams | None = None,
    prompt_builder: PromptBuilder | None = None,
    writer: TrajectoryWriter | str | Path | None = None,
    limits: EpisodeLimits | None = None,
    observation: ObservationConfig | None = None,
    max_batch_wait_s: float = 0.5,
    phase: int = 0,
    progress: bool = True,
    tally: Tally | None = None,
) -> RolloutResult:
    """Run one episode per task, `concurrency` at a time, sampling actions from `engine`.

    `backend` is the tasks' `SiteBackend`; `pool` a started `BrowserPool` (its own
    `max_concurrency` also caps how many episodes are open). `prompt_builder` defaults to WebRL's
    completion-form actor prompt. `writer` (a TrajectoryWriter or a path to append to) receives each
    trajectory as it ends, and `tally` the run's figures so far just before it, so that every episode written has its
    share recorded. Returns trajectories in task order and the metrics.
    """
    if concurrency < 1:
        raise ValueError(f"collect_rollouts concurrency must be >= 1, got {concurrency}")
    sampling = sampling or SamplingParams()
    prompt_builder = prompt_builder or actor_prompt_for_step
    own_writer = isinstance(writer, (str, Path))
    sink = TrajectoryWriter(writer) if own_writer else writer
    clock = ActivityClock()
    batcher = _Batcher(engine, sampling, clock, max_batch_wait_s)
    options = {"limits": limits or EpisodeLimits(), "observation": observation, "phase": phase, "tally": tally}
    run = _Rollout(batcher, pool, backend, prompt_builder, **options)
    slots = asyncio.Semaphore(concurrency)
    bar = progress_bar(total=len(tasks), desc="rollouts", unit="ep", enabled=progress)
    finished: list[Trajectory] = []

    async def one(task: Task, key: str) -> Trajectory:
        async with slots:
            trajectory = await run.episode(task, key)
        run.report()
        if sink is not None:
            sink.write(trajectory)
        finished.append(trajectory)
        bar.update(1)
        bar.set_postfix(success=f"{sum(t.succeeded for t in finished)}/{len(finished)}")
        return trajectory

    episodes = [one(task, key) for task, key in zip(tasks, episode_keys(tasks), strict=True)]
    try:
        trajectories = await _beside_the_batcher(batcher, episodes)
    finally:
        bar.close()
        if own_writer and sink is not None:
            sink.close()
    return RolloutResult(trajectories, run.metrics(trajectories))


async def _beside_the_batcher(batcher: _Batcher, episodes: list[Coroutine[Any, Any, Trajectory]]) -> list[Trajectory]:
    """Run `episodes` while `batcher` answers their prompts; a batcher that fails (the engine is down) cancels them.

    So does an episode that stops the run (a missing login state): the others are cancelled and wait for their
    contexts to close, lest they go on in a pool that is closing.
    """
    batch_loop = asyncio.create_task(batcher.run())
    running = [asyncio.ensure_future(episode) for episode in episodes]
    gathered = asyncio.gather(*running)
    try:
        done, _ = await asyncio.wait({batch_loop, gathered}, return_when=asyncio.FIRST_COMPLETED)
        if batch_loop in done:
            gathered.cancel()
            batch_loop.result()
        return list(await gathered)
    finally:
        batch_loop.cancel()
        for episode in running:
            episode.cancel()
        await asyncio.gather(*running, return_exceptions=True)


def collect_rollouts_sync(
    engine: InferenceEngine,
    tasks: Sequence[Task],
    backend: Any,
    browser: BrowserConfig | None = None,
    **options: Any,
) -> RolloutResult:
    """`collect_rollouts` from synchronous code: starts a BrowserPool, runs, closes it.

    The pool's `max_concurrency` is raised to `options["concurrency"]` when that is larger.
    """
    browser = browser or BrowserConfig()
    concurrency = options.get("concurrency", 8)
    if browser.max_concurrency < concurrency:
        browser = BrowserConfig(**{**browser.__dict__, "max_concurrency": concurrency})

    async def main() -> RolloutResult:
        async with BrowserPool(browser) as pool:
            return await collect_rollouts(engine, tasks, backend, pool, **options)

    return asyncio.run(main())
