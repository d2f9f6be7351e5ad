"""Language-model plumbing shared by the actor, critic and ORM: loading, LoRA, action log-probs.

Tokenisation convention for a (prompt, action) pair — the single definition every part of webrl
uses, so that the actor's loss, the replay filter's confidence and the reference model all score
exactly the same tokens:

- prompt ids = `prompt_token_ids(tokenizer, prompt)` (so BOS is included when the tokenizer adds it, as WebRL's
  Llama-3 tokenizer does in both training and serving, and only once when a chat template rendered it);
- action ids = `tokenizer(action, add_special_tokens=False) + [eos_token_id]` (the EOS is WebRL's
  action terminator `<|eot_id|>`, and the model must learn to emit it), without the EOS for a response
  the engine cut at its token budget (`webrl.data.collate.action_token_ids`);
- input = prompt ids + action ids; the action mask marks the action ids (EOS included);
- when the input is longer than `max_length`, the PROMPT is cut from the left (keeping a leading
  BOS), never the action: the end of the prompt holds the current page, the start the oldest history.

The log-prob of token t is read from the logits at t−1. Position ids are computed from the attention
mask, so left and right padding give the same numbers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from webrl.data.collate import action_token_ids
from webrl.data.prompts import prompt_token_ids
from webrl.data.replay import Scorer
from webrl.modules.model_factory import build_tiny_model, convert_smollm2
from webrl.modules.settings import LoraSettings

__all__ = [
    "ActionLogProbs",
    "action_logprobs",
    "actor_scorer",
    "action_token_logprobs",
    "apply_lora",
    "build_tiny_model",
    "collate_actions",
    "convert_smollm2",
    "encode_prompt",
    "encode_prompt_action",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "pad_batch",
    "position_ids_from_mask",
]


def apply_lora(model: PreTrainedModel, lora: LoraSettings) -> PeftModel:
    """Wrap `model` with fresh LoRA adapters; the adapters start at zero, so outputs are unchanged."""
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def load_tokenizer(path: str | os.PathLike) -> PreTrainedTokenizerBase:
    """The tokenizer saved in the local directory `path` (never the hub), or an error that names the directory.

    transformers' own errors for a directory without a tokenizer name neither the directory nor the files it looked
    for ("Couldn't instantiate the backend tokenizer ..."), which leaves a user guessing which of a run's models
    (base, actor, ORM) is incomplete.
    """
    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as err:
        reason = " ".join(str(err).split()) or type(err).__name__
        raise ValueError(f"{path}: no loadable tokenizer (tokenizer.json / tokenizer_config.json): {reason}") from err


def load_model_and_tokenizer(
    path: str | os.PathLike,
    dtype: torch.dtype = torch.float32,
    lora: LoraSettings | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a local directory (never the hub).

    A tokenizer without a pad token gets its EOS as pad: padded positions are always masked out,
    so the choice of pad id never changes a result.
    """
    path = Path(path).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model directory {path} has no config.json (expected a save_pretrained directory)")
    tokenizer = load_tokenizer(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    except (RuntimeError, SafetensorError) as err:
        # Weights that do not fit config.json, or a cut-off weights file: bad input, told as a ValueError naming the
        # directory (which callers name the setting of), not a traceback from deep inside transformers.
        raise ValueError(
            f"model directory {path} does not load: {_first_line(err)} (are its weights whole, and of its config.json?)"
        ) from err
    if lora is not None:
        model = apply_lora(model, lora)
    return model, tokenizer


def _first_line(err: Exception) -> str:
    """The first line of `err`'s message: transformers' load errors print their report above and end in a pointer."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def model_and_tokenizer(
    model: str | os.PathLike | PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    lora: LoraSettings | None,
    module: str,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """What a module's `model=` argument names: a directory is loaded with its tokenizer, a model object keeps the
    tokenizer it was given (which it must be); either way with fresh LoRA adapters when `lora` is set."""
    if isinstance(model, (str, os.PathLike)):
        return load_model_and_tokenizer(model, lora=lora)
    if lora is not None:
        model = apply_lora(model, lora)
    if tokenizer is None:
        raise ValueError(f"{module} needs the tokenizer that goes with a model object")
    return model, tokenizer


def _cut_prompt(prompt_ids: list[int], budget: int, bos_id: int | None) -> list[int]:
    """Keep the last `budget` prompt ids, keeping a leading BOS in front of them."""
    if len(prompt_ids) <= budget:
        return prompt_ids
    if bos_id is not None and prompt_ids and prompt_ids[0] == bos_id:
        return [bos_id] + prompt_ids[len(prompt_ids) - budget + 1 :]
    return prompt_ids[len(prompt_ids) - budget :]


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, max_length: int | None = None) -> list[int]:
    """Prompt ids under the module's convention, left-cut to `max_length`."""
    ids = prompt_token_ids(tokenizer, prompt)
    if max_length is not None:
        ids = _cut_prompt(ids, max_length, tokenizer.bos_token_id)
    return ids


def encode_prompt_action(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    action: str,
    max_length: int | None = None,
    *,
    truncated: bool = False,
) -> tuple[list[int], list[int]]:
    """Token ids of prompt+action and the 0/1 mask of the action's tokens (see the module docstring)."""
    action_ids = action_token_ids(tokenizer, action, truncated=truncated)
    prompt_ids = prompt_token_ids(tokenizer, prompt)
    if max_length is not None:
        if len(action_ids) + 1 > max_length:
            raise ValueError(
                f"action of {len(action_ids)} tokens (with EOS) leaves no room for the prompt in "
                f"max_length={max_length}: {action[:80]!r}"
            )
        prompt_ids = _cut_prompt(prompt_ids, max_length - len(action_ids), tokenizer.bos_token_id)
    if not prompt_ids:
        raise ValueError("empty prompt: the first action token needs at least one prompt token before it")
    return prompt_ids + action_ids, [0] * len(prompt_ids) + [1] * len(action_ids)


def pad_batch(
    sequences: Sequence[Sequence[int]], pad_value: int, padding_side: str = "left"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad lists of ids into a (B, T) tensor plus its (B, T) attention mask."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_value, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)  # (B, T)
    for row, seq in enumerate(sequences):
        span = slice(width - len(seq), width) if padding_side == "left" else slice(0, len(seq))
        ids[row, span] = torch.as_tensor(list(seq), dtype=torch.long)
        mask[row, span] = 1
    return ids, mask


def collate_actions(
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[tuple[str, str, float]],
    max_length: int | None = None,
    padding_side: str = "left",
    truncated: Sequence[bool] | None = None,
) -> dict[str, torch.Tensor]:
    """Build an actor batch from (prompt, action, advantage) triples.

    Returns input_ids, attention_mask, action_mask (all (B, T) long) and advantage ((B,) float).
    Left padding is the default because it lines the actions up at the end, which lets the forward
    pass compute logits for the action span only (see `action_token_logprobs`). `truncated[i]` marks an
    action the engine cut, which gets no EOS; None means none was cut.
    """
    cut = _truncation_flags(truncated, len(examples))
    encoded = [
        encode_prompt_action(tokenizer, p, a, max_length, truncated=flag)
        for (p, a, _), flag in zip(examples, cut, strict=True)
    ]
    input_ids, attention_mask = pad_batch([ids for ids, _ in encoded], tokenizer.pad_token_id, padding_side)
    action_mask, _ = pad_batch([m for _, m in encoded], 0, padding_side)
    advantage = torch.tensor([float(adv) for _, _, adv in examples], dtype=torch.float32)  # (B,)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "action_mask": action_mask,
        "advantage": advantage,
    }


def _truncation_flags(truncated: Sequence[bool] | None, count: int) -> list[bool]:
    """One cut flag per action: `truncated` checked against `count`, or all False when None."""
    if truncated is None:
        return [False] * count
    if len(truncated) != count:
        raise ValueError(f"{len(truncated)} truncation flags for {count} actions")
    return [bool(flag) for flag in truncated]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only, so padding side does not shift RoPE positions."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)


def action_token_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor
) -> torch.Tensor:
    """Differentiable per-token log-probs of the action tokens, zero elsewhere; shape (B, T).

    Logits are computed only from the first position that predicts an action token onwards, so a
    long observation costs a trunk forward but not a (T, vocab) softmax.
    """
    if not bool(action_mask.any()):
        raise ValueError("action_mask selects no token: every example needs at least one action token")
    width = input_ids.shape[1]
    first_action = int(action_mask.long().argmax(-1).masked_fill(~action_mask.bool().any(-1), width).min())
    if first_action == 0:
        raise ValueError("an action starts at position 0: it needs at least one prompt token before it")
    keep = width - first_action + 1  # logits at positions first_action-1 .. T-1
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        logits_to_keep=keep,
        use_cache=False,
    )
    logits = out.logits[:, :-1].float()  # (B, keep-1, V): predictions for tokens first_action .. T-1
    targets = input_ids[:, first_action:]  # (B, keep-1)
    token_lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, keep-1)
    mask = action_mask[:, first_action:].to(token_lp.dtype)  # (B, keep-1)
    full = token_lp.new_zeros(input_ids.shape, dtype=token_lp.dtype)  # (B, T)
    full[:, first_action:] = token_lp * mask
    return full


