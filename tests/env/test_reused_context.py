"""Context reuse (BrowserConfig.reuse_contexts): the next episode gets the same context, and nothing of the last one."""

from __future__ import annotations

import pytest
from env_helpers import page_task

from webrl.data.trajectory import Task
from webrl.env.backend import WebArenaBackend
from webrl.env.executor import NO_EARLIER_PAGE

pytestmark = pytest.mark.timeout(120)

# Every kind of state a page can leave, and a timer that would write more after the wipe began.
LEAVE_STATE_JS = """async () => {
  localStorage.setItem("k", "1");
  sessionStorage.setItem("k", "1");
  document.cookie = "k=1; max-age=3600";
  window.name = "left behind";
  history.pushState({}, "", "?pushed");
  await new Promise((done) => { const r = indexedDB.open("db"); r.onsuccess = () => { r.result.close(); done(); }; });
  await (await caches.open("cache")).put("/cached", new Response("x"));
  setInterval(() => { localStorage.setItem("late", "1"); sessionStorage.setItem("late", "1"); }, 0);
  window.open(location.href);
}"""
READ_STATE_JS = """async () => ({
  local: localStorage.length,
  session: sessionStorage.length,
  cookie: document.cookie,
  name: window.name,
  history: history.length,
  databases: (await indexedDB.databases()).length,
  caches: (await caches.keys()).length,
})"""
NOTHING_LEFT = {"local": 0, "session": 0, "cookie": "", "name": "", "history": 1, "databases": 0, "caches": 0}


def test_the_next_episode_sees_nothing_of_the_last(run, reusing, backend):
    async def scenario():
        async with reusing.episode(page_task("actions.html"), backend) as first:
            await first.reset()
            await first.page.evaluate(LEAVE_STATE_JS)
            assert (await first.page.evaluate(READ_STATE_JS))["local"] >= 1
            context = first.context
        async with reusing.episode(page_task("actions.html"), backend) as second:
            await second.reset()
            state = await second.page.evaluate(READ_STATE_JS)
            back = await second.step('do(action="Go Backward")')
            return second.context is context, len(second.context.pages), state, back.error

    reused, tabs, state, back_error = run(scenario())
    assert reused
    assert tabs == 1
    assert state == NOTHING_LEFT
    assert back_error == NO_EARLIER_PAGE


def test_a_refused_request_is_counted_by_the_episode_running_then(run, reusing, pages, other_origin):
    backend = WebArenaBackend({"__PAGES__": pages.url})
    task = page_task(f"fetch_other.html?other={other_origin.url}")

    async def scenario():
        async with reusing.episode(page_task("actions.html"), backend) as first:
            await first.reset()
            context = first.context
        async with reusing.episode(task, backend) as second:
            await second.reset()
            await second.page.wait_for_function("() => document.getElementById('result').textContent !== 'pending'")
            html = (await second.step('do(action="Wait")')).observation.html
            return second.context is context, html, first.trajectory.metadata, second.trajectory.metadata

    reused, html, first, second = run(scenario())
    assert reused
    assert "fetch failed" in html
    assert first["blocked_requests"] == 0
    assert second["blocked_requests"] == 1 and second["blocked_urls"] == [f"{other_origin.url}/page2.html"]


def test_a_context_whose_tab_showed_another_origin_is_not_reused(run, reusing, pages, other_origin):
    # sessionStorage is cleared through a document of its origin, so a second origin's would be left.
    backend = WebArenaBackend({"__PAGES__": pages.url, "__OTHER__": other_origin.url})
    task = Task(task_id="t2", intent="test", sites=["pages", "other"], start_url="__PAGES__/actions.html")

    async def scenario():
        async with reusing.episode(task, backend) as first:
            await first.reset()
            await first.page.goto(f"{other_origin.url}/page2.html")
            context = first.context
        async with reusing.episode(task, backend) as second:
            await second.reset()
            return second.context is context

    assert not run(scenario())


def test_a_context_whose_tab_ends_on_a_sandboxed_document_is_not_reused(run, reusing, pages, backend):
    # A sandboxed document (an opaque origin) has no sessionStorage through which its origin's can be cleared.
    async def sandboxed(route):
        response = await route.fetch()
        await route.fulfill(response=response, headers={**response.headers, "content-security-policy": "sandbox"})

    async def scenario():
        async with reusing.episode(page_task("actions.html"), backend) as first:
            await first.reset()
            await first.page.evaluate("() => sessionStorage.setItem('k', '1')")
            await first.page.route("**/page2.html", sandboxed)
            await first.page.goto(f"{pages.url}/page2.html")
            context = first.context
        async with reusing.episode(page_task("actions.html"), backend) as second:
            await second.reset()
            return second.context is context, await second.page.evaluate("() => sessionStorage.length")

    assert run(scenario()) == (False, 0)


def test_a_logged_in_task_gets_a_fresh_context(run, reusing, pages):
    class LoggedIn(WebArenaBackend):
        def storage_state(self, task):
            return {"cookies": [], "origins": []}

    backend = LoggedIn({"__PAGES__": pages.url})

    async def scenario():
        async with reusing.episode(page_task("actions.html"), backend) as first:
            await first.reset()
            context = first.context
        async with reusing.episode(page_task("actions.html"), backend) as second:
            await second.reset()
            return second.context is context, first.context.pages

    reused, first_pages = run(scenario())
    assert not reused
    assert first_pages == []
