"""BrowserPool: one Chromium, one isolated context per episode, and recovery when Chromium dies.

Contexts are cheap (milliseconds) and share nothing (cookies, storage, cache), so running many
episodes in one browser gives both isolation and speed; a semaphore caps how many run at once. A
crashed Chromium must not take a training run down: the episodes that were using it end with
status "error" on their next call, and the next episode the pool hands out gets a relaunched
browser.

    async with BrowserPool(BrowserConfig(max_concurrency=4)) as pool:
        async with pool.episode(task, backend) as episode:
            observation = await episode.reset()
            result = await episode.step('do(action="Click", element="3")')
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright

from webrl.data.trajectory import Task
from webrl.env.backend import SiteBackend
from webrl.env.chromium import DEFAULT_LAUNCH_ARGS, find_chromium, is_sandbox_failure, sandbox_unavailable_reason
from webrl.env.episode import Episode
from webrl.env.episode_context import FreshContext, ReusedContext
from webrl.env.limits import EpisodeLimits
from webrl.env.observation import ObservationConfig
from webrl.env.outside_proxy import OutsideProxy
from webrl.env.screenshots import ScreenshotRecorder

log = logging.getLogger(__name__)


@dataclass
class BrowserConfig:
    """How the pool launches Chromium and how many episodes share it."""

    executable_path: str | None = None
    """Chromium binary; None searches WEBRL_CHROMIUM, the system (a headless shell first), then Playwright's cache."""
    headless: bool = True
    """Run without a window (the only option on servers)."""
    max_concurrency: int = 8
    """Episodes (browser contexts) open at the same time; further `episode()` calls wait."""
    launch_args: list[str] = field(default_factory=lambda: list(DEFAULT_LAUNCH_ARGS))
    """Chromium command-line flags (`--no-sandbox` among them turns the sandbox off outright)."""
    viewport_width: int = 1280
    """Page width in CSS pixels (WebRL: 1280)."""
    viewport_height: int = 720
    """Page height in CSS pixels (WebRL: 720)."""
    launch_timeout_s: float = 30.0
    """Limit for Chromium to start."""
    reuse_contexts: bool = False
    """Hand a finished episode's context, wiped, to the next episode with the same allowed origins
    (webrl.env.episode_context). Off by default: a fresh context is isolation by construction, a reused
    one is isolation by wiping; on, it saves a renderer process and a page set-up per episode."""

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError(f"BrowserConfig.max_concurrency must be >= 1, got {self.max_concurrency}")


