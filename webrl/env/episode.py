"""One task carried out in one isolated browser context, recorded step by step as a Trajectory.

The episode is the contract between the browser and the rollout loop: `reset()` opens the task's
start page and returns the first observation; `step(response)` parses the model's raw response,
acts, observes and records a Step (observation and URL from *before* the action, as training
needs). Nothing the agent or the site does raises: malformed actions, missing elements, slow pages
and even a dead browser become step errors or an ended episode with its status and reason recorded
(docs/method.md §4.4 limits: 30 steps, 5 identical consecutive actions, 5 consecutive parse failures).

The agent is told in words where the allowlist stopped it: a navigation to a host outside the task's
sites leaves the page where it was, and the next observation starts with
`blocked: URL is outside this task's sites`. A tab the page opens (target=_blank, window.open) on the
task's sites is followed, and the tab it came from stays open as history: Go Backward from the new
tab's first page returns to it (closing the new tab), and so does a followed tab the page closes itself
(window.close()). A tab opened outside the sites is closed. A page that closes the episode's last tab (Chromium
lets window.close() close a tab whose history has one entry) ends the episode as "error", the page's or the
agent's doing, not the browser's, whether it closes during a step or while the start page is being opened.

Native dialogs are answered as a person who meant the click would (webrl.env.dialogs: `alert` and `confirm`
accepted, `prompt` dismissed), and the next observation starts with what the page asked
(`the page asked "Delete?"; accepted`).
When the browser or the site fails (not the agent), the trajectory's metadata says so
(`infra_error`), so that a rollout can retry the task and keep the failure out of the labels.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from playwright.async_api import Error as PlaywrightError

from webrl.data.trajectory import Step, Task, Trajectory
from webrl.env.actions import Action, ActionParseError, parse_action
from webrl.env.backend import SiteBackend
from webrl.env.dialogs import DialogAnswerer
from webrl.env.evaluators import EvalResult, EvaluatorSiteError
from webrl.env.executor import NO_EARLIER_PAGE, PageGoneError, execute_action
from webrl.env.limits import EpisodeLimits, LimitTracker
from webrl.env.observation import Observation, ObservationConfig, observe
from webrl.env.site_guard import SiteGuard

if TYPE_CHECKING:
    from webrl.env.episode_context import FreshContext, ReusedContext

_TAB_CLOSED = "the page closed its tab during {when} (window.close()), and the episode has no other tab"
"""Why an episode ended whose page closed its last tab: the page's or the agent's doing, not the browser's."""
# Errors that mean "the browser side failed", as opposed to bugs in webrl or a backend.
_BROWSER_ERRORS = (PlaywrightError, PageGoneError, asyncio.TimeoutError, OSError)


@dataclass
class StepResult:
    """What the agent sees after a step: the new observation, the parsed action and any error."""

    observation: Observation
    action: Action | None
    error: str | None
    done: bool
    status: str


