"""OpenAIEngine against a REAL local server: vLLM's own OpenAI API server on the tiny model.

The server is started once for the module (`openai_server.vllm_server`: a subprocess on 127.0.0.1, bounded
wait, its log shown on failure) and stopped at the end. A chat template is passed on the command line, since
the tiny tokenizer has none; it writes BOS itself, as chat templates do.

What vLLM never does (send a broken reply, check an API key) is tested against `_StubServer`, a TEST DOUBLE of
a misbehaving OpenAI-compatible server: a local HTTP server whose reply is chosen by the request's model name
(`STUB_REPLIES`) and which records the Authorization header of every request.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai_server import free_port, vllm_server
from stub_http import StubHandler, serve

from webrl.inference.engine import PromptTooLongError, SamplingParams, build_engine
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
        assert engine.max_model_len == model.config.max_position_embeddings  # vLLM lists it with the model
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


@pytest.mark.vllm
def test_a_chat_prompt_reaches_the_server_with_one_bos(server, tiny_model_dir, greedy_reference) -> None:
    # The run's actor engine: built from the served directory, whose tokenizer encodes each prompt to ids with
    # one BOS, so the server decodes what the HF engine decodes. Sent as a string, it would get a second BOS.
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    chat = [{"role": "user", "content": "click Home"}]
    prompt = tokenizer.apply_chat_template(
        chat, chat_template=CHAT_TEMPLATE, tokenize=False, add_generation_prompt=True
    )
    params = SamplingParams(temperature=0, max_tokens=10)
    engine = build_engine("openai", tiny_model_dir, base_url=server, return_token_ids=True)
    try:
        ours = engine.generate([prompt], params)[0]
    finally:
        engine.close()
    theirs = HFEngine(tiny_model_dir).generate([prompt], params)[0]
    assert (ours.text, ours.token_ids) == (theirs.text, theirs.token_ids)
    two_bos = greedy_reference(model, tokenizer, prompt, 10)[0]  # `tokenizer(prompt)` adds a BOS to the rendered one
    assert two_bos != theirs.token_ids, "the prompt must tell one BOS from two"


def test_an_unreachable_server_is_an_error_naming_it() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EngineRequestError, match=f"{url}: cannot list models"):
        OpenAIEngine(url, max_retries=0, timeout_s=5)
    engine = OpenAIEngine(url, model="m", max_retries=1, timeout_s=5)
    with pytest.raises(EngineRequestError, match="model 'm'"):
        engine.generate(["hi"], SamplingParams(max_tokens=2))
    engine.close()


class _NoModels(StubHandler):
    """A server that serves no model: listing its models gives an empty list."""

    def do_GET(self) -> None:
        self.reply(200, "application/json", json.dumps({"object": "list", "data": []}).encode())


def test_a_construction_that_fails_closes_its_client(monkeypatch) -> None:
    # The caller gets no engine to close, so the engine must close the HTTP client it made before failing.
    clients: list[openai.OpenAI] = []

    class Recorded(openai.OpenAI):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            clients.append(self)

    monkeypatch.setattr(openai, "OpenAI", Recorded)
    unreachable = f"http://127.0.0.1:{free_port()}/v1"
    with serve(_NoModels) as empty:
        for url, what in ((unreachable, "cannot list models"), (empty, "the server lists no models")):
            with pytest.raises(EngineRequestError, match=what):
                OpenAIEngine(url, max_retries=0, timeout_s=5)
    assert len(clients) == 2
    assert [client.is_closed() for client in clients] == [True, True]


def test_a_closed_engine_says_so() -> None:
    engine = OpenAIEngine(f"http://127.0.0.1:{free_port()}/v1", model="m", max_retries=0, timeout_s=5)
    engine.close()
    engine.close()  # closing again is harmless
    with pytest.raises(RuntimeError, match="is closed: build a new engine"):
        engine.generate(["hi"], SamplingParams(max_tokens=2))


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        OpenAIEngine("http://127.0.0.1:9/v1", model="m", mode="responses")


KEY = "sk-test-not-a-real-key"


def _chat_reply(content: str | None, finish: str) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
    return json.dumps(
        {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    ).encode()


def _completion_reply(text: str | None, finish: str) -> bytes:
    choice = {"index": 0, "text": text, "finish_reason": finish}
    return json.dumps(
        {"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": [choice]}
    ).encode()


JSON, HTML = "application/json", "text/html"
STUB_REPLIES = {
    "ok": (200, JSON, b""),  # a well-formed answer in the request's mode
    "html": (200, HTML, b"<html><body>Please log in to the proxy</body></html>"),
    "not-json": (200, JSON, b"{not json"),
    "empty-object": (200, JSON, b"{}"),
    "no-choices": (200, JSON, json.dumps({"id": "c", "object": "chat.completion", "choices": []}).encode()),
    "null-content": (200, JSON, _chat_reply(None, "stop")),
    "null-content-cut": (200, JSON, _chat_reply(None, "length")),
    "null-text": (200, JSON, _completion_reply(None, "stop")),
    "echo-401": (401, JSON, b""),  # an error body quoting the request's Authorization header
    "echo-html": (200, HTML, b""),  # a non-JSON page quoting it
}


class _StubServer(StubHandler):
    """Test double of a misbehaving OpenAI-compatible server (see the module docstring)."""

    auth: list[str | None] = []

    def do_GET(self) -> None:
        self.auth.append(self.headers.get("Authorization"))
        self.reply(200, JSON, json.dumps({"object": "list", "data": [{"id": "ok", "object": "model"}]}).encode())

    def do_POST(self) -> None:
        self.auth.append(self.headers.get("Authorization"))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, content_type, data = STUB_REPLIES[body["model"]]
        header = str(self.headers.get("Authorization"))
        if body["model"] == "ok":
            data = _chat_reply("fine", "stop") if "messages" in body else _completion_reply("fine", "stop")
        elif body["model"] == "echo-401":
            data = json.dumps({"error": {"message": f"Incorrect API key provided: {header}"}}).encode()
        elif body["model"] == "echo-html":
            data = f"<html>Denied for {header}</html>".encode()
        self.reply(status, content_type, data)


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    with serve(_StubServer) as url:
        yield url


def _sent_auth(url: str, **options: object) -> set[str | None]:
    """The Authorization headers of one engine's requests: listing models, then one answer."""
    _StubServer.auth.clear()
    engine = build_engine("openai", None, base_url=url, mode="chat", max_retries=0, timeout_s=5, **options)
    try:
        assert engine.generate(["hi"], SamplingParams(max_tokens=2))[0].text == "fine"
    finally:
        engine.close()
    assert len(_StubServer.auth) == 2
    return set(_StubServer.auth)


