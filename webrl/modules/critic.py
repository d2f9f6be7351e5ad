"""CriticModule: WebRL's value function V(s, I) = P(success | state), a "double critic".

Structure follows the release [C `VLMDoubleCritic`]: the decoder stack of a causal LM (its LM head
dropped) reads the state prompt; the hidden state of the prompt's last token feeds two
independent MLP heads (hidden→hidden→hidden→2, ReLU; first two Linear layers N(0, 0.2), biases
0); V(s) = min over heads of softmax P(success), the pessimistic of the two. It is trained by
cross-entropy of both heads against the trajectory's outcome [P eq. 7, C].

The release trains on (s, s') pairs: each step's loss covers s and s', and since the next state
of step t is the prompt of step t+1 (`webrl.data.steps.trajectory_to_samples`), every interior
state of a trajectory is run through the trunk, forward and backward, twice per epoch. Here the
training batches are single states instead (`webrl.data.critic_states`): each distinct state of a
trajectory once, labelled by that trajectory's outcome. The value target is the same, the heads
see the same per-state gradient weight, and an epoch takes about half the trunk passes, which is
what the critic stage costs on a CPU. Pair batches are still accepted, for the release's loss.

Unlike the release, which reads position −1 and is only right at batch size 1, the feature is
taken at the LAST REAL token of each row and positions come from the attention mask, so a
state's value does not depend on the padding side or on what else is in the batch.

Batch schemas; `compute_loss` takes either:
- single states (`webrl.data.collate.CriticStateCollator` or `CriticModule.collate_states`):
  `input_ids`, `attention_mask` (B, T) long, any padding side; `outcome` (B,) float, 1 for a
  successful trajectory, 0 otherwise. Loss: `webrl.modules.losses.critic_state_loss`.
- pairs, the release's form (`webrl.data.collate.CriticCollator` or `CriticModule.collate`):
  `state_input_ids`, `state_attention_mask` (B, Ts) — s; `next_state_input_ids`,
  `next_state_attention_mask` (B, Tn) — s'; `outcome` (B,), the label of both.
  Loss: `webrl.modules.losses.critic_loss`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from peft import PeftModel
from torch import nn
from torchmetrics.classification import BinaryCalibrationError
from torchmetrics.functional.classification import binary_calibration_error
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from webrl.data.collate import StepTokenizer
from webrl.data.steps import StepSample
from webrl.data.trajectory import SUCCESS_THRESHOLD
from webrl.modules.base import WebRLModule, require_model
from webrl.modules.lm import (
    encode_prompt,
    model_and_tokenizer,
    pad_batch,
    position_ids_from_mask,
)
from webrl.modules.losses import critic_loss, critic_state_loss, critic_values
from webrl.modules.settings import HEAD_INIT_STD, LoraSettings

NUM_HEADS = 2
CALIBRATION_BINS = 10
"""Equal-width bins of V(s) for the expected calibration error (`critic/calibration_error`): |P(success) − rate|
weighted by each bin's share. A value is a probability the advantage relies on, not just a ranking."""


