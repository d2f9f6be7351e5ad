"""A training stage interrupted after a saved checkpoint resumes to the same weights as one never interrupted.

The probe stage draws on everything a resume must put back: AdamW's moments, a warmup-then-cosine
learning rate that depends on the step, gradient accumulation, dropout (the global RNG) and a loader
that shuffles with the global RNG at each epoch's start (as the ORM's does), over 2.5 epochs. A crash
is an exception from the loss after a given number of batches; the relaunch builds everything afresh
from the same seed, as a new process would.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from lightning.fabric import Fabric
from lightning.fabric.plugins import MixedPrecision
from safetensors.torch import load_file
from sample_records import build_trajectory
from torch.utils.data import DataLoader, TensorDataset

from webrl import training
from webrl.config import load_config
from webrl.loop_config import WebRLConfig
from webrl.stage_checkpoint import META_NAME, STATE_NAME, StageCheckpoint, StageProgress, stage_meta
from webrl.stage_settings import StageSettings
from webrl.starting_models import base_model_dir, train_orm, train_sft
from webrl.training import setup_for_training, train_module

SETTINGS = StageSettings(lr=0.05, epochs=2.5, batch_size=2, accumulate=2, warmup_ratio=0.3, schedule="cosine")
"""8 examples in batches of 2: 4 batches an epoch, 10 in all, 5 optimiser steps."""


class Crash(RuntimeError):
    """The stand-in for a killed process."""


class DropoutProbe(torch.nn.Module):
    """A linear regression behind dropout; `crash_at` raises on that (1-based) batch."""

    def __init__(self, crash_at: int = 0) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)
        self.dropout = torch.nn.Dropout(0.3)
        self.crash_at = crash_at
        self.batches = 0

    def compute_loss(self, batch: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        self.batches += 1
        if self.batches == self.crash_at:
            raise Crash(f"batch {self.batches}")
        x, y = batch
        loss = (self.linear(self.dropout(x)).squeeze(-1) - y).pow(2).mean()
        return loss, {"probe/loss": loss.detach()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=SETTINGS.lr)


def _launch(
    checkpoint: StageCheckpoint | None, crash_at: int = 0, accelerator: str = "cpu", plugins: list | None = None
) -> tuple[DropoutProbe, dict[str, float]]:
    """One process's worth: seed, model, loader and stage from scratch, as `python -m ...` would."""
    torch.manual_seed(7)
    fabric = Fabric(accelerator=accelerator, devices=1, plugins=plugins)
    probe = DropoutProbe(crash_at)
    data = TensorDataset(torch.randn(8, 3), torch.randn(8))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=SETTINGS.batch_size, shuffle=True))
    module, optimizer = setup_for_training(fabric, probe)
    summary = train_module(fabric, module, optimizer, loader, SETTINGS, name="probe", checkpoint=checkpoint)
    return probe, summary


@pytest.mark.parametrize(
    ("crash_at", "resumed_at"),
    [(7, 6), (5, 4), (3, 2)],
    ids=["mid-second-epoch", "at-an-epoch-boundary", "mid-first-epoch"],
)
def test_a_resumed_stage_ends_with_the_weights_and_metrics_of_an_uninterrupted_one(
    tmp_path, capsys, crash_at, resumed_at
):
    straight, straight_summary = _launch(None)
    checkpoint = StageCheckpoint(tmp_path / "stage.resume", every_s=1e-9)  # a save at every optimiser step
    with pytest.raises(Crash):
        _launch(checkpoint, crash_at=crash_at)
    assert (tmp_path / "stage.resume" / META_NAME).exists()
    resumed, resumed_summary = _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=0))
    assert f"probe: resuming at batch {resumed_at} of 10" in capsys.readouterr().out
    assert resumed.batches == 10 - resumed_at, "only the batches after the checkpoint are trained again"
    for name, weight in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], weight), name
    assert resumed_summary["probe/steps"] == straight_summary["probe/steps"] == 10
    assert resumed_summary["probe/optimizer_steps"] == straight_summary["probe/optimizer_steps"] == 5  # accumulate=2
    assert resumed_summary["probe/loss"] == pytest.approx(straight_summary["probe/loss"], rel=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_resumed_stage_on_a_gpu_draws_the_dropout_masks_an_uninterrupted_one_would(tmp_path):
    """Dropout on a GPU draws from the CUDA generator, which the replayed batches do not advance."""
    straight, _ = _launch(None, accelerator="cuda")
    with pytest.raises(Crash):
        _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=1e-9), crash_at=7, accelerator="cuda")
    resumed, _ = _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=0), accelerator="cuda")
    assert resumed.batches == 4
    assert all(torch.equal(resumed.state_dict()[k], v) for k, v in straight.state_dict().items())


