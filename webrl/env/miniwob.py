"""MiniWoB++ tasks behind the same observation/action interface as every other site.

The `miniwob` package ships its 130 task pages under `miniwob/html/`; this backend serves that
directory over http on 127.0.0.1, seeds each episode (`Math.seedrandom`), starts it the way the
package does (`core.startEpisodeReal()`), and reads the page's reward globals. The task's utterance
(the `#query` text) becomes the task intent once the page has generated it.

Success is counted only for a raw reward >= 1: MiniWoB's time-discounted and partial rewards are
not successes (a complaint about other harnesses). The page's own 10 s episode timer is stretched
to `episode_max_time_s`, because an LLM agent on a CPU needs more than 10 s for a few steps.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from webrl.data.trajectory import Task, is_full_score
from webrl.env.backend import origin_of
from webrl.env.evaluators import EvalResult
from webrl.env.static_server import StaticServer
from webrl.env.tasks import substitute

PLACEHOLDER = "__MINIWOB__"
# MiniWoB's reward HUD, click visualiser and start cover are scaffolding for humans, not task content.
_HIDE_CSS = "#reward-display, #click-canvas, #sync-task-cover { display: none !important; }"
# One round trip: hide the scaffolding, seed, start the episode, and report readiness and utterance.
_START_JS = """
({seed, maxTimeMs, css}) => {
  const style = document.createElement("style");
  style.textContent = css;
  document.head.appendChild(style);
  if (seed !== null) Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = maxTimeMs;
  core.startEpisodeReal();
  return {ready: WOB_TASK_READY !== false, utterance: core.getUtterance()};
}
"""
_REWARD_JS = "() => ({done: WOB_DONE_GLOBAL, reward: WOB_REWARD_GLOBAL, raw: WOB_RAW_REWARD_GLOBAL})"


def miniwob_html_dir() -> Path:
    """The package's `html/` directory (found without importing miniwob, which registers gym envs)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the `miniwob` package is not installed (pip install miniwob)")
    html = Path(next(iter(spec.submodule_search_locations))) / "html"
    if not (html / "miniwob").is_dir():
        raise FileNotFoundError(f"{html}/miniwob not found: the miniwob package install looks incomplete")
    return html


def available_tasks() -> list[str]:
    """Names of the MiniWoB++ task pages, e.g. "click-button"."""
    return sorted(p.stem for p in (miniwob_html_dir() / "miniwob").glob("*.html"))


def miniwob_tasks(names: Iterable[str], seeds: Iterable[int]) -> list[Task]:
    """One Task per (name, seed); the intent is filled in from the page when the episode starts."""
    known = set(available_tasks())
    seeds = list(seeds)
    tasks = []
    for name in names:
        if name not in known:
            raise ValueError(f"unknown MiniWoB++ task {name!r}; see webrl.env.miniwob.available_tasks()")
        for seed in seeds:
            tasks.append(
                Task(
                    task_id=f"miniwob.{name}.{seed}",
                    intent="",
                    sites=["miniwob"],
                    start_url=f"{PLACEHOLDER}/miniwob/{name}.html",
                    extra={"miniwob_task": name, "seed": seed},
                )
            )
    return tasks


class MiniWoBBackend:
    """Serves MiniWoB++ pages and scores episodes from the page's reward globals.

    Use as a context manager (or call `close()`) to stop the file server.
    """

    def __init__(self, episode_max_time_s: float = 600.0, html_dir: str | Path | None = None) -> None:
        self.episode_max_time_s = episode_max_time_s
        self._server = StaticServer(html_dir or miniwob_html_dir())
        self.url_map = {PLACEHOLDER: self._server.url}

    def allowed_origins(self, task: Task) -> list[str]:
        return [origin_of(self._server.url)]

    def storage_state(self, task: Task) -> dict[str, Any] | None:
        return None

    async def setup_context(self, context: Any, task: Task) -> None:
        return None

    async def start(self, page: Any, task: Task) -> None:
        """Load the page, start a seeded episode, and take its utterance as the task intent."""
        await page.goto(substitute(task.start_url, self.url_map), wait_until="load")
        options = {"seed": task.extra.get("seed"), "maxTimeMs": int(self.episode_max_time_s * 1000), "css": _HIDE_CSS}
        state = await page.evaluate(_START_JS, options)
        if not state["ready"]:
            # A few tasks build their problem asynchronously and flag readiness when done.
            await page.wait_for_function("() => WOB_TASK_READY !== false")
            state["utterance"] = await page.evaluate("() => core.getUtterance()")
        task.intent = state["utterance"]

    async def episode_done(self, page: Any, task: Task) -> bool:
        return bool(await page.evaluate("() => WOB_DONE_GLOBAL"))

    async def evaluate(self, page: Any, task: Task, answer: str | None) -> EvalResult:
        """1.0 only when the page's raw reward is >= 1; the raw and time-discounted rewards are kept."""
        state = await page.evaluate(_REWARD_JS)
        success = float(bool(state["done"]) and is_full_score(state["raw"]))
        details = {"done": bool(state["done"]), "raw_reward": state["raw"], "reward": state["reward"]}
        return EvalResult(score=success, per_type={"miniwob": success}, details=details)

    def close(self) -> None:
        self._server.close()

    def __enter__(self) -> MiniWoBBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
