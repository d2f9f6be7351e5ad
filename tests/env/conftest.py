"""Fixtures for the env tests: one event loop and one real Chromium per module, local test pages.

Playwright objects belong to the event loop that created them, so each module gets one loop
(`run` runs a coroutine on it) and one BrowserPool on that loop; every test opens its own
isolated context from that pool. Pages under `pages/` are served over http on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from env_helpers import PAGES

from webrl.env.backend import WebArenaBackend
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.static_server import StaticServer


@pytest.fixture(scope="session")
def pages() -> Iterator[StaticServer]:
    with StaticServer(PAGES) as server:
        yield server


@pytest.fixture(scope="session")
def other_origin() -> Iterator[StaticServer]:
    """A second server: same files, another port, hence another origin for allowlist tests."""
    with StaticServer(PAGES) as server:
        yield server


@pytest.fixture(scope="session")
def backend(pages: StaticServer) -> WebArenaBackend:
    return WebArenaBackend({"__PAGES__": pages.url})


@pytest.fixture(scope="module")
def reusing(run):
    """A pool of one slot that reuses contexts, so consecutive episodes share one (and each episode's tab starts with
    one history entry, which window.close() may close; a fresh context's tab has about:blank before it)."""
    pool = BrowserPool(BrowserConfig(max_concurrency=1, reuse_contexts=True))
    run(pool.start())
    yield pool
    run(pool.close())
