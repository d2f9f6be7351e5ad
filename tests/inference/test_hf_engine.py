"""HFEngine: batched, left-padded generation equals a hand-written greedy decoder; stops, seeds, limits.

A greedy row's completion must not depend on the rest of its batch: not on the padding its
neighbours leave it (pad is EOS for SmolLM2 and the SFT actors), nor on their lengths.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from webrl.inference.engine import Completion, SamplingParams
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
    else:  # an EOS within the budget: at most the 3 tokens asked for, the EOS among them
        assert 1 <= len(completion.token_ids) <= 3
        assert completion.token_ids[-1] == engine.tokenizer.eos_token_id


def test_a_prompt_longer_than_the_model_is_an_error_naming_it(tiny_model_dir, prompts: list[str]) -> None:
    engine = HFEngine(tiny_model_dir, max_model_len=20)
    with pytest.raises(ValueError, match="prompt 0 has .* tokens; the model takes fewer than 20"):
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


@pytest.fixture(scope="module")
def pad_is_eos_dir(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with pad == EOS, as SmolLM2 and the SFT actors have: `generate` fills ended rows with EOS."""
    path = tmp_path_factory.mktemp("pad_is_eos")
    shutil.copytree(tiny_model_dir, path, dirs_exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.save_pretrained(path)
    return path


def _early_stop(texts: list[str], row: int) -> str:
    """A printable two-character stop string found early in `texts[row]` and in no other text."""
    text = texts[row]
    for start in range(1, len(text) - 2):
        stop = text[start : start + 2]
        unique = not any(stop in other for i, other in enumerate(texts) if i != row)
        if stop.isascii() and stop.isprintable() and text.find(stop) == start and unique:
            return stop
    pytest.fail(f"no stop string to pick from {text!r}")


def _assert_same(batched: Completion, alone: Completion) -> None:
    assert batched.token_ids == alone.token_ids
    assert batched.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    assert (batched.text, batched.finish_reason) == (alone.text, alone.finish_reason)


def test_a_row_ended_by_a_stop_string_gets_no_eos_from_its_batchs_padding(pad_is_eos_dir, prompts: list[str]) -> None:
    engine = HFEngine(pad_is_eos_dir, batch_size=len(prompts))
    eos = engine.tokenizer.eos_token_id
    assert engine.tokenizer.pad_token_id == eos
    free = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=12))
    assert all(c.finish_reason == "length" for c in free), "the tiny model must not end by itself here"
    params = SamplingParams(temperature=0, max_tokens=12, stop=[_early_stop([c.text for c in free], 1)], logprobs=True)
    batched = engine.generate(prompts, params)
    alone = engine.generate(prompts[1:2], params)[0]
    assert alone.finish_reason == "stop"
    assert len(alone.token_ids) < 12, "the stopped row must end while its batch still decodes"
    # The row's tokens are what it generated, the same as alone: no EOS the model never emitted.
    _assert_same(batched[1], alone)
    assert eos not in batched[1].token_ids
    assert batched[1].token_ids == free[1].token_ids[: len(alone.token_ids)]
    for row in (0, 2):
        assert batched[row].token_ids == free[row].token_ids


def test_a_short_prompt_batched_with_one_near_the_limit_gets_its_full_max_tokens(
    engine: HFEngine, tiny_model_dir, prompts: list[str]
) -> None:
    short, long = prompts[1], prompts[2]
    room = 4
    limit = len(engine.tokenizer(long).input_ids) + room
    near_limit = HFEngine(tiny_model_dir, batch_size=2, max_model_len=limit)
    positions: list[int] = []
    near_limit.model.register_forward_pre_hook(
        lambda _module, _args, kwargs: positions.append(int(kwargs["position_ids"].max())), with_kwargs=True
    )
    params = SamplingParams(temperature=0, max_tokens=12, logprobs=True)
    alone_short, alone_long = (near_limit.generate([p], params)[0] for p in (short, long))
    assert (len(alone_short.token_ids), alone_short.finish_reason) == (12, "length")
    assert (len(alone_long.token_ids), alone_long.finish_reason) == (room, "length")
    positions.clear()
    batched_long, batched_short = near_limit.generate([long, short], params)
    # Each prompt's budget is its own, as in vLLM: min(max_tokens, max_model_len - its length).
    _assert_same(batched_short, alone_short)
    _assert_same(batched_long, alone_long)
    # And no row, even one that has ended, is run at a position the model was not limited to.
    assert positions and max(positions) < limit


