"""Edge cases of actions that open, close or leave a page, and of a context reused between episodes.

A link with target=_blank whose click the page handles itself, a Type whose newline submits a form, a
followed tab that closes itself, and a menu under the pointer the last episode left behind: each is
something a site does in the normal course, and each must look to the agent as it would to a person.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from env_helpers import element_id, page_task

from tests.stub_http import StubHandler, serve
from webrl.env.backend import WebArenaBackend
from webrl.env.limits import EpisodeLimits

pytestmark = pytest.mark.timeout(120)

LIMITS = EpisodeLimits(action_timeout_s=5.0, wait_action_s=0.05)
SETTLING = EpisodeLimits(action_timeout_s=5.0, wait_action_s=0.5)
PAGES = {
    "/links": """<!DOCTYPE html><html><body><p id="log">none</p>
<a href="/popup" target="_blank"
  onclick="event.preventDefault(); document.getElementById('log').textContent = 'menu opened'">Account menu</a>
<a href="/popup" target="_blank">Open popup</a></body></html>""",
    "/popup": """<!DOCTYPE html><html><body><h1>Popup</h1>
<button onclick="window.close()">Close window</button></body></html>""",
    "/form": """<!DOCTYPE html><html><body>
<form action="/results"><input name="q" aria-label="query"></form></body></html>""",
    "/results": "<!DOCTYPE html><html><body><h1>Results</h1></body></html>",
    "/menu": """<!DOCTYPE html><html><head><style>.menu { padding: 20px; } .sub { display: none; }
.menu:hover .sub { display: block; }</style></head>
<body><div class="menu">Shop <a class="sub" href="#chairs">Chairs</a></div></body></html>""",
}
RESULTS_DELAY_S = 0.5
# Whether an observation not waiting for the submission is taken before the form submits is a race: several trials.
TYPE_TRIALS = 8


class _Site(StubHandler):
    """The pages above; the results page is answered late, so that a navigation commits after the action."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?")[0]
        if path == "/results":
            time.sleep(RESULTS_DELAY_S)
        self.reply(200 if path in PAGES else 404, "text/html", PAGES.get(path, "").encode())


@pytest.fixture(scope="module")
def site() -> Iterator[WebArenaBackend]:
    with serve(_Site, path="") as url:
        yield WebArenaBackend({"__PAGES__": url})


def test_a_new_tab_link_the_page_handles_itself_is_clicked_at_once(run, pool, site):
    async def scenario():
        async with pool.episode(page_task("links"), site, LIMITS) as ep:
            obs = await ep.reset()
            start = time.monotonic()
            result = await ep.step(f'do(action="Click", element="{element_id(obs.html, "Account menu")}")')
            return time.monotonic() - start, result, len(ep.context.pages)

    seconds, result, tabs = run(scenario())
    assert result.error is None
    assert "menu opened" in result.observation.html
    assert tabs == 1
    assert seconds < LIMITS.action_timeout_s / 2


def test_a_new_tab_link_is_still_followed(run, pool, site):
    async def scenario():
        async with pool.episode(page_task("links"), site, LIMITS) as ep:
            obs = await ep.reset()
            return await ep.step(f'do(action="Click", element="{element_id(obs.html, "Open popup")}")')

    result = run(scenario())
    assert result.error is None
    assert "/popup" in result.observation.url and "Close window" in result.observation.html


def test_a_type_whose_newline_submits_the_form_observes_the_results(run, pool, site):
    async def trial():
        async with pool.episode(page_task("form"), site, LIMITS) as ep:
            obs = await ep.reset()
            return await ep.step(f'do(action="Type", argument="lamp\\n", element="{element_id(obs.html, "query")}")')

    for _ in range(TYPE_TRIALS):
        result = run(trial())
        assert result.error is None
        assert "/results?q=lamp" in result.observation.url
        assert "Results" in result.observation.html


def test_a_followed_tab_that_closes_itself_returns_to_its_opener(run, pool, site):
    async def scenario():
        async with pool.episode(page_task("links"), site, LIMITS) as ep:
            obs = await ep.reset()
            popup = await ep.step(f'do(action="Click", element="{element_id(obs.html, "Open popup")}")')
            closed = await ep.step(f'do(action="Click", element="{element_id(popup.observation.html, "Close")}")')
            after = None if closed.done else await ep.step('do(action="Wait")')
            return popup, closed, after, ep.trajectory

    popup, closed, after, trajectory = run(scenario())
    assert "/popup" in popup.observation.url
    assert closed.status == "running", trajectory.error
    assert closed.error is None
    assert "/links" in closed.observation.url and "Account menu" in closed.observation.html
    assert after.status == "running" and after.error is None
    assert not trajectory.infra_error


def test_the_next_episode_does_not_start_under_the_last_ones_pointer(run, reusing, site):
    async def scenario():
        async with reusing.episode(page_task("menu"), site, LIMITS) as first:
            obs = await first.reset()
            fresh = obs.html
            hovered = await first.step(f'do(action="Hover", element="{element_id(obs.html, "Shop")}")')
        async with reusing.episode(page_task("menu"), site, SETTLING) as second:
            await second.reset()
            # Chromium applies :hover for a pointer that did not move once the page has been laid out a while.
            waited = await second.step('do(action="Wait")')
            return fresh, hovered.observation.html, waited.observation.html

    fresh, hovered, next_start = run(scenario())
    assert "Chairs" in hovered and "Chairs" not in fresh
    assert next_start == fresh
