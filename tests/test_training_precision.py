"""`bf16-mixed` trains in bf16 however the strategy wraps the module.

Fabric enters its autocast only for a marked method that goes through a wrapper's forward; a module
left unwrapped (one device) or sharded in place (FSDP2) calls `compute_loss` directly, which on an
H200 trained SmolLM2 in fp32 with twice the activation memory. The training step enters it itself.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.fabric import Fabric

from tests.sample_records import one_token_tokenizer
from webrl import phase_training
from webrl.config import load_config
from webrl.data.trajectory import Step, Task, Trajectory
from webrl.loop_config import WebRLConfig
from webrl.stage_settings import StageSettings
from webrl.training import setup_for_training, train_module


class DtypeProbe(torch.nn.Module):
    """A linear layer whose loss records the dtype its matmul ran in."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.seen: list[torch.dtype] = []

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        out = self.linear(batch["x"])
        self.seen.append(out.dtype)
        loss = out.float().pow(2).mean()
        return loss, {"probe/loss": loss.detach()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _dtypes_seen(precision: str) -> tuple[list[torch.dtype], torch.dtype]:
    fabric = Fabric(accelerator="cpu", devices=1, precision=precision)
    probe = DtypeProbe()
    module, optimizer = setup_for_training(fabric, probe)
    batches = [{"x": torch.ones(2, 4)}] * 2
    train_module(fabric, module, optimizer, batches, StageSettings(), name="probe", progress=False)
    return probe.seen, probe.linear.weight.dtype


def test_bf16_mixed_computes_the_loss_in_bf16_and_keeps_fp32_weights():
    seen, weight_dtype = _dtypes_seen("bf16-mixed")
    assert seen == [torch.bfloat16, torch.bfloat16]
    assert weight_dtype == torch.float32


def test_full_precision_stays_in_fp32():
    seen, _ = _dtypes_seen("32-true")
    assert seen == [torch.float32, torch.float32]


def test_replay_scoring_runs_in_the_run_precision(tmp_path, monkeypatch):
    """The replay filter's forward passes (7 min a phase for SmolLM2 in fp32) run under the run's autocast too."""
    seen: list[tuple[bool, torch.dtype]] = []

    def scorer(*args, **kwargs):
        def score(prompts: list[str], actions: list[str]) -> list[float]:
            out = torch.nn.functional.linear(torch.ones(1, 2), torch.ones(2, 2))
            seen.append((torch.is_autocast_enabled("cpu"), out.dtype))
            return [0.7] * len(prompts)

        return score

    monkeypatch.setattr(phase_training, "load_actor_model", lambda path: (torch.nn.Linear(2, 2), one_token_tokenizer()))
    monkeypatch.setattr(phase_training, "actor_scorer", scorer)
    config = load_config(WebRLConfig, [f"output_dir={tmp_path}"])
    for precision, expected in (("bf16-mixed", (True, torch.bfloat16)), ("32-true", (False, torch.float32))):
        fabric = Fabric(accelerator="cpu", devices=1, precision=precision)
        phase_training.filter_replay(fabric, config, [_success()], actor_dir=Path("unused"), current_steps=4)
        assert seen.pop() == expected, precision


def _success() -> Trajectory:
    task = Task(task_id="t", intent="Open item t", sites=["shopping"], start_url="")
    success = Trajectory(task=task, outcome=1.0, phase=0, status="exit", trajectory_id="t")
    success.steps.append(Step(index=0, prompt="state", observation="<p>0</p>", response="act"))
    return success


class _MetaFabric(Fabric):
    """A CPU Fabric whose device is `meta`: where a GPU rank's device would be, on a machine without one."""

    device = torch.device("meta")


def test_replay_scoring_runs_on_the_ranks_device(tmp_path, monkeypatch):
    """The actor loads on the CPU; left there, a GPU run scored its replay in fp32 on the host."""
    placed: list[torch.device] = []

    def scorer(model, tokenizer, **kwargs):
        placed.append(next(model.parameters()).device)
        return lambda prompts, actions: [0.7] * len(prompts)

    monkeypatch.setattr(phase_training, "load_actor_model", lambda path: (torch.nn.Linear(2, 2), one_token_tokenizer()))
    monkeypatch.setattr(phase_training, "actor_scorer", scorer)
    config = load_config(WebRLConfig, [f"output_dir={tmp_path}"])
    fabric = _MetaFabric(accelerator="cpu", devices=1)
    phase_training.filter_replay(fabric, config, [_success()], actor_dir=Path("unused"), current_steps=4)
    assert placed == [torch.device("meta")]
