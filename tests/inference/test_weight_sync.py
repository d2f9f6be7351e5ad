"""Weight sync without vLLM: HFEngine via disk and push, LoRA folded into base weights exactly like
peft's merge, and a full state dict gathered from an FSDP2-sharded model on two gloo ranks."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from webrl.inference.engine import SamplingParams
from webrl.inference.hf import HFEngine
from webrl.inference.weight_sync import DiskWeightSync, PushWeightSync, build_weight_sync, full_state_dict
from webrl.modules.lm import LoraSettings, apply_lora, load_model_and_tokenizer

GREEDY = SamplingParams(temperature=0, max_tokens=10)
WORKER = Path(__file__).with_name("fsdp_worker.py")


def _train_a_little(model, tokenizer, steps: int = 2) -> None:
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-2)
    batch = tokenizer(['exit(message="The mug costs 12 dollars")'], return_tensors="pt")
    for _ in range(steps):
        model(**batch, labels=batch["input_ids"]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("method", ["disk", "push"])
def test_hf_engine_decodes_like_the_trained_model_after_sync(
    method, tiny_model_dir, tmp_path, prompts, greedy_reference
) -> None:
    engine = HFEngine(tiny_model_dir)
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    _train_a_little(model, tokenizer)
    expected = [greedy_reference(model, tokenizer, p, 10)[0] for p in prompts]
    assert [c.token_ids for c in engine.generate(prompts, GREEDY)] != expected
    build_weight_sync(method, engine, directory=tmp_path, tokenizer=tokenizer).sync(model)
    assert [c.token_ids for c in engine.generate(prompts, GREEDY)] == expected


def test_disk_sync_keeps_only_the_latest_directory_and_it_is_a_complete_model(tiny_model_dir, tmp_path) -> None:
    engine = HFEngine(tiny_model_dir)
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    sync = DiskWeightSync(engine, tmp_path, tokenizer=tokenizer)
    sync.sync(model)
    _train_a_little(model, tokenizer, steps=1)
    latest = sync.sync(model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v2"]
    reloaded, _ = load_model_and_tokenizer(latest)
    for name, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name


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
    PushWeightSync(engine).sync(peft_model)
    ids = tokenizer(prompts[1], return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(engine.model(ids).logits, peft_model(input_ids=ids).logits, rtol=0, atol=1e-4)


def test_sync_errors_name_what_is_wrong(tmp_path) -> None:
    class NoReload:
        def generate(self, prompts, params):
            return []

    with pytest.raises(TypeError, match="NoReload cannot reload"):
        DiskWeightSync(NoReload(), tmp_path)
    with pytest.raises(TypeError, match="NoReload cannot take weights in memory"):
        PushWeightSync(NoReload())
    with pytest.raises(ValueError, match="unknown weight sync method 'nccl'"):
        build_weight_sync("nccl", NoReload())
    with pytest.raises(ValueError, match="needs a directory"):
        build_weight_sync("disk", NoReload())


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
    assert result["rank1_len"] == 0 and result["rank1_wrote_nothing"]
    assert result["max_logit_diff"] < 1e-4, "gathered weights do not reproduce the sharded model"
    assert result["changed"], "training did not change the greedy output"
    assert result["synced"], "the engine does not decode like the gathered model after sync"
