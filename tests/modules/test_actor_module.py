"""ActorModule: the direction of one update per loss form, the reference model, LoRA, Trainer.fit."""

from __future__ import annotations

import copy

import pytest
import torch
from lightning.fabric import Fabric
from torch.utils.data import DataLoader

from webrl.modules.actor import ActorModule
from webrl.modules.critic import CriticModule
from webrl.modules.lm import action_logprobs, load_model_and_tokenizer
from webrl.modules.losses import actor_loss
from webrl.modules.settings import ActorLossConfig, AdvantageConfig, LoraSettings
from webrl.training import setup_for_training

PROMPT = 'Task Instruction: buy the red shirt\n\nRound 0\n\n<html><button id="2">Add to cart</button></html>'
ACTION = 'do(action="Click", element="2")'


def logprob(actor: ActorModule) -> torch.Tensor:
    return action_logprobs(actor.model, actor.tokenizer, [PROMPT], [ACTION]).sum[0]


def one_step(actor: ActorModule, advantage: float) -> None:
    optimizer = actor.configure_optimizers()
    loss, _ = actor.compute_loss(ActorModule.collate(actor.tokenizer, [(PROMPT, ACTION, advantage)]))
    loss.backward()
    optimizer.step()


@pytest.mark.parametrize(
    ("config", "advantage", "direction"),
    [
        (ActorLossConfig.paper(), 1.0, "up"),
        (ActorLossConfig.paper(), -0.6, "down"),
        (ActorLossConfig.release(), 1.0, "up"),
        (ActorLossConfig.release(), -0.6, "same"),
    ],
    ids=["paper-positive", "paper-negative", "release-positive", "release-negative-masked"],
)
def test_one_step_moves_the_action_logprob(tiny, config, advantage, direction):
    model, tokenizer = tiny
    actor = ActorModule(model, tokenizer, loss=config, lr=1e-3)
    before = logprob(actor)
    one_step(actor, advantage)
    after = logprob(actor)
    if direction == "up":
        assert after > before + 1e-3
    elif direction == "down":
        assert after < before - 1e-3
    else:
        assert torch.equal(after, before)  # masked: zero gradient, and AdamW without decay does not move


def test_reference_stays_fixed_until_reset(tiny):
    model, tokenizer = tiny
    actor = ActorModule(model, tokenizer, lr=1e-3)
    batch = ActorModule.collate(tokenizer, [(PROMPT, ACTION, 1.0)])
    start = actor.reference_logprob_sum(batch)
    one_step(actor, 1.0)
    assert torch.equal(actor.reference_logprob_sum(batch), start)
    assert not any(p.requires_grad for p in actor.reference.parameters())
    assert all(p.requires_grad for p in actor.trainable_parameters())
    assert len(actor.trainable_parameters()) == len(list(actor.model.parameters()))
    actor.reset_reference()
    assert torch.allclose(actor.reference_logprob_sum(batch), logprob(actor).unsqueeze(0), atol=1e-5)


def test_lora_reference_is_the_base_model_with_adapters_disabled(tiny_dir):
    actor = ActorModule(tiny_dir, lora=LoraSettings(r=4, alpha=8), lr=1e-2)
    base, _ = load_model_and_tokenizer(tiny_dir)
    assert actor.reference is None  # no second copy of the weights
    one_step(actor, 1.0)
    ids = ActorModule.collate(actor.tokenizer, [(PROMPT, ACTION, 1.0)])["input_ids"]
    with torch.no_grad():
        policy_logits = actor.model(input_ids=ids).logits
        with actor.model.disable_adapter():
            reference_logits = actor.model(input_ids=ids).logits
        base_logits = base(input_ids=ids).logits
    assert torch.equal(reference_logits, base_logits)
    assert not torch.allclose(policy_logits, base_logits, atol=1e-4)  # the adapters did learn something
    # A new phase: π_ref becomes the current policy, still without a copy.
    actor.reset_reference()
    with torch.no_grad(), actor.model.disable_adapter():
        assert torch.allclose(actor.model(input_ids=ids).logits, policy_logits, atol=1e-5)
    with torch.no_grad():
        assert torch.allclose(actor.model(input_ids=ids).logits, policy_logits, atol=1e-5)


def test_the_run_configs_lora_trains_only_adapters_against_the_base_model(tiny_dir):
    from webrl.loop_config import LoraConfig

    actor = ActorModule(tiny_dir, lora=LoraConfig(enabled=True, r=4, alpha=8).active(), lr=1e-2)
    base, tokenizer = load_model_and_tokenizer(tiny_dir)
    trainable = {id(p) for p in actor.trainable_parameters()}
    names = [name for name, p in actor.named_parameters() if id(p) in trainable]
    assert names and all(".lora_A." in name or ".lora_B." in name for name in names)
    batch = ActorModule.collate(actor.tokenizer, [(PROMPT, ACTION, 1.0)])
    one_step(actor, 1.0)
    expected = action_logprobs(base, tokenizer, [PROMPT], [ACTION]).sum
    assert torch.allclose(actor.reference_logprob_sum(batch), expected, atol=1e-6)
    assert not torch.allclose(logprob(actor), expected[0], atol=1e-4)


