"""CriticModule: WebRL's value function V(s, I) = P(success | state), a "double critic".

Structure follows the release [C `VLMDoubleCritic`]: the decoder stack of a causal LM (its LM head
dropped) reads the state prompt; the hidden state of the prompt's last token feeds two
independent MLP heads (hidden→hidden→hidden→2, ReLU; first two Linear layers N(0, 0.2), biases
0); V(s) = min over heads of softmax P(success), the pessimistic of the two. It is trained by
cross-entropy of both heads on s and s' against the trajectory's outcome [P eq. 7, C].

Unlike the release, which reads position −1 and is only right at batch size 1, the feature is
taken at the LAST REAL token of each row and positions come from the attention mask, so a
state's value does not depend on the padding side or on what else is in the batch.

Batch schema (as produced by `webrl.data.collate.CriticCollator` or `CriticModule.collate`):
- `state_input_ids`, `state_attention_mask`: (B, Ts) long — s, any padding side;
- `next_state_input_ids`, `next_state_attention_mask`: (B, Tn) long — s';
- `outcome`: (B,) float — 1 for a successful trajectory, 0 otherwise (label for both s and s').
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from peft import PeftModel
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from webrl.modules.base import WebRLModule, require_model
from webrl.modules.lm import (
    LoraSettings,
    apply_lora,
    encode_prompt,
    load_model_and_tokenizer,
    pad_batch,
    position_ids_from_mask,
)
from webrl.modules.losses import critic_loss, critic_values

NUM_HEADS = 2
HEAD_INIT_STD = 0.2


def _value_head(hidden: int) -> nn.Sequential:
    head = nn.Sequential(
        nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2)
    )
    for layer in (head[0], head[2]):
        nn.init.normal_(layer.weight, mean=0.0, std=HEAD_INIT_STD)
        nn.init.zeros_(layer.bias)
    return head


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last real token, for left or right padding; (B, T) → (B,)."""
    width = attention_mask.shape[-1]
    return width - 1 - attention_mask.long().flip(-1).argmax(-1)


def at_last_token(values: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Each row's entry at its last real token, for any padding side; (B, T, ...) → (B, ...)."""
    rows = torch.arange(values.shape[0], device=values.device)
    return values[rows, last_token_index(attention_mask)]


class CriticModule(WebRLModule):
    """Double-head value critic on an LM trunk; `values(prompts)` scores states, `compute_loss` trains it.

    `model` is a local model directory or a loaded causal LM (its `base_model`, the decoder stack,
    becomes the trunk; the LM head is not kept). Phase i's critic usually starts from the SFT
    model's weights and then resumes from phase i−1's critic state dict [I #7].
    """

    namespace = "critic"

    def __init__(
        self,
        model: str | os.PathLike | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        lr: float = 1e-6,
        weight_decay: float = 0.0,
        max_length: int | None = None,
        lora: LoraSettings | None = None,
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay)
        self.save_init_arguments(require_model(model, "CriticModule"))
        if isinstance(model, (str, os.PathLike)):
            model, tokenizer = load_model_and_tokenizer(Path(model), lora=lora)
        elif lora is not None:
            model = apply_lora(model, lora)
        if tokenizer is None:
            raise ValueError("CriticModule needs the tokenizer that goes with a model object")
        self.tokenizer = tokenizer
        self.max_length = max_length
        if isinstance(model, PeftModel):  # the adapters sit in the decoder stack; its base weights stay frozen
            model = model.get_base_model()
        self.trunk = model.base_model
        hidden = model.config.hidden_size
        self.heads = nn.ModuleList([_value_head(hidden) for _ in range(NUM_HEADS)])
        self.train()  # from_pretrained returns eval mode; Lightning keeps whatever mode it finds

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits of both heads at each row's last real token; (B, T) → (H, B, 2)."""
        hidden = self.trunk(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
        ).last_hidden_state  # (B, T, D)
        feature = at_last_token(hidden, attention_mask)  # (B, D)
        feature = feature.to(self.heads[0][0].weight.dtype)
        return torch.stack([head(feature) for head in self.heads])  # (H, B, 2)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logits = self(batch["state_input_ids"], batch["state_attention_mask"])  # (H, B, 2)
        next_logits = self(batch["next_state_input_ids"], batch["next_state_attention_mask"])  # (H, B, 2)
        loss, accuracy = critic_loss(logits, next_logits, batch["outcome"])
        metrics = {
            "critic/loss": loss.detach(),
            "critic/acc": accuracy,
            "critic/value_mean": critic_values(logits.detach()).mean(),
        }
        return loss, metrics

    def state_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """V(s) of tokenised states, without gradients; (B, T) → (B,)."""
        with torch.no_grad():
            return critic_values(self(input_ids, attention_mask))

    def values(self, prompts: Sequence[str], batch_size: int = 8) -> torch.Tensor:
        """V(s) = P(success) for state prompt strings, batched; returns (N,) on the CPU."""
        device = self.heads[0][0].weight.device
        was_training = self.training
        self.eval()
        out = []
        try:
            for start in range(0, len(prompts), batch_size):
                rows = [encode_prompt(self.tokenizer, p, self.max_length) for p in prompts[start : start + batch_size]]
                ids, mask = pad_batch(rows, self.tokenizer.pad_token_id)
                out.append(self.state_values(ids.to(device), mask.to(device)).cpu())
        finally:
            self.train(was_training)
        return torch.cat(out) if out else torch.zeros(0)

    @staticmethod
    def collate(
        tokenizer: PreTrainedTokenizerBase,
        examples: Sequence[tuple[str, str, float]],
        max_length: int | None = None,
        padding_side: str = "left",
    ) -> dict[str, torch.Tensor]:
        """A critic batch (see the module docstring) from (state, next_state, outcome) triples."""
        states = [encode_prompt(tokenizer, s, max_length) for s, _, _ in examples]
        next_states = [encode_prompt(tokenizer, n, max_length) for _, n, _ in examples]
        state_ids, state_mask = pad_batch(states, tokenizer.pad_token_id, padding_side)
        next_ids, next_mask = pad_batch(next_states, tokenizer.pad_token_id, padding_side)
        return {
            "state_input_ids": state_ids,
            "state_attention_mask": state_mask,
            "next_state_input_ids": next_ids,
            "next_state_attention_mask": next_mask,
            "outcome": torch.tensor([float(o) for _, _, o in examples], dtype=torch.float32),  # (B,)
        }