def test_a_checkpoint_that_cannot_be_read_starts_the_stage_over_to_the_same_weights(tmp_path):
    straight, _ = _launch(None)
    checkpoint = StageCheckpoint(tmp_path / "stage.resume", every_s=1e-9)
    with pytest.raises(Crash):
        _launch(checkpoint, crash_at=7)
    (tmp_path / "stage.resume" / META_NAME).unlink()  # unreadable: the stage starts over
    again, _ = _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=0))
    assert again.batches == 10
    assert all(torch.equal(again.state_dict()[k], v) for k, v in straight.state_dict().items()), "a rerun is exact"


def test_a_crash_between_the_renames_of_a_save_resumes_from_the_state_moved_aside(tmp_path, capsys):
    """publish_dir moves the last state to `.<name>.old` before renaming the new one in: a kill in between."""
    straight, _ = _launch(None)
    with pytest.raises(Crash):
        _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=1e-9), crash_at=7)
    (tmp_path / "stage.resume").rename(tmp_path / ".stage.resume.old")
    resumed, _ = _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=0))
    assert "probe: resuming at batch 6 of 10" in capsys.readouterr().out and resumed.batches == 4
    assert all(torch.equal(resumed.state_dict()[k], v) for k, v in straight.state_dict().items())


def test_a_checkpoint_of_other_settings_is_set_aside_with_the_reason(tmp_path, capsys, monkeypatch):
    checkpoint = StageCheckpoint(tmp_path / "stage.resume", every_s=1e-9)
    with pytest.raises(Crash):
        _launch(checkpoint, crash_at=7)
    monkeypatch.setattr(f"{__name__}.SETTINGS", StageSettings(lr=0.05, epochs=3.0, batch_size=2, accumulate=2))
    probe, summary = _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=0))
    out = capsys.readouterr().out
    assert (
        "(settings.epochs, settings.schedule, settings.warmup_ratio, total_batches differ); starting the stage over"
        in out
    )
    assert probe.batches == 12 and summary["probe/steps"] == 12


def test_a_checkpoint_made_under_other_inputs_is_set_aside_and_the_same_inputs_resume(tmp_path, capsys):
    """A relaunch with another loss beta (allowed by resume.allow_changes) must not finish a stage begun under
    the old one: the same optimiser settings and data, but other `inputs`, start the stage over."""
    straight, _ = _launch(None)
    inputs = {"actor": {"loss": {"beta": 1.0, "objective": "squared"}}, "seed": 3}
    with pytest.raises(Crash):
        _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=1e-9, inputs=inputs), crash_at=7)
    changed = {"actor": {"loss": {"beta": 0.5, "objective": "squared"}}, "seed": 3}
    probe, _ = _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=0, inputs=changed))
    out = capsys.readouterr().out
    assert "is of another stage (inputs.actor.loss.beta differ); starting the stage over" in out and probe.batches == 10
    # That launch saved nothing (every_s=0): the state of the first is still there, and its own inputs resume it.
    resumed, _ = _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=0, inputs=inputs))
    assert "probe: resuming at batch 6 of 10" in capsys.readouterr().out and resumed.batches == 4
    assert all(torch.equal(resumed.state_dict()[k], v) for k, v in straight.state_dict().items())


def test_saves_come_as_often_as_asked_and_discard_removes_them(tmp_path, monkeypatch):
    saves = []
    monkeypatch.setattr(StageCheckpoint, "save", lambda self, *args: saves.append(args[3].batch_index))
    _launch(StageCheckpoint(tmp_path / "every-step", every_s=1e-9))
    assert saves == [2, 4, 6, 8], "after each optimiser step but the last, whose model the caller saves"
    saves.clear()
    _launch(StageCheckpoint(tmp_path / "never", every_s=0))
    assert saves == []


def test_discard_removes_the_state_and_what_a_crashed_save_left(tmp_path):
    fabric = Fabric(accelerator="cpu", devices=1)
    checkpoint = StageCheckpoint.beside(tmp_path / "sft-abc", minutes=10)
    assert checkpoint.path == tmp_path / "sft-abc.resume" and checkpoint.every_s == 600
    leftovers = [checkpoint.path, tmp_path / "sft-abc.resume.tmp", tmp_path / ".sft-abc.resume.old"]
    for folder in leftovers:
        folder.mkdir()
    checkpoint.discard(fabric)
    assert not any(folder.exists() for folder in leftovers)