def test_lora_export_matches_the_policy(tiny_dir, tmp_path):
    actor = ActorModule(tiny_dir, lora=LoraSettings(r=4, alpha=8), lr=1e-2)
    one_step(actor, 1.0)
    exported, tokenizer = load_model_and_tokenizer(actor.save_pretrained(tmp_path / "export"))
    expected = logprob(actor)
    assert torch.allclose(action_logprobs(exported, tokenizer, [PROMPT], [ACTION]).sum[0], expected, atol=1e-4)


def test_precomputed_reference_gives_the_same_loss(tiny):
    model, tokenizer = tiny
    actor = ActorModule(model, tokenizer, lr=1e-3)
    batch = ActorModule.collate(tokenizer, [(PROMPT, ACTION, 0.5), ("Home", "exit()", -0.6)])
    one_step(actor, 1.0)  # so that π ≠ π_ref and the reference really matters
    computed, _ = actor.compute_loss(batch)
    given, _ = actor.compute_loss({**batch, "ref_logprob_sum": actor.reference_logprob_sum(batch)})
    assert torch.allclose(computed, given)
    # A given reference is the one the loss uses, not recomputed: shifted by 1, the loss is actor_loss's with it.
    shifted = actor.reference_logprob_sum(batch) + 1.0
    loss, _ = actor.compute_loss({**batch, "ref_logprob_sum": shifted})
    with torch.no_grad():
        logp_sum = actor.policy_logprobs(batch).sum(-1)
    expected, _ = actor_loss(logp_sum, shifted, batch["action_mask"].sum(-1), batch["advantage"], actor.loss_config)
    assert torch.allclose(loss, expected) and not torch.allclose(loss, computed)


