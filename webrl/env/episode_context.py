"""The browser context an episode runs in: a fresh one per episode, or (opt-in) one reused in turn, wiped between.

Both prepare the episode's tab (`open_page`), follow the tabs the page opens once the start page is
up (`started`), and end with the episode (`release`). A fresh context per episode (the default) is
isolation by construction, but every episode then pays for a new renderer process and Playwright's
set-up of a new page. A reused one (`BrowserConfig.reuse_contexts`) keeps its page (so its
renderer process), its init script, its site guard's routes and its OutsideProxy, and between two
episodes removes everything a page can leave behind for the next one:

- the other tabs: closed (again at the end, and at the next episode's start, for one opened late);
- the tab's document, its timers and its sessionStorage: scripts are stopped first, so nothing
  writes after the wipe, the sessionStorage of the tab's origin and `window.name` are emptied (one
  script in the stopped document), and the tab goes to about:blank;
- the mouse pointer: moved off the page (a fresh context's was never on it), since the next start page would
  otherwise open (`:hover`) whatever menu lies under the spot where the last episode left it;
- cookies, permissions, and for every allowed origin localStorage, IndexedDB, Cache Storage,
  service workers and the rest of `Storage.clearDataForOrigin`'s "all"; the HTTP cache;
- history: the next episode's start page becomes the tab's only entry (`Page.resetNavigationHistory`).

sessionStorage can only be cleared through a document of its origin, so a context whose tab showed
documents of any other origin (frames included) is closed rather than reused; so is one whose
episode failed in the browser, or whose browser is no longer the pool's. A backend's
`setup_context` runs again for each episode, on the wiped context.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from playwright.async_api import Error as PlaywrightError

from webrl.env.backend import origin_of
from webrl.env.executor import NAVIGATION_FLAG_JS
from webrl.env.observation_script import HOVER_LISTENERS_JS
from webrl.env.outside_proxy import OutsideProxy

EPISODE_INIT_JS = NAVIGATION_FLAG_JS + HOVER_LISTENERS_JS
"""The init script of every episode's context: navigation marks (webrl.env.executor) and hover listeners."""


class FreshContext:
    """A context made for one episode: set up by it, closed with it."""

    def __init__(self, context: Any) -> None:
        self.context = context

    async def open_page(self, episode: Any) -> Any:
        """The init script, the episode's site guard and dialog answerer, the backend's set-up, then a new tab."""
        await self.context.add_init_script(EPISODE_INIT_JS)
        await episode.guard.install(self.context)
        episode.dialogs.install(self.context)
        await episode.backend.setup_context(self.context, episode.task)
        return await self.context.new_page()

    async def started(self, on_new_tab: Callable[[Any], None]) -> None:
        """After the start page (whose `|AND|` tabs the agent is not led to), tabs the page opens go to `on_new_tab`."""
        self.context.on("page", on_new_tab)

    async def release(self) -> None:
        """Close the context; safe twice and after the browser died."""
        with contextlib.suppress(PlaywrightError):
            await self.context.close()


class ReusedContext:
    """A browser context and its OutsideProxy, lent to one episode at a time by the BrowserPool."""

    def __init__(self, browser: Any, context: Any, proxy: OutsideProxy, origins: Iterable[str]) -> None:
        self.browser = browser
        """The Browser the context lives in: a relaunched Chromium leaves this context dead."""
        self.context = context
        self.proxy = proxy
        self.origins = sorted(origins)
        self.page: Any = None
        """The tab every episode starts in (created by the first episode)."""
        self.episode: Any = None
        """The Episode using the context now, or last: its guard counts the refused requests (the wipe's too, which
        can only be its page's)."""
        self._cdp: Any = None
        self._shown: set[str] = set()
        self._follow_tab: Callable[[Any], None] | None = None

    async def open_page(self, episode: Any) -> Any:
        """Hand the context to `episode`: its init script, guard and dialog answerer the first time, the backend's
        set-up, the tab."""
        self.episode = episode
        self.proxy.on_blocked = episode.guard.count_blocked
        if self.page is None:
            await self.context.add_init_script(EPISODE_INIT_JS)
            await episode.guard.install(self.context, current=lambda: self.episode.guard)
            episode.dialogs.install(self.context, current=lambda: self.episode.dialogs)
            self.context.on("page", self._on_new_tab)
            self.page = await self.context.new_page()
            self.page.on("framenavigated", self._on_navigated)
            self._cdp = await self.context.new_cdp_session(self.page)
        await self._close_other_tabs()
        await episode.backend.setup_context(self.context, episode.task)
        return self.page

    async def started(self, on_new_tab: Callable[[Any], None]) -> None:
        """After the start page: the tab's history begins there, and tabs the page opens go to `on_new_tab`."""
        await self._cdp.send("Page.resetNavigationHistory")
        self._follow_tab = on_new_tab

    def _on_new_tab(self, page: Any) -> None:
        if self._follow_tab is not None:
            self._follow_tab(page)

    def _on_navigated(self, frame: Any) -> None:
        if frame.url.startswith(("http:", "https:")):
            self._shown.add(origin_of(frame.url))

    def reusable(self, browser: Any) -> bool:
        """Whether the wipe can make this context as good as new: same live browser, one origin shown, tab open."""
        if self.browser is not browser or not browser.is_connected() or self.page is None or self.page.is_closed():
            return False
        on_site = self.page.url.startswith(("http:", "https:"))
        return self._shown <= ({origin_of(self.page.url)} if on_site else set())

    async def wipe(self, browser: Any) -> bool:
        """Remove what the last episode left (module docstring); False when the context must be closed instead."""
        self._follow_tab = None
        if not self.reusable(browser):
            return False
        try:
            if not await self._clear_tabs():
                return False
            await self.context.clear_cookies()
            await self.context.clear_permissions()
            for origin in self.origins:
                await self._cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
            await self._cdp.send("Network.clearBrowserCache")
            await self._close_other_tabs()
        except PlaywrightError:
            return False
        self._shown.clear()
        return True

    async def _clear_tabs(self) -> bool:
        """Close the other tabs; stop the tab's scripts, clear its sessionStorage and name, leave it on about:blank
        with the pointer off the page.

        False when the tab's document would not clear its sessionStorage (a sandboxed one has none to reach).
        """
        await self._close_other_tabs()
        await self._cdp.send("Emulation.setScriptExecutionDisabled", {"value": True})
        # One Runtime.evaluate in the stopped document, through the tab's CDP session (page.evaluate would first
        # install Playwright's helper script): no script of the page runs again to write either before it is left,
        # and the tab keeps its name across the navigation. `_shown` is at most this document's origin (`reusable`).
        expression = "window.name = ''" + ("; sessionStorage.clear()" if self._shown else "")
        cleared = await self._cdp.send("Runtime.evaluate", {"expression": expression})
        if "exceptionDetails" in cleared:
            return False
        await self.page.goto("about:blank")
        await self.page.mouse.move(-1, -1)
        await self._cdp.send("Emulation.setScriptExecutionDisabled", {"value": False})
        return True

    async def release(self) -> None:
        """Nothing: the pool wipes the context (`wipe`) once the episode is over, or closes it."""

    async def _close_other_tabs(self) -> None:
        """Close every tab but the episodes' own: done again at the wipe's end and at the next episode's
        start, for a tab opened just before the wipe, which Playwright reports only once it is set up."""
        for page in self.context.pages:
            if page is not self.page:
                await page.close()

    async def close(self) -> None:
        """Close the context and stop its proxy; safe after the browser died."""
        with contextlib.suppress(PlaywrightError):
            await self.context.close()
        await self.proxy.__aexit__(None, None, None)
