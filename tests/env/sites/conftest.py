"""Fixtures for the embedded-sites tests: one sites server per session, one Chromium per module.

The sites run as the real subprocess (`EmbeddedSites`), the browser is the real Chromium through
Playwright. Playwright objects belong to the event loop that made them, so each module gets one
loop (`run` runs a coroutine on it) and one BrowserPool on that loop.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from webrl.env.sites import EmbeddedSites, EmbeddedSitesBackend


@pytest.fixture(scope="session")
def sites() -> Iterator[EmbeddedSites]:
    with EmbeddedSites() as running:
        yield running


@pytest.fixture(scope="session")
def backend(sites: EmbeddedSites) -> EmbeddedSitesBackend:
    return sites.backend()
