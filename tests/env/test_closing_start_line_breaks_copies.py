"""A start page that closes its own tab, a Type whose text holds a tab or a line break, and an element the page copies.

Each is something a site or an agent does in the normal course: the episode must charge a closing start page to
the task, not to the browser; a Type must leave in the field the text the agent wrote, or say why it cannot; and
an action must reach the element the agent saw, not a copy the page made of it since.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from env_helpers import element_id, page_task

from tests.stub_http import StubHandler, serve
from webrl.data.trajectory import Task
from webrl.env.backend import WebArenaBackend
from webrl.env.limits import EpisodeLimits

pytestmark = pytest.mark.timeout(120)

LIMITS = EpisodeLimits(action_timeout_s=5.0, wait_action_s=0.05)
# Copies the button once the observation has labelled it: `copies` of them before it, the original kept or not.
COPYING = """<!DOCTYPE html><html><body><p id="log">none</p><div id="copies"></div>
<button id="buy">Buy</button>
<script>
const buy = document.getElementById("buy");
buy.addEventListener("click", () => { log.textContent = "clicked the original"; });
const watch = new MutationObserver(() => {
  if (!buy.hasAttribute("data-webrl-id")) return;
  watch.disconnect();
  for (let n = 0; n < COPIES; n++) {
    const copy = buy.cloneNode(true);
    copy.addEventListener("click", () => { log.textContent = "clicked a copy"; });
    document.getElementById("copies").append(copy);
  }
  if (!KEEP) buy.remove();
});
watch.observe(buy, { attributes: true, attributeFilter: ["data-webrl-id"] });
</script></body></html>"""
PAGES = {
    # Closes its tab as soon as Chromium lets it: once the tab's history holds this page alone.
    "/closing-start": """<!DOCTYPE html><html><body><h1>Bye</h1>
<script>setInterval(() => window.close(), 10);</script></body></html>""",
    "/fields": """<!DOCTYPE html><html><body>
<form action="/results"><input name="q" aria-label="query"></form>
<textarea aria-label="notes"></textarea></body></html>""",
    "/results": "<!DOCTYPE html><html><body><h1>Results</h1></body></html>",
    "/copied": COPYING.replace("COPIES", "1").replace("KEEP", "true"),
    "/replaced": COPYING.replace("COPIES", "2").replace("KEEP", "false"),
}


class _Site(StubHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?")[0]
        self.reply(200 if path in PAGES else 404, "text/html", PAGES.get(path, "").encode())


class _OneEntryStart(WebArenaBackend):
    """Leaves the start page the tab's only history entry, as a reused context does once any start page is up, and
    waits for the page's own script to close the tab, which Chromium then allows: the close lands in the reset."""

    async def start(self, page: Any, task: Task) -> None:
        await super().start(page, task)
        session = await page.context.new_cdp_session(page)
        await session.send("Page.resetNavigationHistory")
        await page.wait_for_event("close")


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with serve(_Site, path="") as url:
        yield url


def test_a_start_page_closing_its_own_tab_is_the_tasks_error_not_the_browsers(run, pool, site):
    async def scenario():
        async with pool.episode(page_task("closing-start"), _OneEntryStart({"__PAGES__": site}), LIMITS) as ep:
            obs = await ep.reset()
            reward = await ep.evaluate()
            return obs, ep.trajectory, reward

    obs, trajectory, reward = run(scenario())
    assert trajectory.status == "error" and obs.html == ""
    assert "the page closed its tab during reset" in trajectory.error
    assert not trajectory.infra_error, "a retry would close the same way, and the task would leave the rates"
    assert reward == 0.0


def _type_into(run, pool, site: str, field: str, text: str) -> tuple[Any, dict[str, str]]:
    """Type `text` into the field labelled `field` of /fields: the step, and the fields' values and focus after it."""

    async def scenario():
        async with pool.episode(page_task("fields"), WebArenaBackend({"__PAGES__": site}), LIMITS) as ep:
            obs = await ep.reset()
            action = f'do(action="Type", argument={text!r}, element="{element_id(obs.html, field)}")'
            result = await ep.step(action)
            state = await ep.page.evaluate(
                """() => ({query: document.querySelector("[name=q]")?.value, notes: document.querySelector("textarea")
                ?.value, focused: document.activeElement.getAttribute("aria-label") || ""})"""
            )
            return result, state

    return run(scenario())


@pytest.mark.parametrize(("field", "text"), [("query", "lamp\t"), ("notes", "a\tb\t")])
def test_a_last_tab_is_typed_as_text_and_keeps_the_focus(run, pool, site, field, text):
    result, state = _type_into(run, pool, site, field, text)
    assert result.error is None
    assert state["query" if field == "query" else "notes"] == text
    assert state["focused"] == field, "a Tab keystroke would have moved the focus to the next field"


def test_a_line_break_inside_the_text_is_refused_by_an_input_and_kept_by_a_textarea(run, pool, site):
    refused, in_input = _type_into(run, pool, site, "query", "red\nlamp\n")
    kept, in_textarea = _type_into(run, pool, site, "notes", "line one\nline two\n")
    assert refused.error is not None and "single-line input, which cannot hold a line break" in refused.error
    assert in_input["query"] == "" and in_input["focused"] == "", "nothing typed, the field not even focused"
    assert "/fields" in refused.observation.url, "no Enter pressed at the break"
    assert kept.error is None and in_textarea["notes"] == "line one\nline two\n"


def _ids_of(html: str, text: str) -> list[str]:
    return re.findall(rf'<button id="(\d+)"> {text} </button>', html)


def test_an_action_reaches_the_element_observed_not_a_copy_the_page_made_since(run, pool, site):
    async def scenario():
        async with pool.episode(page_task("copied"), WebArenaBackend({"__PAGES__": site}), LIMITS) as ep:
            obs = await ep.reset()
            copies = await ep.page.evaluate("() => document.querySelectorAll('#copies button').length")
            return obs, copies, await ep.step(f'do(action="Click", element="{element_id(obs.html, "Buy")}")')

    obs, copies, result = run(scenario())
    assert copies == 1 and len(_ids_of(obs.html, "Buy")) == 1, "the page copies the button after the observation"
    assert result.error is None
    assert "clicked the original" in result.observation.html
    assert len(set(_ids_of(result.observation.html, "Buy"))) == 2, "the next observation numbers the copy apart"


def test_an_action_on_an_element_replaced_by_several_copies_is_refused(run, pool, site):
    async def scenario():
        async with pool.episode(page_task("replaced"), WebArenaBackend({"__PAGES__": site}), LIMITS) as ep:
            obs = await ep.reset()
            return await ep.step(f'do(action="Click", element="{element_id(obs.html, "Buy")}")')

    result = run(scenario())
    assert result.error is not None and "was replaced by 2 copies of it, so nothing was done" in result.error
    assert "<p> none </p>" in result.observation.html
    assert len(set(_ids_of(result.observation.html, "Buy"))) == 2