def loss_and_forward_shapes(actor: ActorModule, batch: dict) -> tuple[torch.Tensor, dict, list[torch.Size]]:
    """`compute_loss(batch)` and the `input_ids` shape of every forward of the policy model it ran."""
    shapes = []
    hook = actor.model.register_forward_pre_hook(
        lambda _, args, kwargs: shapes.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    try:
        loss, metrics = actor.compute_loss(batch)
    finally:
        hook.remove()
    return loss, metrics, shapes


def test_masked_rows_skip_the_forwards_and_leave_the_gradient_unchanged(tiny):
    """Release loss: the two negative rows (and the long one's pad columns) never reach the model, yet the loss
    and every parameter's gradient equal the whole batch's, computed by running actor_loss on every row."""
    model, tokenizer = tiny
    actor = ActorModule(model, tokenizer, loss=ActorLossConfig.release(sft_weight=0.5), lr=1e-3)
    one_step(actor, 1.0)  # so that pi differs from pi_ref
    actor.model.zero_grad()
    long_prompt = PROMPT + " and then some more text that makes this row the longest" * 3
    triples = [(PROMPT, ACTION, 1.0), (long_prompt, "exit()", -0.6), ("Home", ACTION, 1.0), ("Home", "exit()", -0.6)]
    batch = ActorModule.collate(tokenizer, triples)

    loss, metrics, widths = loss_and_forward_shapes(actor, batch)
    assert [shape[0] for shape in widths] == [2]  # the policy's forward on the positive rows (pi_ref is a copy)
    assert widths[0][1] < batch["input_ids"].shape[1]  # the long negative's pad columns are gone too
    loss.backward()
    skipped = {name: p.grad.clone() for name, p in actor.model.named_parameters()}
    actor.model.zero_grad()

    logp_sum = actor.policy_logprobs(batch).sum(-1)
    ref_sum = actor.reference_logprob_sum(batch)
    expected, _ = actor_loss(logp_sum, ref_sum, batch["action_mask"].sum(-1), batch["advantage"], actor.loss_config)
    expected.backward()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    for name, p in actor.model.named_parameters():
        assert torch.allclose(skipped[name], p.grad, atol=1e-6), name
    assert metrics["actor/masked_frac"].item() == pytest.approx(0.5)
    assert metrics["actor/advantage_mean"].item() == pytest.approx(0.2)  # (1 - .6 + 1 - .6) / 4, every row


def test_a_batch_with_no_trainable_row_runs_one_row_and_moves_nothing(tiny):
    model, tokenizer = tiny
    actor = ActorModule(model, tokenizer, loss=ActorLossConfig.release(), lr=1e-3)
    batch = ActorModule.collate(tokenizer, [(PROMPT, ACTION, -0.6), ("Home", "exit()", -0.6)])
    loss, metrics, shapes = loss_and_forward_shapes(actor, batch)
    loss.backward()
    assert [shape[0] for shape in shapes] == [1] and loss.item() == 0.0 and metrics["actor/masked_frac"].item() == 1.0
    assert all(not p.grad.any() for p in actor.model.parameters() if p.grad is not None)


def test_advantage_from_an_attached_critic(tiny_dir):
    actor = ActorModule(tiny_dir, advantage=AdvantageConfig(form="release"))
    critic = CriticModule(tiny_dir)
    tokenizer = actor.tokenizer
    batch = ActorModule.collate(tokenizer, [(PROMPT, ACTION, 0.0)])
    del batch["advantage"]
    states = CriticModule.collate(tokenizer, [(PROMPT, PROMPT + " next", 1.0)])
    labels = {"reward": torch.tensor([0.0]), "mc_return": torch.tensor([0.0])}
    batch = {**batch, **states, **labels}
    with pytest.raises(ValueError, match="advantage"):
        actor.compute_loss(batch)
    actor.attach_critic(critic)
    value, next_value = critic.values([PROMPT, PROMPT + " next"])
    expected = 1.0 if next_value - value - 0.05 >= 0 else -0.6  # release form, failed step
    _, metrics = actor.compute_loss(batch)
    assert metrics["actor/advantage_mean"].item() == pytest.approx(expected)
    assert "critic" not in dict(actor.named_children())  # held by reference: not trained or saved


def test_trainer_fit_logs_the_actor_metrics(tiny, trainer_factory):
    model, tokenizer = tiny
    # A small lr: at 1e-3 the squared regression overshoots its target log-ratio and oscillates.
    actor = ActorModule(model, tokenizer, lr=1e-4)
    examples = [(PROMPT, ACTION, 1.0), ("Home", "exit()", 0.5)]
    loader = DataLoader(examples, batch_size=2, collate_fn=lambda rows: ActorModule.collate(tokenizer, rows))
    before = logprob(actor)
    trainer = trainer_factory(max_steps=3)
    trainer.fit(actor, loader)
    assert trainer.global_step == 3
    expected = {"actor/loss", "actor/logratio", "actor/beta", "actor/advantage_mean", "actor/masked_frac"}
    assert expected <= set(trainer.callback_metrics)
    assert logprob(actor) > before
    assert not actor.reference.training


def test_compute_loss_runs_under_fabric(tiny):
    model, tokenizer = tiny
    fabric = Fabric(accelerator="cpu", devices=1)
    actor = ActorModule(model, tokenizer, lr=1e-4)
    before = logprob(actor)
    wrapped, optimizer = setup_for_training(fabric, actor)
    batch = ActorModule.collate(tokenizer, [(PROMPT, ACTION, 1.0)])
    loss, metrics = wrapped.compute_loss(batch)
    fabric.backward(loss)
    optimizer.step()
    assert metrics["actor/loss"].item() == pytest.approx(1.0)  # π = π_ref at the start: (0 - A)^2 with A = 1
    assert logprob(actor) > before


def test_a_resumed_actor_stage_keeps_the_phase_start_reference(tiny, tmp_path):
    """A stage checkpoint holds the half-trained policy; loading it must not make π_ref that policy too."""
    from webrl.stage_checkpoint import StageCheckpoint, StageProgress

    model, tokenizer = tiny
    fabric = Fabric(accelerator="cpu", devices=1)
    batch = ActorModule.collate(tokenizer, [(PROMPT, ACTION, 1.0)])

    def stage() -> tuple[ActorModule, object, torch.optim.Optimizer]:
        actor = ActorModule(copy.deepcopy(model), tokenizer, lr=1e-3)  # built from the phase's starting actor
        return (actor, *setup_for_training(fabric, actor))

    first, wrapped, optimizer = stage()
    start = first.reference_logprob_sum(batch)
    for _ in range(3):
        loss, _ = wrapped.compute_loss(batch)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    checkpoint = StageCheckpoint(tmp_path / "actor.resume", every_s=1e-9)
    checkpoint.save(fabric, wrapped, optimizer, StageProgress(batch_index=3), {"name": "actor", "total_batches": 6})
    resumed, wrapped_again, optimizer_again = stage()
    assert checkpoint.load(fabric, wrapped_again, optimizer_again, {"name": "actor", "total_batches": 6}) is not None
    assert torch.equal(resumed.reference_logprob_sum(batch), start), "π_ref is the phase-start actor"
    assert torch.equal(logprob(resumed), logprob(first)), "the policy is the half-trained one"
    assert resumed.compute_loss(batch)[0].item() == pytest.approx(first.compute_loss(batch)[0].item())


def test_activation_checkpointing_recomputes_the_layers_and_leaves_the_gradients_unchanged(tiny):
    model, tokenizer = tiny
    batch = ActorModule.collate(tokenizer, [(PROMPT, ACTION, 1.0), ("Home", "exit()", -0.5)])
    gradients = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        actor = ActorModule(copy.deepcopy(model), tokenizer, lr=1e-4)
        wrapped, _ = setup_for_training(
            Fabric(accelerator="cpu", devices=1), actor, activation_checkpointing=checkpointing
        )
        assert actor.model.is_gradient_checkpointing is checkpointing
        assert not actor.reference.is_gradient_checkpointing  # π_ref is a frozen copy made before, never trained
        loss, _ = wrapped.compute_loss(batch)
        loss.backward()
        gradients.append({name: p.grad.clone() for name, p in actor.model.named_parameters() if p.grad is not None})
    plain, checkpointed = gradients
    assert plain.keys() == checkpointed.keys() and len(plain) > 10
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, rtol=1e-5, atol=1e-7, msg=name)