def test_an_interrupted_sft_resumes_from_beside_its_target_and_leaves_nothing_behind(tmp_path, monkeypatch):
    """The SFT stage as the recipes run it: a tiny model on 6 demonstrations, 2 epochs in batches of 2."""
    config = load_config(
        WebRLConfig,
        [
            f"output_dir={tmp_path / 'run'}",
            f"model.cache_dir={tmp_path / 'cache'}",
            *("model.tiny_hidden_size=64", "model.tiny_layers=1", "model.tiny_vocab_size=300"),
            "sft.train.epochs=2.0",
            "sft.train.batch_size=2",
            "resume.stage_checkpoint_minutes=1e-9",  # a save after every step
        ],
    )
    demos = [build_trajectory(f"t{i}", num_steps=1) for i in range(6)]
    base = base_model_dir(config, demos)
    fabric = Fabric(accelerator="cpu", devices=1)

    def sft(target):
        torch.manual_seed(0)
        return train_sft(config, fabric, base, demos, target, settings=config.sft.train)

    straight = sft(tmp_path / "straight")
    real_step, calls = training.train_micro_batch, []

    def crashing_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise Crash("step 4")
        return real_step(*args, **kwargs)

    monkeypatch.setattr(training, "train_micro_batch", crashing_step)
    with pytest.raises(Crash):
        sft(tmp_path / "resumed")
    assert (tmp_path / "resumed.resume" / META_NAME).exists() and not (tmp_path / "resumed").exists()
    calls.clear()
    monkeypatch.setattr(training, "train_micro_batch", lambda *a, **k: calls.append(1) or real_step(*a, **k))
    resumed = sft(tmp_path / "resumed")
    assert len(calls) == 3, "the relaunch trains the 3 batches after the checkpoint, not all 6"
    assert not (tmp_path / "resumed.resume").exists(), "the state goes once the model is saved"
    weights, expected = (load_file(tmp_path / name / "model.safetensors") for name in ("resumed", "straight"))
    assert weights.keys() == expected.keys() and all(torch.equal(weights[k], expected[k]) for k in expected)
    assert resumed["sft/steps"] == straight["sft/steps"] == 6


