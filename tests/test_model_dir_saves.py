"""How a stage ends its writes and steps safely: `save_model_dir` clears what a crashed save left, and a non-finite
loss stops `train_micro_batch` before it reaches the weights."""

from __future__ import annotations

import pytest
import torch
from lightning.fabric import Fabric

from tests.sample_records import one_token_tokenizer
from tests.single_process import SingleProcess
from webrl.cache_builds import is_built
from webrl.stage_settings import StageSettings
from webrl.training import save_model_dir, train_micro_batch


def _tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=1)
    return LlamaForCausalLM(config)


def test_a_save_clears_the_staging_left_by_a_crashed_one(tmp_path):
    target = tmp_path / "phase_001" / "actor"
    crashed = tmp_path / "phase_001" / ".actor.tmp-abc123"
    crashed.mkdir(parents=True)
    (crashed / "model.safetensors").write_bytes(b"half a model")
    other = tmp_path / "phase_001" / ".critic.tmp-def456"  # another target's staging is not this save's to clear
    other.mkdir()
    save_model_dir(SingleProcess(), _tiny_model(), one_token_tokenizer(), target, {"phase": 1})
    assert is_built(target) and (target / "config.json").is_file()
    assert sorted(path.name for path in target.parent.iterdir()) == [".critic.tmp-def456", "actor"]


class _Regression(torch.nn.Module):
    """y = w·x, its loss the mean squared error to a target that may be NaN (a NaN advantage, a NaN critic value)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))

    def compute_loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        x, target = batch
        loss = ((x @ self.weight - target) ** 2).mean()
        return loss, {"loss": loss.detach()}


def test_a_non_finite_loss_stops_the_stage_before_any_weight_changes():
    fabric = Fabric(accelerator="cpu", devices=1)
    module = fabric.setup_module(_Regression())
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(module.parameters(), lr=0.1))
    settings, x = StageSettings(grad_clip=1.0), torch.ones(2, 3)
    train_micro_batch(fabric, module, optimizer, (x, torch.zeros(2)), settings, optimizer_step=True)
    before = module.weight.detach().clone()
    nan_target = torch.tensor([0.0, float("nan")])
    with pytest.raises(FloatingPointError, match=r"^_Regression: the loss is nan on this micro-batch .*no gradient"):
        train_micro_batch(fabric, module, optimizer, (x, nan_target), settings, optimizer_step=True)
    assert torch.equal(module.weight.detach(), before) and torch.isfinite(before).all()
