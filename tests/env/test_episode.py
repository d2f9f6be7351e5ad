"""Episodes on real local pages: every action type, step errors, episode limits, the host allowlist."""

from __future__ import annotations

import asyncio
import threading

import pytest
from env_helpers import element_id, page_task

from webrl.data.trajectory import Task
from webrl.env import episode as episode_module
from webrl.env.actions import parse_action
from webrl.env.backend import WebArenaBackend
from webrl.env.evaluators import EvaluatorSiteError
from webrl.env.limits import EpisodeLimits
from webrl.env.site_guard import outside_origins

pytestmark = pytest.mark.timeout(120)

FAST = EpisodeLimits(action_timeout_s=5.0, wait_action_s=0.05)


async def _log(episode) -> str:
    return await episode.page.evaluate("() => document.getElementById('log').textContent")


def test_every_action_type(run, pool, backend):
    async def scenario():
        async with pool.episode(page_task("actions.html"), backend, FAST) as ep:
            obs = await ep.reset()
            q, go, notes = element_id(obs.html, 'name="q"'), element_id(obs.html, "Go"), element_id(obs.html, "notes")
            sort, hover = element_id(obs.html, 'name="sort"'), element_id(obs.html, "Hover target")
            fake, link = element_id(obs.html, "Styled link"), element_id(obs.html, "Next page")

            r = await ep.step(f'# Element: the search box\ndo(action="Type", argument="lamp", element="{q}")')
            assert r.error is None and not r.done
            typed = f'<input id="{q}" type="text" name="q" placeholder="Search products" value="lamp" />'
            assert typed in r.observation.html
            await ep.step(f'do(action="Click", element="{go}")')
            assert await _log(ep) == "clicked go with lamp"
            r = await ep.step(f'do(action="Type", argument="new notes", element="{notes}")')
            assert 'value="new notes"' in r.observation.html and "old notes" not in r.observation.html
            await ep.step(f'do(action="Search", argument="desk", element="{q}")')
            assert await _log(ep) == "searched desk"
            r = await ep.step(f'do(action="Select Dropdown Option", argument="Name", element="{sort}")')
            assert "<option selected>Name</option>" in r.observation.html
            assert await _log(ep) == "sorted by name"
            await ep.step(f'do(action="Hover", element="{hover}")')
            assert await _log(ep) == "hovered"
            await ep.step(f'do(action="Click", element="{fake}")')
            assert await _log(ep) == "fake link clicked"
            await ep.step(f'do(action="Type", argument="chair", element="{q}")')
            await ep.step('do(action="Press Enter")')
            assert await _log(ep) == "searched chair"
            await ep.step('do(action="Scroll Down")')
            assert await ep.page.evaluate("() => window.scrollY") > 0
            await ep.step('do(action="Scroll Up")')
            assert await ep.page.evaluate("() => window.scrollY") == 0
            r = await ep.step(f'do(action="Click", element="{link}")')
            assert r.observation.url.endswith("/page2.html") and "Order #42 is shipped." in r.observation.html
            r = await ep.step('do(action="Go Backward")')
            assert r.error is None and r.observation.url.endswith("/actions.html")
            r = await ep.step('do(action="go forward")')
            assert r.error is None and r.observation.url.endswith("/page2.html")
            r = await ep.step('do(action="Wait")')
            assert r.error is None and r.status == "running"
            r = await ep.step('exit(message="Order #42 is shipped")')
            assert r.done and r.status == "exit"
            return ep.trajectory

    traj = run(scenario())
    assert traj.status == "exit" and traj.answer == "Order #42 is shipped"
    names = [s.action["name"] for s in traj.steps]
    assert names == [
        "type", "click", "type", "search", "select", "hover", "click", "type", "press_enter",
        "scroll_down", "scroll_up", "click", "go_backward", "go_forward", "wait", "exit",
    ]  # fmt: skip
    # Each step records the page *before* its action.
    assert 'value="lamp"' not in traj.steps[0].observation and 'value="lamp"' in traj.steps[1].observation
    assert traj.steps[11].url.endswith("/actions.html") and traj.steps[12].url.endswith("/page2.html")
    assert set(traj.steps[0].timings) == {"act", "observe"}
    assert traj.final_url.endswith("/page2.html") and "Order #42" in traj.final_observation