def test_the_orms_batches_do_not_depend_on_what_the_process_drew_before(tmp_path, monkeypatch):
    """A relaunch that finds the SFT cached skips its draws from the global RNG; the ORM must train the same."""
    config = load_config(
        WebRLConfig,
        [
            f"output_dir={tmp_path / 'run'}",
            f"model.cache_dir={tmp_path / 'cache'}",
            *("model.tiny_hidden_size=64", "model.tiny_layers=1", "model.tiny_vocab_size=300"),
            "orm.train.batch_size=2",
            "orm.train.epochs=1.0",
        ],
    )
    trajectories = [build_trajectory(f"t{i}", num_steps=1, eval_reward=float(i % 2)) for i in range(6)]
    base = base_model_dir(config, trajectories)
    fabric = Fabric(accelerator="cpu", devices=1)
    seen: list[list[str]] = []
    real_step = training.train_micro_batch

    def orm(target, draws: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        torch.rand(draws)  # what an SFT trained earlier in the same process would have drawn
        seen.append([])
        train_orm(config, fabric, base, trajectories, target)
        return load_file(target / "model.safetensors")

    def recording_step(fabric, module, optimizer, batch, *args, **kwargs):
        seen[-1].append(batch["input_ids"].sum().item())
        return real_step(fabric, module, optimizer, batch, *args, **kwargs)

    monkeypatch.setattr(training, "train_micro_batch", recording_step)
    first, second = orm(tmp_path / "a", 0), orm(tmp_path / "b", 2)
    assert seen[0] == seen[1] and len(seen[0]) == 3
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_a_stages_last_short_group_of_micro_batches_steps_on_their_mean(monkeypatch):
    """5 batches at accumulate=2: the last optimizer step has one batch, which must count whole (loss / 1), not
    halved (loss / 2) as if its partner were there with a zero gradient."""
    divisors: list[float] = []
    real_backward = Fabric.backward

    def recording_backward(self, tensor, *args, **kwargs):
        divisors.append(recorded_loss[-1] / tensor.item())
        return real_backward(self, tensor, *args, **kwargs)

    recorded_loss: list[float] = []
    real_compute = DropoutProbe.compute_loss

    def compute_loss(self, batch):
        loss, metrics = real_compute(self, batch)
        recorded_loss.append(loss.item())
        return loss, metrics

    monkeypatch.setattr(Fabric, "backward", recording_backward)
    monkeypatch.setattr(DropoutProbe, "compute_loss", compute_loss)
    monkeypatch.setattr(f"{__name__}.SETTINGS", StageSettings(lr=0.05, epochs=1.25, batch_size=2, accumulate=2))
    _launch(None)
    assert divisors == pytest.approx([2, 2, 2, 2, 1])


def _fp16_plugin(growth_interval: int = 2000) -> MixedPrecision:
    """`16-mixed` with a real GradScaler on CPU: Lightning refuses `precision="16-mixed"` there, but takes the
    plugin, so the scaler that a GPU run's plugin holds can be saved and loaded on this machine."""
    return MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", growth_interval=growth_interval))


def _scaler_state(plugin: MixedPrecision) -> tuple[float, int]:
    state = plugin.state_dict()
    return state["scale"], state["_growth_tracker"]


def _fp16_fabric_and_probe(plugin: MixedPrecision) -> tuple[Fabric, Any, Any]:
    fabric = Fabric(accelerator="cpu", devices=1, plugins=[plugin])
    module, optimizer = setup_for_training(fabric, DropoutProbe())
    return fabric, module, optimizer


def test_the_gradient_scalers_scale_and_growth_tracker_are_saved_and_restored(tmp_path):
    """Fabric's save leaves the precision plugin out; a fresh plugin must get the saved scaler back, not 65536."""
    meta = stage_meta("probe", SETTINGS, total_batches=10, batches_per_epoch=4, world_size=1)
    plugin = _fp16_plugin(growth_interval=5)
    fabric, module, optimizer = _fp16_fabric_and_probe(plugin)
    x = torch.randn(4, 3)
    plugin.scaler.scale(torch.ones(()))
    plugin.scaler.update(new_scale=1024.0)
    for _ in range(3):  # real steps, small enough not to overflow at 1024: the growth tracker counts them
        with fabric.autocast():
            loss = module.linear(x).float().mean() * 1e-3
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    assert _scaler_state(plugin) == (1024.0, 3)
    StageCheckpoint(tmp_path / "stage.resume", every_s=0).save(fabric, module, optimizer, StageProgress(4), meta)

    fresh = _fp16_plugin(growth_interval=5)
    fabric, module, optimizer = _fp16_fabric_and_probe(fresh)
    assert _scaler_state(fresh) == (65536.0, 0)
    progress = StageCheckpoint(tmp_path / "stage.resume", every_s=0).load(fabric, module, optimizer, meta)
    assert progress is not None and progress.batch_index == 4
    assert _scaler_state(fresh) == (1024.0, 3)
    assert fresh.state_dict() == plugin.state_dict()


def test_a_resumed_stage_under_16_mixed_ends_with_the_scaler_and_weights_of_an_uninterrupted_one(tmp_path):
    """The probe's fp16 gradients overflow at the first scales, so the scaler lowers its scale and skips those
    steps; a resume that started again from 65536 would skip steps the uninterrupted stage took."""
    straight_plugin, resumed_plugin = _fp16_plugin(growth_interval=2), _fp16_plugin(growth_interval=2)
    straight, _ = _launch(None, plugins=[straight_plugin])
    assert _scaler_state(straight_plugin)[0] < 65536.0, "the run lowered its scale: the state matters"
    with pytest.raises(Crash):
        _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=1e-9), crash_at=7, plugins=[_fp16_plugin(2)])
    resumed, _ = _launch(StageCheckpoint(tmp_path / "stage.resume", every_s=0), plugins=[resumed_plugin])
    assert resumed.batches == 4
    assert resumed_plugin.state_dict() == straight_plugin.state_dict()
    assert all(torch.equal(resumed.state_dict()[k], v) for k, v in straight.state_dict().items())


@pytest.mark.parametrize("saved", [None, {}], ids=["written-before-the-key", "precision-without-a-scaler"])
def test_a_checkpoint_without_a_scaler_state_loads_and_leaves_the_scaler_as_built(tmp_path, saved):
    """A checkpoint with no precision entry (written before it was saved) or an empty one (32-true) still resumes."""
    meta = stage_meta("probe", SETTINGS, total_batches=10, batches_per_epoch=4, world_size=1)
    fabric, module, optimizer = _fp16_fabric_and_probe(_fp16_plugin())
    StageCheckpoint(tmp_path / "stage.resume", every_s=0).save(fabric, module, optimizer, StageProgress(4), meta)
    state_file = tmp_path / "stage.resume" / STATE_NAME
    state = torch.load(state_file, weights_only=False)
    assert state["precision"] == _fp16_plugin().state_dict(), "the saved entry is the plugin's state"
    if saved is None:
        del state["precision"]
    else:
        state["precision"] = saved
    torch.save(state, state_file)
    fresh = _fp16_plugin()
    fabric, module, optimizer = _fp16_fabric_and_probe(fresh)
    progress = StageCheckpoint(tmp_path / "stage.resume", every_s=0).load(fabric, module, optimizer, meta)
    assert progress is not None and progress.batch_index == 4
    assert _scaler_state(fresh) == (65536.0, 0)
