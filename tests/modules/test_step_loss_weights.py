"""An optimizer step's gradient is the mean over all its units (SFT: action tokens), whatever the micro-batches.

Two micro-batches of 1 and 2 actions hold different numbers of action tokens. Whether they are two
micro-batches of one accumulated step or one micro-batch on each of two DDP ranks, the step must equal
the hand-computed one: the sum of every action token's negative log-likelihood over the step's tokens.
A mean of the two micro-batches' means would weigh each token of the short action above the others.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.fabric import Fabric
from step_weights_worker import LR, build, micro_batches

from webrl.modules.lm import action_token_logprobs
from webrl.stage_settings import StageSettings
from webrl.training import setup_for_training, step_loss_scales, train_module

WORKER = Path(__file__).with_name("step_weights_worker.py")


def token_mean_step(model_dir: Path) -> dict[str, torch.Tensor]:
    """The weights after one SGD step on the token-mean loss over both micro-batches, computed by hand."""
    module = build(str(model_dir))
    batches = micro_batches(module.tokenizer)
    total = sum(batch["action_mask"].sum() for batch in batches)
    nll = sum(
        -action_token_logprobs(module.model, b["input_ids"], b["attention_mask"], b["action_mask"]).sum()
        for b in batches
    )
    (nll / total).backward()
    module.configure_optimizers().step()
    return module.state_dict()


def assert_same_weights(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], before) -> None:
    assert any(not torch.equal(expected[key], before[key]) for key in expected), "the step changed no weight"
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=1e-4, atol=1e-6, msg=key)


def test_the_micro_batches_hold_different_token_counts(tiny_dir):
    tokens = [int(batch["action_mask"].sum()) for batch in micro_batches(build(str(tiny_dir)).tokenizer)]
    assert tokens[0] * 2 < tokens[1], tokens


def test_an_accumulated_step_weighs_every_action_token_alike(tiny_dir):
    expected = token_mean_step(tiny_dir)
    fabric = Fabric(accelerator="cpu", devices=1)
    module = build(str(tiny_dir))
    before = {key: value.detach().clone() for key, value in module.state_dict().items()}
    wrapped, optimizer = setup_for_training(fabric, module)
    settings = StageSettings(lr=LR, epochs=1.0, batch_size=2, accumulate=2, grad_clip=0.0)
    train_module(fabric, wrapped, optimizer, micro_batches(module.tokenizer), settings, name="sft", progress=False)
    assert_same_weights(module.state_dict(), expected, before)


def test_the_scales_are_each_micro_batchs_share_of_the_steps_tokens(tiny_dir):
    module = build(str(tiny_dir))
    batches = micro_batches(module.tokenizer)
    tokens = [float(batch["action_mask"].sum()) for batch in batches]
    scales = step_loss_scales(Fabric(accelerator="cpu", devices=1), module, batches)
    assert scales == pytest.approx([tokens[0] / sum(tokens), tokens[1] / sum(tokens)])
    assert step_loss_scales(Fabric(accelerator="cpu", devices=1), module, batches[:1]) == [1.0]


def test_two_ddp_ranks_with_unequal_tokens_step_on_the_token_mean(tiny_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(WORKER.parent.parents[1]), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(WORKER), str(tiny_dir), str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    before = build(str(tiny_dir)).state_dict()
    assert_same_weights(torch.load(tmp_path / "sft.pt", weights_only=True), token_mean_step(tiny_dir), before)
