"""VLLMEngine on CUDA, colocated with training: sleep frees the GPU and wake brings the same engine back, and
weights pushed in memory decode exactly as the same weights reloaded from a saved directory.

CUDA only (`gpu`): the CPU worker has no sleep mode (`test_vllm_engine.py` checks that it is a logged no-op).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from webrl.inference.engine import SamplingParams
from webrl.inference.weight_sync import full_state_dict
from webrl.modules.lm import load_model_and_tokenizer

pytestmark = [pytest.mark.gpu, pytest.mark.vllm]

GREEDY = SamplingParams(temperature=0, max_tokens=12)
BUDGET = 0.3
"""The engine's share of the GPU: small, so that a training process could sit beside it."""


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> Iterator:
    from webrl.inference.vllm import VLLMEngine

    cuda_engine = VLLMEngine(
        tiny_model_dir, dtype="float32", max_model_len=1024, gpu_memory_utilization=BUDGET, enable_sleep_mode=True
    )
    yield cuda_engine
    cuda_engine.close()


def _greedy_ids(engine, prompts) -> list[list[int]]:
    return [c.token_ids for c in engine.generate(prompts, GREEDY)]


def test_sleep_gives_the_kv_cache_back_and_wake_decodes_as_before(engine, prompts) -> None:
    assert engine.supports_sleep
    before = _greedy_ids(engine, prompts)
    free_awake, total = torch.cuda.mem_get_info()
    engine.sleep()
    free_asleep, _ = torch.cuda.mem_get_info()
    # The tiny model's weights are a few MB: nearly all of the budget is KV cache, released by level-1 sleep.
    assert free_asleep - free_awake > 0.8 * BUDGET * total
    engine.wake_up()
    assert torch.cuda.mem_get_info()[0] < free_asleep - 0.8 * BUDGET * total
    assert _greedy_ids(engine, prompts) == before


def test_weights_pushed_in_memory_decode_like_the_reloaded_directory(engine, tiny_model_dir, prompts, reload_from_disk):
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    batch = tokenizer(['# Element: Search\ndo(action="Click", element="3")'], return_tensors="pt")
    for _ in range(3):
        model(**batch, labels=batch["input_ids"]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    original = _greedy_ids(engine, prompts)
    try:
        reload_from_disk(engine, model, tokenizer)
        from_disk = _greedy_ids(engine, prompts)
        assert from_disk != original, "training did not change the greedy output"
        engine.reload(tiny_model_dir)
        engine.push_weights(full_state_dict(model).items())
        assert _greedy_ids(engine, prompts) == from_disk
    finally:
        engine.reload(tiny_model_dir)