def test_a_link_that_opens_a_tab_is_followed(run, pool, backend):
    async def scenario():
        async with pool.episode(page_task("actions.html"), backend, FAST) as ep:
            obs = await ep.reset()
            result = await ep.step(f'do(action="Click", element="{element_id(obs.html, "Open in new tab")}")')
            return result, len(ep.context.pages)

    result, tabs = run(scenario())
    assert result.error is None and tabs == 2
    assert result.observation.url.endswith("/page2.html") and "Order #42" in result.observation.html


def test_failed_actions_and_parse_errors_are_step_errors(run, pool, backend):
    async def scenario():
        limits = EpisodeLimits(action_timeout_s=0.5, wait_action_s=0.05)
        async with pool.episode(page_task("actions.html"), backend, limits) as ep:
            obs = await ep.reset()
            sort, go = element_id(obs.html, 'name="sort"'), element_id(obs.html, "Go")
            results = [
                await ep.step("I think I should click the Go button."),
                await ep.step('do(action="Click", element="999")'),
                await ep.step(f'do(action="Select Dropdown Option", argument="Colour", element="{sort}")'),
                await ep.step(f'do(action="Type", argument="x", element="{go}")'),
                await ep.step('do(action="Go Backward")'),
            ]
            return results, ep.trajectory

    results, traj = run(scenario())
    assert results[0].action is None and results[0].error.startswith("invalid action: no do(...) or exit(...)")
    assert "element 999 is not in the page" in results[1].error
    assert "no option 'Colour'" in results[2].error and "'Price', 'Name'" in results[2].error
    assert results[3].error.startswith("type failed:")
    assert results[4].error == "there is no earlier page in this tab's history"
    assert all(not r.done and r.status == "running" for r in results)
    assert traj.steps[0].action is None and traj.steps[0].error == results[0].error
    assert traj.steps[1].action["element"] == "999"


def test_an_element_id_that_is_not_a_number_is_refused_before_it_reaches_a_selector(run, pool, backend):
    async def scenario():
        async with pool.episode(page_task("actions.html"), backend, FAST) as ep:
            obs = await ep.reset()
            go = element_id(obs.html, "Go")
            # Unescaped in `[data-webrl-id="…"]`, this id would select element `go` (and every other element).
            injected = f'{go}"] , *[x="'
            results = [await ep.step(f"do(action='Click', element='{element}')") for element in (injected, "Go")]
            return results, await _log(ep)

    results, log = run(scenario())
    assert all("is not an element id" in r.error and not r.done for r in results), [r.error for r in results]
    assert log == "", "the injected selector clicked an element"


def test_the_response_is_parsed_off_the_event_loop(run, pool, backend, monkeypatch):
    """A long degenerate response takes milliseconds to parse; the other episodes on the loop go on meanwhile."""
    started, released, waits = threading.Event(), threading.Event(), []

    def parse_waiting_for_the_loop(text):
        started.set()
        waits.append(released.wait(timeout=5))
        return parse_action(text)

    async def release_once_parsing():
        while not started.is_set():
            await asyncio.sleep(0.005)
        released.set()

    monkeypatch.setattr(episode_module, "parse_action", parse_waiting_for_the_loop)

    async def scenario():
        async with pool.episode(page_task("actions.html"), backend, FAST) as ep:
            await ep.reset()
            result, _ = await asyncio.gather(ep.step('do(action="Scroll Down")'), release_once_parsing())
            return result

    result = run(scenario())
    assert result.error is None and result.action.name == "scroll_down"
    assert waits == [True], "the loop did not run while the response was being parsed"


