"""CriticModule: head structure, padding-independent values, and training under Trainer.fit."""

from __future__ import annotations

import pytest
import torch
from sample_records import build_trajectory
from torch.utils.data import DataLoader

from webrl.curriculum.phase import start_page_prompt
from webrl.data.collate import CriticStateCollator
from webrl.data.critic_states import CriticState
from webrl.data.prompts import actor_prompt_for_step
from webrl.data.steps import trajectory_to_samples
from webrl.data.trajectory import Task
from webrl.modules.critic import CriticModule, last_token_index
from webrl.modules.losses import critic_loss, critic_state_loss
from webrl.modules.settings import LoraSettings

STATES = [
    'Task Instruction: buy the red shirt\n\nRound 0\n\n<html><button id="2">Add to cart</button></html>',
    "Task Instruction: find the cheapest laptop",
    "Home",
]


def test_last_token_index_for_both_padding_sides():
    left = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1]])
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    assert last_token_index(left).tolist() == [3, 3, 3]
    assert last_token_index(right).tolist() == [1, 3, 0]


def test_heads_follow_the_release_structure(tiny):
    model, tokenizer = tiny
    critic = CriticModule(model, tokenizer)
    hidden = model.config.hidden_size
    assert len(critic.heads) == 2
    assert not hasattr(critic, "lm_head") and not any("lm_head" in name for name, _ in critic.named_parameters())
    for head in critic.heads:
        shapes = [tuple(m.weight.shape) for m in head if isinstance(m, torch.nn.Linear)]
        assert shapes == [(hidden, hidden), (hidden, hidden), (2, hidden)]
        for layer in (head[0], head[2]):
            assert abs(layer.weight.std().item() - 0.2) < 0.01 and torch.count_nonzero(layer.bias) == 0


def test_values_do_not_depend_on_padding_side_or_batch(tiny):
    model, tokenizer = tiny
    critic = CriticModule(model, tokenizer)
    together = critic.values(STATES)
    alone = torch.cat([critic.values([s]) for s in STATES])
    assert torch.allclose(together, alone, atol=1e-5)
    batch = CriticModule.collate(tokenizer, [(s, s, 1.0) for s in STATES], padding_side="right")
    right = critic.state_values(batch["state_input_ids"], batch["state_attention_mask"])
    assert torch.allclose(together, right, atol=1e-5)
    assert bool(((together > 0) & (together < 1)).all())


def test_a_state_whose_page_is_cut_is_scored_on_the_ids_critic_training_gives_it(tiny_dir):
    """A first step too long for max_length: its value is the critic's forward on the loop's training batch of that
    state (the page cut, the instruction kept), whether a rollout recorded it or the curriculum builds it for a
    task's start page; a state that fits is scored on the ids of its prompt, as before."""
    max_length = 256
    critic = CriticModule(tiny_dir, max_length=max_length)
    long = trajectory_to_samples(build_trajectory("long", num_steps=2, outcome=0.0, html_size=2000))[0]
    short = trajectory_to_samples(build_trajectory("short", num_steps=2, outcome=1.0))[0]
    assert len(critic.tokenizer(long.prompt)["input_ids"]) > max_length  # the page must be cut
    batch = CriticStateCollator(critic.tokenizer, max_length)([CriticState(long, False), CriticState(short, False)])
    trained = critic.state_values(batch["input_ids"], batch["attention_mask"])  # (2,)
    task = Task(task_id="long", intent=long.intent, sites=["shopping"], start_url="")
    start = start_page_prompt(actor_prompt_for_step)(task, long.html)  # the curriculum's critic input
    assert torch.allclose(critic.values([start]), trained[:1], atol=1e-5)
    assert torch.allclose(critic.values([long, short]), trained, atol=1e-5)
    assert torch.equal(critic.values([short]), critic.values([short.prompt]))


def test_compute_loss_is_the_double_critic_loss(tiny):
    model, tokenizer = tiny
    critic = CriticModule(model, tokenizer)
    batch = CriticModule.collate(tokenizer, [(STATES[0], STATES[1], 1.0), (STATES[2], STATES[0], 0.0)])
    loss, metrics = critic.compute_loss(batch)
    expected, accuracy = critic_loss(
        critic(batch["state_input_ids"], batch["state_attention_mask"]),
        critic(batch["next_state_input_ids"], batch["next_state_attention_mask"]),
        batch["outcome"],
    )
    assert torch.allclose(loss, expected) and torch.equal(metrics["critic/acc"], accuracy)
    assert set(metrics) == {"critic/loss", "critic/acc", "critic/value_mean", "critic/calibration_error"}


