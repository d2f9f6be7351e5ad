"""SFTModule: behaviour cloning of actions given prompts (the SFT and Filtered BC baselines).

WebRL starts from an SFT model trained on demonstrations [P §3.1]; Filtered BC is the same loss
on the rollouts whose ORM score is in the top 30% [P App. B.2]. The loss is the mean negative
log-likelihood of the action tokens (EOS included), prompt tokens excluded, so that the model
learns to answer, not to reproduce pages. Batches come from `webrl.modules.lm.collate_actions`
(its `advantage` column is ignored).
"""

from __future__ import annotations

import os

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from webrl.modules.base import WebRLModule, require_model
from webrl.modules.lm import action_token_logprobs, model_and_tokenizer


class SFTModule(WebRLModule):
    """A causal LM trained with token-level cross-entropy on action tokens only."""

    namespace = "sft"

    def __init__(
        self,
        model: str | os.PathLike | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay)
        self.save_init_arguments(require_model(model, "SFTModule"))
        model, tokenizer = model_and_tokenizer(model, tokenizer, None, "SFTModule")
        self.model = model
        self.tokenizer = tokenizer

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        mask = batch["action_mask"].to(torch.float32)  # (B, T)
        token_logprobs = action_token_logprobs(
            self.model, batch["input_ids"], batch["attention_mask"], batch["action_mask"]
        )  # (B, T), zero off the action
        tokens = mask.sum().clamp(min=1.0)
        loss = -token_logprobs.sum() / tokens
        with torch.no_grad():
            # Geometric-mean probability of the demonstrated action: how sure the model is of it.
            per_action = token_logprobs.sum(-1) / mask.sum(-1).clamp(min=1.0)  # (B,)
        metrics = {"sft/loss": loss.detach(), "sft/action_prob": per_action.exp().mean()}
        return loss, metrics

    def loss_weight(self, batch: dict[str, torch.Tensor]) -> float:
        """The action tokens of the batch: the loss is their mean, so a step weighs every token alike."""
        return float(batch["action_mask"].sum())
