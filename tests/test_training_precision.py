"""`bf16-mixed` trains in bf16 however the strategy wraps the module.

Fabric enters its autocast only for a marked method that goes through a wrapper's forward; a module
left unwrapped (one device) or sharded in place (FSDP2) calls `compute_loss` directly, which on an
H200 trained SmolLM2 in fp32 with twice the activation memory. The training step enters it itself.
"""

from __future__ import annotations

import torch
from lightning.fabric import Fabric

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
