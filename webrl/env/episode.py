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
tab's first page returns to it (closing the new tab). A tab opened outside the sites is closed.
When the browser or the site fails (not the agent), the trajectory's metadata says so
(`infra_error`), so that a rollout can retry the task and keep the failure out of the labels.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any

from playwright.async_api import Error as PlaywrightError

from webrl.data.trajectory import Step, Task, Trajectory
from webrl.env.actions import Action, ActionParseError, parse_action
from webrl.env.backend import SiteBackend
from webrl.env.evaluators import EvalResult, EvaluationError
from webrl.env.executor import NAVIGATION_FLAG_JS, NO_EARLIER_PAGE, PageGoneError, execute_action
from webrl.env.observation import Observation, ObservationConfig, observe

# Errors that mean "the browser side failed", as opposed to bugs in webrl or a backend.
_BROWSER_ERRORS = (PlaywrightError, PageGoneError, asyncio.TimeoutError, OSError)
_KEPT_BLOCKED_URLS = 20


def outside_origins(origins: set[str] | list[str]) -> re.Pattern:
    """A URL pattern matching every http(s)/ws URL whose origin is NOT one of `origins`.

    Routing only these keeps allowed traffic off the Python side entirely: Playwright matches the
    pattern in its driver, so a page's own scripts and styles load without a round trip per request.
    """
    allowed = "|".join(re.escape(origin) for origin in sorted(origins))
    return re.compile(rf"^(?!(?:{allowed})(?:[/?#]|$))")