class Episode:
    """One task in one isolated browser context. Created by `BrowserPool.episode`."""

    def __init__(
        self,
        task: Task,
        backend: SiteBackend,
        holder: FreshContext | ReusedContext,
        limits: EpisodeLimits | None = None,
        observation: ObservationConfig | None = None,
    ) -> None:
        # A copy, so a backend filling in per-episode fields (MiniWoB's intent) never touches a shared Task.
        self.task = Task.from_dict(task.to_dict())
        self.backend = backend
        # The context's set-up and end differ between a fresh and a reused one (webrl.env.episode_context).
        self._holder = holder
        self.context = holder.context
        self.limits = limits or EpisodeLimits()
        self.observation_config = observation or ObservationConfig()
        self.trajectory = Trajectory(task=self.task)
        self.guard = SiteGuard(backend.allowed_origins(self.task), self.trajectory.metadata)
        self.dialogs = DialogAnswerer(self.trajectory.metadata)
        self.page: Any = None
        self._opened: list[Any] = []
        self._history_tabs: list[Any] = []
        self._observation = Observation.empty()
        self._tracker = LimitTracker(self.limits)

    @property
    def done(self) -> bool:
        return self.trajectory.status != "running"

    @property
    def observation(self) -> Observation:
        """The latest observation (the one the agent acts on next)."""
        return self._observation

    def _end(self, status: str, error: str | None = None) -> None:
        self.trajectory.status = status
        self.trajectory.error = error
        self.trajectory.final_url = self._observation.url
        self.trajectory.final_observation = self._observation.html
        self.trajectory.metadata["duration_s"] = round(self._tracker.elapsed_s, 3)

    async def _observe(self) -> Observation:
        """Observe the page; a dialog answered since the last observation is told at its top (webrl.env.dialogs)."""
        observed = await asyncio.wait_for(observe(self.page, self.observation_config), self.limits.action_timeout_s)
        self._observation = _told(observed, self.dialogs.notice())
        return self._observation

    async def reset(self) -> Observation:
        """Open the start page and return the first observation.

        If the site or browser fails here, or the start page closes its tab (`_reset_error`), the episode ends at
        once with status "error" (see `done`) and an empty observation is returned, so a rollout loop never has to
        catch.
        """
        if self.page is not None or self.done:
            raise RuntimeError(f"episode for task {self.task.task_id} was already reset")
        self._tracker.start()
        try:
            self.page = await self._holder.open_page(self)
            _set_timeouts(self.page, self.limits)
            await asyncio.wait_for(self.backend.start(self.page, self.task), timeout=self.limits.reset_timeout_s)
            await self._holder.started(self._on_new_tab)
            return await self._observe()
        except _BROWSER_ERRORS as err:
            closed = await _closed_by_its_page(self.page, self.context)
            self._end("error", _reset_error(self.trajectory.metadata, err, closed_by_its_page=closed))
            return self._observation

    def _on_new_tab(self, page: Any) -> None:
        self._opened.append(page)

    async def _act(self, action: Action) -> str | None:
        try:
            error = await execute_action(self.page, action, self.limits.action_timeout_s, self.limits.wait_action_s)
        except asyncio.TimeoutError:
            return f"{action.name} timed out after {self.limits.action_timeout_s:g}s"
        except PageGoneError:
            if not self._back_to_opener():
                raise
            return None
        if self._opened:
            # The action opened a tab (target=_blank, window.open): the agent has no tab actions,
            # so it follows the newest tab, as a person would, if that tab shows a page of the site.
            tab = self._opened[-1]
            self._opened.clear()
            _set_timeouts(tab, self.limits)
            await tab.wait_for_load_state("domcontentloaded")
            if not self.guard.on_site(tab.url):
                await tab.close()
                if not self.guard.refused_a_navigation:
                    return error or f"the new tab's page ({tab.url[:100]}) is outside the task's sites; it was closed"
                return error
            self._history_tabs.append(self.page)
            self.page = tab
        elif error == NO_EARLIER_PAGE and self._history_tabs:
            # Back from a followed tab's first page: close it and return to the tab that opened it.
            await self.page.close()
            self.page = self._history_tabs.pop()
            return None
        if self.guard.left_the_site(self.page.url):
            # A navigation refused on its way out (an https redirect hop) leaves an error page: go back.
            left = self.page.url
            await self.page.go_back(wait_until="domcontentloaded")
            if not self.guard.refused_a_navigation:
                return error or f"the page left the task's sites ({left[:100]}); went back"
        return error

    def _back_to_opener(self) -> bool:
        """If the page closed the followed tab the agent is in, go back to the tab that opened it (`_opener_tab`)."""
        opener = _opener_tab(self.page, self._history_tabs)
        self.page = opener or self.page
        return opener is not None

    async def step(self, response: str, prompt: str = "") -> StepResult:
        """Parse `response`, act, observe, record the step; return what the agent sees next."""
        if self.page is None and not self.done:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError(f"episode for task {self.task.task_id} already ended ({self.trajectory.status})")
        before = self._observation
        timings = {"act": 0.0, "observe": 0.0}
        action, error = await self._parse(response)
        ended = self._ends_without_acting(action)
        if ended is None:
            error, ended = await self._act_and_observe(action, error, timings)
        self._record_step(before, prompt, response, action, error, timings)
        ended = ended or self._tracker.reached(len(self.trajectory.steps))
        if ended:
            self._end(*ended)
        return StepResult(self._observation, action, error, self.done, self.trajectory.status)

    async def _parse(self, response: str) -> tuple[Action | None, str | None]:
        """The response's action (or the parse error), counted towards the repeat and parse-failure limits."""
        action, error = None, None
        try:
            # Off the event loop: a degenerate response takes milliseconds (bench/parser.py), and the
            # other episodes sharing the loop must not wait on it.
            action = await asyncio.to_thread(parse_action, response)
        except ActionParseError as err:
            error = f"invalid action: {err}"
        self._tracker.count(action)
        return action, error

    def _ends_without_acting(self, action: Action | None) -> tuple[str, str | None] | None:
        """The agent's exit (its message is the answer), or the episode's time running out, before any action."""
        if action is not None and action.name == "exit":
            self.trajectory.answer = action.message
            return "exit", None
        return self._tracker.out_of_time()

    async def _act_and_observe(
        self, action: Action | None, error: str | None, timings: dict[str, float]
    ) -> tuple[str | None, tuple[str, str | None] | None]:
        """Run `action` (None: a response that did not parse), observe the page: the step's error and any ending."""
        try:
            start = time.perf_counter()
            if action is not None:
                error = await self._act(action)
            timings["act"] = time.perf_counter() - start
            start = time.perf_counter()
            self._back_to_opener()
            await self._observe()
            timings["observe"] = time.perf_counter() - start
            notice = self.guard.notice()
            if notice:
                self._observation = _told(self._observation, notice)
                error = error or notice
            if action is not None and await self.backend.episode_done(self.page, self.task):
                return error, ("site_done", None)
        except _BROWSER_ERRORS as err:
            step = len(self.trajectory.steps)
            if await _closed_by_its_page(self.page, self.context):
                return error, ("error", _TAB_CLOSED.format(when=f"step {step}"))
            self.trajectory.metadata["infra_error"] = True
            return error, ("error", f"browser failed during step {step}: {_describe(err)}")
        return error, None

    def _record_step(
        self,
        before: Observation,
        prompt: str,
        response: str,
        action: Action | None,
        error: str | None,
        timings: dict[str, float],
    ) -> None:
        """Append the step, with the observation and URL from before the action, as training needs."""
        self.trajectory.steps.append(
            Step(
                index=len(self.trajectory.steps),
                prompt=prompt,
                observation=before.html,
                response=response,
                action=action.to_dict() if action else None,
                url=before.url,
                error=error,
                timings={k: round(v, 4) for k, v in timings.items()},
            )
        )

    async def evaluate(self) -> float | None:
        """Score the final state with the backend; sets and returns `trajectory.eval_reward`.

        None when the task has no programmatic evaluator, when a fuzzy_match has no judge (the
        ORM decides then), or when the browser is gone; the reason goes into the metadata. An
        evaluator that fails (an `EvaluationError` such as a WebArena `func:` helper webrl lacks, or
        any other exception) marks this episode "error", and only this one: see `_evaluation_failed`.
        A browser that fails while scoring, and a site an evaluator reads that cannot be reached
        (`EvaluatorSiteError`), are not the agent's doing: the episode is an `infra_error`, retried.
        An episode that already ended in error is not scored from its page: see `_score_error`.
        """
        if self.trajectory.status == "error":
            return _score_error(self.trajectory)
        if self.page is None or self.page.is_closed():
            _evaluation_failed(self.trajectory, PageGoneError("no live page to evaluate"), infra=True)
            return None
        try:
            result = await asyncio.wait_for(
                self.backend.evaluate(self.page, self.task, self.trajectory.answer),
                timeout=self.limits.action_timeout_s * 3,
            )
        except Exception as err:  # noqa: BLE001 - one task's evaluator must not stop the other episodes
            _evaluation_failed(self.trajectory, err, infra=isinstance(err, (*_BROWSER_ERRORS, EvaluatorSiteError)))
            return _score_error(self.trajectory)
        if isinstance(result, EvalResult):
            self.trajectory.metadata["eval"] = {
                "per_type": result.per_type,
                "needs_judge": result.needs_judge,
                **result.details,
            }
            result = None if result.needs_judge else result.score
        self.trajectory.eval_reward = result
        return result

    async def close(self) -> None:
        """End the episode with its context (a reused one is wiped by the pool); safe twice and after a crash."""
        if not self.done:
            self._end("error", "episode closed before it ended")
        await self._holder.release()


