"""Fixtures for the process CLI's tests: hand-built trajectories and a tiny Llama that has seen their text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sample_records import build_trajectory

from webrl.data.trajectory import Trajectory


@pytest.fixture
def make_trajectory() -> Callable[..., Trajectory]:
    return build_trajectory


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from webrl.modules.model_factory import build_tiny_model

    trajectories = [build_trajectory(f"h{i}", num_steps=3) for i in range(4)]
    corpus = [step.prompt + step.response for t in trajectories for step in t.steps]
    out = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(out, corpus, vocab_size=400, hidden_size=64, num_layers=1, num_heads=1)
