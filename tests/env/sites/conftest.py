"""Fixtures for the embedded-sites tests: one sites server per session, one Chromium per module.

The sites run as the real subprocess (`EmbeddedSites`), the browser is the real Chromium through
Playwright. Playwright objects belong to the event loop that made them, so each module gets one
loop (`run` runs a coroutine on it) and one BrowserPool on that loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.sites import EmbeddedSites, EmbeddedSitesBackend


@pytest.fixture(scope="session")
def sites() -> Iterator[EmbeddedSites]:
    with EmbeddedSites() as running:
        yield running


@pytest.fixture(scope="session")
def backend(sites: EmbeddedSites) -> EmbeddedSitesBackend:
    return sites.backend()


@pytest.fixture(scope="module")
def run() -> Iterator[Callable[[Any], Any]]:
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


@pytest.fixture(scope="module")
def pool(run: Callable[[Any], Any]) -> Iterator[BrowserPool]:
    browser_pool = BrowserPool(BrowserConfig(max_concurrency=6))
    run(browser_pool.start())
    yield browser_pool
    run(browser_pool.close())