def _opener_tab(page: Any, history_tabs: list[Any]) -> Any | None:
    """The tab to go on in when the page closed the followed tab `page` (window.close()); None if there is none.

    The agent's tab closing is the site's doing, not the browser failing: the tab it came from is still there,
    as after Go Backward from the followed tab's first page. None when the page is open, the browser died, or
    no tab that opened it is left (the first tab closed).
    """
    browser = page.context.browser
    if not page.is_closed() or not browser or not browser.is_connected():
        return None
    while page.is_closed() and history_tabs:
        page = history_tabs.pop()
    return None if page.is_closed() else page


def _reset_error(metadata: dict[str, Any], err: BaseException, *, closed_by_its_page: bool) -> str:
    """Why the reset that `err` stopped failed; `metadata` is marked an `infra_error` when the browser or site failed.

    A start page that closed its own tab (`closed_by_its_page`: window.close(), legal once the tab's history has one
    entry) is the task's site doing what it does every time, as when it does so during a step (`_TAB_CLOSED`): a
    retry would end the same way, and an infra_error would keep the task out of every rate. Whether that close lands
    during the reset or just after it is a matter of timing, so both end the episode as its own "error".
    """
    if closed_by_its_page:
        return _TAB_CLOSED.format(when="reset")
    reason = _describe(err)
    if metadata["blocked_navigations"]:
        # A start page that redirects off the site fails here, its navigation refused. A refused font or
        # script of a slow start page is no such sign: the site failed, and that is worth another try.
        reason += f" (requests outside the task's sites refused: {metadata['blocked_urls']})"
    else:
        # Not the allowlist (the task's own fault) but the browser or the site: worth another try.
        metadata["infra_error"] = True
    return f"reset failed: {reason}"


