"""Batched transformers `generate` behind the engine protocol: the CPU default and the test reference.

It needs nothing beyond transformers, so the tiny embedded recipe and every CPU test can roll out
without vLLM, and its greedy output is the reference that weight-sync tests compare vLLM against.
It follows vLLM's conventions (see `webrl.inference.engine`): prompts encoded as training encodes them
(`webrl.data.prompts.prompt_token_ids`: BOS added by the tokenizer, once), top-k
off, text cut before the first stop string, EOS kept in `token_ids` but not in `text`, raw
(pre-temperature) log-probabilities, and only the settings of `SamplingParams`: of the checkpoint's
`generation_config.json` only the token ids (EOS, pad, BOS) count.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    StoppingCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from webrl.inference.engine import (
    Completion,
    SamplingParams,
    encode_prompts,
    torch_threads,
    truncate_at_stop,
    with_tied_head,
)

log = logging.getLogger(__name__)


class HFEngine:
    """Generate with a transformers causal LM held by this engine (its own copy of the weights).

    Prompts are sorted by length and decoded in left-padded chunks of `batch_size`, then returned in
    the caller's order. Sampling with `params.seed` is reproducible for the same batch of prompts.
    Per-prompt `params.seeds` give each prompt a random stream of its own (`_RowSampler`), as vLLM does:
    its sample does not depend on the prompts it is batched with, nor on their seeds.
    A prompt of `max_model_len` tokens or more is a `PromptTooLongError` naming the prompt's index.
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
        model.generation_config = _token_ids_only(model.generation_config)
        self.model = model.to(self.device).eval()
        self.model_path = Path(model_path)

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Copy a full (unsharded) state dict with the model's own parameter names into the engine."""
        with torch.no_grad():
            self._require_model().load_state_dict(dict(state_dict), strict=True)

    def push_weights(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], model_path: str | Path | None = None
    ) -> None:
        """`load_state_dict` of the `(name, tensor)` pairs in checkpoint naming, with a tied LM head's key added when
        they lack it (as the vLLM engine does); `model_path`, the directory they were saved to, is recorded as the
        engine's `model_path` (what it now serves)."""
        ties = bool(getattr(self._require_model().config.get_text_config(), "tie_word_embeddings", False))
        self.load_state_dict(dict(with_tied_head(named_tensors, ties)))
        if model_path is not None:
            self.model_path = Path(model_path)

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        model = self._require_model()
        encoded = encode_prompts(self.tokenizer, prompts, self.max_model_len)
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
        results: list[Completion | None] = [None] * len(prompts)
        seeds = None if params.seeds is None else params.prompt_seeds(len(prompts))
        call_seed = params.seed if seeds is None else None
        with torch_threads(self.num_threads), _seeded(call_seed, self.device), torch.no_grad():
            for chunk in self._chunks(order, [len(ids) for ids in encoded], params.max_tokens):
                chunk_seeds = None if seeds is None else [seeds[i] for i in chunk]
                completions = self._generate_chunk(model, [encoded[i] for i in chunk], params, chunk_seeds)
                for index, completion in zip(chunk, completions, strict=True):
                    results[index] = completion
        return [r for r in results if r is not None]

    def close(self) -> None:
        self.model = None

    def _chunks(self, order: list[int], lengths: list[int], max_tokens: int) -> list[list[int]]:
        """Split prompt indices sorted by length into batches of at most `batch_size` that fit `max_model_len`.

        `generate` keeps running a row that has ended until its whole batch has, one position
        further each step. A prompt too close to the limit for `max_tokens` more tokens, batched with
        a shorter prompt that may decode longer, would run past `max_model_len`: out of a learned
        position table, or into dynamic RoPE scaling, which rescales every row of the batch. Prompts
        with room for `max_tokens` batch together as before; nearer the limit, only equal lengths do.
        """
        chunks: list[list[int]] = []
        for index in order:
            if chunks and len(chunks[-1]) < self.batch_size:
                shortest = lengths[chunks[-1][0]]
                if lengths[index] + min(max_tokens, self.max_model_len - shortest) <= self.max_model_len:
                    chunks[-1].append(index)
                    continue
            chunks.append([index])
        return chunks

    def _generate_chunk(
        self, model: PreTrainedModel, encoded: list[list[int]], params: SamplingParams, seeds: list[int] | None
    ) -> list[Completion]:
        batch = self.tokenizer.pad({"input_ids": encoded}, padding=True, return_tensors="pt").to(self.device)
        width = batch["input_ids"].shape[1]
        # Each prompt's own room, as vLLM gives it: a short prompt is not cut by a long neighbour's.
        budgets = [min(params.max_tokens, self.max_model_len - len(ids)) for ids in encoded]
        ends = _RowEnds(self.tokenizer, params.stop, self.eos_ids, width, budgets)
        # With a seed per row, each row draws its own token and `generate` takes it as the greedy choice.
        per_row = params.temperature > 0 and seeds is not None
        sampling = params.temperature > 0 and not per_row
        out = model.generate(
            **batch,
            max_new_tokens=max(budgets),
            do_sample=sampling,
            temperature=params.temperature if sampling else None,
            top_p=params.top_p if sampling else None,
            top_k=0 if sampling else None,
            logits_processor=LogitsProcessorList([_RowSampler(params, seeds)] if per_row else []),
            eos_token_id=self.eos_ids or None,
            pad_token_id=self.tokenizer.pad_token_id,
            stopping_criteria=StoppingCriteriaList([ends]),
            return_dict_in_generate=True,
            output_logits=params.logprobs,
        )
        generated = out.sequences[:, width:]  # (B, T)
        logprobs = None
        if params.logprobs:
            logits = torch.stack(out.logits, dim=1).float()  # (B, T, V)
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)  # (B, T)
        completions = []
        for row in range(generated.shape[0]):
            end = ends.ends[row] if ends.ends[row] is not None else generated.shape[1]
            row_logprobs = None if logprobs is None else logprobs[row, :end].tolist()
            completions.append(self._finish(generated[row, :end].tolist(), row_logprobs, ends.by_eos[row], params))
        return completions

    def _finish(self, ids: list[int], logprobs: list[float] | None, by_eos: bool, params: SamplingParams) -> Completion:
        """Make one row's completion from the tokens it generated up to where it ended, vLLM-style.

        `by_eos`: its last token is an EOS it emitted, kept in `token_ids` but not in `text`.
        A row that ended otherwise is cut after the token that completed the first stop string in
        its full text (the per-step check decodes a window only, so the text decides).
        """
        if by_eos:
            text, _ = truncate_at_stop(self._decode(ids[:-1]), params.stop)
            return Completion(text, ids, logprobs, "stop")
        text, stopped = truncate_at_stop(self._decode(ids), params.stop)
        if stopped:
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


