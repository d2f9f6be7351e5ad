"""OpenAIEngine against a REAL local server: vLLM's own OpenAI API server on the tiny model.

The server is started once for the module (`openai_server.vllm_server`: a subprocess on 127.0.0.1, bounded
wait, its log shown on failure) and stopped at the end. A chat template is passed on the command line, since
the tiny tokenizer has none; it writes BOS itself, as chat templates do.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from openai_server import free_port, vllm_server

from webrl.inference.engine import SamplingParams
from webrl.inference.hf import HFEngine
from webrl.inference.openai import EngineRequestError, OpenAIEngine
from webrl.modules.lm import load_model_and_tokenizer

CHAT_TEMPLATE = (
    "<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n{% endif %}"
)


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("server")
    (work / "chat.jinja").write_text(CHAT_TEMPLATE)
    with vllm_server(tiny_model_dir, work, "--chat-template", str(work / "chat.jinja")) as base_url:
        yield base_url


@pytest.mark.vllm
def test_completion_mode_equals_the_reference_decoder(server, tiny_model_dir, prompts, greedy_reference) -> None:
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    engine = OpenAIEngine(server, return_token_ids=True, prompts_per_request=2)
    try:
        assert engine.model == str(tiny_model_dir)
        completions = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=10, logprobs=True))
    finally:
        engine.close()
    assert len(completions) == len(prompts)
    for prompt, completion in zip(prompts, completions, strict=True):
        ids, logprobs = greedy_reference(model, tokenizer, prompt, 10)
        assert completion.token_ids == ids
        assert completion.text == tokenizer.decode(ids, skip_special_tokens=True)
        assert completion.logprobs == pytest.approx(logprobs, abs=1e-3)


@pytest.mark.vllm
def test_stop_strings_match_hf(server, tiny_model_dir, prompts) -> None:
    hf = HFEngine(tiny_model_dir)
    stop = hf.generate(prompts[2:], SamplingParams(temperature=0, max_tokens=12))[0].text[3:5]
    params = SamplingParams(temperature=0, max_tokens=12, stop=[stop])
    engine = OpenAIEngine(server, return_token_ids=True)
    try:
        ours = engine.generate(prompts[2:], params)[0]
    finally:
        engine.close()
    theirs = hf.generate(prompts[2:], params)[0]
    assert (ours.text, ours.token_ids, ours.finish_reason) == (theirs.text, theirs.token_ids, "stop")


@pytest.mark.vllm
def test_per_prompt_seeds_go_in_requests_of_their_own(server, prompts) -> None:
    # 4 copies of a prompt, a seed each: 4 samples, reproducible, each what its seed gives alone.
    engine = OpenAIEngine(server, return_token_ids=True, prompts_per_request=4)
    same = [prompts[0]] * 4
    own = SamplingParams(temperature=1.0, max_tokens=12, seeds=[1, 2, 3, 4])
    try:
        separate = [c.token_ids for c in engine.generate(same, own)]
        again = [c.token_ids for c in engine.generate(same, own)]
        alone = engine.generate(same[:1], SamplingParams(temperature=1.0, max_tokens=12, seed=3))[0].token_ids
    finally:
        engine.close()
    assert separate == again
    assert len({tuple(ids) for ids in separate}) > 1
    assert separate[2] == alone


@pytest.mark.vllm
def test_chat_mode_sends_system_and_user_messages(server, tiny_model_dir, greedy_reference) -> None:
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    engine = OpenAIEngine(server, mode="chat", system_prompt="You are a web agent.", return_token_ids=True)
    try:
        completions = engine.generate(["click Home", "find the red mug"], SamplingParams(temperature=0, max_tokens=8))
    finally:
        engine.close()
    for user, completion in zip(["click Home", "find the red mug"], completions, strict=True):
        rendered = (
            "<|start_header_id|>system<|end_header_id|>\nYou are a web agent.<|eot_id|>"
            f"<|start_header_id|>user<|end_header_id|>\n{user}<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n"
        )
        assert completion.token_ids == greedy_reference(model, tokenizer, rendered, 8)[0]


def test_an_unreachable_server_is_an_error_naming_it() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EngineRequestError, match=f"{url}: cannot list models"):
        OpenAIEngine(url, max_retries=0, timeout_s=5)
    engine = OpenAIEngine(url, model="m", max_retries=1, timeout_s=5)
    with pytest.raises(EngineRequestError, match="model 'm'"):
        engine.generate(["hi"], SamplingParams(max_tokens=2))
    engine.close()


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        OpenAIEngine("http://127.0.0.1:9/v1", model="m", mode="responses")
