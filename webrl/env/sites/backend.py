"""The browser-side half of per-episode isolation: a backend that gives each episode its own state.

`EmbeddedSitesBackend` is WebArena's generic backend plus one thing: every new browser context
gets a fresh `webrl_episode` cookie, which the server maps to that episode's copy-on-write
overlay. Resetting a site is therefore opening a context (milliseconds), and episodes running side
by side never see each other's carts, posts or edits. Evaluation is WebArena's own: a
program_html check navigates in the same context, with the same cookie, so it reads the state
this episode produced.
"""

from __future__ import annotations

import uuid
from typing import Any

from webrl.data.trajectory import Task
from webrl.env.backend import WebArenaBackend, origin_of
from webrl.env.evaluators import Judge
from webrl.env.sites.server import EPISODE_COOKIE


class EmbeddedSitesBackend(WebArenaBackend):
    """WebArenaBackend for the embedded sites, isolating each episode with its own cookie.

    Args:
        url_map: placeholder -> URL of a running `EmbeddedSites` (its `url_map`).
        judge: LLM judge for fuzzy_match references (the embedded suites use none).
    """

    def __init__(self, url_map: dict[str, str], judge: Judge | None = None) -> None:
        super().__init__(url_map, judge)
        origins = {origin_of(url) for url in self.url_map.values()}
        if len(origins) != 1:
            raise ValueError(f"the embedded sites share one origin; url_map points at {sorted(origins)}")
        self.origin = origins.pop()

    async def setup_context(self, context: Any, task: Task) -> None:
        """Give the episode's context a new episode id (a cookie scoped to the sites' origin)."""
        episode_id = uuid.uuid4().hex
        await context.add_cookies([{"name": EPISODE_COOKIE, "value": episode_id, "url": self.origin}])