def test_the_api_key_comes_from_the_environment_unless_one_is_passed(stub_url, monkeypatch) -> None:
    # The curriculum generator is built like this, with no key: a hosted API needs OPENAI_API_KEY to reach it.
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert _sent_auth(stub_url) == {f"Bearer {KEY}"}
    assert _sent_auth(stub_url, api_key="sk-passed") == {"Bearer sk-passed"}
    monkeypatch.setenv("WEBRL_TEST_GENERATOR_KEY", "sk-named")
    assert _sent_auth(stub_url, api_key_env="WEBRL_TEST_GENERATOR_KEY") == {"Bearer sk-named"}
    monkeypatch.delenv("OPENAI_API_KEY")
    assert _sent_auth(stub_url) == {"Bearer EMPTY"}


def _request_error(url: str, model: str, mode: str) -> str:
    """The message of the EngineRequestError one request to the stub raises."""
    engine = OpenAIEngine(url, model=model, mode=mode, max_retries=0, timeout_s=5)
    try:
        with pytest.raises(EngineRequestError) as raised:
            engine.generate(["hi"], SamplingParams(max_tokens=2))
    finally:
        engine.close()
    message = str(raised.value)
    assert message.startswith(f"{url} (model {model!r}): ")
    return message


@pytest.mark.parametrize("mode", ["completion", "chat"])
@pytest.mark.parametrize(
    ("model", "what"),
    [
        ("html", "the reply is not JSON but '<html><body>Please log in"),
        ("not-json", "the reply is not valid JSON"),
        ("empty-object", "the reply has no 'choices' list"),
    ],
)
def test_a_reply_that_is_not_a_completion_is_an_error_naming_the_server(stub_url, monkeypatch, mode, model, what):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    message = _request_error(stub_url, model, mode)
    assert what in message
    assert KEY not in message


