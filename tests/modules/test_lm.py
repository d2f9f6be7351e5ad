"""lm.py: tiny-model directories, the prompt/action tokenisation convention, and action log-probs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from webrl.modules.lm import (
    action_logprobs,
    action_token_logprobs,
    build_tiny_model,
    collate_actions,
    convert_smollm2,
    encode_prompt_action,
    load_model_and_tokenizer,
    model_and_tokenizer,
    pad_batch,
)

PROMPTS = [
    "Task Instruction: buy the red shirt\n\nRound 0\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n<html/>",
    "Task Instruction: find the cheapest laptop",
    "Home",
]
ACTIONS = ['do(action="Click", element="2")', 'exit(message="42")', '# Element: search\ndo(action="Type", element="3")']


def test_tiny_dir_loads_with_markers_as_single_tokens(tiny_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True)
    for marker in ("<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|pad|>"):
        assert len(tokenizer.encode(marker, add_special_tokens=False)) == 1, marker
    for word in ("YES", "NO"):
        assert len(tokenizer.encode(word, add_special_tokens=False)) == 1, word
    assert tokenizer.eos_token == "<|eot_id|>" and tokenizer.bos_token == "<|begin_of_text|>"
    ids = tokenizer("Home").input_ids
    assert ids[0] == tokenizer.bos_token_id and tokenizer.decode(ids[1:]) == "Home"
    assert model.config.head_dim == 64
    assert model.config.vocab_size == len(tokenizer)
    assert GenerationConfig.from_pretrained(tiny_dir).eos_token_id == tokenizer.eos_token_id


def test_a_module_takes_a_directory_or_a_model_object_with_its_tokenizer(tiny_dir, tiny):
    model, tokenizer = tiny
    loaded, loaded_tokenizer = model_and_tokenizer(tiny_dir, None, None, "ActorModule")
    assert loaded.config.hidden_size == model.config.hidden_size
    assert loaded_tokenizer("Home").input_ids == tokenizer("Home").input_ids
    assert model_and_tokenizer(model, tokenizer, None, "ActorModule") == (model, tokenizer)
    with pytest.raises(ValueError, match="CriticModule needs the tokenizer that goes with a model object"):
        model_and_tokenizer(model, None, None, "CriticModule")


def test_tiny_model_is_reproducible_from_its_seed(tmp_path, corpus):
    def weights(name: str, seed: int) -> dict[str, torch.Tensor]:
        out = build_tiny_model(tmp_path / name, corpus, vocab_size=300, hidden_size=64, num_layers=1, seed=seed)
        return load_file(out / "model.safetensors")

    first, again, other = weights("a", 3), weights("b", 3), weights("c", 4)
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["model.embed_tokens.weight"], other["model.embed_tokens.weight"])


def test_encode_appends_eos_and_masks_only_the_action(tiny):
    _, tokenizer = tiny
    ids, mask = encode_prompt_action(tokenizer, "Home", "exit()")
    prompt_ids = tokenizer("Home").input_ids
    action_ids = tokenizer("exit()", add_special_tokens=False).input_ids
    assert ids == prompt_ids + action_ids + [tokenizer.eos_token_id]
    assert mask == [0] * len(prompt_ids) + [1] * (len(action_ids) + 1)


def test_encode_cuts_the_prompt_from_the_left_keeping_bos(tiny):
    _, tokenizer = tiny
    prompt = PROMPTS[0]
    full, _ = encode_prompt_action(tokenizer, prompt, "exit()")
    n_action = len(tokenizer("exit()", add_special_tokens=False).input_ids) + 1
    ids, mask = encode_prompt_action(tokenizer, prompt, "exit()", max_length=n_action + 4)
    assert len(ids) == n_action + 4
    assert ids[0] == tokenizer.bos_token_id
    assert ids[1:] == full[-(n_action + 3) :]  # 3 last prompt tokens survive, then the whole action
    assert sum(mask) == n_action


def test_encode_refuses_an_action_that_cannot_fit(tiny):
    _, tokenizer = tiny
    n_action = len(tokenizer(ACTIONS[0], add_special_tokens=False).input_ids) + 1
    try:
        encode_prompt_action(tokenizer, "Home", ACTIONS[0], max_length=n_action)
    except ValueError as err:
        assert "max_length" in str(err)
    else:
        raise AssertionError("an action that fills max_length must be refused")


def test_pad_batch_both_sides():
    ids, mask = pad_batch([[5, 6, 7], [8]], pad_value=0, padding_side="left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    ids, mask = pad_batch([[5, 6, 7], [8]], pad_value=0, padding_side="right")
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_action_logprobs_match_a_plain_forward(tiny):
    model, tokenizer = tiny
    scores = action_logprobs(model, tokenizer, PROMPTS, ACTIONS, batch_size=2)
    for i, (prompt, action) in enumerate(zip(PROMPTS, ACTIONS, strict=True)):
        ids, mask = encode_prompt_action(tokenizer, prompt, action)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]  # (T, V)
        logp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
        expected = (logp * torch.tensor(mask[1:])).sum()
        assert torch.allclose(scores.sum[i], expected, atol=1e-4), (i, scores.sum[i], expected)
        assert scores.count[i] == sum(mask)
    assert torch.allclose(scores.mean, scores.sum / scores.count)
    assert torch.allclose(scores.geo_mean_prob, scores.mean.exp())
    assert bool((scores.geo_mean_prob > 0).all() and (scores.geo_mean_prob < 1).all())


def test_action_logprobs_batch_neighbours_in_length_and_keep_the_given_order(tiny):
    model, tokenizer = tiny
    widths: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    prompts = ["Home", PROMPTS[0], "Go", PROMPTS[1]]  # long and short alternate
    actions = [ACTIONS[1]] * 4
    try:
        batched = action_logprobs(model, tokenizer, prompts, actions, batch_size=2).sum
    finally:
        hook.remove()
    alone = torch.cat([action_logprobs(model, tokenizer, [p], [a]).sum for p, a in zip(prompts, actions, strict=True)])
    assert torch.allclose(batched, alone, atol=1e-5)
    lengths = sorted(len(encode_prompt_action(tokenizer, p, a)[0]) for p, a in zip(prompts, actions, strict=True))
    assert widths == [lengths[1], lengths[3]]  # the two short ones together, then the two long ones


def test_padding_side_and_batching_do_not_change_logprobs(tiny):
    model, tokenizer = tiny
    examples = [(p, a, 0.0) for p, a in zip(PROMPTS, ACTIONS, strict=True)]
    results = {}
    for side in ("left", "right"):
        batch = collate_actions(tokenizer, examples, padding_side=side)
        with torch.no_grad():
            lp = action_token_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["action_mask"])
        results[side] = lp.sum(-1)
    alone = action_logprobs(model, tokenizer, PROMPTS, ACTIONS, batch_size=1).sum
    assert torch.allclose(results["left"], results["right"], atol=1e-5)
    assert torch.allclose(results["left"], alone, atol=1e-5)


def test_logprobs_are_differentiable(tiny):
    model, tokenizer = tiny
    batch = collate_actions(tokenizer, [(PROMPTS[0], ACTIONS[0], 1.0)])
    lp = action_token_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["action_mask"])
    lp.sum().backward()
    assert model.model.embed_tokens.weight.grad is not None
    assert model.model.embed_tokens.weight.grad.abs().sum() > 0


# vLLM spawns worker processes, which needs a `__main__` guard, so it runs in a script of its own.
_VLLM_SCRIPT = """
import json, sys
from vllm import LLM, SamplingParams

