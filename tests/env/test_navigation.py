"""Actions that navigate: the episode waits for the new page and observes it, never the old one or nothing.

One server on 127.0.0.1 plays the site. Its search form submits on Enter (an implicit submission:
one text field, no button) to a results page that the server answers after a delay, cycling
through 0 to 300 ms, so that the navigation commits at every point of the action-observe
sequence: before the action returns, during the observation (the execution context the
observation runs in is destroyed), and after it (a stale page). Every trial must see the results.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from env_helpers import element_id, page_task

from tests.stub_http import StubHandler, serve
from webrl.env.backend import WebArenaBackend
from webrl.env.limits import EpisodeLimits

# Generous limits: on a loaded machine one page script can take seconds, and a timed-out action is not what is tested.
pytestmark = pytest.mark.timeout(3000)

LIMITS = EpisodeLimits(action_timeout_s=30.0, wait_action_s=0.05)
# WEBRL_ENTER_TRIALS=N runs fewer trials, for a quick look.
ENTER_TRIALS = int(os.environ.get("WEBRL_ENTER_TRIALS", "50"))
DELAYS_MS = (0, 5, 20, 60, 150, 300)

SEARCH = """<!DOCTYPE html><html><body><h1>Search</h1>
<form action="/results"><input name="q" aria-label="query"></form>
</body></html>"""
RESULTS = "<!DOCTYPE html><html><body><h1>Results for {q}</h1><a href='/search'>New search</a></body></html>"


class _Site(StubHandler):
    """The search page, and results answered after the delay the `delay` query parameter names."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        parts = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        if parts.path == "/results":
            time.sleep(int(query.get("delay", "0")) / 1000)
            body = RESULTS.format(q=query.get("q", ""))
        else:
            body = SEARCH.format()
        self.reply(200, "text/html", body.encode())


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serve(_Site, path="") as url:
        yield url


def _outcome(result, query: str) -> str:
    if result.status != "running":
        return f"ended: {result.status}"
    if f"Results for {query}" in result.observation.html and "/results" in result.observation.url:
        return "new page"
    return "stale page"


def test_press_enter_that_submits_a_form_observes_the_new_page(run, pool, site):
    backend = WebArenaBackend({"__PAGES__": site})

    async def trial(index: int) -> tuple[str, str | None]:
        delay = DELAYS_MS[index % len(DELAYS_MS)]
        async with pool.episode(page_task("search"), backend, LIMITS) as ep:
            observation = await ep.reset()
            box = element_id(observation.html, 'name="q"')
            # The delay rides in the query, so the server answers this submission late.
            query = f"lamp {index}"
            await ep.step(f'do(action="Type", argument="{query}", element="{box}")')
            await ep.page.evaluate(
                "(delay) => { const f = document.forms[0]; const h = document.createElement('input');"
                " h.type = 'hidden'; h.name = 'delay'; h.value = delay; f.appendChild(h); }",
                str(delay),
            )
            result = await ep.step('do(action="Press Enter")')
            return _outcome(result, query), ep.trajectory.error or result.error

    outcomes = [run(trial(index)) for index in range(ENTER_TRIALS)]
    counts = Counter(outcome for outcome, _ in outcomes)
    errors = sorted({error for _, error in outcomes if error})
    assert counts == {"new page": ENTER_TRIALS}, f"{dict(counts)}; errors: {errors}"