class BrowserPool:
    """Hands out episodes, each in its own context of one shared Chromium (an async context manager)."""

    def __init__(self, config: BrowserConfig | None = None) -> None:
        self.config = config or BrowserConfig()
        self.executable_path = find_chromium(self.config.executable_path, headless=self.config.headless)
        self.launches = 0
        self.relaunches = 0
        self.sandbox = "--no-sandbox" not in self.config.launch_args and sandbox_unavailable_reason() is None
        """Whether Chromium runs in its sandbox: decided here, and turned off by a launch that fails for want of it."""
        self._playwright: Any = None
        self._browser: Any = None
        self._lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(self.config.max_concurrency)
        self._idle: dict[frozenset[str], list[ReusedContext]] = {}
        self.screenshots: ScreenshotRecorder | None = None
        """When set, the rollout driver records the screenshots of the episodes it `wants` (webrl.env.screenshots)."""

    async def __aenter__(self) -> BrowserPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start Playwright and launch Chromium (done by `async with`)."""
        if self._playwright is None:
            self._playwright = await async_playwright().start()
        await self.browser()

    async def _launch(self) -> None:
        try:
            self._browser = await self._launch_chromium()
        except PlaywrightError as err:
            if not self.sandbox or not is_sandbox_failure(str(err)):
                raise
            log.warning("Chromium's sandbox cannot start here; launching without it: %s", str(err).splitlines()[0])
            self.sandbox = False
            self._browser = await self._launch_chromium()
        self.launches += 1

    async def _launch_chromium(self) -> Any:
        return await self._playwright.chromium.launch(
            executable_path=self.executable_path,
            headless=self.config.headless,
            args=self.config.launch_args,
            # Without it Playwright adds --no-sandbox itself.
            chromium_sandbox=self.sandbox,
            timeout=self.config.launch_timeout_s * 1000,
        )

    async def browser(self) -> Any:
        """The live Browser, relaunching Chromium first if it died."""
        if self._playwright is None:
            raise RuntimeError("BrowserPool is not started: use `async with BrowserPool(...) as pool`")
        async with self._lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            if self._browser is not None:
                self.relaunches += 1
                log.warning("Chromium died; relaunching it (relaunch %d)", self.relaunches)
            await self._launch()
            return self._browser

    async def _new_context(self, proxy: dict[str, Any], storage_state: dict[str, Any] | None = None) -> Any:
        options = {
            # A logged-in session (WebArena's require_login), copied into this context only.
            "storage_state": storage_state,
            "viewport": {"width": self.config.viewport_width, "height": self.config.viewport_height},
            # Service workers fetch outside context.route; the proxy would still stop them, but a
            # worker outliving its page is state no episode should inherit or leave behind.
            "service_workers": "block",
            # Every request for a host outside the allowlist goes to the episode's OutsideProxy.
            "proxy": proxy,
        }
        try:
            return await (await self.browser()).new_context(**options)
        except PlaywrightError:
            # Chromium may have died between the liveness check and the call: one relaunch, then fail.
            if self._browser is not None and self._browser.is_connected():
                raise
            return await (await self.browser()).new_context(**options)

    @asynccontextmanager
    async def episode(
        self,
        task: Task,
        backend: SiteBackend,
        limits: EpisodeLimits | None = None,
        observation: ObservationConfig | None = None,
    ) -> AsyncIterator[Episode]:
        """An Episode for `task` in a fresh context; waits while `max_concurrency` are open.

        With `reuse_contexts` the context may be a wiped one, except for a task with a storage state
        (a logged-in session), which always gets a fresh one.
        """
        reuse = self.config.reuse_contexts and backend.storage_state(task) is None
        async with self._slots:
            opened = self._reused_episode if reuse else self._fresh_episode
            async with opened(task, backend, limits, observation) as episode:
                yield episode

    @asynccontextmanager
    async def _fresh_episode(
        self, task: Task, backend: SiteBackend, limits: EpisodeLimits | None, observation: ObservationConfig | None
    ) -> AsyncIterator[Episode]:
        async with OutsideProxy() as proxy:
            proxy_settings = proxy.context_proxy(backend.allowed_origins(task))
            context = await self._new_context(proxy_settings, backend.storage_state(task))
            episode = Episode(task, backend, FreshContext(context), limits, observation)
            proxy.on_blocked = episode.guard.count_blocked
            try:
                yield episode
            finally:
                await episode.close()

    @asynccontextmanager
    async def _reused_episode(
        self, task: Task, backend: SiteBackend, limits: EpisodeLimits | None, observation: ObservationConfig | None
    ) -> AsyncIterator[Episode]:
        origins = frozenset(backend.allowed_origins(task))
        reused = await self._take_context(origins)
        episode = Episode(task, backend, reused, limits, observation)
        try:
            yield episode
        finally:
            await episode.close()
            # An episode the browser failed in may have left the context half torn down: not worth the risk.
            if not episode.trajectory.metadata.get("infra_error") and await reused.wipe(self._browser):
                self._idle.setdefault(origins, []).append(reused)
            else:
                await reused.close()

    async def _take_context(self, origins: frozenset[str]) -> ReusedContext:
        """An idle wiped context for `origins`, or a new one (with its own OutsideProxy)."""
        idle = self._idle.get(origins, [])
        while idle:
            reused = idle.pop()
            if reused.browser is self._browser and self._browser.is_connected():
                return reused
            await reused.close()
        proxy = await OutsideProxy().__aenter__()
        try:
            context = await self._new_context(proxy.context_proxy(origins))
        except BaseException:
            await proxy.__aexit__(None, None, None)
            raise
        return ReusedContext(self._browser, context, proxy, origins)

    async def browser_pid(self) -> int | None:
        """Process id of the Chromium browser process (for monitoring, and for crash tests)."""
        browser = await self.browser()
        session = await browser.new_browser_cdp_session()
        try:
            info = await session.send("SystemInfo.getProcessInfo")
        finally:
            await session.detach()
        return next((p["id"] for p in info["processInfo"] if p["type"] == "browser"), None)

    async def close(self) -> None:
        """Close the idle contexts, Chromium and Playwright; safe after a crash and when called twice."""
        for idle in self._idle.values():
            for reused in idle:
                await reused.close()
        self._idle.clear()
        if self._browser is not None:
            try:
                await self._browser.close()
            except PlaywrightError:
                log.debug("browser already gone at close")
            self._browser = None
        if self._playwright is not None:
            await self._playwright.stop()
            self._playwright = None
