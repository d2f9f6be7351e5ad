"""Batched transformers `generate` behind the engine protocol: the CPU default and the test reference.

It needs nothing beyond transformers, so the tiny embedded recipe and every CPU test can roll out
without vLLM, and its greedy output is the reference that weight-sync tests compare vLLM against.
It follows vLLM's conventions (see `webrl.inference.engine`): BOS added by the tokenizer, top-k
off, text cut before the first stop string, EOS kept in `token_ids` but not in `text`, raw
(pre-temperature) log-probabilities.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, StoppingCriteria, StoppingCriteriaList

from webrl.inference.engine import Completion, SamplingParams, digest_seed, torch_threads, truncate_at_stop

log = logging.getLogger(__name__)


class HFEngine:
    """Generate with a transformers causal LM held by this engine (its own copy of the weights).

    Prompts are sorted by length and decoded in left-padded chunks of `batch_size`, then returned in
    the caller's order. Sampling with `params.seed` is reproducible for the same batch of prompts.
    One batched `generate` draws from one generator, so per-prompt `params.seeds` cannot each own a
    stream here: they seed the call together, which still gives each call of a rollout its own draws.
    A prompt of `max_model_len` tokens or more is an error naming the prompt's index.
    `num_threads` torch threads decode (the caller's setting is restored after each call; None
    keeps it): measured on a 2-core machine shared with other jobs, the tiny model decoded 10-20x
    faster on 1 thread than on 2, whose OpenMP workers spin waiting for a descheduled peer.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        dtype: torch.dtype | str = torch.float32,
        batch_size: int = 16,
        max_model_len: int | None = None,
        num_threads: int | None = 1,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"HFEngine batch_size must be >= 1, got {batch_size}")
        self.model_path = Path(model_path)
        self.device = torch.device(device)
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        self.batch_size = batch_size
        self.num_threads = num_threads
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model: PreTrainedModel | None = None
        self.reload(self.model_path)
        self.max_model_len = max_model_len or int(getattr(self.model.config, "max_position_embeddings", 1 << 30))
        self.eos_ids = self._eos_ids()

    def reload(self, model_path: str | Path) -> None:
        """Load the weights saved in `model_path` (a `save_pretrained` directory) into this engine."""
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=self.dtype, local_files_only=True)
        self.model = model.to(self.device).eval()
        self.model_path = Path(model_path)

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Copy a full (unsharded) state dict with the model's own parameter names into the engine."""
        with torch.no_grad():
            self._require_model().load_state_dict(dict(state_dict), strict=True)

    def push_weights(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], model_path: str | Path | None = None
    ) -> None:
        """`load_state_dict` of the `(name, tensor)` pairs; `model_path`, the directory they were saved to, is recorded
        as the engine's `model_path` (what it now serves)."""
        self.load_state_dict(dict(named_tensors))
        if model_path is not None:
            self.model_path = Path(model_path)

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        model = self._require_model()
        encoded = [self.tokenizer(p).input_ids for p in prompts]
        for index, ids in enumerate(encoded):
            if len(ids) >= self.max_model_len:
                raise ValueError(
                    f"prompt {index} has {len(ids)} tokens; the model accepts fewer than {self.max_model_len}"
                )
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
        results: list[Completion | None] = [None] * len(prompts)
        with torch_threads(self.num_threads), torch.random.fork_rng(devices=[]), torch.no_grad():
            call_seed = _call_seed(params, len(prompts))
            if call_seed is not None:
                torch.manual_seed(call_seed)
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                completions = self._generate_chunk(model, [encoded[i] for i in chunk], params)
                for index, completion in zip(chunk, completions, strict=True):
                    results[index] = completion
        return [r for r in results if r is not None]

    def close(self) -> None:
        self.model = None

    def _generate_chunk(
        self, model: PreTrainedModel, encoded: list[list[int]], params: SamplingParams
    ) -> list[Completion]:
        batch = self.tokenizer.pad({"input_ids": encoded}, padding=True, return_tensors="pt").to(self.device)
        width = batch["input_ids"].shape[1]
        max_new = min(params.max_tokens, self.max_model_len - width)
        sampling = params.temperature > 0
        out = model.generate(
            **batch,
            max_new_tokens=max_new,
            do_sample=sampling,
            temperature=params.temperature if sampling else None,
            top_p=params.top_p if sampling else None,
            top_k=0 if sampling else None,
            eos_token_id=self.eos_ids or None,
            pad_token_id=self.tokenizer.pad_token_id,
            stopping_criteria=StoppingCriteriaList([_StopStrings(self.tokenizer, params.stop, width)])
            if params.stop
            else None,
            return_dict_in_generate=True,
            output_logits=params.logprobs,
        )
        generated = out.sequences[:, width:]  # (B, T)
        logprobs = None
        if params.logprobs:
            logits = torch.stack(out.logits, dim=1).float()  # (B, T, V)
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)  # (B, T)
        return [
            self._finish(generated[row].tolist(), None if logprobs is None else logprobs[row].tolist(), params)
            for row in range(generated.shape[0])
        ]

    def _finish(self, ids: list[int], logprobs: list[float] | None, params: SamplingParams) -> Completion:
        """Cut one row of `generate` output at EOS or the first stop string, vLLM-style."""
        eos_at = next((i for i, t in enumerate(ids) if t in self.eos_ids), None)
        if eos_at is not None:
            text, _ = truncate_at_stop(self._decode(ids[:eos_at]), params.stop)
            ids = ids[: eos_at + 1]
            return Completion(text, ids, None if logprobs is None else logprobs[: len(ids)], "stop")
        text, stopped = truncate_at_stop(self._decode(ids), params.stop)
        if stopped:
            # Keep the tokens up to the one that completed the stop string, as vLLM does.
            ids = ids[: self._tokens_until_stop(ids, params.stop)]
        finish = "stop" if stopped else "length"
        return Completion(text, ids, None if logprobs is None else logprobs[: len(ids)], finish)

    def _tokens_until_stop(self, ids: list[int], stop: list[str]) -> int:
        for count in range(1, len(ids) + 1):
            if truncate_at_stop(self._decode(ids[:count]), stop)[1]:
                return count
        return len(ids)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _eos_ids(self) -> list[int]:
        configured = self._require_model().generation_config.eos_token_id
        ids = set(configured if isinstance(configured, list) else [configured] if configured is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        if not ids:
            log.warning("%s has no EOS token: generation stops only at max_tokens or a stop string", self.model_path)
        return sorted(ids)

    def _require_model(self) -> PreTrainedModel:
        if self.model is None:
            raise RuntimeError("HFEngine is closed")
        return self.model


class _StopStrings(StoppingCriteria):
    """Stop a row once its GENERATED text contains a stop string.

    transformers' own `stop_strings` also match text that starts in the prompt (a prompt ending in
    "\n" plus a generated "\n" matches "\n\n"); vLLM looks at generated text only, and so do we.
    Only the last few tokens are decoded each step: a stop string of n characters completed by the
    newest token lies within its last n + 4 tokens (every token decodes to at least one character).
    """

    def __init__(self, tokenizer: Any, stop: list[str], prompt_width: int) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.prompt_width = prompt_width
        self.window = max(len(s) for s in stop) + 4

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        generated = input_ids[:, self.prompt_width :]  # (B, t)
        tails = self.tokenizer.batch_decode(generated[:, -self.window :], skip_special_tokens=True)
        done = [truncate_at_stop(tail, self.stop)[1] for tail in tails]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _call_seed(params: SamplingParams, count: int) -> int | None:
    """One seed for a batched call: `params.seed`, or a digest of all of `params.seeds` (None: unseeded)."""
    if params.seeds is None:
        return params.seed
    return digest_seed(*params.prompt_seeds(count))