def _value_head(hidden: int, init_std: float = HEAD_INIT_STD) -> nn.Sequential:
    head = nn.Sequential(
        nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2)
    )
    for layer in (head[0], head[2]):
        nn.init.normal_(layer.weight, mean=0.0, std=init_std)
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
    """Double-head value critic on an LM trunk; `values(states)` scores states, `compute_loss` trains it.

    `model` is a local model directory or a loaded causal LM (its `base_model`, the decoder stack,
    becomes the trunk; the LM head is not kept). Phase i's critic usually starts from the SFT
    model's weights and then resumes from phase i−1's critic state dict [I #7]. `head_init_std` is
    the std of the heads' first two Linear weights (the release's 0.2 by default).
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
        head_init_std: float = HEAD_INIT_STD,
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay)
        if head_init_std <= 0:
            raise ValueError(f"head_init_std must be > 0, got {head_init_std}")
        self.save_init_arguments(require_model(model, "CriticModule"))
        model, tokenizer = model_and_tokenizer(model, tokenizer, lora, "CriticModule")
        self.tokenizer = tokenizer
        self.max_length = max_length
        if isinstance(model, PeftModel):  # the adapters sit in the decoder stack; its base weights stay frozen
            model = model.get_base_model()
        self.trunk = model.base_model
        hidden = model.config.hidden_size
        self.heads = nn.ModuleList([_value_head(hidden, head_init_std) for _ in range(NUM_HEADS)])
        # Epoch-level validation metric (Lightning computes and resets the logged object); no checkpoint state.
        self.val_calibration = BinaryCalibrationError(n_bins=CALIBRATION_BINS)
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
        loss, metrics, values, truth = self._loss_and_values(batch)
        metrics["critic/calibration_error"] = binary_calibration_error(values, truth, n_bins=CALIBRATION_BINS)
        return loss, metrics

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """Loss per batch; the calibration error of V(s) against the outcomes over the whole epoch."""
        loss, metrics, values, truth = self._loss_and_values(batch)
        self.val_calibration.update(values, truth)
        self.log_validation({**metrics, "critic/calibration_error": self.val_calibration}, batch)
        return loss

    def _loss_and_values(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        """Loss of a single-state or pair batch, its metrics, the detached V(s) and the 0/1 outcomes; (B,) each."""
        if "input_ids" in batch:  # one state per row (module docstring)
            logits = self(batch["input_ids"], batch["attention_mask"])  # (H, B, 2)
            loss, accuracy = critic_state_loss(logits, batch["outcome"])
        else:  # the release's (s, s') pairs
            logits = self(batch["state_input_ids"], batch["state_attention_mask"])  # (H, B, 2)
            next_logits = self(batch["next_state_input_ids"], batch["next_state_attention_mask"])  # (H, B, 2)
            loss, accuracy = critic_loss(logits, next_logits, batch["outcome"])
        values = critic_values(logits.detach())  # (B,)
        metrics = {"critic/loss": loss.detach(), "critic/acc": accuracy, "critic/value_mean": values.mean()}
        return loss, metrics, values, (batch["outcome"] >= SUCCESS_THRESHOLD).long()

    def state_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """V(s) of tokenised states, without gradients; (B, T) → (B,)."""
        with torch.no_grad():
            return critic_values(self(input_ids, attention_mask))

    def values(self, states: Sequence[str | StepSample], batch_size: int = 8) -> torch.Tensor:
        """V(s) = P(success) of states, each a step sample (its s) or a prompt string, batched; (N,) on the CPU.

        A step sample is tokenised as critic training tokenises it (`StepTokenizer.fit_state`, the loop's
        `CriticStateCollator`): a prompt over `max_length` is re-built with less page HTML, keeping the
        instruction and the history, so a long state is scored on the text the critic was trained on. A prompt
        string has no page to re-build; it is cut from the left, as `collate_states` cuts it for training.
        """
        device = self.heads[0][0].weight.device
        steps = StepTokenizer(self.tokenizer, self.max_length) if self.max_length is not None else None
        was_training = self.training
        self.eval()
        out = []
        try:
            for start in range(0, len(states), batch_size):
                rows = [self._state_ids(state, steps) for state in states[start : start + batch_size]]
                ids, mask = pad_batch(rows, self.tokenizer.pad_token_id)
                out.append(self.state_values(ids.to(device), mask.to(device)).cpu())
        finally:
            self.train(was_training)
        return torch.cat(out) if out else torch.zeros(0)

    def _state_ids(self, state: str | StepSample, steps: StepTokenizer | None) -> list[int]:
        """The ids `values` scores `state` on: training's fit for a step sample, else the prompt cut from the left."""
        if isinstance(state, StepSample) and steps is not None:
            return steps.fit_state(state, next_state=False)
        prompt = state.prompt if isinstance(state, StepSample) else state
        return encode_prompt(self.tokenizer, prompt, self.max_length)

    @staticmethod
    def collate_states(
        tokenizer: PreTrainedTokenizerBase,
        examples: Sequence[tuple[str, float]],
        max_length: int | None = None,
        padding_side: str = "left",
    ) -> dict[str, torch.Tensor]:
        """A single-state critic batch (see the module docstring) from (state, outcome) pairs."""
        rows = [encode_prompt(tokenizer, state, max_length) for state, _ in examples]
        ids, mask = pad_batch(rows, tokenizer.pad_token_id, padding_side)
        outcome = torch.tensor([float(o) for _, o in examples], dtype=torch.float32)  # (B,)
        return {"input_ids": ids, "attention_mask": mask, "outcome": outcome}

    @staticmethod
    def collate(
        tokenizer: PreTrainedTokenizerBase,
        examples: Sequence[tuple[str, str, float]],
        max_length: int | None = None,
        padding_side: str = "left",
    ) -> dict[str, torch.Tensor]:
        """A pair critic batch, the release's form (module docstring), from (state, next_state, outcome) triples."""
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
