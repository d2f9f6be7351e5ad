"""PhaseLoop's critic and actor stages on a tiny model: the critic's steps per epoch count each state once, the
actor trains on advantages scored once before its first step.

A real single-process CPU Fabric and a tiny Llama built from the trajectories' own prompts; the
labelled trajectories are records written by hand where the labelling stage would write them.
"""

from __future__ import annotations

import pytest
from lightning.fabric import Fabric
from sample_records import build_trajectory

from webrl.config import load_config
from webrl.data.steps import trajectory_to_samples, write_samples
from webrl.data.trajectory import write_trajectories
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.modules.advantages import precompute_advantages
from webrl.modules.model_factory import build_tiny_model
from webrl.phase_training import load_critic


def test_the_critic_trains_each_state_once_and_the_actor_on_advantages_scored_before_it(tmp_path):
    trajectories = [
        build_trajectory("win", num_steps=3, outcome=1.0, phase=1),
        build_trajectory("lose", num_steps=2, outcome=0.0, phase=1),
    ]
    corpus = [step.prompt + step.response for t in trajectories for step in t.steps]
    sft = build_tiny_model(tmp_path / "sft", corpus, vocab_size=400, hidden_size=64, num_layers=1, num_heads=1)
    overrides = [f"output_dir={tmp_path / 'run'}", "phases=1", "model.max_length=512"]
    for stage in ("critic", "actor"):
        overrides += [f"{stage}.train.batch_size=2", f"{stage}.train.epochs=1.0", f"{stage}.train.lr=1e-3"]
    config = load_config(WebRLConfig, overrides)
    loop = PhaseLoop(
        config, Fabric(accelerator="cpu", devices=1), None, None, sft_dir=sft, orm_dir=None, demonstrations=[]
    )
    write_trajectories(loop.layout.labelled_path(1), trajectories)
    write_samples(loop.layout.replay_samples_path(1), [])

    critic_metrics = loop._critic(1)
    # 5 steps of 2 trajectories hold 5 + 2 distinct states: 4 batches of 2 (pairs would have run 3 batches of 2 x 2).
    assert critic_metrics["critic/steps"] == 4
    assert loop.layout.critic_path(1).exists()

    critic = load_critic(config, sft, loop.layout.critic_path(1))
    samples = [s for t in trajectories for s in trajectory_to_samples(t)]
    expected = precompute_advantages(critic, samples, config.actor.advantage, max_length=512)
    actor_metrics = loop._actor(1)
    assert actor_metrics["actor/steps"] == 3
    assert actor_metrics["actor/advantage_all_mean"] == pytest.approx(expected.mean().item(), abs=1e-5)
    assert actor_metrics["actor/advantage_all_std"] == pytest.approx(expected.std(correction=0).item(), abs=1e-5)
    assert actor_metrics["actor/advantage_all_std"] > 0
    assert (loop.layout.actor_dir(1) / "config.json").exists()
