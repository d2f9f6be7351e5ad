"""A prompt too long for the model is the agent's failure, not the engine's: scored 0, counted, never retried.

The prompt is the episode's own page and history, so a retry fails the same way, and leaving the episode out of
the rates would flatter an agent whose histories outgrow its model. Real Chromium, real MiniWoB++ pages and the
real tiny model behind `HFEngine`, whose `max_model_len` is set between the first prompts' lengths of two tasks
(measured by a first rollout with room for every prompt), so that one task fits and the other does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.fabric import Fabric

from webrl.config import load_config
from webrl.data.atomic_io import write_json_atomic
from webrl.data.prompts import prompt_token_ids
from webrl.data.trajectory import Task
from webrl.env.limits import EpisodeLimits
from webrl.env.miniwob import miniwob_tasks
from webrl.inference.engine import SamplingParams, encode_prompts
from webrl.inference.hf import HFEngine
from webrl.inference.rollout import MAX_FAILED_ENGINE_CALLS, EngineDownError, collect_rollouts
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.metrics import success_by_site

pytestmark = pytest.mark.timeout(240)

ONE_STEP = EpisodeLimits(max_steps=1)
"""One step per episode: its one prompt is the page the task opens on, the same in every run of the module."""


def _tasks() -> list[Task]:
    """A small page and a larger one: click-button's buttons, and login-user's form."""
    return miniwob_tasks(["click-button", "login-user"], seeds=[7])


def _rollouts(run, pool, miniwob, engine, tasks: list[Task], concurrency: int = 2, writer: Path | None = None):
    return run(
        collect_rollouts(
            engine,
            tasks,
            miniwob,
            pool,
            concurrency=concurrency,
            sampling=SamplingParams(temperature=1.0, max_tokens=4, seed=0),
            limits=ONE_STEP,
            writer=writer,
            progress=False,
        )
    )


@pytest.fixture(scope="module")
def first_prompt_tokens(run, pool, miniwob, tiny_model_dir) -> dict[str, int]:
    """Each task's first prompt's length in tokens, as the engine counts it, from a rollout with room for all."""
    engine = HFEngine(tiny_model_dir)
    result = _rollouts(run, pool, miniwob, engine, _tasks())
    lengths = {t.task.task_id: len(prompt_token_ids(engine.tokenizer, t.steps[0].prompt)) for t in result.trajectories}
    small, large = (lengths[task.task_id] for task in _tasks())
    assert small < large < engine.max_model_len, lengths
    return lengths


def _labelling_loop(tmp_path: Path, tasks: list[Task]) -> PhaseLoop:
    """A PhaseLoop labelling phase 1 from the evaluator's reward (no ORM), its task list `tasks`."""
    overrides = [f"output_dir={tmp_path / 'run'}", "reward.source=evaluator", "reward.orm_labels=false"]
    config = load_config(WebRLConfig, overrides)
    fabric = Fabric(accelerator="cpu", devices=1)
    loop = PhaseLoop(config, fabric, None, None, sft_dir=tmp_path / "sft", orm_dir=None, demonstrations=[])
    write_json_atomic(loop.layout.tasks_path(1), [task.to_dict() for task in tasks])
    return loop


