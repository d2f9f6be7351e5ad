"""The loop's curriculum stage scores tasks with the critic in the prompt form the critic was trained on.

The critic learns from the prompts the rollouts record, which an actor with a chat template (SmolLM2) gets in
chat form. The first test runs the stage on the embedded sites with a chat-template actor and then rolls the
proposed tasks out: what the critic scored must be, byte for byte, what each rollout recorded for its first step.
The second keeps the default run as it was: its tiny actor has no chat template, so the critic still reads the
completion form the curriculum always gave it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from tests.sample_records import chatml_tokenizer
from tests.single_process import SingleProcess
from webrl import loop as loop_module
from webrl.config import load_config
from webrl.curriculum.phase import start_page_prompt
from webrl.data.atomic_io import write_json_atomic
from webrl.data.prompts import build_actor_prompt, uses_chat_template
from webrl.data.trajectory import Task, Trajectory, write_trajectories
from webrl.inference.scripted import ScriptedEngine
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.web_environment import WebEnvironment


@pytest.fixture(scope="module")
def chat_tokenizer() -> PreTrainedTokenizerFast:
    """A chat-template tokenizer like SmolLM2's: `apply_chat_template` renders the rollouts' prompts."""
    return chatml_tokenizer(["Task Instruction: What is the price of"] * 5, vocab_size=300)


@pytest.fixture(scope="module")
def env() -> WebEnvironment:
    with WebEnvironment(load_config(WebRLConfig, [])) as environment:
        yield environment


def _exit_at_once(tokenizer: object) -> ScriptedEngine:
    """The actor of `tokenizer` as the rollouts drive it, answering with an empty exit: one step per episode."""
    return ScriptedEngine(lambda task, history, html: 'exit(message="")', tokenizer)


def test_the_critic_scores_the_first_step_prompt_a_rollout_records(tmp_path, env, chat_tokenizer, monkeypatch):
    """Phase 1's failed price question grows two new ones in phase 2; the critic saved in phase 1 scores them."""
    prices = [task for task in env.suite("train", 0, 0) if task.intent_template_id == 101][:2]
    overrides = ["phases=2", "curriculum.tasks_per_phase=2", "curriculum.variants_per_seed=2"]
    config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", *overrides])
    engine = _exit_at_once(chat_tokenizer)
    loop = PhaseLoop(config, SingleProcess(), env, engine, sft_dir=tmp_path / "sft", orm_dir=None, demonstrations=[])
    write_json_atomic(loop.layout.tasks_path(0), env.portable(prices[:1]))
    write_json_atomic(loop.layout.tasks_path(1), env.portable(prices[1:]))
    write_trajectories(loop.layout.labelled_path(1), [Trajectory(task=prices[1], outcome=0.0, status="exit")])
    loop.layout.critic_path(1).write_bytes(b"")  # phase 1 saved a critic: phase 2's curriculum scores with it
    scored: list[str] = []

    def critic_scorer(config: WebRLConfig, sft_dir: Path, path: Path):
        assert path == loop.layout.critic_path(1)
        return lambda states: scored.extend(state.prompt for state in states) or [0.5] * len(states)

    monkeypatch.setattr(loop_module, "critic_scorer", critic_scorer)
    metrics = loop._curriculum(2)
    assert metrics["curriculum/kept"] == 2.0 and metrics["curriculum/topped_up"] == 0.0
    proposed = env.resolve(loop.layout.tasks(2))
    rollouts, _ = env.run_episodes(
        engine, proposed, tmp_path / "rollouts.jsonl", phase=2, evaluation=False, seed=0, progress=False
    )
    recorded = [trajectory.steps[0].prompt for trajectory in rollouts]
    assert len(recorded) == 2 and all(p.startswith("<|im_start|>user\nTask Instruction: ") for p in recorded)
    assert sorted(scored) == sorted(recorded)


def test_a_default_run_s_critic_still_reads_the_completion_form(tmp_path):
    """The tiny actor's tokenizer, as the default run builds it, has no chat template: the prompt is unchanged."""
    from webrl.modules.model_factory import build_tiny_model

    corpus = ["Task Instruction: What is the price of the mug? <button id='1'> Buy </button>"] * 4
    model_dir = build_tiny_model(tmp_path / "tiny", corpus, vocab_size=300, hidden_size=64, num_layers=1, num_heads=1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert not uses_chat_template(tokenizer)
    prompt = start_page_prompt(WebEnvironment.actor_prompt_builder(_exit_at_once(tokenizer)))
    task = Task(task_id="t", intent="What is the price of the mug?", sites=["shopping"], start_url="http://shop.test/")
    html = "<button id='1'> Buy </button>"
    assert prompt(task, html).prompt == build_actor_prompt(task.intent, [], html)
    assert start_page_prompt(WebEnvironment.actor_prompt_builder(None))(task, html).prompt == build_actor_prompt(
        task.intent, [], html
    ), "a rank without an engine, as in the loop's unit tests"


def test_a_proposed_task_that_a_test_task_asks_is_refused_without_page_facts(tmp_path, env, monkeypatch):
    """Phase 1 failed a price question; its template's new value happens to be a test task's. With page facts off
    (the default) the loop must still hand the curriculum the held-out tasks, so the variant is refused."""
    failed = next(task for task in env.suite("train", 0, 0) if task.intent_template_id == 101)
    test_task = next(task for task in env.suite("test", 0, 0) if task.intent_template_id == 101)
    monkeypatch.setattr(env, "reinstantiate", lambda task, rng, n: [test_task])
    overrides = ["phases=2", "curriculum.mode=template", "curriculum.tasks_per_phase=1", "curriculum.page_facts=0"]
    config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", *overrides])
    loop = PhaseLoop(config, SingleProcess(), env, None, sft_dir=tmp_path / "sft", orm_dir=None, demonstrations=[])
    write_json_atomic(loop.layout.tasks_path(0), env.portable([failed]))
    write_json_atomic(loop.layout.tasks_path(1), env.portable([failed]))
    write_trajectories(loop.layout.labelled_path(1), [Trajectory(task=failed, outcome=0.0, status="exit")])
    metrics = loop._curriculum(2)
    assert metrics["curriculum/rejected_held_out"] == 1.0
    assert test_task.intent not in [task.intent for task in loop.layout.tasks(2)]
