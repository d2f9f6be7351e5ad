"""An engine call that fails for one episode's prompt is the engine's failure, not the agent's: an infra error.

The episode is retried once in a fresh context, like one the browser failed; if the engine fails it again it is
kept out of the labels and the success rates, and counted. Real Chromium and real MiniWoB++ pages, driven by the
MiniWoB scripted policy behind a fake server that fails chosen requests (so every outcome is known).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.fabric import Fabric

from webrl.config import load_config
from webrl.data.atomic_io import write_json_atomic
from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Task, read_trajectories
from webrl.env.miniwob import miniwob_tasks
from webrl.inference.engine import SamplingParams
from webrl.inference.openai import EngineRequestError
from webrl.inference.rollout import collect_rollouts, request_seed
from webrl.inference.scripted import ScriptedEngine
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.metrics import success_by_site

pytestmark = pytest.mark.timeout(240)

SEED = 0
SERVER_ERROR = "http://127.0.0.1:8000/v1 (model 'actor'): 500 Internal Server Error"
# login-user takes 3 actions; its second request fails, after a step it has already taken.
FAILING_TASK, FAILING_STEP = "miniwob.login-user.5", 1


class _FailingServer:
    """A fake inference server, standing for a real one that fails some requests: a call holding one of the
    `failing` requests raises `EngineRequestError`, as `OpenAIEngine` does when its server answers 500; every other
    request gets the scripted policy's answer. A request is named by its sampling seed (`request_seed`: episode,
    attempt, step), so which request fails does not depend on which episodes share its batch."""

    def __init__(self, inner: ScriptedEngine, failing: set[int]) -> None:
        self.inner, self.failing, self.failed_calls = inner, failing, 0

    def generate(self, prompts, params):
        if self.failing.intersection(params.seeds or []):
            self.failed_calls += 1
            raise EngineRequestError(SERVER_ERROR)
        return self.inner.generate(prompts, params)

    def close(self) -> None:
        self.inner.close()


def _failing_attempts(*attempts: int) -> set[int]:
    """The seeds of `FAILING_TASK`'s request at `FAILING_STEP` in `attempts` (0: the first try, 1: its retry)."""
    return {request_seed(SEED, f"{FAILING_TASK}#0", attempt, FAILING_STEP) for attempt in attempts}


def _tasks() -> list[Task]:
    return miniwob_tasks(["login-user", "click-button", "enter-text"], seeds=[5])


def _rollouts(run, pool, miniwob, failing: set[int], out: Path):
    scripted = ScriptedEngine.for_miniwob()
    engine = _FailingServer(scripted, failing)
    result = run(
        collect_rollouts(
            engine,
            _tasks(),
            miniwob,
            pool,
            concurrency=2,
            sampling=SamplingParams(seed=SEED),
            prompt_builder=scripted.wrap(actor_prompt_for_step),
            writer=out,
            progress=False,
        )
    )
    assert engine.failed_calls >= 1, "the chosen request must have been asked for, and failed"
    return result


def test_an_engine_failing_one_prompt_then_recovering_retries_that_episode_and_spares_the_others(
    run, pool, miniwob, tmp_path
):
    result = _rollouts(run, pool, miniwob, _failing_attempts(0), tmp_path / "rollouts.jsonl")
    failed_once, *others = result.trajectories
    assert failed_once.task.task_id == FAILING_TASK
    assert failed_once.metadata["attempts"] == 2
    first_error = failed_once.metadata["first_error"]
    assert first_error.startswith("the engine failed on this episode's prompt: EngineRequestError:"), first_error
    assert SERVER_ERROR in first_error
    assert (failed_once.status, failed_once.eval_reward, len(failed_once.steps)) == ("site_done", 1.0, 3)
    assert not failed_once.infra_error
    assert [t.eval_reward for t in others] == [1.0, 1.0] and not any("attempts" in t.metadata for t in others)
    metrics = result.metrics
    assert (metrics["rollout/retried"], metrics["rollout/infra_errors"], metrics["rollout/success_rate"]) == (1, 0, 1.0)
    assert len(read_trajectories(tmp_path / "rollouts.jsonl")) == 3, "one record per task, the retry's"


def _labelling_loop(tmp_path: Path, tasks: list[Task]) -> PhaseLoop:
    """A PhaseLoop labelling phase 1 from the evaluator's reward (no ORM), its task list `tasks`."""
    overrides = [f"output_dir={tmp_path / 'run'}", "reward.source=evaluator", "reward.orm_labels=false"]
    config = load_config(WebRLConfig, [*overrides, "rollout.samples_per_task=1"])
    loop = PhaseLoop(
        config,
        Fabric(accelerator="cpu", devices=1),
        None,
        None,
        sft_dir=tmp_path / "sft",
        orm_dir=None,
        demonstrations=[],
    )
    write_json_atomic(loop.layout.tasks_path(1), [task.to_dict() for task in tasks])
    return loop


def test_an_episode_the_engine_fails_twice_gets_no_label_and_is_left_out_of_the_rates(run, pool, miniwob, tmp_path):
    loop = _labelling_loop(tmp_path, _tasks())
    result = _rollouts(run, pool, miniwob, _failing_attempts(0, 1), loop.layout.rollouts_path(1, 0))
    failed, *others = result.trajectories
    assert failed.task.task_id == FAILING_TASK
    # The labels stage reads the rollouts as written: the failed episode gets no outcome 0, so no training signal.
    labels = loop._labels(1)
    assert [(t.task.task_id, t.outcome) for t in loop.layout.labelled(1)] == [(t.task.task_id, 1.0) for t in others]
    assert (labels["train/success_rate"], labels["rollout/infra_errors"], labels["rollout/errors"]) == (1.0, 1, 0)
    assert failed.status == "error" and failed.infra_error and failed.metadata["attempts"] == 2
    assert failed.error.startswith("the engine failed on this episode's prompt: EngineRequestError:"), failed.error
    assert failed.eval_reward is None and len(failed.steps) == FAILING_STEP
    assert [t.eval_reward for t in others] == [1.0, 1.0] and not any(t.infra_error for t in others)
    metrics = result.metrics
    assert (metrics["rollout/infra_errors"], metrics["rollout/retried"], metrics["rollout/status/error"]) == (1, 1, 1)
    assert metrics["rollout/success_rate"] == 1.0, "2 of the 2 countable episodes, not 2 of 3"
    assert success_by_site(result.trajectories) == {
        "success_rate": 1.0,
        "episodes": 2.0,
        "success_rate/miniwob": 1.0,
        "infra_errors": 1.0,
    }