def _set_timeouts(page: Any, limits: EpisodeLimits) -> None:
    page.set_default_timeout(limits.action_timeout_s * 1000)
    page.set_default_navigation_timeout(limits.reset_timeout_s * 1000)


async def _closed_by_its_page(page: Any, context: Any) -> bool:
    """Whether the episode's tab `page` is closed while its context and browser live: the page closed it.

    Then the page or the agent ended the episode (window.close()), not the browser: no retry is owed. A tab
    closed with its context (the pool closing it) or with its browser (a crash) is an infrastructure failure;
    the context's liveness is asked of the browser, since Playwright may not yet have reported that it closed.
    """
    browser = context.browser
    if page is None or not page.is_closed() or browser is None or not browser.is_connected():
        return False
    try:
        await context.cookies()
    except PlaywrightError:
        return False
    return True


def _told(observation: Observation, notice: str | None) -> Observation:
    """`observation` with `notice` at its top: the observation is what the agent reads next turn."""
    if not notice:
        return observation
    return Observation(f"{notice}\n{observation.html}", observation.url, observation.title)


def _describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300]}" if text else type(err).__name__


def _score_error(trajectory: Trajectory) -> float | None:
    """The reward of an episode that ended in error: None for a browser, site or engine failure (`infra_error`:
    no evidence about the agent, kept out of every rate), else 0.0, a failure. That is the agent's action or
    output, or a task whose evaluator cannot run: leaving it unscored would drop the task from the rates and
    the paired tests, so a checkpoint would look better the more of its tasks end in error.
    """
    if not trajectory.infra_error:
        trajectory.eval_reward = 0.0
    return trajectory.eval_reward


def _evaluation_failed(trajectory: Trajectory, err: Exception, *, infra: bool) -> None:
    """End as "error" with a message naming the exception; the status the agent ended with stays as `ended_as`.

    `infra`: the browser or the site failed, not the evaluator's config (`Trajectory.infra_error`: retried).
    """
    reason = f"{type(err).__name__}: {err}"
    metadata = trajectory.metadata
    metadata["eval_error"] = reason
    metadata["ended_as"] = trajectory.status
    if infra:
        metadata["infra_error"] = True
    trajectory.status, trajectory.error = "error", f"evaluation failed: {reason}"
