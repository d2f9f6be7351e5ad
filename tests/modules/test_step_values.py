"""The actor stage records each trained step's V(s), V(s') and advantage: exactly what the actor was weighted by."""

from __future__ import annotations

import copy

import pytest
import torch
from lightning.fabric import Fabric
from sample_records import build_trajectory

from webrl.data.critic_values import read_critic_values
from webrl.data.datamodule import ReplayDataModule
from webrl.data.step_values import read_step_values, write_step_values
from webrl.data.steps import trajectory_to_samples
from webrl.loop_config import WebRLConfig
from webrl.modules.advantages import precompute_advantages, state_values
from webrl.modules.critic import CriticModule
from webrl.modules.lm import load_model_and_tokenizer
from webrl.phase_training import critic_values_key, score_advantages
from webrl.run_layout import RunLayout

MAX_LENGTH = 256


def test_the_recorded_advantages_are_the_ones_precomputed_for_the_actor(tmp_path, tiny_dir):
    config = WebRLConfig(output_dir=str(tmp_path))
    config.model.max_length = MAX_LENGTH
    layout = RunLayout(tmp_path)
    _, tokenizer = load_model_and_tokenizer(tiny_dir)
    current = [
        build_trajectory("win", num_steps=3, outcome=1.0, phase=2),
        build_trajectory("lose", num_steps=2, outcome=0.0, phase=2, html_size=2000),
    ]
    replayed = trajectory_to_samples(build_trajectory("old", num_steps=2, outcome=1.0, phase=0))
    data = ReplayDataModule(tokenizer, current, replayed, max_length=MAX_LENGTH)
    data.setup()
    untouched = copy.deepcopy(data.dataset.samples)
    torch.manual_seed(0)
    critic = CriticModule(tiny_dir, max_length=MAX_LENGTH)

    metrics = score_advantages(
        Fabric(accelerator="cpu", devices=1), critic, data, config, values_path=layout.advantages_path(2)
    )

    expected = precompute_advantages(critic, untouched, config.actor.advantage, max_length=MAX_LENGTH)
    values = state_values(critic, untouched, max_length=MAX_LENGTH)
    recorded = read_step_values(layout.advantages_path(2))
    assert sorted(recorded) == sorted((s.trajectory_id, s.step_index) for s in untouched) and len(recorded) == 7
    for sample, advantage in zip(untouched, expected.tolist(), strict=True):
        record = recorded[(sample.trajectory_id, sample.step_index)]
        assert record["advantage"] == pytest.approx(advantage, abs=1e-6)
        assert record["value"] == pytest.approx(values[sample.prompt], abs=1e-6)
        assert record["next_value"] == pytest.approx(values[sample.next_prompt], abs=1e-6)
        assert record["phase"] == sample.phase and record["task_id"] == sample.task_id
    assert {r["phase"] for r in recorded.values()} == {0, 2}  # replayed steps keep the phase they came from
    assert float(expected.std()) > 0
    assert metrics["actor/advantage_all_mean"] == pytest.approx(float(expected.mean()), abs=1e-6)
    assert [s.advantage for s in data.dataset.samples] == pytest.approx(expected.tolist(), abs=1e-6)


def test_step_values_of_unequal_lengths_are_refused(tmp_path):
    samples = trajectory_to_samples(build_trajectory("a", num_steps=2))
    with pytest.raises(ValueError, match="2 samples but 1 values"):
        write_step_values(tmp_path / "a.jsonl", samples, [0.1], [0.2, 0.3], [0.0, 0.1])
    assert read_step_values(tmp_path / "a.jsonl") == {}


def test_a_second_start_of_the_stage_takes_the_kept_values_and_scores_nothing(tmp_path, tiny_dir, monkeypatch):
    config = WebRLConfig(output_dir=str(tmp_path))
    config.model.max_length = MAX_LENGTH
    layout = RunLayout(tmp_path)
    _, tokenizer = load_model_and_tokenizer(tiny_dir)
    current = [build_trajectory("win", num_steps=3, outcome=1.0), build_trajectory("lose", num_steps=2, outcome=0.0)]
    torch.manual_seed(0)
    critic = CriticModule(tiny_dir, max_length=MAX_LENGTH)
    torch.save(critic.state_dict(), tmp_path / "critic.pt")
    kept = (layout.critic_values_path(1), critic_values_key(config, tiny_dir, tmp_path / "critic.pt"))
    fabric = Fabric(accelerator="cpu", devices=1)

    def scored_data() -> tuple[ReplayDataModule, dict[str, float]]:
        data = ReplayDataModule(tokenizer, copy.deepcopy(current), [], max_length=MAX_LENGTH)
        data.setup()
        return data, score_advantages(fabric, critic, data, config, kept_values=kept)

    first, first_metrics = scored_data()
    assert len(read_critic_values(*kept)) == 7  # 3 + 2 steps share their interior states: 4 + 3 distinct states
    monkeypatch.setattr(critic, "state_values", lambda *_: pytest.fail("a kept state was scored again"))
    again, again_metrics = scored_data()
    assert [s.advantage for s in again.dataset.samples] == [s.advantage for s in first.dataset.samples]
    assert again_metrics == first_metrics

    with torch.no_grad():
        critic.heads[0][0].bias.add_(1.0)  # the critic trained again in place
    torch.save(critic.state_dict(), tmp_path / "critic.pt")
    other = critic_values_key(config, tiny_dir, tmp_path / "critic.pt")
    assert other["critic_sha256"] != kept[1]["critic_sha256"] and other["trunk_sha256"] == kept[1]["trunk_sha256"]
    assert read_critic_values(kept[0], other) == {}
