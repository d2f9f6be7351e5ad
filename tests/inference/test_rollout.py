"""collect_rollouts on real Chromium: MiniWoB++ and the embedded sites driven by scripted test
doubles (known outcomes), a real tiny model through HFEngine, and the failure paths: Chromium killed
during a rollout batch, an engine that rejects one episode's prompt, and a hung engine call.

One event loop and one BrowserPool per module (Playwright objects belong to their loop); the crash
test gets its own pool, since it kills the browser.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from webrl.data.prompts import actor_prompt_for_step, trajectory_prompts
from webrl.data.trajectory import read_trajectories
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.limits import EpisodeLimits
from webrl.env.miniwob import miniwob_tasks
from webrl.inference.engine import Completion, SamplingParams
from webrl.inference.hf import HFEngine
from webrl.inference.rollout import EngineDownError, collect_rollouts, collect_rollouts_sync
from webrl.inference.rollout_metrics import engine_browser_figures
from webrl.inference.scripted import ScriptedEngine


def test_miniwob_rollouts_with_the_scripted_policy_all_succeed_and_stream_to_jsonl(run, pool, miniwob, tmp_path):
    tasks = miniwob_tasks(["click-button", "enter-text", "login-user"], seeds=[1, 2])
    engine = ScriptedEngine.for_miniwob()
    out = tmp_path / "trajectories.jsonl"
    tallied: list[dict[str, Any]] = []
    result = run(
        collect_rollouts(
            engine,
            tasks,
            miniwob,
            pool,
            concurrency=4,
            prompt_builder=engine.wrap(actor_prompt_for_step),
            writer=out,
            phase=3,
            max_batch_wait_s=60.0,  # a strict step barrier, so batch sizes do not depend on timing
            progress=False,
            tally=tallied.append,
        )
    )
    assert [t.task.task_id for t in result.trajectories] == [t.task_id for t in tasks]
    _tallied_as_reported(tallied, result.metrics, episodes=6, steps=12)
    assert [t.eval_reward for t in result.trajectories] == [1.0] * len(tasks)
    # login-user takes 3 actions (two fields, then Login); enter-text 2; click-button 1.
    assert [len(t.steps) for t in result.trajectories] == [1, 1, 2, 2, 3, 3]
    assert sorted(t.task.task_id for t in read_trajectories(out)) == sorted(t.task_id for t in tasks)
    for trajectory in result.trajectories:
        assert trajectory.phase == 3
        assert trajectory.task.intent, "the MiniWoB utterance must reach the recorded task"
        # The recorded prompts are exactly what the training side rebuilds from the trajectory.
        assert [s.prompt for s in trajectory.steps] == trajectory_prompts(trajectory)
        assert all(s.timings["engine"] >= 0 and "act" in s.timings for s in trajectory.steps)
    # With a strict barrier the 4 open episodes share every call: a first batch of 4.
    assert engine.calls[0] == 4
    assert sum(engine.calls) == sum(len(t.steps) for t in result.trajectories)
    metrics = result.metrics
    assert metrics["rollout/episodes"] == 6 and metrics["rollout/steps"] == 12
    assert metrics["rollout/success_rate"] == 1.0 and metrics["rollout/success_rate/miniwob"] == 1.0
    assert metrics["rollout/engine_calls"] == len(engine.calls)
    assert metrics["rollout/mean_batch_size"] == pytest.approx(12 / len(engine.calls))
    split = sum(metrics[f"rollout/{k}_s"] for k in ("engine_only", "browser_only", "overlap", "idle"))
    assert split == pytest.approx(metrics["rollout/wall_s"], rel=1e-6)


def _tallied_as_reported(tallied: list[dict[str, Any]], metrics: dict[str, float], episodes: int, steps: int) -> None:
    """The run's tally: a line per episode and one at its end, whose sums and latencies give its figures again
    (what a resumed stage adds up: `webrl.stage_attempts`); every step's latency given once."""
    assert len(tallied) == episodes + 1 and tallied[-1]["latencies"] == []
    calls = [record["sums"]["engine_calls"] for record in tallied]
    assert calls == sorted(calls) and calls[-1] == metrics["rollout/engine_calls"], "sums so far, not since the last"
    latencies = [latency for record in tallied for latency in record["latencies"]]
    assert len(latencies) == steps
    figures = engine_browser_figures(tallied[-1]["sums"], latencies)
    assert figures == {key: metrics[key] for key in figures}
    assert tallied[-1]["sums"]["wall_s"] == metrics["rollout/wall_s"]