def test_an_eos_the_model_emits_is_kept_while_a_stopped_neighbour_gets_none(
    pad_is_eos_dir, prompts: list[str], greedy_reference
) -> None:
    engine = HFEngine(pad_is_eos_dir, batch_size=len(prompts))
    eos = engine.tokenizer.eos_token_id
    ids = engine.generate(prompts[1:2], SamplingParams(temperature=0, max_tokens=12))[0].token_ids
    # Make the model itself emit EOS where its greedy choice first takes a new token at k >= 2:
    # EOS's (tied) embedding row becomes that token's, slightly scaled up.
    k = next(i for i, t in enumerate(ids) if i > 1 and t not in ids[:i])
    with torch.no_grad():
        weight = engine.model.get_output_embeddings().weight
        weight[eos] = 1.02 * weight[ids[k]]
    references = [greedy_reference(engine.model, engine.tokenizer, p, 12)[0] for p in prompts]
    assert references[1][-1] == eos and len(references[1]) > 2, "the model must now emit EOS itself"
    assert all(eos not in references[row] for row in (0, 2)), "the other rows must not"
    texts = [engine.tokenizer.decode(r, skip_special_tokens=True) for r in references]
    params = SamplingParams(temperature=0, max_tokens=12, stop=[_early_stop(texts, 2)], logprobs=True)
    batched = engine.generate(prompts, params)
    alone = [engine.generate([p], params)[0] for p in prompts]
    for row in range(len(prompts)):
        _assert_same(batched[row], alone[row])
    assert batched[1].token_ids == references[1]
    assert (batched[1].finish_reason, batched[1].text) == ("stop", texts[1])
    assert batched[2].finish_reason == "stop" and eos not in batched[2].token_ids
    assert len(batched[2].token_ids) < 12, "the stopped row must end while its batch still decodes"


def test_unseeded_sampling_draws_anew_on_every_call(engine: HFEngine, prompts: list[str]) -> None:
    # As from vLLM: without a seed, the same prompts sample new answers each call, not the same noise again.
    unseeded = SamplingParams(temperature=1.0, max_tokens=12)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        first = [c.token_ids for c in engine.generate(prompts, unseeded)]
        second = [c.token_ids for c in engine.generate(prompts, unseeded)]
        torch.manual_seed(0)
        again = [c.token_ids for c in engine.generate(prompts, unseeded)]
    assert first != second
    assert again == first, "they are the process's draws"


@pytest.fixture(scope="module")
def decoding_defaults_dir(tiny_model_dir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a `generation_config.json` that sets decoding defaults, as Qwen2.5's does."""
    path = tmp_path_factory.mktemp("decoding_defaults")
    shutil.copytree(tiny_model_dir, path, dirs_exist_ok=True)
    config = json.loads((path / "generation_config.json").read_text())
    config.update(repetition_penalty=3.0, no_repeat_ngram_size=1, min_p=0.5, top_k=2, do_sample=True, temperature=0.1)
    (path / "generation_config.json").write_text(json.dumps(config))
    return path


def test_a_checkpoints_decoding_defaults_do_not_change_what_the_engine_decodes(
    engine: HFEngine, decoding_defaults_dir, prompts: list[str], greedy_reference
) -> None:
    # vLLM's LLM.generate takes only EOS ids from generation_config.json; the settings are SamplingParams' alone.
    defaults = HFEngine(decoding_defaults_dir, batch_size=2)
    greedy = SamplingParams(temperature=0, max_tokens=12)
    for prompt, completion in zip(prompts, defaults.generate(prompts, greedy), strict=True):
        assert completion.token_ids == greedy_reference(defaults.model, defaults.tokenizer, prompt, 12)[0]
    sampled = SamplingParams(temperature=1.0, max_tokens=12, seed=5)
    assert [c.token_ids for c in defaults.generate(prompts, sampled)] == [
        c.token_ids for c in engine.generate(prompts, sampled)
    ]
    assert defaults.eos_ids == engine.eos_ids


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_seeded_call_on_a_gpu_leaves_the_callers_cuda_random_state(tiny_model_dir, prompts: list[str]) -> None:
    engine = HFEngine(tiny_model_dir, device="cuda")
    torch.cuda.manual_seed(123)
    before = torch.cuda.get_rng_state()
    engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=4, seed=7))
    assert torch.equal(torch.cuda.get_rng_state(), before)
