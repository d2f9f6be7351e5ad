"""Fixtures for the inference tests: one tiny Llama per session (built offline, head_dim 64 so that
vLLM's CPU kernels accept it) and prompts in WebRL's completion form.

`reload_from_disk` syncs an engine the way the phase loop does after training; `miniwob` serves the MiniWoB++
pages that the rollout tests drive in real Chromium.
`greedy_reference` is a hand-written greedy decoder: it runs the full sequence through the model
at every step (no cache, no padding, one prompt at a time), so it shares none of the machinery that
batching, left padding or KV caches could get wrong; every engine's greedy output is checked
against it. Engines that take seconds to start (vLLM, its OpenAI server) are shared per test module by the
modules themselves.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from webrl.data.prompts import build_actor_prompt
from webrl.env.miniwob import MiniWoBBackend
from webrl.modules.lm import build_tiny_model

ONE_PROCESS = SimpleNamespace(is_global_zero=True, barrier=lambda: None)
"""The two Fabric members `save_model_dir` reads, for a single process."""

PAGE = '<a id="1"> Home </a><input id="2" type="text" placeholder="Search" /><button id="3"> Search </button>'
CORPUS = [
    build_actor_prompt("find the red mug", [], PAGE),
    build_actor_prompt("find the red mug", ['do(action="Type", argument="red mug", element="2")'], PAGE),
    '# Element: the search box\ndo(action="Type", argument="red mug", element="2")',
    '# Element: Search\ndo(action="Click", element="3")',
    'exit(message="The mug costs 12 dollars")',
] * 20

PROMPTS = [
    build_actor_prompt("find the red mug", [], PAGE),
    "Task Instruction: click Home",
    build_actor_prompt("what does the blue lamp cost", ['# Element: Home\ndo(action="Click", element="1")'], PAGE),
]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The factory's tiny Llama with larger random weights.

    At the factory's initialisation (std 0.02, tied embeddings) greedy decoding just repeats the
    prompt's last token, which would let an engine that ignores most of the model pass. Weights of
    std 1/sqrt(fan_in) give varied, prompt-dependent outputs.
    """
    path = build_tiny_model(
        tmp_path_factory.mktemp("tiny"),
        CORPUS,
        vocab_size=512,
        hidden_size=128,
        num_layers=2,
        num_heads=2,
        max_position_embeddings=1024,
    )
    model = AutoModelForCausalLM.from_pretrained(path)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) / math.sqrt(param.shape[1]))
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def prompts() -> list[str]:
    """Three prompts of different lengths, so batches need padding."""
    return list(PROMPTS)


@torch.no_grad()
def _greedy_reference(model, tokenizer, prompt: str, max_tokens: int) -> tuple[list[int], list[float]]:
    """Greedy token ids and their log-probabilities, stopping after EOS or `max_tokens`."""
    ids = tokenizer(prompt, return_tensors="pt").input_ids  # (1, T)
    out_ids: list[int] = []
    out_logprobs: list[float] = []
    for _ in range(max_tokens):
        logits = model(input_ids=ids).logits[0, -1].float()  # (V,)
        logprobs = torch.log_softmax(logits, dim=-1)
        token = int(torch.argmax(logits))
        out_ids.append(token)
        out_logprobs.append(float(logprobs[token]))
        if token == tokenizer.eos_token_id:
            break
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return out_ids, out_logprobs


@pytest.fixture(scope="session")
def greedy_reference():
    return _greedy_reference


@pytest.fixture
def reload_from_disk(tmp_path: Path):
    """sync(engine, model, tokenizer): save the model with the loop's `save_model_dir`, then `engine.reload` it.

    `webrl.training` is imported only here: it pulls in Lightning.
    """
    from webrl.training import save_model_dir

    versions = itertools.count(1)

    def sync(engine, model, tokenizer) -> Path:
        target = save_model_dir(ONE_PROCESS, model, tokenizer, tmp_path / f"actor_v{next(versions)}", {})
        engine.reload(target)
        return target

    return sync


@pytest.fixture(scope="module")
def miniwob() -> Iterator[MiniWoBBackend]:
    """The MiniWoB++ pages the rollout tests drive, served once per test module."""
    with MiniWoBBackend() as backend:
        yield backend