def test_embedded_site_rollouts_with_the_reference_solver_all_succeed(run, pool):
    from webrl.env.sites import EmbeddedSites
    from webrl.env.sites.suite import load_suite

    with EmbeddedSites() as sites:
        by_template: dict[int, Any] = {}
        for task in load_suite("train", sites.url_map):
            by_template.setdefault(task.intent_template_id, task)
        tasks = list(by_template.values())[::4][:6]
        engine = ScriptedEngine.for_embedded_sites()
        result = run(
            collect_rollouts(
                engine,
                tasks,
                sites.backend(),
                pool,
                concurrency=3,
                prompt_builder=engine.wrap(actor_prompt_for_step),
                progress=False,
            )
        )
    assert len({t.site for t in tasks}) >= 2, "the sample should span several sites"
    for trajectory in result.trajectories:
        assert trajectory.eval_reward == 1.0, (trajectory.task.task_id, trajectory.status, trajectory.error)
        assert trajectory.status == "exit"
    for site in {t.site for t in tasks}:
        assert result.metrics[f"rollout/success_rate/{site}"] == 1.0


def test_a_real_model_rollout_records_prompts_token_ids_and_logprobs(run, pool, miniwob, tiny_model_dir):
    engine = HFEngine(tiny_model_dir, batch_size=4)
    tasks = miniwob_tasks(["click-button", "click-link"], seeds=[1, 2])
    result = run(
        collect_rollouts(
            engine,
            tasks,
            miniwob,
            pool,
            concurrency=4,
            sampling=SamplingParams(temperature=1.0, max_tokens=8, seed=0, logprobs=True),
            limits=EpisodeLimits(max_steps=2),
            progress=False,
        )
    )
    assert len(result.trajectories) == 4
    for trajectory in result.trajectories:
        assert trajectory.status in {"max_steps", "parse_failures", "repeated_action", "exit", "site_done"}
        assert trajectory.steps
        for step in trajectory.steps:
            assert step.prompt == actor_prompt_for_step(
                trajectory.task, trajectory.steps[: step.index], step.observation
            )
            assert 1 <= len(step.response_token_ids) <= 8
            assert len(step.response_logprobs) == len(step.response_token_ids)
            assert all(lp <= 0 for lp in step.response_logprobs)
            assert step.response == engine.tokenizer.decode(step.response_token_ids, skip_special_tokens=True)
    assert result.metrics["rollout/generated_tokens"] == sum(
        len(s.response_token_ids) for t in result.trajectories for s in t.steps
    )
    assert result.metrics["rollout/gen_tokens_per_s"] > 0


def test_the_sync_wrapper_runs_its_own_browser_pool(miniwob):
    engine = ScriptedEngine.for_miniwob()
    tasks = miniwob_tasks(["click-link", "click-button"], seeds=[9])
    result = collect_rollouts_sync(
        engine, tasks, miniwob, concurrency=2, prompt_builder=engine.wrap(actor_prompt_for_step), progress=False
    )
    assert [t.eval_reward for t in result.trajectories] == [1.0, 1.0]


class _KillBrowserOnCall:
    """Wraps an engine; on its `kill_on`-th generate call it SIGKILLs Chromium before answering."""

    def __init__(self, inner: ScriptedEngine, pid: int, kill_on: int) -> None:
        self.inner, self.pid, self.kill_on, self.calls = inner, pid, kill_on, 0

    def generate(self, prompts, params):
        self.calls += 1
        if self.calls == self.kill_on:
            os.kill(self.pid, signal.SIGKILL)
            time.sleep(0.5)  # let Playwright see the disconnect before the actions run
        return self.inner.generate(prompts, params)

    def close(self) -> None:
        self.inner.close()


