"""Fixtures for the modules tests: one tiny Llama directory per session, built offline in well under a second."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest

from webrl.modules.lm import build_tiny_model, load_model_and_tokenizer

# Web-agent-flavoured text so the BPE learns the markers and action syntax the tests use.
CORPUS = [
    "Task Instruction: buy the red shirt\n\nRound 0\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
    '<html><a id="1">Home</a><button id="2">Add to cart</button><input id="3" placeholder="Search"/></html>'
    "\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n",
    '# Element: the add to cart button\ndo(action="Click", element="2")',
    '# Element: the search box\ndo(action="Type", argument="red shirt", element="3")',
    'exit(message="The order total is 42 dollars")',
    "The User Intent:\nfind the cheapest laptop\n\nAction History:\nclick; type\n\nThe Current Screenshot:\n<html/>",
] * 20


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return CORPUS


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), CORPUS, vocab_size=512, hidden_size=128, num_layers=2)


@pytest.fixture
def tiny(tiny_dir: Path):
    """A fresh (model, tokenizer) pair per test, so optimiser steps in one test never leak into another."""
    return load_model_and_tokenizer(tiny_dir)


def make_trainer(max_steps: int) -> L.Trainer:
    """A quiet single-process CPU Trainer: no logger files, checkpoints or progress bars in tests."""
    return L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )


@pytest.fixture
def trainer_factory():
    return make_trainer
