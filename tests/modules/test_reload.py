"""Modules reload from Lightning checkpoints; the actor's frozen reference is not part of the module's weights.

Each module trains one real step under a plain `lightning.Trainer`, the Trainer writes a checkpoint, and
`Module.load_from_checkpoint(ckpt)` alone (no model object) must give back the same weights and the same outputs.
"""

from __future__ import annotations

import copy

import pytest
import torch
from sample_records import build_trajectory
from torch.utils.data import DataLoader
from transformers import LlamaForCausalLM

from webrl.data.collate import ActorCollator
from webrl.data.steps import trajectory_to_samples
from webrl.modules import ActorModule, CriticModule, OutcomeRewardModule
from webrl.modules.losses import paper_advantage

PROMPT = 'Task Instruction: buy the red shirt\n\nRound 0\n\n<html><button id="2">Add to cart</button></html>'
NEXT = PROMPT + '\n# Element: the add to cart button\ndo(action="Click", element="2")'
ACTION = 'do(action="Click", element="2")'
JUDGE = "You grade arithmetic answers. Answer YES if the answer is right, NO otherwise."
TEMPLATE = "Question: {intent}\nWork:\n{actions}\nResult: {page}"


def fit_and_checkpoint(module, batch, trainer_factory, path):
    """One optimiser step on `batch` under `Trainer.fit`, then the Trainer's own checkpoint at `path`."""
    trainer = trainer_factory(max_steps=1)
    trainer.fit(module, DataLoader([batch], batch_size=None))
    trainer.save_checkpoint(path)
    return path


def built_in_memory(like: LlamaForCausalLM) -> LlamaForCausalLM:
    """A model of the same shape made from its config in memory: no directory to reload it from."""
    config = copy.deepcopy(like.config)
    config._name_or_path = ""
    return LlamaForCausalLM(config)


def same_state(left: torch.nn.Module, right: torch.nn.Module) -> None:
    a, b = left.state_dict(), right.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_critic_reloads_from_a_trainer_checkpoint(tiny_dir, trainer_factory, tmp_path):
    critic = CriticModule(tiny_dir, lr=1e-3, max_length=64)
    before = critic.values([PROMPT, NEXT])
    batch = CriticModule.collate(critic.tokenizer, [(PROMPT, NEXT, 1.0)])
    ckpt = fit_and_checkpoint(critic, batch, trainer_factory, tmp_path / "critic.ckpt")
    assert not torch.allclose(critic.values([PROMPT, NEXT]), before)  # the step changed it: the reload must carry it

    loaded = CriticModule.load_from_checkpoint(ckpt)
    assert loaded.hparams["model"] == str(tiny_dir)
    assert (loaded.lr, loaded.max_length) == (1e-3, 64)
    same_state(critic, loaded)
    assert torch.equal(loaded.values([PROMPT, NEXT]), critic.values([PROMPT, NEXT]))


def test_actor_state_and_parameters_are_the_policy_alone(tiny):
    model, tokenizer = tiny
    policy_params = sum(p.numel() for p in model.parameters())
    actor = ActorModule(model, tokenizer, lr=1e-3)
    assert actor.reference is not None  # the frozen copy exists ...
    assert sum(p.numel() for p in actor.parameters()) == policy_params  # ... but is not counted
    assert all(key.startswith("model.") for key in actor.state_dict())
    assert len(actor.state_dict()) == len(model.state_dict())
    actor.to(torch.float64)  # a move or cast reaches the unregistered copy too
    assert {p.dtype for p in actor.reference.parameters()} == {torch.float64}

    registered = ActorModule(model, tokenizer, lr=1e-3, register_reference=True)
    assert sum(p.numel() for p in registered.parameters()) == 2 * policy_params