def test_an_episode_whose_prompt_outgrew_the_model_is_scored_0_and_counted_not_retried(
    run, pool, miniwob, tiny_model_dir, first_prompt_tokens, tmp_path
):
    small_task, large_task = _tasks()
    limit = first_prompt_tokens[large_task.task_id]  # the larger prompt has no room for one token; the other has
    loop = _labelling_loop(tmp_path, _tasks())
    engine = HFEngine(tiny_model_dir, max_model_len=limit)
    result = _rollouts(run, pool, miniwob, engine, _tasks(), writer=loop.layout.rollouts_path(1, 0))
    fits, too_long = result.trajectories
    assert too_long.task.task_id == large_task.task_id
    assert (too_long.status, too_long.eval_reward, too_long.steps) == ("error", 0.0, [])
    assert (
        too_long.error
        == f"PromptTooLongError: the prompt of step 0 has {limit} tokens; the model takes fewer than {limit}"
    )
    assert not too_long.infra_error and "attempts" not in too_long.metadata, "the same prompt would fail again"
    assert fits.status != "error" and len(fits.steps) == 1
    metrics = result.metrics
    assert (metrics["rollout/infra_errors"], metrics["rollout/retried"], metrics["rollout/status/error"]) == (0, 0, 1)
    assert success_by_site(result.trajectories)["episodes"] == 2.0, "both episodes count in the rates"
    # The labels stage reads the rollouts as written: the refused episode is a failure to learn from, not left out.
    labels = loop._labels(1)
    outcomes = {t.task.task_id: t.outcome for t in loop.layout.labelled(1)}
    assert outcomes[large_task.task_id] == 0.0 and outcomes.keys() == {small_task.task_id, large_task.task_id}
    assert (labels["train/episodes"], labels["rollout/infra_errors"], labels["rollout/errors"]) == (2, 0, 1)


def test_prompts_too_long_for_the_model_in_every_call_do_not_stop_the_run_as_an_engine_down(
    run, pool, miniwob, tiny_model_dir
):
    tasks = miniwob_tasks(["click-button"], seeds=[7, 8, 9, 10])
    engine = HFEngine(tiny_model_dir, max_model_len=20)  # no page's prompt is that short
    result = _rollouts(run, pool, miniwob, engine, tasks, concurrency=1)
    assert len(tasks) > MAX_FAILED_ENGINE_CALLS, "more refused calls in a row than an engine that is down makes"
    assert [(t.status, t.eval_reward, t.infra_error) for t in result.trajectories] == [("error", 0.0, False)] * 4
    assert all(t.error.startswith("PromptTooLongError: the prompt of step 0 has ") for t in result.trajectories)


class _Unreachable:
    """An engine whose server is down, and that measures each prompt against the model first, as the hf and vllm
    engines do: a prompt too long is refused as such, any other fails as the server's."""

    def __init__(self, tokenizer, max_model_len: int) -> None:
        self.tokenizer, self.max_model_len, self.calls = tokenizer, max_model_len, 0

    def generate(self, prompts, params):
        self.calls += 1
        encode_prompts(self.tokenizer, prompts, self.max_model_len)
        raise ConnectionError("inference server unreachable")

    def close(self) -> None:
        return None


def test_a_prompt_too_long_between_failed_calls_does_not_hide_an_engine_that_is_down(
    run, pool, miniwob, tiny_model_dir, first_prompt_tokens
):
    """Each small task's episode fails twice (its retry too), each large one's once, refused as too long: were the
    refusals to start the count again, the down engine would never be told (2 failures, 0, 2, 0, ...)."""
    small_task, large_task = _tasks()
    tasks = [small_task, large_task] * 3
    tokenizer = HFEngine(tiny_model_dir).tokenizer
    engine = _Unreachable(tokenizer, first_prompt_tokens[large_task.task_id])
    with pytest.raises(EngineDownError, match="3 calls in a row: inference server unreachable"):
        _rollouts(run, pool, miniwob, engine, tasks, concurrency=1)
    assert engine.calls == 4, "the small task's two tries, the large one's refusal, then the next small task's"


def test_the_refusal_names_the_prompt_its_length_and_the_limit_and_is_still_a_value_error(tiny_model_dir, prompts):
    from webrl.inference.engine import PromptTooLongError

    engine = HFEngine(tiny_model_dir, max_model_len=20)
    long_prompt = prompts[0]
    with pytest.raises(PromptTooLongError) as refused:
        engine.generate(["short", long_prompt], SamplingParams(max_tokens=2))
    tokens = len(prompt_token_ids(engine.tokenizer, long_prompt))
    assert (refused.value.index, refused.value.tokens, refused.value.limit) == (1, tokens, 20)
    assert isinstance(refused.value, ValueError), "callers that caught the plain ValueError still catch it"
