"""A Chromium killed mid-episode: in-flight episodes end with status "error", the pool relaunches.

With reused contexts too: the dead browser's contexts are dropped, not lent to the next episodes.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from env_helpers import element_id, page_task

from webrl.env.browser import BrowserConfig, BrowserPool

pytestmark = pytest.mark.timeout(120)


async def _wait_disconnected(browser, limit_s: float = 20.0) -> None:
    for _ in range(int(limit_s / 0.05)):
        if not browser.is_connected():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("Chromium still connected after SIGKILL")


@pytest.mark.parametrize("reuse_contexts", [False, True], ids=["fresh contexts", "reused contexts"])
def test_killed_chromium_ends_in_flight_episodes_and_the_pool_recovers(run, backend, reuse_contexts):
    async def scenario():
        async with BrowserPool(BrowserConfig(max_concurrency=4, reuse_contexts=reuse_contexts)) as pool:
            task = page_task("actions.html")
            async with pool.episode(task, backend) as first, pool.episode(task, backend) as second:
                obs = await first.reset()
                await second.reset()
                go = element_id(obs.html, "Go")
                assert (await first.step(f'do(action="Click", element="{go}")')).status == "running"

                pid = await pool.browser_pid()
                browser = await pool.browser()
                os.kill(pid, signal.SIGKILL)
                await _wait_disconnected(browser)

                crashed = await first.step(f'do(action="Click", element="{go}")')
                # `second` never acts again; closing it records that it did not finish.
            after = []
            for _ in range(2):
                async with pool.episode(task, backend) as episode:
                    obs = await episode.reset()
                    go = element_id(obs.html, "Go")
                    await episode.step(f'do(action="Click", element="{go}")')
                    await episode.step('exit(message="ok")')
                    after.append(episode.trajectory)
            return crashed, first.trajectory, second.trajectory, after, pool.relaunches, await pool.browser_pid(), pid

    crashed, first, second, after, relaunches, new_pid, old_pid = run(scenario())
    assert crashed.done and crashed.status == "error"
    assert first.status == "error" and first.error.startswith("browser failed during step 1")
    assert len(first.steps) == 2 and first.steps[0].error is None
    assert second.status == "error" and second.error == "episode closed before it ended"
    assert [t.status for t in after] == ["exit", "exit"]
    assert all(t.steps[0].error is None for t in after)
    assert relaunches == 1 and new_pid != old_pid
