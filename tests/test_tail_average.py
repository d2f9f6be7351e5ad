"""A stage with `average_tail` ends on the mean of its weights after each of its last steps, resumed or not."""

from __future__ import annotations

import pytest
import torch
from lightning.fabric import Fabric
from torch.utils.data import DataLoader, TensorDataset

from webrl.config import ConfigError
from webrl.stage_checkpoint import StageCheckpoint
from webrl.stage_settings import StageSettings
from webrl.tail_average import STATE_KEY, TailAverage
from webrl.training import setup_for_training, train_module

SETTINGS = StageSettings(lr=0.05, epochs=2.0, batch_size=2, accumulate=2, schedule="cosine", warmup_ratio=0.25)
"""8 examples in batches of 2: 4 batches an epoch, 8 in all, 4 optimiser steps."""


class Crash(RuntimeError):
    """The stand-in for a killed process."""


class Probe(torch.nn.Module):
    """A linear regression whose optimiser keeps a copy of the weights after each of its steps."""

    def __init__(self, crash_at: int = 0) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 1)
        self.after_each_step: list[dict[str, torch.Tensor]] = []
        self.crash_at, self.batches = crash_at, 0

    def compute_loss(self, batch: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        self.batches += 1
        if self.batches == self.crash_at:
            raise Crash(f"batch {self.batches}")
        x, y = batch
        loss = (self.linear(x).squeeze(-1) - y).pow(2).mean()
        return loss, {"probe/loss": loss.detach()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        optimizer = torch.optim.AdamW(self.parameters(), lr=SETTINGS.lr)
        optimizer.register_step_post_hook(lambda *_: self.after_each_step.append(self._weights()))
        return optimizer

    def _weights(self) -> dict[str, torch.Tensor]:
        return {name: value.detach().clone() for name, value in self.state_dict().items()}


def _launch(settings: StageSettings, checkpoint: StageCheckpoint | None = None, crash_at: int = 0):
    torch.manual_seed(3)
    fabric = Fabric(accelerator="cpu", devices=1)
    probe = Probe(crash_at)
    data = TensorDataset(torch.randn(8, 3), torch.randn(8))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=settings.batch_size, shuffle=True))
    module, optimizer = setup_for_training(fabric, probe)
    summary = train_module(fabric, module, optimizer, loader, settings, name="probe", checkpoint=checkpoint)
    return probe, optimizer, summary


def test_the_result_is_the_mean_of_the_weights_after_each_of_the_last_steps():
    plain, _, plain_summary = _launch(SETTINGS)
    averaged, optimizer, summary = _launch(StageSettings(**{**vars(SETTINGS), "average_tail": 0.5}))
    assert len(plain.after_each_step) == len(averaged.after_each_step) == 4
    for name, weight in plain.after_each_step[-1].items():
        assert torch.equal(averaged.after_each_step[-1][name], weight), "averaging does not change the training"
        mean = (plain.after_each_step[2][name] + plain.after_each_step[3][name]) / 2  # steps 3 and 4 of 4
        assert torch.allclose(averaged.state_dict()[name], mean, atol=1e-7), name
        assert not torch.allclose(mean, weight), "the steps' weights differ, so the mean is not the last weights"
    assert summary["probe/averaged_steps"] == 2.0 and "probe/averaged_steps" not in plain_summary
    assert not any(STATE_KEY in state for state in optimizer.state.values()), "the mean leaves the optimiser"


def test_a_stage_resumed_inside_its_tail_ends_on_the_mean_an_uninterrupted_one_has(tmp_path, capsys):
    settings = StageSettings(**{**vars(SETTINGS), "average_tail": 0.75})  # steps 2-4 of 4
    straight, _, _ = _launch(settings)
    with pytest.raises(Crash):  # batch 7 is in step 4: the save after step 3 holds the mean of steps 2 and 3
        _launch(settings, StageCheckpoint(tmp_path / "stage.resume", every_s=1e-9), crash_at=7)
    resumed, _, summary = _launch(settings, StageCheckpoint(tmp_path / "stage.resume", every_s=0))
    assert "probe: resuming at batch 6 of 8" in capsys.readouterr().out
    for name, weight in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], weight), name
    assert summary["probe/averaged_steps"] == 3.0


def test_a_parameter_not_stepped_yet_gets_no_state_until_it_is():
    frozen, stepped = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.AdamW([frozen, stepped], lr=0.1)
    stepped.grad = torch.ones(2)
    optimizer.step()
    tail = TailAverage(total_steps=2, fraction=1.0)
    tail.after_step(optimizer, 0)
    assert frozen not in optimizer.state and STATE_KEY in optimizer.state[stepped]
    frozen.grad = torch.ones(2)
    optimizer.step()  # AdamW still builds the frozen parameter's state itself
    assert "exp_avg" in optimizer.state[frozen]
    assert tail.finish(optimizer) == 2


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_a_fraction_outside_zero_to_one_is_refused_by_name(value):
    with pytest.raises(ConfigError, match=r"actor\.train\.average_tail"):
        StageSettings(average_tail=value).validate("actor.train")
