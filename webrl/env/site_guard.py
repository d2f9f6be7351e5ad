"""Keeps one episode on its task's sites: refuses every request elsewhere, counts it, and tells the agent.

Requests to an origin outside the task's sites never reach their server: a navigation is answered
204 No Content (the page stays where it was), anything else is aborted, and a WebSocket is closed
before it connects. The trajectory's metadata counts them (`blocked_requests`, of them the
navigations of the tab itself `blocked_navigations`, the first `blocked_urls`), and such a refused navigation
becomes a line the agent reads at the top of its next observation (`blocked: URL is outside this task's sites`),
since the page itself shows no sign of it. An iframe's refused page is counted as a request only: the agent
did not ask for it, and a start page's refused iframe is no sign of the task leading off its sites.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from playwright.async_api import Error as PlaywrightError

_KEPT_BLOCKED_URLS = 20


def outside_origins(origins: set[str] | list[str]) -> re.Pattern:
    """A URL pattern matching every http(s)/ws URL whose origin is NOT one of `origins`.

    Routing only these keeps allowed traffic off the Python side entirely: Playwright matches the
    pattern in its driver, so a page's own scripts and styles load without a round trip per request.
    """
    allowed = "|".join(re.escape(origin) for origin in sorted(origins))
    return re.compile(rf"^(?!(?:{allowed})(?:[/?#]|$))")


def _of_a_tab(navigation: Any) -> bool:
    """Whether a navigation request is a tab's own, not an iframe's.

    Only a tab's navigation is the agent's to hear about: an iframe's page (a map, a video) is one of the
    page's own requests, refused as quietly as its fonts. A new tab's first request comes before its frame.
    """
    try:
        return navigation.frame.parent_frame is None
    except PlaywrightError:
        return True


class SiteGuard:
    """The allowlist of one episode: which URLs are on its sites, and what was refused so far."""

    def __init__(self, allowed_origins: set[str], metadata: dict[str, Any]) -> None:
        self.allowed = set(allowed_origins)
        self._outside = outside_origins(self.allowed)
        self._metadata = metadata
        self._metadata["blocked_requests"] = 0
        self._metadata["blocked_navigations"] = 0
        self._refused_navigations: list[str] = []

    async def install(self, context: Any, current: Callable[[], SiteGuard] | None = None) -> None:
        """Route the context's requests and WebSockets to outside origins through the guard.

        `current`, for a context that serves episodes in turn (webrl.env.episode_context), names the
        guard of the episode running when a request comes: that episode counts it. All of them have
        this guard's allowlist.

        The route costs CPU (Playwright pauses every request of a routed context, and turns its HTTP
        cache off: 6–8 ms more per MiniWoB++ page load, measured), but the OutsideProxy cannot replace
        it: a plain-http request reaches the proxy with nothing to say whether it is a navigation,
        and an https one only as a tunnel to `host:port`. The proxy alone would let a page's own
        requests succeed (204) and tell the agent of each, and would turn a refused https navigation
        into an error page named by its host only (tests/env/test_allowlist.py pins all three).
        """
        guard = current or (lambda: self)
        await context.route(self._outside, lambda route: guard()._block(route))
        sockets = {o.replace("http", "ws", 1) for o in self.allowed if o.startswith("http")}
        await context.route_web_socket(outside_origins(sockets), lambda socket: guard()._block_socket(socket))

    def count_blocked(self, url: str) -> None:
        """Record a request the pool's OutsideProxy refused: a redirect hop or a tunnel, most often the page leaving."""
        self._record(url, tell=True)

    @property
    def refused_a_navigation(self) -> bool:
        """A navigation was refused since the last `notice()`: the agent will be told about it there."""
        return bool(self._refused_navigations)

    def notice(self) -> str | None:
        """What the agent is told about navigations refused since the last call, if any."""
        if not self._refused_navigations:
            return None
        urls = list(dict.fromkeys(f"https:{url}" if url.startswith("//") else url for url in self._refused_navigations))
        self._refused_navigations.clear()
        return "\n".join(f"blocked: {url[:200]} is outside this task's sites" for url in urls[:3])

    def on_site(self, url: str) -> bool:
        return url.startswith(("http:", "https:")) and not self._outside.search(url)

    def left_the_site(self, url: str) -> bool:
        """An error page, or a page outside the task's sites (about:blank and the like are neither)."""
        return url.startswith("chrome-error:") or (url.startswith(("http:", "https:")) and not self.on_site(url))

    def _record(self, url: str, tell: bool) -> None:
        """Count a refused request; `tell` also puts it in the agent's next observation."""
        if tell:
            self._refused_navigations.append(url)
            self._metadata["blocked_navigations"] += 1
        self._metadata["blocked_requests"] += 1
        if len(self._metadata.setdefault("blocked_urls", [])) < _KEPT_BLOCKED_URLS:
            self._metadata["blocked_urls"].append(url[:200])

    async def _block(self, route: Any) -> None:
        """Refuse and count a request outside the task's origins (only those reach this handler).

        A navigation is answered 204 No Content, so that it does not happen and the page stays on
        the site; aborting it would replace the page (or the iframe) with an error page. Anything else is aborted.
        """
        navigation = route.request.is_navigation_request()
        self._record(route.request.url, tell=navigation and _of_a_tab(route.request))
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
