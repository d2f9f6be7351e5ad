"""Fixtures for end-to-end runs of the real entry points (`python -m recipes.*`) in subprocesses.

The runs share one model cache per test session, so the demonstrations, the tiny model, SFT and
the ORM are built once (by the first run) and reused by the others, like a user's second run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# A short run: few tasks, one phase after phase 0, small stages. Every key is a real config key.
QUICK = [
    "phases=1",
    "env.train_tasks=6",
    "env.test_tasks=6",
    "env.max_steps=5",
    "sft.demo_tasks=24",
    "sft.train.epochs=1",
    "orm.rollout_tasks=8",
    "orm.data.solver_noise=[0.3]",
    "orm.data.solver_tasks=8",
    "orm.data.hard_negative_tasks=8",
    "orm.train.epochs=1",
    "curriculum.tasks_per_phase=6",
    "rollout.concurrency=6",
    "rollout.max_tokens=32",
    "replay.max_scored_steps=48",
    "tracking.wandb_mode=offline",
]


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model_cache")


def _recipe_command(module: str, run_dir: Path, cache: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        module,
        f"output_dir={run_dir}",
        f"model.cache_dir={cache}",
        *QUICK,
        *overrides,
    ]


def _run_recipe(command: list[str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=timeout)


def recipe_env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture
def recipe_command():
    """`recipe_command(module, run_dir, cache, *overrides)`: the argv of a quick run of a recipe."""
    return _recipe_command


@pytest.fixture
def run_recipe():
    """`run_recipe(argv, timeout)`: run it to the end in the repo root; returns the CompletedProcess."""
    return _run_recipe


@pytest.fixture
def quick() -> list[str]:
    """The quick run's overrides, for commands a test builds itself."""
    return list(QUICK)