@dataclass
class ActionLogProbs:
    """Per-action scores, each of shape (N,), in the order the actions were given."""

    sum: torch.Tensor
    """Σ log π(token) over the action's tokens (EOS included)."""
    count: torch.Tensor
    """Number of action tokens."""
    mean: torch.Tensor
    """sum / count: the per-token mean log-prob."""
    geo_mean_prob: torch.Tensor
    """exp(mean): geometric-mean token probability, the replay filter's confidence measure."""


@torch.no_grad()
def action_logprobs(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    actions: Sequence[str],
    batch_size: int = 8,
    max_length: int | None = None,
    truncated: Sequence[bool] | None = None,
) -> ActionLogProbs:
    """Score actions under `model` in batches without gradients (eval mode, restored afterwards).

    `truncated` marks actions the engine cut at its token budget: they are scored without the EOS
    they never had (`collate_actions`).

    Batches are formed from neighbours in length (prompt and action characters) and the scores
    returned in the given order: a batch pads to its longest member, and replayed steps range from a
    few hundred to the full `max_length` tokens, so batches in the given order spend much of the
    forward on padding.
    """
    if len(prompts) != len(actions):
        raise ValueError(f"{len(prompts)} prompts but {len(actions)} actions")
    cut = _truncation_flags(truncated, len(prompts))
    if not prompts:
        empty = torch.zeros(0)
        return ActionLogProbs(sum=empty, count=empty, mean=empty, geo_mean_prob=empty)
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(actions[i]))
    was_training = model.training
    model.eval()
    sums, counts = [], []
    try:
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            chunk = [(prompts[i], actions[i], 0.0) for i in rows]
            collated = collate_actions(tokenizer, chunk, max_length, truncated=[cut[i] for i in rows])
            batch = {k: v.to(device) for k, v in collated.items()}
            mask = batch["action_mask"]
            token_lp = action_token_logprobs(model, batch["input_ids"], batch["attention_mask"], mask)
            sums.append(token_lp.sum(-1).float().cpu())
            counts.append(mask.sum(-1).cpu().float())
    finally:
        model.train(was_training)
    unsort = torch.empty(len(order), dtype=torch.long)
    unsort[torch.tensor(order)] = torch.arange(len(order))
    total, count = torch.cat(sums)[unsort], torch.cat(counts)[unsort]  # (N,), (N,) in the given order
    mean = total / count
    return ActionLogProbs(sum=total, count=count, mean=mean, geo_mean_prob=mean.exp())


def actor_scorer(model: Any, tokenizer: Any, *, batch_size: int = 8, max_length: int | None = None) -> Scorer:
    """The replay filter's scorer (`webrl.data.replay.Scorer`): geometric-mean action-token probability.

    Its optional third argument marks the actions the engine cut, scored without an EOS (`action_logprobs`).
    """

    def score(prompts: list[str], actions: list[str], truncated: Sequence[bool] | None = None) -> list[float]:
        scores = action_logprobs(
            model, tokenizer, prompts, actions, batch_size=batch_size, max_length=max_length, truncated=truncated
        )
        return scores.geo_mean_prob.tolist()

    return score