def test_actor_reloads_and_takes_the_loaded_policy_as_reference(tiny_dir, trainer_factory, tmp_path):
    actor = ActorModule(tiny_dir, lr=1e-3)
    batch = ActorModule.collate(actor.tokenizer, [(PROMPT, ACTION, 1.0)])
    ckpt = fit_and_checkpoint(actor, batch, trainer_factory, tmp_path / "actor.ckpt")
    trained = actor.policy_logprobs(batch).sum(-1).detach()
    assert not torch.allclose(actor.reference_logprob_sum(batch), trained)  # π moved away from π_ref

    loaded = ActorModule.load_from_checkpoint(ckpt)
    same_state(actor, loaded)
    assert torch.allclose(loaded.policy_logprobs(batch).sum(-1), trained, atol=1e-6)
    assert torch.allclose(loaded.reference_logprob_sum(batch), trained, atol=1e-6)
    assert loaded.loss_config == actor.loss_config and loaded.advantage_config == actor.advantage_config


def test_orm_reloads_with_its_judge_wording(tiny_dir, trainer_factory, tmp_path):
    orm = OutcomeRewardModule(tiny_dir, lr=1e-3, system_prompt=JUDGE, user_template=TEMPLATE)
    parts = (["2 + 2"], [["4"]], ["4"])
    batch = OutcomeRewardModule.collate(orm.tokenizer, [("Question: 2 + 2", 1.0)])
    ckpt = fit_and_checkpoint(orm, batch, trainer_factory, tmp_path / "orm.ckpt")

    loaded = OutcomeRewardModule.load_from_checkpoint(ckpt)
    assert (loaded.system_prompt, loaded.user_template) == (JUDGE, TEMPLATE)
    same_state(orm, loaded)
    assert torch.equal(loaded.score(*parts), orm.score(*parts))


def test_a_model_object_reloads_from_its_directory_and_one_built_in_memory_asks_for_it(tiny, trainer_factory, tmp_path):
    model, tokenizer = tiny  # loaded from the tiny directory: `name_or_path` names it
    critic = CriticModule(model, tokenizer, lr=1e-3)
    batch = CriticModule.collate(tokenizer, [(PROMPT, NEXT, 0.0)])
    same_state(
        critic, CriticModule.load_from_checkpoint(fit_and_checkpoint(critic, batch, trainer_factory, tmp_path / "a"))
    )

    in_memory = built_in_memory(model)
    critic = CriticModule(in_memory, tokenizer, lr=1e-3)
    ckpt = fit_and_checkpoint(critic, batch, trainer_factory, tmp_path / "b")
    with pytest.raises(ValueError, match="pass model= and tokenizer= to CriticModule.load_from_checkpoint"):
        CriticModule.load_from_checkpoint(ckpt)
    fresh = built_in_memory(model)
    same_state(critic, CriticModule.load_from_checkpoint(ckpt, model=fresh, tokenizer=tokenizer))


def test_missing_advantage_labels_are_named_and_actor_collator_makes_them(tiny_dir):
    critic = CriticModule(tiny_dir)
    actor = ActorModule(tiny_dir, lr=1e-3, critic=critic)
    samples = trajectory_to_samples(build_trajectory("t0", num_steps=2, html_size=10))
    batch = ActorCollator(actor.tokenizer, max_length=512)(samples)

    without = {key: value for key, value in batch.items() if key not in ("num_steps", "done")}
    with pytest.raises(KeyError, match=r"\['done', 'num_steps'\].*webrl.data.collate.ActorCollator"):
        actor.compute_loss(without)

    value = critic.state_values(batch["state_input_ids"], batch["state_attention_mask"])
    next_value = critic.state_values(batch["next_state_input_ids"], batch["next_state_attention_mask"])
    # Two steps of a success: the first is one step from the end, the second ends it.
    expected = paper_advantage(
        value,
        next_value,
        torch.tensor([1.0, 1.0]),
        torch.tensor([False, True]),
        torch.tensor([1, 0]),
        gamma=0.9,
        lam=0.5,
    )
    assert torch.allclose(actor.critic_advantage(batch), expected)
