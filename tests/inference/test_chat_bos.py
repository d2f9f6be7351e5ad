"""A chat template that renders the BOS itself (Llama-3's) and a tokenizer that adds BOS on encode: one BOS.

Encoding such a prompt with the tokenizer's special tokens puts a second BOS in front of the rendered one. Training
(step batches, actor scoring, the ORM) and the engines encode prompts alike, to ids with exactly one BOS. The
tokenizer is the tiny model's (which adds BOS on encode) given a Llama-3 style template that starts with
`{{ bos_token }}`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from sample_records import build_trajectory
from stub_http import StubHandler, serve
from transformers import AutoTokenizer

from webrl.data.collate import StepTokenizer
from webrl.data.prompts import build_orm_prompt, prompt_token_ids
from webrl.data.steps import trajectory_to_samples
from webrl.inference.engine import SamplingParams, build_engine
from webrl.inference.hf import HFEngine
from webrl.inference.openai import OpenAIEngine
from webrl.modules.lm import encode_prompt_action
from webrl.modules.orm import fit_orm_prompt

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
GREEDY = SamplingParams(temperature=0, max_tokens=2)


@pytest.fixture(scope="module")
def llama3_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with the Llama-3 style chat template saved in its tokenizer."""
    out = tmp_path_factory.mktemp("llama3")
    for file in tiny_model_dir.iterdir():
        shutil.copy(file, out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    tokenizer.chat_template = LLAMA3_TEMPLATE
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def chat_prompt(llama3_dir: Path) -> tuple[object, str, list[int]]:
    """The tokenizer, a step's chat prompt, and the ids it should encode to: one BOS, then the rendered text."""
    tokenizer = AutoTokenizer.from_pretrained(llama3_dir)
    trajectory = build_trajectory(num_steps=2, tokenizer=tokenizer)
    prompt = trajectory.steps[1].prompt
    assert prompt.startswith(tokenizer.bos_token)
    assert tokenizer(prompt).input_ids[:2] == [tokenizer.bos_token_id] * 2, "the tokenizer alone doubles the BOS"
    return tokenizer, prompt, tokenizer(prompt, add_special_tokens=False).input_ids


def _one_bos(ids: list[int], bos: int) -> bool:
    return ids[0] == bos and ids.count(bos) == 1


def test_training_encodes_a_chat_prompt_with_one_bos(chat_prompt) -> None:
    tokenizer, prompt, expected = chat_prompt
    trajectory = build_trajectory(num_steps=2, tokenizer=tokenizer)
    sample = trajectory_to_samples(trajectory, chat_template_tokenizer=tokenizer)[1]
    assert sample.prompt == prompt
    prompt_ids, _ = StepTokenizer(tokenizer, max_length=4096).actor_ids(sample)
    assert prompt_ids == expected
    ids, mask = encode_prompt_action(tokenizer, prompt, sample.action)
    assert ids[: mask.index(1)] == expected
    orm_prompt = build_orm_prompt("Do thing t0", [sample.action], "<page>", chat_template_tokenizer=tokenizer)
    assert _one_bos(fit_orm_prompt(tokenizer, orm_prompt, None), tokenizer.bos_token_id)


def test_the_hf_engine_decodes_a_chat_prompt_after_one_bos(llama3_dir, chat_prompt, monkeypatch) -> None:
    _, prompt, expected = chat_prompt
    engine = HFEngine(llama3_dir)
    seen: list[list[int]] = []
    decode = engine._generate_chunk

    def spy(model, encoded, *rest):
        seen.extend(encoded)
        return decode(model, encoded, *rest)

    monkeypatch.setattr(engine, "_generate_chunk", spy)
    engine.generate([prompt], GREEDY)
    assert seen == [expected]


@pytest.mark.vllm
def test_the_vllm_engine_sends_a_chat_prompt_as_ids_with_one_bos(chat_prompt) -> None:
    from webrl.inference.vllm import VLLMEngine

    tokenizer, prompt, expected = chat_prompt
    sent: list[object] = []

    def generate(prompts, sampling, use_tqdm):
        sent.extend(prompts)
        done = SimpleNamespace(token_ids=[tokenizer.eos_token_id], text="", logprobs=None, finish_reason="stop")
        return [SimpleNamespace(outputs=[done]) for _ in prompts]

    # A running engine's state with a stand-in for `vllm.LLM` that records what it is sent (the real one takes a
    # minute to start; `test_vllm_engine` checks that a BOS-led prompt decodes like one without).
    engine = object.__new__(VLLMEngine)
    engine.__dict__.update(
        tokenizer=tokenizer, max_model_len=4096, num_threads=None, llm=SimpleNamespace(generate=generate)
    )
    engine.generate([prompt], GREEDY)
    assert sent == [{"prompt_token_ids": expected}]


class _Recorder(StubHandler):
    """A server that records the JSON body of each request and answers every prompt "fine"."""

    bodies: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        if "messages" in body:
            choices = [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}]
        else:
            choices = [{"index": i, "text": "fine", "finish_reason": "stop"} for i in range(len(body["prompt"]))]
        reply = {"id": "c", "object": "text_completion", "created": 0, "model": body["model"], "choices": choices}
        self.reply(200, "application/json", json.dumps(reply).encode())


def _sent(engine: OpenAIEngine, prompts: list[str], **params: object) -> list[object]:
    """What `engine` sends for `prompts`: the completion requests' prompts, or the chat requests' user messages,
    shortest first (requests sent concurrently arrive in any order)."""
    _Recorder.bodies.clear()
    try:
        assert [c.text for c in engine.generate(prompts, SamplingParams(max_tokens=2, **params))] == ["fine"] * 2
    finally:
        engine.close()
    sent = [item for body in _Recorder.bodies for item in body.get("prompt") or [body["messages"][-1]["content"]]]
    return sorted(sent, key=len)


def test_the_openai_engine_sends_prompts_as_ids_with_one_bos(llama3_dir, chat_prompt) -> None:
    # The run builds its actor engine from the served directory, which holds the tokenizer; vLLM would add a BOS
    # to a string prompt, not to ids.
    tokenizer, prompt, expected = chat_prompt
    prompts, ids = ["Task: x", prompt], [prompt_token_ids(tokenizer, "Task: x"), expected]
    with serve(_Recorder) as url:
        assert _sent(build_engine("openai", llama3_dir, base_url=url), prompts) == ids
        assert _sent(OpenAIEngine(url, model="m", tokenizer=tokenizer), prompts, seeds=[1, 2]) == ids
        # No tokenizer (a model name, or none asked for), or the server renders a chat: the strings, as before.
        assert _sent(build_engine("openai", "m", base_url=url), prompts) == prompts
        assert _sent(build_engine("openai", llama3_dir, base_url=url, tokenizer=None), prompts) == prompts
        assert _sent(build_engine("openai", llama3_dir, base_url=url, mode="chat"), prompts) == prompts