if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=256, enforce_eager=True, seed=0,
              gpu_memory_utilization=0.1, kv_cache_memory_bytes=128 * 2**20)
    params = SamplingParams(temperature=0.0, max_tokens=6, logprobs=0)
    out = llm.generate([sys.argv[2]], params)[0]
    sample = out.outputs[0]
    logprobs = [entry[tok].logprob for tok, entry in zip(sample.token_ids, sample.logprobs)]
    print("RESULT " + json.dumps({"prompt_ids": list(out.prompt_token_ids), "ids": list(sample.token_ids),
                                  "logprobs": logprobs}))
"""


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_loads_the_tiny_dir_and_agrees_with_transformers(tiny_dir, tmp_path):
    script = tmp_path / "run_vllm.py"
    script.write_text(_VLLM_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(tiny_dir), PROMPTS[1]], capture_output=True, text=True, timeout=600
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)
    assert result["prompt_ids"] == tokenizer(PROMPTS[1]).input_ids  # vLLM adds BOS like training does
    ids = torch.tensor([result["prompt_ids"] + result["ids"]])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1], -1)  # (T-1, V)
    n_prompt = len(result["prompt_ids"])
    generated = logp[n_prompt - 1 :]  # (n_new, V)
    assert generated.argmax(-1).tolist() == result["ids"]
    hf_logprobs = generated.gather(-1, torch.tensor(result["ids"]).unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(hf_logprobs, torch.tensor(result["logprobs"]), atol=1e-3)


@pytest.mark.slow
def test_convert_smollm2_writes_a_loadable_dir_once(tmp_path):
    out = convert_smollm2(tmp_path / "smollm2")
    model, tokenizer = load_model_and_tokenizer(out)
    assert model.config.num_hidden_layers == 30 and tokenizer.pad_token is not None
    assert not hasattr(model.config, "quantization_config")
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert convert_smollm2(tmp_path / "smollm2") == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp  # cached: not rewritten
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    answers = ["The capital of France is Paris.", "The capital of France is Berlin."]
    scores = action_logprobs(model, tokenizer, [prompt, prompt], answers)
    # A pretrained model, not random weights: confident in the right answer, and far less in the wrong one.
    assert scores.geo_mean_prob[0] > 0.5
    assert scores.sum[0] > scores.sum[1] + 5.0
