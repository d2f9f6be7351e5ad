"""A signed or exponent number typed, an app-like page that scrolls an inner box, a page that closes its only
tab, and native dialogs: each something a site does in the normal course, and each must look to the agent as
it would to a person, and be charged to whoever caused it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from env_helpers import element_id, page_task

from tests.stub_http import StubHandler, serve
from webrl.env.backend import WebArenaBackend
from webrl.env.limits import EpisodeLimits
from webrl.env.observation import ObservationConfig

pytestmark = pytest.mark.timeout(120)

LIMITS = EpisodeLimits(action_timeout_s=5.0, wait_action_s=0.05)
SECTIONS = "".join(f'<p style="height: 100px; margin: 0">Section {n}</p>' for n in range(60))
PAGES = {
    "/number": """<!DOCTYPE html><html><body><p id="log">none</p>
<input type="number" aria-label="amount" oninput="log.textContent = 'input ' + this.value"></body></html>""",
    # The window cannot scroll: only <main> does, as in an app shell.
    "/inner": f"""<!DOCTYPE html><html><head><style>html, body {{ height: 100%; overflow: hidden; margin: 0 }}
main {{ height: 100%; overflow: auto }}</style></head><body><main>{SECTIONS}</main></body></html>""",
    "/closing": """<!DOCTYPE html><html><body><h1>Checkout</h1>
<button onclick="window.close()">Close window</button></body></html>""",
    "/dialogs": """<!DOCTYPE html><html><body><p id="log">none</p>
<button onclick="if (confirm('Delete?')) log.textContent = 'deleted'">Delete</button>
<button onclick="alert('Saved'); log.textContent = 'after alert'">Save</button>
<button onclick="const v = prompt('New name?', 'x'); log.textContent = v === null ? 'cancelled' : 'named ' + v">
Rename</button></body></html>""",
}


class _Site(StubHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.reply(200 if self.path in PAGES else 404, "text/html", PAGES.get(self.path, "").encode())


@pytest.fixture(scope="module")
def site() -> Iterator[WebArenaBackend]:
    with serve(_Site, path="") as url:
        yield WebArenaBackend({"__PAGES__": url})


@pytest.mark.parametrize(("text", "number"), [("-5", -5), ("1e5", 100000), ("42", 42), ("-2.5", -2.5)])
def test_a_number_is_typed_into_a_number_input(run, pool, site, text, number):
    async def scenario():
        async with pool.episode(page_task("number"), site, LIMITS) as ep:
            obs = await ep.reset()
            result = await ep.step(f'do(action="Type", argument="{text}", element="{element_id(obs.html, "amount")}")')
            field = await ep.page.evaluate("() => document.querySelector('input').valueAsNumber")
            return result, field

    result, field = run(scenario())
    assert result.error is None
    assert field == number
    assert f"<p> input {text} </p>" in result.observation.html, "no input event, as typing would fire"


def test_scroll_moves_the_inner_box_of_a_page_whose_window_does_not_scroll(run, pool, site):
    async def scenario():
        config = ObservationConfig(region="viewport")
        async with pool.episode(page_task("inner"), site, LIMITS, config) as ep:
            start = await ep.reset()
            down = await ep.step('do(action="Scroll Down")')
            moved = await ep.page.evaluate("() => document.querySelector('main').scrollTop")
            up = await ep.step('do(action="Scroll Up")')
            top = await ep.step('do(action="Scroll Up")')
            return start, down, moved, up, top

    start, down, moved, up, top = run(scenario())
    assert down.error is None and moved > 0
    # The viewport region shows what the box revealed, and no longer what it scrolled out of view.
    assert "Section 0 " in start.html and "Section 10" not in start.html
    assert "Section 10" in down.observation.html and "Section 0 " not in down.observation.html
    assert up.error is None and "Section 0 " in up.observation.html
    assert top.error is not None and "nothing on this page can scroll up" in top.error


def test_a_page_closing_its_only_tab_ends_the_episode_as_its_own_error(run, reusing, site):
    async def scenario():
        async with reusing.episode(page_task("closing"), site, LIMITS) as ep:
            obs = await ep.reset()
            result = await ep.step(f'do(action="Click", element="{element_id(obs.html, "Close window")}")')
            reward = await ep.evaluate()
            return result, ep.trajectory, reward

    result, trajectory, reward = run(scenario())
    assert result.done and result.status == "error"
    assert "the page closed its tab" in trajectory.error
    assert not trajectory.infra_error
    assert reward == 0.0


def test_the_reused_context_whose_tab_the_page_closed_serves_the_next_episode(run, reusing, site):
    async def scenario():
        async with reusing.episode(page_task("closing"), site, LIMITS) as ep:
            obs = await ep.reset()
            await ep.step(f'do(action="Click", element="{element_id(obs.html, "Close window")}")')
        async with reusing.episode(page_task("closing"), site, LIMITS) as ep:
            obs = await ep.reset()
            return obs, ep.trajectory.status, ep.trajectory.error

    obs, status, error = run(scenario())
    assert status == "running" and "Checkout" in obs.html, error


def test_a_context_closed_under_the_episode_stays_an_infrastructure_failure(run, pool, site):
    async def scenario():
        async with pool.episode(page_task("closing"), site, LIMITS) as ep:
            await ep.reset()
            await ep.context.close()
            result = await ep.step('do(action="Wait")')
            return result, ep.trajectory

    result, trajectory = run(scenario())
    assert result.status == "error" and trajectory.infra_error
    assert "browser failed" in trajectory.error


@pytest.mark.parametrize(
    ("button", "log", "told"),
    [
        ("Delete", "deleted", 'the page asked "Delete?"; accepted'),
        ("Save", "after alert", 'the page showed the alert "Saved"; closed with OK'),
        ("Rename", "cancelled", 'the page asked for text ("New name?"); cancelled'),
    ],
)
def test_a_dialog_is_answered_and_the_agent_told(run, pool, site, button, log, told):
    async def scenario():
        async with pool.episode(page_task("dialogs"), site, LIMITS) as ep:
            obs = await ep.reset()
            result = await ep.step(f'do(action="Click", element="{element_id(obs.html, button)}")')
            after = await ep.step('do(action="Wait")')
            return result, after, ep.trajectory

    result, after, trajectory = run(scenario())
    assert result.error is None and result.status == "running"
    assert f"<p> {log} </p>" in result.observation.html
    assert result.observation.html.startswith(told)
    assert told not in after.observation.html, "each dialog is told once"
    assert trajectory.metadata["dialogs"][0]["message"] in told
