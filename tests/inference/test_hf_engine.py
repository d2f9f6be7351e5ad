"""HFEngine: batched, left-padded generation equals a hand-written greedy decoder; stops, seeds, limits."""

from __future__ import annotations

import pytest
import torch

from webrl.inference.engine import SamplingParams
from webrl.inference.hf import HFEngine


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> HFEngine:
    return HFEngine(tiny_model_dir, batch_size=2)


def test_batched_greedy_equals_the_reference_decoder(engine: HFEngine, prompts: list[str], greedy_reference) -> None:
    completions = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=10, logprobs=True))
    assert len(completions) == len(prompts)
    for prompt, completion in zip(prompts, completions, strict=True):
        ids, logprobs = greedy_reference(engine.model, engine.tokenizer, prompt, 10)
        assert completion.token_ids == ids
        assert completion.logprobs == pytest.approx(logprobs, abs=1e-4)
        assert completion.finish_reason == ("stop" if ids[-1] == engine.tokenizer.eos_token_id else "length")
        assert completion.text == engine.tokenizer.decode(ids, skip_special_tokens=True)


def test_stop_string_cuts_text_and_tokens_like_vllm(engine: HFEngine, prompts: list[str]) -> None:
    free = engine.generate(prompts[2:], SamplingParams(temperature=0, max_tokens=12))[0]
    assert len(free.text) > 4, "the greedy text is too short to pick a stop string from"
    stop = free.text[3:5]
    cut = engine.generate(prompts[2:], SamplingParams(temperature=0, max_tokens=12, stop=[stop]))[0]
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.find(stop)]
    # Tokens run up to the one that completed the stop string, and no further.
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)]
    assert stop in engine.tokenizer.decode(cut.token_ids, skip_special_tokens=True)
    assert stop not in engine.tokenizer.decode(cut.token_ids[:-1], skip_special_tokens=True)


def test_eos_is_kept_in_token_ids_but_not_in_text(tiny_model_dir, prompts: list[str]) -> None:
    engine = HFEngine(tiny_model_dir)
    greedy = engine.generate(prompts[1:2], SamplingParams(temperature=0, max_tokens=8))[0]
    # Make a greedy token that first appears at position k >= 1 the end of sequence.
    k = next(i for i, t in enumerate(greedy.token_ids) if i > 0 and t not in greedy.token_ids[:i])
    engine.eos_ids = [greedy.token_ids[k]]
    ended = engine.generate(prompts[1:2], SamplingParams(temperature=0, max_tokens=8))[0]
    assert ended.token_ids == greedy.token_ids[: k + 1]
    assert ended.finish_reason == "stop"
    assert ended.text == engine.tokenizer.decode(greedy.token_ids[:k], skip_special_tokens=True)


def test_seeded_sampling_is_reproducible(engine: HFEngine, prompts: list[str]) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=12, seed=7)
    first = [c.token_ids for c in engine.generate(prompts, params)]
    again = [c.token_ids for c in engine.generate(prompts, params)]
    other = [c.token_ids for c in engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=12, seed=8))]
    assert first == again
    assert first != other
    # Seeded sampling leaves the caller's random state alone.
    state = torch.random.get_rng_state()
    engine.generate(prompts[:1], params)
    assert torch.equal(state, torch.random.get_rng_state())


def test_max_tokens_ends_with_length(engine: HFEngine, prompts: list[str]) -> None:
    completion = engine.generate(prompts[1:2], SamplingParams(temperature=1.0, max_tokens=3, seed=0))[0]
    if completion.finish_reason == "length":
        assert len(completion.token_ids) == 3
    else:
        assert completion.token_ids[-1] == engine.tokenizer.eos_token_id


def test_a_prompt_longer_than_the_model_is_an_error_naming_it(tiny_model_dir, prompts: list[str]) -> None:
    engine = HFEngine(tiny_model_dir, max_model_len=20)
    with pytest.raises(ValueError, match="prompt 0 has .* tokens; the model accepts fewer than 20"):
        engine.generate([prompts[0], "short"], SamplingParams(max_tokens=2))


def test_decoding_threads_are_set_per_call_and_the_callers_setting_restored(tiny_model_dir, prompts) -> None:
    engine = HFEngine(tiny_model_dir, num_threads=1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        engine.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=2))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