def _run_steps(run, pool, backend, limits: EpisodeLimits, responses: list[str]):
    async def scenario():
        async with pool.episode(page_task("actions.html"), backend, limits) as ep:
            await ep.reset()
            statuses = []
            for response in responses:
                if ep.done:
                    break
                statuses.append((await ep.step(response)).status)
            return statuses, ep.trajectory

    return run(scenario())


def test_max_steps(run, pool, backend):
    limits = EpisodeLimits(max_steps=3, wait_action_s=0.05)
    moves = ['do(action="Scroll Down")', 'do(action="Scroll Up")'] * 3
    statuses, traj = _run_steps(run, pool, backend, limits, moves)
    assert statuses == ["running", "running", "max_steps"]
    assert traj.status == "max_steps" and len(traj.steps) == 3


def test_five_identical_actions_end_the_episode(run, pool, backend):
    repeated = ['# Element: down\ndo(action="Scroll Down")'] + ['do(action="Scroll Down")'] * 9
    statuses, traj = _run_steps(run, pool, backend, EpisodeLimits(), repeated)
    assert statuses == ["running"] * 4 + ["repeated_action"]
    assert traj.error == "the same action 5 times in a row"


def test_five_consecutive_parse_failures_end_the_episode(run, pool, backend):
    broken = ["click the button"] * 4 + ['do(action="Scroll Down")'] + ["do(action="] * 6
    statuses, traj = _run_steps(run, pool, backend, EpisodeLimits(), broken)
    assert statuses == ["running"] * 9 + ["parse_failures"]
    assert traj.status == "parse_failures" and len(traj.steps) == 10


def test_episode_timeout(run, pool, backend):
    limits = EpisodeLimits(episode_timeout_s=0.2, wait_action_s=0.3)
    statuses, traj = _run_steps(run, pool, backend, limits, ['do(action="Wait")'] * 3)
    assert statuses == ["timeout"]
    assert traj.error == "episode exceeded 0.2s"


def test_step_after_the_end_is_a_programming_error(run, pool, backend):
    async def scenario():
        async with pool.episode(page_task("actions.html"), backend) as ep:
            await ep.reset()
            await ep.step('exit(message="")')
            with pytest.raises(RuntimeError, match="already ended"):
                await ep.step('do(action="Scroll Down")')

    run(scenario())


def _fetch_other(run, pool, task: Task, backend: WebArenaBackend):
    async def scenario():
        async with pool.episode(task, backend) as ep:
            await ep.reset()
            await ep.page.wait_for_function("() => document.getElementById('result').textContent !== 'pending'")
            result = await ep.step('do(action="Wait")')
            return result.observation.html, ep.trajectory.metadata

    return run(scenario())


def test_requests_outside_the_task_hosts_are_blocked_and_counted(run, pool, pages, other_origin):
    task = page_task(f"fetch_other.html?other={other_origin.url}")
    html, metadata = _fetch_other(run, pool, task, WebArenaBackend({"__PAGES__": pages.url}))
    assert "fetch failed" in html
    assert metadata["blocked_requests"] == 1
    assert metadata["blocked_urls"] == [f"{other_origin.url}/page2.html"]

    # The same page reaches the other origin when the task names it as one of its sites.
    both = Task(task_id="t2", intent="test", sites=["pages", "other"], start_url=task.start_url)
    both_backend = WebArenaBackend({"__PAGES__": pages.url, "__OTHER__": other_origin.url})
    html, metadata = _fetch_other(run, pool, both, both_backend)
    assert "fetch loaded" in html
    assert metadata["blocked_requests"] == 0


