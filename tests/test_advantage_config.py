"""`actor.advantage` is a run-config section, and the phase loop uses it everywhere the advantage's settings matter.

The actor gets the whole section; γ also discounts each step's `mc_return` (the release form's
input), both for the current phase's steps and for the replayed ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.sample_records import one_token_tokenizer
from tests.single_process import SingleProcess
from webrl import phase_training
from webrl.config import load_config
from webrl.data.steps import read_samples
from webrl.data.trajectory import Step, Task, Trajectory, write_trajectories
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.modules.settings import ActorLossConfig, AdvantageConfig
from webrl.stage_settings import StageSettings

CONFIGS = Path(__file__).resolve().parents[1] / "recipes" / "configs"
HALF_DISCOUNT = [1.75, 1.5, 1.0]
"""mc_return of a 3-step success with γ = 0.5 (the default γ would give 2.71, 1.9, 1.0)."""


def success(task_id: str, steps: int = 3) -> Trajectory:
    task = Task(task_id=task_id, intent=f"Open item {task_id}", sites=["shopping"], start_url="")
    trajectory = Trajectory(task=task, outcome=1.0, phase=0, status="exit", trajectory_id=task_id)
    for i in range(steps):
        trajectory.steps.append(Step(index=i, prompt=f"state {i}", observation=f"<p>{i}</p>", response=f"act {i}"))
    return trajectory


def phase_loop(tmp_path: Path, *overrides: str, demonstrations: list[Trajectory] = ()) -> PhaseLoop:
    config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", *overrides])
    loop = PhaseLoop(
        config,
        SingleProcess(),
        env=None,
        engine=None,
        sft_dir=tmp_path / "sft",
        orm_dir=None,
        demonstrations=list(demonstrations),
    )
    write_trajectories(loop.layout.labelled_path(1), [success("current")])
    return loop


def test_run_config_sets_the_advantage():
    config = load_config(WebRLConfig, ["actor.advantage.form=release", "actor.advantage.gamma=0.5"])
    assert config.actor.advantage == AdvantageConfig(form="release", gamma=0.5)
    assert load_config(WebRLConfig, []).actor.advantage == AdvantageConfig()


def test_release_loss_config_pairs_the_release_loss_with_the_release_advantage():
    config = load_config(WebRLConfig, ["--config", str(CONFIGS / "webrl_release_loss.yaml")])
    assert config.actor.loss == ActorLossConfig.release()
    assert config.actor.advantage == AdvantageConfig(form="release")


def test_actor_stage_builds_the_actor_with_the_configured_advantage(tmp_path, monkeypatch):
    class Built(Exception):
        """Stops the stage once the actor module is built; carries its keyword arguments."""

    def build_actor(*args, **kwargs):
        raise Built(kwargs)

    loop = phase_loop(tmp_path, "actor.advantage.form=release", "actor.advantage.margin=0.2")
    monkeypatch.setattr(phase_training, "ActorModule", build_actor)
    monkeypatch.setattr(phase_training, "load_actor_model", lambda path: (None, None))
    with pytest.raises(Built) as built:
        loop._actor(1)
    assert built.value.args[0]["advantage"] == AdvantageConfig(form="release", margin=0.2)


def test_current_steps_are_discounted_by_the_configured_gamma(tmp_path):
    loop = phase_loop(tmp_path, "actor.advantage.gamma=0.5")
    (loop.layout.replay_samples_path(1)).write_text("")
    data = phase_training.replay_datamodule(
        loop.config, loop.layout, 1, None, StageSettings(batch_size=2), target="critic"
    )
    assert [sample.mc_return for sample in data.dataset.samples] == pytest.approx(HALF_DISCOUNT)


def test_replayed_steps_are_discounted_by_the_configured_gamma(tmp_path, monkeypatch):
    loop = phase_loop(tmp_path, "actor.advantage.gamma=0.5", demonstrations=[success("demo")])
    monkeypatch.setattr(phase_training, "load_actor_model", lambda path: (torch.nn.Linear(1, 1), one_token_tokenizer()))
    monkeypatch.setattr(phase_training, "actor_scorer", lambda *args, **kwargs: lambda p, a: [0.7] * len(p))
    loop._replay(1)
    kept = sorted(read_samples(loop.layout.replay_samples_path(1)), key=lambda sample: sample.step_index)
    assert [sample.mc_return for sample in kept] == pytest.approx(HALF_DISCOUNT)
