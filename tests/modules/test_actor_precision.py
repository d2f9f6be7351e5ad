"""ActorModule's π and π_ref forwards under mixed precision: `ActorLossConfig.fp32_logprobs`.

The KL-regularised loss regresses on Σlogπ − Σlogπ_ref, the difference of two forwards. After a step at lr 1e-6
that difference is ~1e-4, below what bf16 autocast rounds each forward by; with the setting on, the actor runs
both forwards in the fp32 master weights, so its log-ratio is the fp32 one even inside `fabric.autocast()`.
"""

from __future__ import annotations

import copy

import pytest
import torch
from lightning.fabric import Fabric

from webrl.modules.actor import ActorModule
from webrl.modules.settings import ActorLossConfig, LoraSettings
from webrl.training import setup_for_training

PROMPT = 'Task Instruction: buy the red shirt\n\nRound 0\n\n<html><button id="2">Add to cart</button></html>'
CLICK = 'do(action="Click", element="2")'
TYPE = '# Element: the search box\ndo(action="Type", argument="red shirt", element="3")'
EXIT = 'exit(message="The order total is 42 dollars")'
EXAMPLES = [  # 30 to 70 action tokens each: bf16 rounding grows with the tokens summed
    (PROMPT, "\n".join([CLICK, TYPE, CLICK]), 1.0),
    (PROMPT, "\n".join([TYPE, TYPE, EXIT]), -0.6),
    ("Home", "\n".join([EXIT, CLICK, EXIT]), 0.5),
    (PROMPT, "\n".join([CLICK, EXIT, TYPE]), 0.0),
]


def logratio(actor: ActorModule, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Σlogπ − Σlogπ_ref per action (B,), as `compute_loss` forms it."""
    with torch.no_grad():
        return actor.policy_logprobs(batch).sum(-1) - actor.reference_logprob_sum(batch)


def tiny_step(actor: ActorModule, batch: dict[str, torch.Tensor]) -> None:
    """One fp32 AdamW step at the actor's lr: moves every trainable weight by about lr."""
    optimizer = actor.configure_optimizers()
    actor.compute_loss(batch)[0].backward()
    optimizer.step()


@pytest.mark.parametrize(
    ("lora", "lr"),
    [(None, 1e-7), (LoraSettings(r=4, alpha=8), 1e-6)],  # a LoRA step (adapters only, B from zero) moves π less
    ids=["full", "lora"],
)
def test_bf16_mixed_log_ratio_is_the_fp32_one_only_with_fp32_logprobs(tiny, lora, lr):
    model, tokenizer = tiny
    batch = ActorModule.collate(tokenizer, EXAMPLES)
    fabric = Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    errors = {}
    for fp32_logprobs in (True, False):
        loss = ActorLossConfig(fp32_logprobs=fp32_logprobs)
        actor = ActorModule(copy.deepcopy(model), tokenizer, loss=loss, lr=lr, lora=lora)
        tiny_step(actor, batch)
        exact = logratio(actor, batch)  # outside autocast: fp32 either way
        assert 0 < exact.abs().max() < 0.1
        wrapped, _ = setup_for_training(fabric, actor)
        with fabric.autocast():
            mixed = logratio(actor, batch)
            assert wrapped.compute_loss(batch)[1]["actor/logratio"] == pytest.approx(mixed.mean().item(), abs=1e-6)
        errors[fp32_logprobs] = (mixed - exact).abs().max().item()
    assert ActorLossConfig().fp32_logprobs, "on by default"
    assert errors[True] < 1e-6, errors
    assert errors[False] > 1e-3, f"bf16 forwards should show rounding noise: {errors}"


def test_32_true_training_is_bit_identical_with_and_without_fp32_logprobs(tiny):
    model, tokenizer = tiny
    batch = ActorModule.collate(tokenizer, EXAMPLES)
    fabric = Fabric(accelerator="cpu", devices=1, precision="32-true")
    runs = {}
    for fp32_logprobs in (True, False):
        loss_config = ActorLossConfig(fp32_logprobs=fp32_logprobs)
        actor = ActorModule(copy.deepcopy(model), tokenizer, loss=loss_config, lr=1e-3)
        wrapped, optimizer = setup_for_training(fabric, actor)
        losses = []
        for _ in range(2):
            with fabric.autocast():  # as `webrl.training.train_micro_batch` runs it
                loss, _ = wrapped.compute_loss(batch)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.detach())
        runs[fp32_logprobs] = (torch.stack(losses), [p.detach().clone() for p in actor.model.parameters()])
    (losses_on, weights_on), (losses_off, weights_off) = runs[True], runs[False]
    assert torch.equal(losses_on, losses_off)
    assert all(torch.equal(a, b) for a, b in zip(weights_on, weights_off, strict=True))