class _SlowSiteBackend(WebArenaBackend):
    """Opens the start page (which fetches from an outside origin), then fails as a site that timed out would."""

    async def start(self, page, task):
        await super().start(page, task)
        await page.wait_for_function("() => document.getElementById('result').textContent !== 'pending'")
        raise episode_module.PlaywrightError("Timeout 30000ms exceeded (a slow site)")

    async def evaluate(self, page, task, answer):
        raise EvaluatorSiteError(f"task {task.task_id}: program_html calls shopping_get_latest_order_url(): refused")


def test_a_site_that_fails_is_the_browsers_fault_though_the_page_asked_for_an_outside_resource(
    run, pool, pages, other_origin
):
    """A refused font or fetch of a start page that then times out is no sign of the task leaving its sites."""
    task = page_task(f"fetch_other.html?other={other_origin.url}")

    async def scenario():
        async with pool.episode(task, _SlowSiteBackend({"__PAGES__": pages.url}), FAST) as ep:
            await ep.reset()
            return ep.trajectory

    trajectory = run(scenario())
    assert trajectory.metadata["blocked_requests"] == 1 and trajectory.metadata["blocked_navigations"] == 0
    assert trajectory.status == "error" and trajectory.infra_error, trajectory.error


def test_an_evaluator_whose_site_fails_marks_the_episode_an_infra_error(run, pool, pages):
    async def scenario():
        async with pool.episode(page_task("page2.html"), _SlowSiteBackend({"__PAGES__": pages.url}), FAST) as ep:
            ep.page = await ep._holder.open_page(ep)
            await ep.step('exit(message="shipped")')
            return await ep.evaluate(), ep.trajectory

    reward, trajectory = run(scenario())
    assert reward is None and trajectory.status == "error" and trajectory.infra_error
    assert "shopping_get_latest_order_url" in trajectory.metadata["eval_error"]


def test_limits_are_validated():
    with pytest.raises(ValueError, match="EpisodeLimits.max_steps"):
        EpisodeLimits(max_steps=0)
    with pytest.raises(ValueError, match="EpisodeLimits.action_timeout_s"):
        EpisodeLimits(action_timeout_s=0)


def test_websockets_outside_the_task_hosts_are_refused(run, pool, pages, other_origin):
    other = other_origin.url.replace("http", "ws", 1)
    task = page_task(f"socket_other.html?other={other}")

    async def scenario():
        async with pool.episode(task, WebArenaBackend({"__PAGES__": pages.url})) as ep:
            await ep.reset()
            await ep.page.wait_for_function("() => document.getElementById('result').textContent !== 'pending'")
            return (await ep.step('do(action="Wait")')).observation.html, ep.trajectory.metadata

    html, metadata = run(scenario())
    assert "socket closed 1008" in html
    assert metadata["blocked_requests"] == 1 and metadata["blocked_urls"] == [f"{other}/chat"]


def test_outside_origins_pattern():
    pattern = outside_origins({"http://127.0.0.1:8000", "http://shop.local"})
    for allowed in ("http://127.0.0.1:8000", "http://127.0.0.1:8000/a?b=1", "http://shop.local/#x"):
        assert not pattern.search(allowed), allowed
    for blocked in ("http://127.0.0.1:80001/", "http://127.0.0.1:8001/x", "https://shop.local/", "http://evil.com/"):
        assert pattern.search(blocked), blocked
    assert outside_origins(set()).search("http://127.0.0.1:8000/")


def test_an_episode_opens_a_menu_that_only_script_listens_for(run, pool, backend):
    # js_hover.html's "Shop" menu opens on addEventListener("mouseenter"): the episode's context records it.
    async def scenario():
        async with pool.episode(page_task("js_hover.html"), backend, FAST) as ep:
            obs = await ep.reset()
            assert "Chairs" not in obs.html
            shop = element_id(obs.html, "Shop")
            result = await ep.step(f'do(action="Hover", element="{shop}")')
            return result.error, result.observation.html

    error, html = run(scenario())
    assert error is None and "Chairs" in html