def test_a_chat_reply_without_choices_is_an_error_naming_the_server(stub_url) -> None:
    assert "asked for one chat answer, got 0 choices" in _request_error(stub_url, "no-choices", "chat")


def test_a_choice_without_text_is_an_error_unless_the_answer_was_cut(stub_url) -> None:
    assert "a choice has no text (None, finish_reason 'stop')" in _request_error(stub_url, "null-content", "chat")
    assert "a choice has no text (None, finish_reason 'stop')" in _request_error(stub_url, "null-text", "completion")
    # Cut at max_tokens before any text (a reasoning model's budget spent thinking): a truncated answer, not an error.
    engine = OpenAIEngine(stub_url, model="null-content-cut", mode="chat", max_retries=0, timeout_s=5)
    try:
        completion = engine.generate(["hi"], SamplingParams(max_tokens=2))[0]
    finally:
        engine.close()
    assert (completion.text, completion.finish_reason) == ("", "length")


@pytest.mark.parametrize(("model", "what"), [("echo-401", "Incorrect API key provided"), ("echo-html", "Denied for")])
def test_the_api_key_is_masked_where_a_server_echoes_it(stub_url, model, what) -> None:
    engine = OpenAIEngine(stub_url, model=model, mode="chat", api_key=KEY, max_retries=0, timeout_s=5)
    try:
        with pytest.raises(EngineRequestError) as raised:
            engine.generate(["hi"], SamplingParams(max_tokens=2))
    finally:
        engine.close()
    shown = "".join(traceback.format_exception(raised.value))
    assert what in str(raised.value) and "***" in str(raised.value)
    assert KEY not in shown
    assert KEY not in repr(engine)


class _ListsContextLength(StubHandler):
    """A server that lists its model's context length (vLLM's `max_model_len`) and answers any completion."""

    def do_GET(self) -> None:
        model = {"id": "m", "object": "model", "max_model_len": 24}
        self.reply(200, JSON, json.dumps({"object": "list", "data": [model]}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        choices = [{"index": i, "text": "ok", "finish_reason": "stop"} for i in range(len(body["prompt"]))]
        self.reply(200, JSON, json.dumps({"id": "c", "object": "text_completion", "choices": choices}).encode())


@pytest.mark.parametrize("model", [None, "m"])
def test_a_prompt_past_the_served_context_length_is_refused_as_too_long_before_it_is_sent(tiny_model_dir, model):
    """The server's own refusal (an HTTP 400) would pass for an engine failure, retried and left out of the rates;
    a prompt too long is the episode's own doing (`webrl.inference.rollout`), as with the local engines."""
    _, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    with serve(_ListsContextLength) as url:
        engine = OpenAIEngine(url, model=model, tokenizer=tokenizer, max_retries=0, timeout_s=5)
        assert engine.max_model_len == 24
        assert [c.text for c in engine.generate(["click"], SamplingParams(max_tokens=2))] == ["ok"]
        with pytest.raises(PromptTooLongError) as refused:
            engine.generate(["click", "type the words " * 20], SamplingParams(max_tokens=2))
        engine.close()
    assert (refused.value.index, refused.value.limit) == (1, 24) and refused.value.tokens >= 24