class _RowEnds(StoppingCriteria):
    """Stop each row where it ends, and record that step: EOS emitted, stop string matched, or budget reached.

    The output of `generate` cannot say this by itself: a row that has ended is filled with
    `pad_token_id`, which is EOS for many models (SmolLM2, the SFT actors), so an EOS found there
    may be filler the model never produced. `ends[row]` is the number of tokens the row generated
    (None while it runs); `by_eos[row]` says whether the last of them is an EOS it emitted.

    Stop strings match generated text only: transformers' own `stop_strings` also match text that
    starts in the prompt (a prompt ending in "\n" plus a generated "\n" matches "\n\n"); vLLM looks at
    generated text only, and so do we. Only the last few tokens are decoded each step: a stop string
    of n characters completed by the newest token lies within its last n + 4 tokens (every token
    decodes to at least one character).
    """

    def __init__(
        self, tokenizer: Any, stop: list[str], eos_ids: list[int], prompt_width: int, budgets: list[int]
    ) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.eos_ids = set(eos_ids)
        self.prompt_width = prompt_width
        self.budgets = budgets
        self.window = max((len(s) for s in stop), default=0) + 4
        self.ends: list[int | None] = [None] * len(budgets)
        self.by_eos = [False] * len(budgets)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        step = input_ids.shape[1] - self.prompt_width
        running = [row for row, end in enumerate(self.ends) if end is None]
        newest = input_ids[:, -1].tolist()
        stopped = dict.fromkeys(running, False)
        if self.stop and running:
            tails = self.tokenizer.batch_decode(
                input_ids[running, self.prompt_width :][:, -self.window :], skip_special_tokens=True
            )
            stopped = {row: truncate_at_stop(tail, self.stop)[1] for row, tail in zip(running, tails, strict=True)}
        for row in running:
            by_eos = newest[row] in self.eos_ids
            if by_eos or stopped[row] or step >= self.budgets[row]:
                self.ends[row] = step
                self.by_eos[row] = by_eos
        return torch.tensor([end is not None for end in self.ends], dtype=torch.bool, device=input_ids.device)


@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """Draw from a stream of `seed`, leaving the caller's random state as it was; None: from the process's stream.

    Unseeded calls must advance the process's stream like any other draw: a forked and restored state would
    give every unseeded call the same noise, so the same prompts would sample the same answers call after call.
    `torch.manual_seed` reseeds every CUDA device too, so on a GPU the engine's device state is saved and restored
    with the CPU's: a training stage in the same process then draws its dropout masks as it would have.
    """
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def _token_ids_only(loaded: GenerationConfig) -> GenerationConfig:
    """`loaded` with only its token ids kept, so that `generate` applies no decoding default of the checkpoint.

    `generate` fills every setting it is not passed from the model's generation config: a checkpoint's
    repetition_penalty, no_repeat_ngram_size, min_p or suppressed tokens (Qwen2.5's config has some, and
    `save_pretrained` copies them into every actor saved from it) would change what this engine decodes,
    while vLLM's `LLM.generate` takes only the EOS ids from that file.
    """
    return GenerationConfig(
        bos_token_id=loaded.bos_token_id, eos_token_id=loaded.eos_token_id, pad_token_id=loaded.pad_token_id
    )


class _RowSampler(LogitsProcessor):
    """Sample each row's next token from a generator of its own seed, and leave only that token to choose.

    One batched `generate` draws all rows' tokens from one generator, so a row's sample would depend on
    its batch mates (how many, and their seeds). Here each row is warped as `do_sample` warps it
    (temperature, then top-p) and sampled with the exponential-race trick (argmax of p / E, E ~ Exp(1)
    from the row's generator), which a row's own logits and seed alone decide. Every other token gets
    -inf, so greedy decoding picks the sampled one; `output_logits` still returns the raw logits.
    """

    def __init__(self, params: SamplingParams, seeds: list[int]) -> None:
        self.warpers = [TemperatureLogitsWarper(params.temperature)]
        if params.top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(params.top_p))
        self.generators = [torch.Generator().manual_seed(seed) for seed in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        warped = scores.float()  # (B, V)
        for warper in self.warpers:
            warped = warper(input_ids, warped)
        probs = torch.softmax(warped, dim=-1).cpu()  # (B, V)
        noise = torch.stack([torch.empty(probs.shape[1]).exponential_(generator=g) for g in self.generators])
        chosen = (probs / noise).argmax(dim=-1, keepdim=True).to(scores.device)  # (B, 1)
        return torch.full_like(scores, float("-inf")).scatter_(-1, chosen, 0.0)
