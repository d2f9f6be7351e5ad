"""Advantages computed once per actor stage equal those the actor step computes with the critic attached."""

from __future__ import annotations

import pytest
import torch
from sample_records import build_trajectory

from webrl.data.collate import ActorCollator
from webrl.data.critic_values import state_key
from webrl.data.steps import trajectory_to_samples
from webrl.modules.actor import ActorModule
from webrl.modules.advantages import precompute_advantages, state_values
from webrl.modules.critic import CriticModule
from webrl.modules.lm import load_model_and_tokenizer
from webrl.modules.settings import AdvantageConfig

MAX_LENGTH = 256


@pytest.fixture
def samples():
    """Steps of a success and of a failure, one page long enough to be cut to MAX_LENGTH."""
    win = build_trajectory("win", num_steps=3, outcome=1.0)
    lose = build_trajectory("lose", num_steps=2, outcome=0.0, html_size=2000)
    return trajectory_to_samples(win) + trajectory_to_samples(lose)


@pytest.fixture
def critic(tiny_dir):
    torch.manual_seed(0)
    return CriticModule(tiny_dir, max_length=MAX_LENGTH)


@pytest.mark.parametrize(
    "config", [AdvantageConfig(), AdvantageConfig(form="release", binarise=False)], ids=["paper", "release"]
)
def test_precomputed_advantages_equal_the_ones_the_actor_step_computes(tiny_dir, critic, samples, config):
    model, tokenizer = load_model_and_tokenizer(tiny_dir)
    actor = ActorModule(model, tokenizer, advantage=config, critic=critic)
    batch = ActorCollator(tokenizer, MAX_LENGTH)(samples)
    assert "advantage" not in batch and batch["state_input_ids"].shape[0] == len(samples)
    on_the_fly = actor.critic_advantage(batch)
    precomputed = precompute_advantages(critic, samples, config, max_length=MAX_LENGTH, batch_size=3)
    assert torch.allclose(precomputed, on_the_fly, atol=1e-5)
    assert [s.advantage for s in samples] == pytest.approx(on_the_fly.tolist(), abs=1e-5)
    assert float(on_the_fly.std()) > 0  # the critic's values do reach the advantages
    assert critic.training, "scoring leaves the critic's mode as it found it"


def test_each_distinct_state_is_scored_once_with_its_own_value(critic, samples):
    values = state_values(critic, samples, max_length=MAX_LENGTH, batch_size=2)
    # 3 + 2 steps share their interior states: 4 + 3 distinct states.
    assert len(values) == 7
    assert set(values) == {s.prompt for s in samples} | {s.next_prompt for s in samples}
    alone = critic.values([samples[0].prompt])
    assert values[samples[0].prompt] == pytest.approx(alone.item(), abs=1e-5)


def test_state_scoring_shows_its_progress_and_keeps_its_values(critic, samples, capsys):
    quiet = state_values(critic, samples, max_length=MAX_LENGTH, batch_size=2)
    assert capsys.readouterr().err == ""
    shown = state_values(critic, samples, max_length=MAX_LENGTH, batch_size=2, progress=True)
    # 7 distinct states in batches of 2: the line that ends the stage (stderr is no terminal here) counts 4 batches.
    assert "advantage scoring: done 4/4 batch" in capsys.readouterr().err
    assert shown == quiet


def test_an_actor_batch_with_advantages_needs_no_critic_and_gives_the_same_loss(tiny_dir, critic, samples):
    model, tokenizer = load_model_and_tokenizer(tiny_dir)
    actor = ActorModule(model, tokenizer, critic=critic)
    with_critic, _ = actor.compute_loss(ActorCollator(tokenizer, MAX_LENGTH)(samples))
    precompute_advantages(critic, samples, AdvantageConfig(), max_length=MAX_LENGTH)
    batch = ActorCollator(tokenizer, MAX_LENGTH)(samples)
    assert "state_input_ids" not in batch and "next_state_input_ids" not in batch
    actor.attach_critic(None)
    loss, metrics = actor.compute_loss(batch)
    assert torch.allclose(loss, with_critic, atol=1e-5)
    assert metrics["actor/advantage_mean"].item() == pytest.approx(sum(s.advantage for s in samples) / len(samples))


def test_states_with_a_kept_value_take_it_and_only_the_others_are_scored(critic, samples, monkeypatch):
    everything = state_values(critic, samples, max_length=MAX_LENGTH, batch_size=2)
    kept_texts = [samples[0].prompt, samples[0].next_prompt, samples[-1].next_prompt]
    known = {state_key(text): 10.0 + index for index, text in enumerate(kept_texts)}  # not a critic's: seen if used
    scored_rows = []
    forward = critic.state_values
    monkeypatch.setattr(critic, "state_values", lambda ids, mask: scored_rows.append(len(ids)) or forward(ids, mask))
    values = state_values(critic, samples, max_length=MAX_LENGTH, batch_size=2, known=known)
    assert sum(scored_rows) == len(everything) - 3
    assert [values[text] for text in kept_texts] == [10.0, 11.0, 12.0]
    assert {text: values[text] for text in everything if text not in kept_texts} == pytest.approx(
        {text: value for text, value in everything.items() if text not in kept_texts}, abs=1e-6
    )