def test_chromium_killed_during_a_batch_retries_the_episodes_in_flight_and_the_rest_finish(run, miniwob, tmp_path):
    # Two slots: login-user (3 steps) and enter-text (2 steps) are in flight at the 2nd engine call;
    # the two click tasks start after the crash, on a relaunched browser.
    tasks = miniwob_tasks(["login-user", "enter-text", "click-button", "click-link"], seeds=[5])
    crash_pool = BrowserPool(BrowserConfig(max_concurrency=2))
    run(crash_pool.start())
    try:
        pid = run(crash_pool.browser_pid())
        scripted = ScriptedEngine.for_miniwob()
        engine = _KillBrowserOnCall(scripted, pid, kill_on=2)
        out = tmp_path / "crash.jsonl"
        result = run(
            collect_rollouts(
                engine,
                tasks,
                miniwob,
                crash_pool,
                concurrency=2,
                prompt_builder=scripted.wrap(actor_prompt_for_step),
                writer=out,
                max_batch_wait_s=30.0,
                progress=False,
            )
        )
        assert crash_pool.relaunches == 1
    finally:
        run(crash_pool.close())
    # The two episodes in flight failed with the browser, not by their own doing: each ran again, and succeeded.
    first_errors = [t.metadata.get("first_error") or "" for t in result.trajectories]
    assert all("browser" in error.lower() or "closed" in error for error in first_errors[:2]), first_errors
    assert [t.metadata.get("attempts", 1) for t in result.trajectories] == [2, 2, 1, 1]
    assert [t.eval_reward for t in result.trajectories] == [1.0, 1.0, 1.0, 1.0]
    assert len(read_trajectories(out)) == 4, "one record per task"
    assert result.metrics["rollout/retried"] == 2 and result.metrics["rollout/infra_errors"] == 0


class _RejectMarked:
    """An engine that fails any batch holding a marked prompt (an engine error for that prompt alone)."""

    def __init__(self, inner: ScriptedEngine) -> None:
        self.inner = inner

    def generate(self, prompts, params):
        if any(p.startswith("POISON") for p in prompts):
            raise ValueError("prompt is too long for this model")
        return self.inner.generate(prompts, params)

    def close(self) -> None:
        self.inner.close()


def test_a_prompt_the_engine_rejects_ends_only_its_own_episode(run, pool, miniwob):
    tasks = miniwob_tasks(["click-button", "click-link", "enter-text"], seeds=[3])
    scripted = ScriptedEngine.for_miniwob()

    def builder(task, steps, html):
        marker = "POISON " if task.extra["miniwob_task"] == "click-link" else ""
        return marker + actor_prompt_for_step(task, steps, html)

    result = run(
        collect_rollouts(
            _RejectMarked(scripted), tasks, miniwob, pool, prompt_builder=scripted.wrap(builder), progress=False
        )
    )
    by_name = {t.task.extra["miniwob_task"]: t for t in result.trajectories}
    rejected = by_name["click-link"]
    # The engine's failure, not the agent's: tried twice, then left out of the labels and rates.
    assert rejected.status == "error" and rejected.infra_error and rejected.metadata["attempts"] == 2
    assert "ValueError: prompt is too long" in rejected.error
    assert by_name["click-button"].eval_reward == 1.0 and by_name["enter-text"].eval_reward == 1.0


class _Broken:
    def generate(self, prompts, params):
        raise ConnectionError("inference server unreachable")

    def close(self) -> None:
        return None


def test_an_engine_that_is_down_stops_the_run_after_recording_what_finished(run, pool, miniwob, tmp_path):
    tasks = miniwob_tasks(["click-button"], seeds=[1, 2, 3, 4, 5])
    out = tmp_path / "down.jsonl"
    with pytest.raises(EngineDownError, match="3 calls in a row: inference server unreachable"):
        run(collect_rollouts(_Broken(), tasks, miniwob, pool, concurrency=1, writer=out, progress=False))
    # The first task's two tries failed the first 2 calls (the engine's failure: an infra error, kept out of the
    # labels); the 3rd call, the second task's first, stopped the run before that task was recorded.
    (recorded,) = read_trajectories(out)
    assert recorded.status == "error" and recorded.infra_error and recorded.metadata["attempts"] == 2
    assert recorded.error == "the engine failed on this episode's prompt: ConnectionError: inference server unreachable"


class _Hangs:
    """An engine whose call outlives the episode's hard limit."""

    def generate(self, prompts, params):
        time.sleep(9.0)
        return [Completion('exit(message="late")', [], None, "stop") for _ in prompts]

    def close(self) -> None:
        return None


def test_a_hung_engine_call_times_the_episode_out(run, pool, miniwob):
    limits = EpisodeLimits(episode_timeout_s=1.0, action_timeout_s=2.0, reset_timeout_s=2.0)
    tasks = miniwob_tasks(["click-button"], seeds=[4])
    result = run(collect_rollouts(_Hangs(), tasks, miniwob, pool, limits=limits, progress=False))
    (trajectory,) = result.trajectories
    assert trajectory.status == "error" and trajectory.infra_error and trajectory.metadata["attempts"] == 2
    assert "hard limit of 7s" in trajectory.error
