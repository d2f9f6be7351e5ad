"""Fixtures for the env tests: one event loop and one real Chromium per module, local test pages.

Playwright objects belong to the event loop that created them, so each module gets one loop
(`run` runs a coroutine on it) and one BrowserPool on that loop; every test opens its own
isolated context from that pool. Pages under `pages/` are served over http on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from webrl.data.trajectory import Task
from webrl.env.backend import WebArenaBackend
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.static_server import StaticServer

PAGES = Path(__file__).parent / "pages"


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


def page_task(page: str, task_id: str = "t1", eval_block: dict | None = None, intent: str = "test") -> Task:
    """A task starting at a test page, with the `__PAGES__` placeholder left for the backend's url_map."""
    return Task(task_id=task_id, intent=intent, sites=["pages"], start_url=f"__PAGES__/{page}", eval=eval_block)


def element_id(html: str, needle: str) -> str:
    """Id of the first labelled element whose tag text contains `needle` (text or attribute)."""
    for match in re.finditer(r'<(\w+) id="(\d+)"([^>]*)>(?:([^<]*))?', html):
        if needle in match.group(0):
            return match.group(2)
    raise AssertionError(f"no labelled element with {needle!r} in:\n{html}")