def test_a_single_state_batch_takes_the_single_state_loss(tiny):
    model, tokenizer = tiny
    critic = CriticModule(model, tokenizer)
    batch = CriticModule.collate_states(tokenizer, [(STATES[0], 1.0), (STATES[2], 0.0)])
    assert set(batch) == {"input_ids", "attention_mask", "outcome"}
    loss, metrics = critic.compute_loss(batch)
    expected, accuracy = critic_state_loss(critic(batch["input_ids"], batch["attention_mask"]), batch["outcome"])
    assert torch.allclose(loss, expected) and torch.equal(metrics["critic/acc"], accuracy)
    # The same two states as the s of a pair batch: that loss adds the s' terms to this one.
    pairs = CriticModule.collate(tokenizer, [(STATES[0], STATES[1], 1.0), (STATES[2], STATES[0], 0.0)])
    pair_loss, _ = critic.compute_loss(pairs)
    next_loss, _ = critic_state_loss(
        critic(pairs["next_state_input_ids"], pairs["next_state_attention_mask"]), pairs["outcome"]
    )
    assert torch.allclose(pair_loss, loss + next_loss, atol=1e-5)


def test_head_init_std_sets_the_heads_first_two_layers(tiny):
    model, tokenizer = tiny
    critic = CriticModule(model, tokenizer, head_init_std=0.02)
    for head in critic.heads:
        for layer in (head[0], head[2]):
            assert abs(layer.weight.std().item() - 0.02) < 0.002
    with pytest.raises(ValueError, match="head_init_std must be > 0"):
        CriticModule(model, tokenizer, head_init_std=0.0)


def test_a_lora_critic_trains_its_adapters_and_heads_only(tiny_dir):
    critic = CriticModule(tiny_dir, lora=LoraSettings(r=4, alpha=8))
    trainable = {id(p) for p in critic.trainable_parameters()}
    names = [name for name, p in critic.named_parameters() if id(p) in trainable]
    assert any(".lora_A." in name for name in names)
    assert all(".lora_" in name or name.startswith("heads.") for name in names)
    restored = CriticModule(tiny_dir, lora=LoraSettings(r=4, alpha=8))
    restored.load_state_dict(critic.state_dict())
    assert torch.equal(restored.values(STATES), critic.values(STATES))


def test_trainer_fit_learns_to_separate_outcomes(tiny, trainer_factory):
    model, tokenizer = tiny
    critic = CriticModule(model, tokenizer, lr=1e-3)
    examples = [(STATES[0], STATES[0] + " next", 1.0), (STATES[1], STATES[1] + " next", 0.0)]
    loader = DataLoader(examples * 2, batch_size=2, collate_fn=lambda rows: CriticModule.collate(tokenizer, rows))
    trainer = trainer_factory(max_steps=12)
    trainer.fit(critic, loader)
    assert trainer.global_step == 12
    assert {"critic/loss", "critic/acc"} <= set(trainer.callback_metrics)
    values = critic.values([STATES[0], STATES[1]])
    assert values[0] > 0.5 > values[1]


def _hand_calibration_error(values: list[float], outcomes: list[int], bins: int = 10) -> float:
    """Expected calibration error: per equal-width bin of V(s), |mean V − success rate| weighted by its share."""
    members: dict[int, list[int]] = {}
    for i, value in enumerate(values):
        members.setdefault(min(int(value * bins), bins - 1), []).append(i)
    return sum(
        abs(sum(values[i] for i in rows) - sum(outcomes[i] for i in rows)) / len(values) for rows in members.values()
    )


def test_calibration_error_of_values_against_outcomes(tiny, trainer_factory):
    model, tokenizer = tiny
    critic = CriticModule(model, tokenizer)
    examples = [(state, state, float(i % 2)) for i, state in enumerate(STATES * 2)]
    outcomes = [int(outcome) for _, _, outcome in examples]
    values = critic.values([state for state, _, _ in examples]).tolist()
    _, metrics = critic.compute_loss(CriticModule.collate(tokenizer, examples[:3]))
    expected = _hand_calibration_error(values[:3], outcomes[:3])
    assert metrics["critic/calibration_error"].item() == pytest.approx(expected, abs=1e-5)
    loader = DataLoader(examples, batch_size=4, collate_fn=lambda rows: CriticModule.collate(tokenizer, rows))
    logged = trainer_factory(max_steps=1).validate(critic, loader, verbose=False)[0]
    assert logged["critic/val_calibration_error"] == pytest.approx(_hand_calibration_error(values, outcomes), abs=1e-5)