@dataclass
class EpisodeLimits:
    """When an episode stops, and how long any part of it may take."""

    max_steps: int = 30
    """Steps (agent turns) before the episode ends with status "max_steps"."""
    max_repeated_actions: int = 5
    """Identical consecutive actions (comments ignored) that end it with "repeated_action"."""
    max_parse_failures: int = 5
    """Consecutive unparsable responses that end it with "parse_failures"."""
    action_timeout_s: float = 10.0
    """Limit for one action and for one observation."""
    reset_timeout_s: float = 30.0
    """Limit for opening the start page (and for any page load)."""
    episode_timeout_s: float = 300.0
    """Wall-clock limit from reset; a step after it ends the episode with "timeout"."""
    wait_action_s: float = 1.0
    """How long the Wait action waits."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_repeated_actions", "max_parse_failures"):
            if getattr(self, name) < 1:
                raise ValueError(f"EpisodeLimits.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("action_timeout_s", "reset_timeout_s", "episode_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"EpisodeLimits.{name} must be > 0, got {getattr(self, name)}")


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
        context: Any,
        limits: EpisodeLimits | None = None,
        observation: ObservationConfig | None = None,
    ) -> None:
        # A copy, so a backend filling in per-episode fields (MiniWoB's intent) never touches a shared Task.
        self.task = Task.from_dict(task.to_dict())
        self.backend = backend
        self.context = context
        self.limits = limits or EpisodeLimits()
        self.observation_config = observation or ObservationConfig()
        self.trajectory = Trajectory(task=self.task)
        self.trajectory.metadata["blocked_requests"] = 0
        self.page: Any = None
        self._opened: list[Any] = []
        self._history_tabs: list[Any] = []
        self._blocked_now: list[str] = []
        self._allowed = set(backend.allowed_origins(self.task))
        self._outside = outside_origins(self._allowed)
        self._observation = Observation.empty()
        self._started = 0.0
        self._repeats = 0
        self._last_key: tuple | None = None
        self._parse_failures = 0

    @property
    def done(self) -> bool:
        return self.trajectory.status != "running"

    @property
    def observation(self) -> Observation:
        """The latest observation (the one the agent acts on next)."""
        return self._observation

    def count_blocked(self, url: str) -> None:
        """Record a request the pool's OutsideProxy refused: a redirect hop or a tunnel, most often the page leaving."""
        self._record_blocked(url, tell=True)

    def _record_blocked(self, url: str, tell: bool) -> None:
        """Count a refused request; `tell` also puts it in the agent's next observation."""
        if tell:
            self._blocked_now.append(url)
        metadata = self.trajectory.metadata
        metadata["blocked_requests"] += 1
        if len(metadata.setdefault("blocked_urls", [])) < _KEPT_BLOCKED_URLS:
            metadata["blocked_urls"].append(url[:200])

    async def _block(self, route: Any) -> None:
        """Refuse and count a request outside the task's origins (only those reach this handler).

        A navigation is answered 204 No Content, so that it does not happen and the page stays on
        the site; aborting it would replace the page with an error page. Anything else is aborted.
        """
        navigation = route.request.is_navigation_request()
        self._record_blocked(route.request.url, tell=navigation)
        try:
            if navigation:
                await route.fulfill(status=204)
            else:
                await route.abort("blockedbyclient")
        except PlaywrightError:
            return  # the context closed under the request; nothing left to protect

    async def _block_socket(self, socket: Any) -> None:
        """Refuse a WebSocket to an outside origin: it is never connected to its server."""
        self.count_blocked(socket.url)
        try:
            await socket.close(code=1008, reason="blocked: outside the task's sites")
        except PlaywrightError:
            return

    def _end(self, status: str, error: str | None = None) -> None:
        self.trajectory.status = status
        self.trajectory.error = error
        self.trajectory.final_url = self._observation.url
        self.trajectory.final_observation = self._observation.html
        self.trajectory.metadata["duration_s"] = round(time.monotonic() - self._started, 3)

    async def _observe(self) -> Observation:
        self._observation = await asyncio.wait_for(
            observe(self.page, self.observation_config), timeout=self.limits.action_timeout_s
        )
        return self._observation

    async def reset(self) -> Observation:
        """Open the start page and return the first observation.

        If the site or browser fails here, the episode ends at once with status "error" (see
        `done`) and an empty observation is returned, so a rollout loop never has to catch.
        """
        if self.page is not None or self.done:
            raise RuntimeError(f"episode for task {self.task.task_id} was already reset")
        self._started = time.monotonic()
        try:
            await self.context.add_init_script(NAVIGATION_FLAG_JS)
            await self.context.route(outside_origins(self._allowed), self._block)
            sockets = {o.replace("http", "ws", 1) for o in self._allowed if o.startswith("http")}
            await self.context.route_web_socket(outside_origins(sockets), self._block_socket)
            await self.backend.setup_context(self.context, self.task)
            self.page = await self.context.new_page()
            self._set_timeouts(self.page)
            self.context.on("page", self._on_new_tab)
            await asyncio.wait_for(self.backend.start(self.page, self.task), timeout=self.limits.reset_timeout_s)
            return await self._observe()
        except _BROWSER_ERRORS as err:
            reason = _describe(err)
            if self.trajectory.metadata["blocked_requests"]:
                # A start page that redirects off the site fails here, its navigation refused.
                reason += f" (requests outside the task's sites refused: {self.trajectory.metadata['blocked_urls']})"
            else:
                # Not the allowlist (the task's own fault) but the browser or the site: worth another try.
                self.trajectory.metadata["infra_error"] = True
            self._end("error", f"reset failed: {reason}")
            return self._observation

    def _set_timeouts(self, page: Any) -> None:
        page.set_default_timeout(self.limits.action_timeout_s * 1000)
        page.set_default_navigation_timeout(self.limits.reset_timeout_s * 1000)

    def _on_new_tab(self, page: Any) -> None:
        self._opened.append(page)

    async def _act(self, action: Action) -> str | None:
        try:
            error = await execute_action(self.page, action, self.limits.action_timeout_s, self.limits.wait_action_s)
        except asyncio.TimeoutError:
            return f"{action.name} timed out after {self.limits.action_timeout_s:g}s"
        if self._opened:
            # The action opened a tab (target=_blank, window.open): the agent has no tab actions,
            # so it follows the newest tab, as a person would, if that tab shows a page of the site.
            tab = self._opened[-1]
            self._opened.clear()
            self._set_timeouts(tab)
            await tab.wait_for_load_state("domcontentloaded")
            if not self._on_site(tab.url):
                await tab.close()
                if not self._blocked_now:
                    return error or f"the new tab's page ({tab.url[:100]}) is outside the task's sites; it was closed"
                return error
            self._history_tabs.append(self.page)
            self.page = tab
        elif error == NO_EARLIER_PAGE and self._history_tabs:
            # Back from a followed tab's first page: close it and return to the tab that opened it.
            await self.page.close()
            self.page = self._history_tabs.pop()
            return None
        if self._left_the_site(self.page.url):
            # A navigation refused on its way out (an https redirect hop) leaves an error page: go back.
            left = self.page.url
            await self.page.go_back(wait_until="domcontentloaded")
            if not self._blocked_now:
                return error or f"the page left the task's sites ({left[:100]}); went back"
        return error

    def _blocked_notice(self) -> str | None:
        """What the agent is told about navigations the allowlist refused during this step, if any."""
        if not self._blocked_now:
            return None
        urls = list(dict.fromkeys(f"https:{url}" if url.startswith("//") else url for url in self._blocked_now))
        self._blocked_now.clear()
        return "\n".join(f"blocked: {url[:200]} is outside this task's sites" for url in urls[:3])

    def _on_site(self, url: str) -> bool:
        return url.startswith(("http:", "https:")) and not self._outside.search(url)

    def _left_the_site(self, url: str) -> bool:
        """An error page, or a page outside the task's sites (about:blank and the like are neither)."""
        return url.startswith("chrome-error:") or (url.startswith(("http:", "https:")) and not self._on_site(url))

    async def step(self, response: str, prompt: str = "") -> StepResult:
        """Parse `response`, act, observe, record the step; return what the agent sees next."""
        if self.page is None and not self.done:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError(f"episode for task {self.task.task_id} already ended ({self.trajectory.status})")
        before = self._observation
        action: Action | None = None
        error: str | None = None
        ended: tuple[str, str | None] | None = None
        timings = {"act": 0.0, "observe": 0.0}
        try:
            # Off the event loop: a degenerate response takes milliseconds (bench/parser.py), and the
            # other episodes sharing the loop must not wait on it.
            action = await asyncio.to_thread(parse_action, response)
            self._parse_failures = 0
            self._repeats = self._repeats + 1 if action.key() == self._last_key else 1
            self._last_key = action.key()
        except ActionParseError as err:
            error = f"invalid action: {err}"
            self._parse_failures += 1
            self._repeats, self._last_key = 0, None
        if action is not None and action.name == "exit":
            self.trajectory.answer = action.message
            ended = ("exit", None)
        elif time.monotonic() - self._started > self.limits.episode_timeout_s:
            ended = ("timeout", f"episode exceeded {self.limits.episode_timeout_s:g}s")
        else:
            try:
                start = time.perf_counter()
                if action is not None:
                    error = await self._act(action)
                timings["act"] = time.perf_counter() - start
                start = time.perf_counter()
                await self._observe()
                timings["observe"] = time.perf_counter() - start
                notice = self._blocked_notice()
                if notice:
                    # In the observation itself, since that is what the agent reads next turn.
                    observed = self._observation
                    self._observation = Observation(f"{notice}\n{observed.html}", observed.url, observed.title)
                    error = error or notice
                if action is not None and await self.backend.episode_done(self.page, self.task):
                    ended = ("site_done", None)
            except _BROWSER_ERRORS as err:
                self.trajectory.metadata["infra_error"] = True
                ended = ("error", f"browser failed during step {len(self.trajectory.steps)}: {_describe(err)}")
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
        ended = ended or self._limit_reached()
        if ended:
            self._end(*ended)
        return StepResult(self._observation, action, error, self.done, self.trajectory.status)

    def _limit_reached(self) -> tuple[str, str | None] | None:
        limits = self.limits
        if self._parse_failures >= limits.max_parse_failures:
            return "parse_failures", f"{self._parse_failures} consecutive responses did not parse"
        if self._repeats >= limits.max_repeated_actions:
            return "repeated_action", f"the same action {self._repeats} times in a row"
        if len(self.trajectory.steps) >= limits.max_steps:
            return "max_steps", None
        if time.monotonic() - self._started > limits.episode_timeout_s:
            return "timeout", f"episode exceeded {limits.episode_timeout_s:g}s"
        return None

    async def evaluate(self) -> float | None:
        """Score the final state with the backend; sets and returns `trajectory.eval_reward`.

        None when the task has no programmatic evaluator, when a fuzzy_match has no judge (the
        ORM decides then), or when the browser is gone; the reason goes into the metadata. A task
        whose evaluator cannot run here (`EvaluationError`, e.g. a WebArena `func:` helper webrl
        lacks) marks this episode "error" with that message, and only this one.
        """
        if self.page is None or self.page.is_closed():
            self.trajectory.metadata["eval_error"] = "no live page to evaluate"
            return None
        try:
            result = await asyncio.wait_for(
                self.backend.evaluate(self.page, self.task, self.trajectory.answer),
                timeout=self.limits.action_timeout_s * 3,
            )
        except _BROWSER_ERRORS as err:
            self.trajectory.metadata["eval_error"] = _describe(err)
            return None
        except EvaluationError as err:
            self.trajectory.metadata["eval_error"] = f"{type(err).__name__}: {err}"
            self.trajectory.metadata["ended_as"] = self.trajectory.status
            self.trajectory.status, self.trajectory.error = "error", f"{type(err).__name__}: {err}"
            return None
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
        """Close the episode's browser context; safe to call twice and after the browser died."""
        if not self.done:
            self._end("error", "episode closed before it ended")
        try:
            await self.context.close()
        except PlaywrightError:
            return


def _describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300]}" if text else type(err).__name__
