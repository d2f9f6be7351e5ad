"""Weight sync without vLLM: HFEngine via a saved directory and in memory, LoRA folded into base weights
exactly like peft's merge, a full state dict gathered from an FSDP2-sharded model on two gloo ranks, the phase
loop's choice between disk and memory (and its refusal of an engine that cannot reload), and its in-memory sync
under real Fabric on two ranks that both hold an engine."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

from tests.single_process import SingleProcess
from webrl.config import load_config
from webrl.inference.engine import Completion, ReloadableEngine, SamplingParams
from webrl.inference.hf import HFEngine
from webrl.inference.weight_sync import full_state_dict
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.modules.lm import apply_lora, load_model_and_tokenizer
from webrl.modules.settings import LoraSettings

GREEDY = SamplingParams(temperature=0, max_tokens=10)
WORKER = Path(__file__).with_name("fsdp_worker.py")
FABRIC_WORKER = Path(__file__).with_name("fabric_sync_worker.py")


def _train_a_little(model, tokenizer, steps: int = 2) -> None:
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-2)
    batch = tokenizer(['exit(message="The mug costs 12 dollars")'], return_tensors="pt")
    for _ in range(steps):
        model(**batch, labels=batch["input_ids"]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def test_hf_engine_decodes_like_the_trained_model_after_a_reload(
    tiny_model_dir, prompts, greedy_reference, reload_from_disk
) -> None:
    engine = HFEngine(tiny_model_dir)
    assert isinstance(engine, ReloadableEngine)
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    _train_a_little(model, tokenizer)
    expected = [greedy_reference(model, tokenizer, p, 10)[0] for p in prompts]
    assert [c.token_ids for c in engine.generate(prompts, GREEDY)] != expected
    target = reload_from_disk(engine, model, tokenizer)
    assert engine.model_path == target
    assert [c.token_ids for c in engine.generate(prompts, GREEDY)] == expected


def test_hf_engine_decodes_like_the_trained_model_after_an_in_memory_load(
    tiny_model_dir, prompts, greedy_reference
) -> None:
    engine = HFEngine(tiny_model_dir)
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    _train_a_little(model, tokenizer)
    engine.load_state_dict(full_state_dict(model))
    assert [c.token_ids for c in engine.generate(prompts, GREEDY)] == [
        greedy_reference(model, tokenizer, p, 10)[0] for p in prompts
    ]


def test_hf_engine_takes_the_weights_of_a_saved_tied_actor_as_the_vllm_engine_does(
    tiny_model_dir, prompts, greedy_reference, tmp_path
) -> None:
    # save_pretrained keeps a tied LM head under the embedding's name only: the file has no lm_head.weight.
    engine = HFEngine(tiny_model_dir)
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    assert model.config.tie_word_embeddings
    _train_a_little(model, tokenizer)
    model.save_pretrained(tmp_path / "actor")
    saved = load_file(tmp_path / "actor" / "model.safetensors")
    assert "lm_head.weight" not in saved
    engine.push_weights(saved.items(), model_path=tmp_path / "actor")
    assert engine.model_path == tmp_path / "actor"
    assert [c.token_ids for c in engine.generate(prompts, GREEDY)] == [
        greedy_reference(model, tokenizer, p, 10)[0] for p in prompts
    ]


def test_lora_is_merged_like_peft_and_named_like_the_base_model(tiny_model_dir) -> None:
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    base_names = set(model.state_dict())
    q_before = model.state_dict()["model.layers.0.self_attn.q_proj.weight"].clone()
    peft_model = apply_lora(model, LoraSettings(r=4, alpha=8))
    _train_a_little(peft_model, tokenizer)  # moves lora_B off zero, so the merge is not a no-op
    merged = full_state_dict(peft_model)
    expected = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    assert set(merged) == base_names == set(expected)
    for name in base_names:
        torch.testing.assert_close(merged[name], expected[name], rtol=0, atol=1e-6)
    assert not torch.allclose(merged["model.layers.0.self_attn.q_proj.weight"], q_before, atol=1e-4)


def test_a_lora_actor_synced_into_an_engine_decodes_like_the_adapted_model(tiny_model_dir, prompts) -> None:
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    peft_model = apply_lora(model, LoraSettings(r=4, alpha=8))
    _train_a_little(peft_model, tokenizer)
    engine = HFEngine(tiny_model_dir)
    engine.load_state_dict(full_state_dict(peft_model))
    ids = tokenizer(prompts[1], return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(engine.model(ids).logits, peft_model(input_ids=ids).logits, rtol=0, atol=1e-4)


@pytest.mark.parametrize("targets", [["embed_tokens"], ["q_proj", "embed_tokens"]])
def test_an_adapted_embedding_reaches_the_engine_and_its_tied_lm_head(tiny_model_dir, prompts, targets) -> None:
    """LoRA on the (tied) input embedding: the synced weights are peft's merge, embedding and LM head alike, and the
    engine computes the merged model's logits. The embedding's factors (`lora_embedding_A/B`) were left out, so the
    engine served the base embedding (or, with no other layer adapted, got peft's names and refused them)."""
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    assert model.config.tie_word_embeddings
    embedding_before = model.state_dict()["model.embed_tokens.weight"].clone()
    peft_model = apply_lora(model, LoraSettings(r=4, alpha=8, target_modules=targets))
    _train_a_little(peft_model, tokenizer)
    merged = full_state_dict(peft_model)
    merged_model = copy.deepcopy(peft_model).merge_and_unload()
    expected = merged_model.state_dict()
    assert set(merged) == set(expected)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        torch.testing.assert_close(merged[name], expected[name], rtol=0, atol=1e-6)
    assert not torch.allclose(merged["model.embed_tokens.weight"], embedding_before, atol=1e-4)
    engine = HFEngine(tiny_model_dir)
    engine.push_weights(merged.items())
    ids = tokenizer(prompts[1], return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(engine.model(ids).logits, merged_model(input_ids=ids).logits, rtol=0, atol=1e-4)


class _Server:
    """TEST DOUBLE of an engine that serves fixed weights (an OpenAI-compatible server): no reload."""

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        return []

    def close(self) -> None:
        return None


class _LocalModel(_Server):
    """TEST DOUBLE of a reloadable engine: records each directory it is asked to load and each push."""

    def __init__(self, model_path: Path) -> None:
        self.model_path = model_path
        self.tokenizer = None
        self.reloads: list[Path] = []
        self.pushes: list[tuple[Path, list[str]]] = []

    def reload(self, model_path: str | Path) -> None:
        self.model_path = Path(model_path)
        self.reloads.append(self.model_path)

    def push_weights(self, named_tensors, model_path: str | Path | None = None) -> None:
        self.model_path = Path(model_path)
        self.pushes.append((self.model_path, [name for name, _ in named_tensors]))


def _phase_loop(tmp_path: Path, engine, *overrides: str) -> PhaseLoop:
    config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", *overrides])
    return PhaseLoop(config, SingleProcess(), None, engine, sft_dir=tmp_path / "sft", orm_dir=None, demonstrations=[])


def test_the_loop_reloads_the_engine_only_when_the_actor_changed(tmp_path) -> None:
    engine = _LocalModel(tmp_path / "sft")
    loop = _phase_loop(tmp_path, engine)
    loop.engine_link.serve(tmp_path / "sft")
    loop.engine_link.serve(tmp_path / "phase_001" / "actor")
    assert engine.reloads == [tmp_path / "phase_001" / "actor"]


@pytest.mark.parametrize(("weight_sync", "in_memory"), [("auto", False), ("disk", False), ("memory", True)])
def test_the_loop_pushes_a_trained_actor_in_memory_only_when_told_and_only_once(
    tmp_path, weight_sync, in_memory
) -> None:
    # On CPU with the hf engine `auto` means disk; the push happens at the first sync after training, and a
    # process that did not train the actor (a resumed one) reloads its directory.
    engine = _LocalModel(tmp_path / "sft")
    loop = _phase_loop(tmp_path, engine, f"engines.weight_sync={weight_sync}")
    actor = tmp_path / "run" / "phase_001" / "actor"
    loop.engine_link.keep_for_sync(actor, {"w": torch.ones(2), "b": torch.zeros(1)})
    loop.engine_link.serve(actor)
    loop.engine_link.serve(actor)
    assert engine.model_path == actor
    assert engine.pushes == ([(actor, ["w", "b"])] if in_memory else [])
    assert engine.reloads == ([] if in_memory else [actor])
    resumed = _phase_loop(tmp_path, _LocalModel(tmp_path / "sft"), f"engines.weight_sync={weight_sync}")
    resumed.engine_link.serve(actor)
    assert (resumed.engine.reloads, resumed.engine.pushes) == ([actor], [])


def test_one_process_serves_the_same_weights_after_a_push_as_after_a_reload_of_the_saved_actor(
    tiny_model_dir, prompts, tmp_path
) -> None:
    # The tiny model ties its embeddings: saving must leave the weights to push whole (save_pretrained drops a tied
    # weight's second name from the dict it is given), or the hf engine's strict load refuses them.
    from webrl.training import save_model_dir

    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    _train_a_little(model, tokenizer)
    state = full_state_dict(model)
    names = set(state)
    assert "lm_head.weight" in names
    loop = _phase_loop(tmp_path, HFEngine(tiny_model_dir), "engines.weight_sync=memory")
    one_process = SimpleNamespace(is_global_zero=True, barrier=lambda: None)
    actor = save_model_dir(one_process, model, tokenizer, loop.layout.actor_dir(1), {}, state=state)
    assert set(state) == names
    loop.engine_link.keep_for_sync(actor, state)
    loop.engine_link.serve(actor)
    assert loop.engine.model_path == actor
    pushed = {name: tensor.clone() for name, tensor in loop.engine.model.state_dict().items()}
    reloaded = HFEngine(actor)
    assert pushed.keys() == reloaded.model.state_dict().keys() == names
    assert all(torch.equal(pushed[name], reloaded.model.state_dict()[name]) for name in names)
    assert all(torch.equal(pushed[name], state[name]) for name in names)
    assert [c.token_ids for c in loop.engine.generate(prompts, GREEDY)] == [
        c.token_ids for c in reloaded.generate(prompts, GREEDY)
    ]


def test_the_loop_names_the_engine_setting_when_the_engine_cannot_reload(tmp_path) -> None:
    assert not isinstance(_Server(), ReloadableEngine)
    loop = _phase_loop(tmp_path, _Server(), "rollout.engine=openai", "rollout.openai_url=http://127.0.0.1:8000/v1")
    with pytest.raises(ValueError, match="rollout.engine=openai cannot load new actor weights: use hf or vllm"):
        loop.engine_link.serve(tmp_path / "sft")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_fsdp2_sharded_model_is_gathered_and_synced(tiny_model_dir, tmp_path) -> None:
    subprocess.run(
        [sys.executable, str(WORKER), str(tiny_model_dir), str(tmp_path), str(_free_port())],
        check=True,
        timeout=600,
    )
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["missing"] == [] and result["extra"] == []
    assert result["rank1_len"] == 0
    assert result["max_logit_diff"] < 1e-4, "gathered weights do not reproduce the sharded model"
    assert result["changed"], "training did not change the greedy output"
    assert result["synced"], "the engine does not decode like the gathered model after sync"


def test_two_ranks_with_an_engine_each_serve_rank_zeros_trained_weights_after_an_in_memory_sync(
    tiny_model_dir, tmp_path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(FABRIC_WORKER.parents[2]), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(FABRIC_WORKER), str(tiny_model_dir), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    trained = torch.load(tmp_path / "trained.pt", weights_only=True)
    start = load_model_and_tokenizer(tiny_model_dir)[0].state_dict()
    assert trained.keys() == start.keys()
    assert any(not torch.equal(trained[name], start[name]) for name in start), "training changed no weight"
    for rank in (0, 1):
        served = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert served["model_path"] == str(tmp_path / "run" / "phase_001" / "actor")
        assert served["served"].keys() == trained.keys()
        unequal = [name for name in trained if not torch.equal(served["served"][name], trained[name])]
        assert unequal == [], f"rank {rank}'s engine differs from the trained weights in {unequal}"


def _randomised_peft_model(tiny_model_dir, **lora_options):
    """A peft model whose every trainable tensor is moved off its initial value, so that no merge is a no-op."""
    model, _ = load_model_and_tokenizer(tiny_model_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, **lora_options))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in peft_model.parameters():
            if param.requires_grad:
                param.add_(0.1 * torch.randn(param.shape, generator=generator))
    return peft_model


@pytest.mark.parametrize(
    "options",
    [{"use_dora": True}, {"modules_to_save": ["norm"]}, {"use_dora": True, "modules_to_save": ["norm"]}],
    ids=["dora", "modules_to_save", "both"],
)
def test_dora_and_modules_to_save_are_merged_like_peft(tiny_model_dir, prompts, options) -> None:
    """DoRA rescales each row of W + s·B A to a learnt magnitude, and a `modules_to_save` layer replaces its original:
    before, DoRA's magnitudes were dropped (the plain LoRA sum served instead) and the trained norm kept peft's
    `modules_to_save.default` name, which no engine loads."""
    peft_model = _randomised_peft_model(tiny_model_dir, target_modules=["q_proj", "v_proj"], **options)
    merged = full_state_dict(peft_model)
    merged_model = copy.deepcopy(peft_model).merge_and_unload()
    expected = merged_model.state_dict()
    assert set(merged) == set(expected)
    for name in expected:
        torch.testing.assert_close(merged[name], expected[name], rtol=0, atol=1e-5)
    engine = HFEngine(tiny_model_dir)
    engine.push_weights(merged.items())
    ids = engine.tokenizer(prompts[1], return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(engine.model(ids).logits, peft_model(input_ids=ids).logits, rtol=0, atol=1e-4)


def test_an_adapter_kind_the_merge_does_not_know_is_refused_by_name(tiny_model_dir) -> None:
    peft_model = _randomised_peft_model(tiny_model_dir, target_modules=["q_proj"], trainable_token_indices=[1, 2])
    with pytest.raises(ValueError, match=r"model\.embed_tokens\.token_adapter.*trainable tokens are not merged"):
        full_state_dict(peft_model)


def test_a_layer_stored_transposed_gets_its_delta_transposed() -> None:
    """GPT-2's Conv1D layers keep their weight as (in, out) (`fan_in_fan_out`): the merge failed on a shape mismatch,
    and for a square layer would have added the delta transposed."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=50, n_positions=32))
    peft_model = get_peft_model(
        model, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"], fan_in_fan_out=True)
    )
    with torch.no_grad():
        for param in peft_model.parameters():
            if param.requires_grad:
                param.add_(0.1 * torch.randn_like(param))
    merged = full_state_dict(peft_model)
    expected = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    assert set(merged) == set(expected)
    for name in expected:
        torch.testing.assert_close(merged[name], expected[name], rtol=0, atol=1e-6)
