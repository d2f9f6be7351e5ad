"""Fixtures for the env tests: one event loop and one real Chromium per module, local test pages.

Playwright objects belong to the event loop that created them, so each module gets one loop
(`run` runs a coroutine on it) and one BrowserPool on that loop; every test opens its own
isolated context from that pool. Pages under `pages/` are served over http on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

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


@pytest.fixture(scope="module")
def run() -> Iterator[Callable[[Any], Any]]:
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


@pytest.fixture(scope="module")
def pool(run: Callable[[Any], Any]) -> Iterator[BrowserPool]:
    browser_pool = BrowserPool(BrowserConfig(max_concurrency=4))
    run(browser_pool.start())
    yield browser_pool
    run(browser_pool.close())


@pytest.fixture(scope="session")
def backend(pages: StaticServer) -> WebArenaBackend:
    return WebArenaBackend({"__PAGES__": pages.url})
