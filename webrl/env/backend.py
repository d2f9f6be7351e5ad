"""Site backends: what an episode needs to know about the website family its task runs on.

The browser pool and episode are site-agnostic; a backend supplies the per-site parts: which
origins the episode may reach (everything else is blocked), how to isolate an episode's state in
its browser context (cookies, storage), how to open the start page, whether the site itself has
ended the episode (MiniWoB++ does), and how to score the outcome. `WebArenaBackend` is the generic
one for sites driven by WebArena-format task configs; the embedded sites and MiniWoB++ subclass
or mirror it.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from webrl.data.trajectory import Task
from webrl.env.evaluators import EvalResult, Judge, evaluate_task
from webrl.env.login import StorageStates
from webrl.env.tasks import normalise_url_map, substitute
from webrl.env.webarena_helpers import WebArenaHelpers

log = logging.getLogger(__name__)

# WebArena starts multi-tab tasks with several URLs joined by this: one tab each, the agent in the first.
_AND = " |AND| "


# The ports a browser leaves out of a URL it reports, per scheme.
_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of a URL, the unit the allowlist works in, spelled as Chromium reports URLs.

    The allowlist matches the URLs of the page's requests by their text, and Chromium lowercases the
    scheme and host and leaves out a default port and any user name: `http://LOCALHOST:80/` is requested
    as `http://localhost/`, and an origin kept as written would refuse the task's own start page.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError as err:
        raise ValueError(f"not an absolute http(s) URL: {url!r} ({err})") from err
    if not parts.scheme or not parts.hostname:
        raise ValueError(f"not an absolute http(s) URL: {url!r}")
    scheme = parts.scheme.lower()
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != _DEFAULT_PORTS.get(scheme) else "")


def start_urls(task: Task) -> list[str]:
    """Every start URL of the task, one per tab (`|AND|` separates them)."""
    return [url.strip() for url in task.start_url.split(_AND) if url.strip()]


def first_start_url(task: Task) -> str:
    return start_urls(task)[0] if start_urls(task) else ""


@runtime_checkable
class SiteBackend(Protocol):
    """One kind of website family, as the episode sees it."""

    url_map: dict[str, str]

    def allowed_origins(self, task: Task) -> list[str]:
        """Origins (`http://127.0.0.1:PORT`) the episode may request; everything else is blocked."""
        ...

    def storage_state(self, task: Task) -> dict[str, Any] | None:
        """The Playwright storage state the episode's context starts with (a logged-in session), or None."""
        ...

    async def setup_context(self, context: Any, task: Task) -> None:
        """Isolate the episode in its fresh browser context (cookies, storage state)."""
        ...

    async def start(self, page: Any, task: Task) -> None:
        """Open the task's start page; may fill in task fields known only then (MiniWoB's intent)."""
        ...

    async def episode_done(self, page: Any, task: Task) -> bool:
        """True when the site itself has ended the episode (checked after every action)."""
        ...

    async def evaluate(self, page: Any, task: Task, answer: str | None) -> float | EvalResult | None:
        """Score the final state in [0, 1] (an EvalResult carries per-type detail), None if no evaluator."""
        ...


class WebArenaBackend:
    """Sites driven by WebArena task configs: start at start_url, score with WebArena's evaluators.

    Args:
        url_map: placeholder -> deployment URL, e.g. {"__SHOPPING__": "http://127.0.0.1:7770"}.
        judge: LLM judge for fuzzy_match references; without one such tasks report `needs_judge`.
        storage_states: where logged-in sessions for `require_login` tasks live (env.storage_state_dir);
            None runs such tasks logged out, with a warning.

    program_html's `func:` helpers run against these sites; the shopping ones log in to the shop's REST API
    with the shop admin's credentials from the environment (`webrl.env.magento_api`).
    """

    def __init__(
        self, url_map: dict[str, str], judge: Judge | None = None, storage_states: StorageStates | None = None
    ) -> None:
        self.url_map = normalise_url_map(url_map)
        self.judge = judge
        self.storage_states = storage_states
        self.helpers = WebArenaHelpers(self.url_map)
        self._warned_login = False

    def start_url(self, task: Task) -> str:
        """The first start URL, with any placeholder still in it resolved from `url_map`."""
        return substitute(first_start_url(task), self.url_map)

    def allowed_origins(self, task: Task) -> list[str]:
        """Every start page's origin, every site the task names, and the pages its evaluator opens."""
        origins = {origin_of(substitute(url, self.url_map)) for url in start_urls(task)}
        for site in task.sites:
            url = self.url_map.get(f"__{site.upper()}__")
            if url:
                origins.add(origin_of(url))
        for target in (task.eval or {}).get("program_html") or []:
            url = substitute(target.get("url", ""), self.url_map)
            if url.startswith(("http://", "https://")):
                origins.add(origin_of(url))
        return sorted(origins)

    def storage_state(self, task: Task) -> dict[str, Any] | None:
        """The task's logged-in session from `storage_states`; raises LoginStateError when it is missing."""
        if self.storage_states is None:
            if task.require_login and not self._warned_login:
                log.warning(
                    "task %s requires a login but env.storage_state_dir is not set: it runs logged out", task.task_id
                )
                self._warned_login = True
            return None
        return self.storage_states.for_task(task)

    async def setup_context(self, context: Any, task: Task) -> None:
        return None

    async def start(self, page: Any, task: Task) -> None:
        """Open the first start URL in `page` and each further `|AND|` URL in a tab of its own, as WebArena does.

        The agent acts in the first tab; the others are open beside it, in the same logged-in context.
        """
        urls = [substitute(url, self.url_map) for url in start_urls(task)]
        await page.goto(urls[0], wait_until="domcontentloaded")
        for url in urls[1:]:
            tab = await page.context.new_page()
            await tab.goto(url, wait_until="domcontentloaded")
        if len(urls) > 1:
            await page.bring_to_front()

    async def episode_done(self, page: Any, task: Task) -> bool:
        return False

    async def evaluate(self, page: Any, task: Task, answer: str | None) -> EvalResult | None:
        """WebArena's product of per-type scores, with the per-type detail."""
        if not task.has_evaluator:
            return None
        return await evaluate_task(task, page, answer, judge=self.judge, helpers=self.helpers)
