"""ActorModule: the WebRL policy update, KL-regularised against the start-of-phase actor π_ref.

The loss regresses β·log(π/π_ref) of each action onto its advantage (`webrl.modules.losses`,
paper or release form by `ActorLossConfig`). π_ref is the actor as it was when the phase began:
`reset_reference()` snapshots it. Without LoRA the snapshot is a frozen copy of the policy, held
outside the module's submodules by default: the state dict and the parameter count are the
policy's alone, `.to()` still moves the copy, and a module loaded from a checkpoint takes the
loaded policy as π_ref. `register_reference=True` registers the copy instead, so that a sharding
strategy shards it and a checkpoint carries it (a mid-phase resume then restores π_ref exactly);
that is the default where torch.distributed is initialised (the phase loop under DDP or FSDP). With LoRA no
copy is made: the reference is the same network with its adapters disabled, and
`reset_reference()` folds the adapters' current update into the frozen base weights and zeroes
them, so "adapters off" is exactly the start-of-phase actor.
Both forwards run with autocast off by default (`ActorLossConfig.fp32_logprobs`): under `bf16-mixed` their
difference, the log-ratio, would otherwise be bf16 rounding rather than the update.

Batch schema (`webrl.data.collate.ActorCollator`, or `ActorModule.collate` from (prompt, action,
advantage) triples) — all (B, T) long unless noted:
- `input_ids`, `attention_mask`, `action_mask`: prompt then action ids then EOS, under the
  tokenisation convention of `webrl.modules.lm`; `action_mask` is 1 on the action and its EOS;
- `advantage` (B,) float, optional: when absent, advantages come from the attached critic and
  `state_input_ids`, `state_attention_mask`, `next_state_input_ids`, `next_state_attention_mask`
  plus the step labels `outcome`, `done`, `step_index`, `num_steps` (paper form) or `reward`,
  `mc_return` (release form);
- `ref_logprob_sum` (B,) float, optional: Σ log π_ref over the action tokens, precomputed to skip
  the reference forward.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from webrl.modules.base import WebRLModule, require_model
from webrl.modules.critic import CriticModule
from webrl.modules.lm import (
    action_token_logprobs,
    collate_actions,
    model_and_tokenizer,
)
from webrl.modules.losses import actor_loss, compute_advantage, trainable_rows
from webrl.modules.settings import ActorLossConfig, AdvantageConfig, LoraSettings


class ActorModule(WebRLModule):
    """The policy π_θ with its reference π_ref; `compute_loss` is one KL-regularised actor update.

    `model` is a local model directory or a loaded causal LM (then pass its `tokenizer`). `critic`
    is held by reference, not as a submodule: the actor neither trains nor saves it, and the caller
    places it on the device. It is only needed for batches without an `advantage`.
    """

    namespace = "actor"

    def __init__(
        self,
        model: str | os.PathLike | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        loss: ActorLossConfig | None = None,
        advantage: AdvantageConfig | None = None,
        lr: float = 1e-6,
        weight_decay: float = 0.0,
        lora: LoraSettings | None = None,
        critic: CriticModule | None = None,
        register_reference: bool | None = None,
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay)
        self.save_init_arguments(require_model(model, "ActorModule"))
        model, tokenizer = model_and_tokenizer(model, tokenizer, lora, "ActorModule")
        self.model = model
        self.tokenizer = tokenizer
        self.loss_config = loss or ActorLossConfig()
        self.advantage_config = advantage or AdvantageConfig()
        self.reference: torch.nn.Module | None = None
        if register_reference is None:  # a launched strategy shards or syncs the copy like the policy
            register_reference = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.register_reference = self.hparams["register_reference"] = register_reference
        self.attach_critic(critic)
        self.keep_reference = False
        """While true, loading a state dict leaves π_ref alone (`loading_mid_stage`)."""
        self.reset_reference()
        self.register_load_state_dict_post_hook(_reference_from_loaded_policy)
        self.train()  # from_pretrained returns eval mode; Lightning keeps whatever mode it finds

    @contextlib.contextmanager
    def loading_mid_stage(self) -> Iterator[None]:
        """Load a stage's own mid-stage state (`webrl.stage_checkpoint`) in this block: the module was built from
        the phase's starting actor, which π_ref must stay, while the policy becomes the half-trained one."""
        self.keep_reference = True
        try:
            yield
        finally:
            self.keep_reference = False

    @property
    def uses_lora(self) -> bool:
        return isinstance(self.model, PeftModel)

    def attach_critic(self, critic: CriticModule | None) -> None:
        """Use `critic` for advantages of batches that carry none (bypasses submodule registration)."""
        object.__setattr__(self, "critic", critic)

    @torch.no_grad()
    def reset_reference(self) -> None:
        """Make π_ref the current policy: call at the start of each phase."""
        if self.uses_lora:
            for layer in self.model.modules():
                if not isinstance(layer, LoraLayer):
                    continue
                for name in layer.active_adapters:
                    if name in layer.lora_A:
                        layer.get_base_layer().weight.data += layer.get_delta_weight(name)
                        layer.lora_B[name].weight.zero_()
            return
        if self.reference is None:
            reference = copy.deepcopy(self.model)
            reference.requires_grad_(False)
            reference.eval()
            if self.register_reference:
                self.reference = reference
            else:
                object.__setattr__(self, "reference", reference)  # not a submodule: not saved, not counted
            return
        for ref_param, param in zip(self.reference.parameters(), self.model.parameters(), strict=True):
            ref_param.copy_(param)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> ActorModule:
        """Moves and casts (`.to`, `.half`, Fabric's setup) reach an unregistered reference too."""
        super()._apply(fn, recurse)
        if self.reference is not None and not self.register_reference:
            self.reference._apply(fn, recurse)
        return self

    def train(self, mode: bool = True) -> ActorModule:
        super().train(mode)
        if self.reference is not None:
            self.reference.eval()  # π_ref is a fixed function: never in training mode (dropout)
        return self

    def logprob_precision(self, input_ids: torch.Tensor) -> contextlib.AbstractContextManager:
        """Autocast off around the π and π_ref forwards when `ActorLossConfig.fp32_logprobs`, else unchanged: both
        the same way, so that their difference, the loss's log-ratio, is not bf16 rounding of each forward."""
        if not self.loss_config.fp32_logprobs:
            return contextlib.nullcontext()
        return torch.autocast(device_type=input_ids.device.type, enabled=False)

    def policy_logprobs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Differentiable per-token action log-probs under π_θ; (B, T)."""
        with self.logprob_precision(batch["input_ids"]):
            return action_token_logprobs(self.model, batch["input_ids"], batch["attention_mask"], batch["action_mask"])

    @torch.no_grad()
    def reference_logprob_sum(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Σ log π_ref over each action's tokens; (B,)."""
        args = (batch["input_ids"], batch["attention_mask"], batch["action_mask"])
        if self.uses_lora:
            with self.model.disable_adapter(), self.logprob_precision(batch["input_ids"]):
                return action_token_logprobs(self.model, *args).sum(-1)
        if not self.register_reference:
            self.reference.to(batch["input_ids"].device)  # a strategy that places only submodules leaves it behind
        with self.logprob_precision(batch["input_ids"]):
            return action_token_logprobs(self.reference, *args).sum(-1)

    def critic_advantage(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Advantage (B,) from the attached critic's V(s), V(s') and the step labels."""
        if self.critic is None:
            raise ValueError(
                "actor batch has no 'advantage' and no critic is attached: "
                "precompute advantages or pass critic= to ActorModule"
            )
        value = self.critic.state_values(batch["state_input_ids"], batch["state_attention_mask"])  # (B,)
        next_value = self.critic.state_values(batch["next_state_input_ids"], batch["next_state_attention_mask"])
        return compute_advantage(value, next_value, batch, self.advantage_config)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of `batch` and its metrics. Rows the loss masks (`trainable_rows`) are left out of the policy and
        reference forwards; the loss is still the mean over every row, so its gradient is the whole batch's."""
        advantage = batch["advantage"] if "advantage" in batch else self.critic_advantage(batch)  # (B,)
        rows = advantage.shape[0]
        keep = trainable_rows(advantage, self.loss_config)
        trained = batch if keep is None else rows_of(batch, keep)
        token_logprobs = self.policy_logprobs(trained)  # (b, T)
        logp_sum = token_logprobs.sum(-1)  # (b,)
        count = trained["action_mask"].sum(-1)  # (b,)
        ref_sum = trained["ref_logprob_sum"] if "ref_logprob_sum" in trained else self.reference_logprob_sum(trained)
        kept_advantage = advantage if keep is None else advantage[keep]
        loss, stats = actor_loss(
            logp_sum, ref_sum, count, kept_advantage.to(logp_sum.dtype), self.loss_config, rows=rows
        )
        stats["advantage_mean"] = advantage.detach().float().mean()
        metrics = {"actor/loss": loss.detach(), **{f"actor/{name}": value for name, value in stats.items()}}
        return loss, metrics

    @staticmethod
    def collate(
        tokenizer: PreTrainedTokenizerBase,
        examples: Sequence[tuple[str, str, float]],
        max_length: int | None = None,
        padding_side: str = "left",
    ) -> dict[str, torch.Tensor]:
        """An actor batch from (prompt, action, advantage) triples; see `webrl.modules.lm.collate_actions`."""
        return collate_actions(tokenizer, examples, max_length, padding_side)

    def save_pretrained(self, out_dir: str | os.PathLike) -> Path:
        """Write the current policy as a plain model directory (LoRA merged into a copy) for an engine to load."""
        out = Path(out_dir)
        model = self.model
        if self.uses_lora:
            model = copy.deepcopy(self.model).merge_and_unload()
        model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        return out


TOKEN_KEYS = ("input_ids", "attention_mask", "action_mask")
"""The (B, T) columns of an actor batch that share its token axis."""


def rows_of(batch: dict[str, torch.Tensor], keep: torch.Tensor) -> dict[str, torch.Tensor]:
    """The rows `keep` (bool, (B,)) of an actor batch, without the token columns that are padding in all of them.

    Position ids come from the attention mask (`action_token_logprobs`), so dropping pad columns changes no
    row's values; it only stops the forwards from computing them.
    """
    size = keep.shape[0]
    picked = {
        key: value[keep] if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == size else value
        for key, value in batch.items()
    }
    filled = picked["attention_mask"].bool().any(0).nonzero().flatten()  # (T',) columns with a token
    first, last = int(filled[0]), int(filled[-1]) + 1
    for key in TOKEN_KEYS:
        picked[key] = picked[key][:, first:last]
    return picked


def _reference_from_loaded_policy(module: ActorModule, incompatible_keys: object) -> None:
    """After `load_state_dict`, an unregistered copy (which the checkpoint lacks) becomes the loaded policy, unless
    the load resumes a stage (`loading_mid_stage`)."""
    if module.reference is not None and not module.register_reference and not module.keep_reference:
        module.reset_reference()
