"""Fixtures for the data tests: labelled trajectories built by hand, and a chat-template tokenizer.

The chat tokenizer is a byte-level BPE trained offline in milliseconds, given SmolLM2's ChatML
template, so the chat form of the prompts is rendered by a real `apply_chat_template`. The tiny
model directory is the project's own tiny Llama (`build_tiny_model`), with the Llama-3 markers
as special tokens, trained on the prompts of `dist_worker.build_trajectories`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from dist_worker import build_trajectories
from sample_records import build_trajectory, chatml_tokenizer
from transformers import PreTrainedTokenizerFast

from webrl.data.trajectory import Trajectory


@pytest.fixture(scope="session")
def chat_tokenizer() -> PreTrainedTokenizerFast:
    return chatml_tokenizer(["<a id=1>Buy</a> do(action='Click') Round Task Instruction"] * 20, vocab_size=400)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from webrl.modules.model_factory import build_tiny_model

    corpus = [step.prompt + step.response for t in build_trajectories() for step in t.steps]
    out = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(out, corpus, vocab_size=400, hidden_size=64, num_layers=1, num_heads=1)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def make_trajectory() -> Callable[..., Trajectory]:
    """Build a trajectory as a rollout runner would (`sample_records.build_trajectory`)."""
    return build_trajectory
