"""The memory plan's arithmetic against figures computed by hand, and the packaged configs' verdicts.

The hand-sized model: vocab 100, hidden 8, MLP 16, 2 layers, 2 heads of 4 (kv: 1 head, 4 wide), untied.
One layer: q 64 + k 32 + v 32 + o 64 + gate/up/down 3 x 128 + two norms 16 = 592; outside the layers:
embeddings 800 + final norm 8 + LM head 800 = 1608; in all 2 x 592 + 1608 = 2792. The critic drops the
LM head and adds two value heads h->h->h->2: 2 x (2 x (64 + 8) + 2 x 8 + 2) = 324, so it trains 2316.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from transformers import LlamaConfig

from webrl.config import load_config
from webrl.loop_config import WebRLConfig
from webrl.memory_plan import GIB, RUNTIME_RESERVE, VLLM_ASLEEP, MemoryPlan, count_on_meta, model_config

REPO = Path(__file__).resolve().parents[1]
HAND = LlamaConfig(
    vocab_size=100,
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    tie_word_embeddings=False,
)


def hand_plan(**changes) -> MemoryPlan:
    settings = {
        "counts": count_on_meta(HAND),
        "strategy": "fsdp",
        "ranks": 2,
        "precision": "bf16-mixed",
        "actor_batch": 2,
        "critic_batch": 1,
        "seq_len": 10,
        "action_tokens": 3,
        "activation_checkpointing": False,
        "device_bytes": 10 * GIB,
    }
    return MemoryPlan(**(settings | changes))


def test_the_meta_model_is_counted_as_by_hand():
    counts = count_on_meta(HAND)
    assert (counts.params, counts.layer_params, counts.root_params, counts.head_params) == (2792, 592, 1608, 800)
    assert (counts.layers, counts.hidden, counts.intermediate, counts.kv_dim, counts.vocab) == (2, 8, 16, 4, 100)


def test_the_actor_stage_under_fsdp_in_bf16_mixed():
    # fp32 master over 2 ranks: 2792 x 4 / 2 = 5584 each for parameters, gradients and pi_ref; AdamW twice that.
    # Gathered in fp32 with the unsharded gradients: 2 x (root 1608 + layer 592) x 4 = 17600. Weight casts: bf16
    # copies of both layers and the head, 2 x (2 x 592 + 800) = 3968. Activations: 10 x 8 + 2 x 4 + 4 x 16 = 152
    # elements x 2 bytes + 18 x 8 fp32 residual bytes = 448 per token and layer, x 20 tokens x 2 layers = 17920.
    # Backward buffers: 20 tokens x 16 x 8 = 2560. Logits: 2 x 3 x 100 x 10 = 6000. The step's temporary (5584)
    # is below the forward/backward's transients, so it adds nothing.
    assert hand_plan().stage("actor") == {
        "parameters": 5584,
        "gradients": 5584,
        "optimizer": 11168,
        "reference": 5584,
        "gathered_units": 17600,
        "weight_casts": 3968,
        "activations": 17920,
        "backward_buffers": 2560,
        "logits": 6000,
        "optimizer_step": 0,
        "runtime_reserve": RUNTIME_RESERVE,
        "vllm": 0,
    }


def test_checkpointing_keeps_each_layer_input_and_one_layer():
    # 2 layers x 20 tokens x 8 x 2 bytes = 640 kept, plus one layer recomputed: 20 x 448 = 8960; one layer's casts.
    stage = hand_plan(activation_checkpointing=True).stage("actor")
    assert (stage["activations"], stage["weight_casts"]) == (9600, 2 * (592 + 800))


def test_one_rank_still_holds_the_gathered_units_but_no_unsharded_gradients():
    assert hand_plan(ranks=1).stage("actor")["gathered_units"] == (1608 + 592) * 4


def test_the_optimizer_step_counts_where_its_temporary_exceeds_the_backward_transients():
    # ddp, one token, no action: temporary 2792 x 4 = 11168 against casts 3968 + activations 448 x 2 layers
    # + buffers 16 x 8: 11168 - 3968 - 896 - 128 = 6176.
    stage = hand_plan(strategy="ddp", actor_batch=1, seq_len=1, action_tokens=0).stage("actor")
    assert stage["optimizer_step"] == 6176


def test_the_critic_stage_has_value_heads_and_no_lm_head_reference_or_logits():
    critic = hand_plan().stage("critic")
    assert (critic["parameters"], critic["optimizer"], critic["reference"], critic["logits"]) == (4632, 9264, 0, 0)
    assert critic["gathered_units"] == 2 * (1608 - 800 + 324 + 592) * 4
    assert critic["weight_casts"] == 2 * 2 * 592  # no head
    assert critic["activations"] == 10 * 448 * 2  # one sequence of 10 tokens


def test_unsharded_strategies_and_true_precision():
    whole = hand_plan(strategy="ddp").stage("actor")
    assert (whole["parameters"], whole["gathered_units"]) == (2792 * 4, 0)
    assert hand_plan(precision="bf16-true").stage("actor")["optimizer"] == 2 * 2792 * 2 // 2
    true32 = hand_plan(precision="32-true").stage("actor")
    assert (true32["activations"], true32["weight_casts"]) == (152 * 4 * 20 * 2, 0)  # fp32, no autocast copies


def test_colocated_vllm_fits_only_when_it_sleeps_through_training():
    asleep = hand_plan(vllm_utilization=0.7)
    report = asleep.report()
    assert report["stages"]["actor"]["vllm"] == VLLM_ASLEEP
    assert report["peaks"]["rollout"] == int(0.7 * 10 * GIB) + RUNTIME_RESERVE
    assert report["fits"]
    awake = hand_plan(vllm_utilization=0.7, vllm_sleeps=False).report()
    assert awake["peaks"]["actor"] == sum(awake["stages"]["actor"].values()) > 10 * GIB
    assert not awake["fits"]


def test_published_shapes_give_the_published_parameter_counts():
    assert count_on_meta(model_config("meta-llama/Llama-3.1-8B")).params == 8_030_261_248
    assert count_on_meta(model_config("smollm2")).params == 134_515_008


def _bench():
    spec = importlib.util.spec_from_file_location("memory_plan_bench", REPO / "bench" / "memory_plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("overrides", "fits"),
    [
        ((), True),
        (("fabric.num_nodes=2",), True),
        (("engines.sleep=false",), False),
        (("fabric.activation_checkpointing=false",), False),
    ],
    ids=["as-configured", "two-nodes", "vllm-awake", "no-checkpointing"],
)
def test_the_8b_config_fits_8_x_80_gb_with_its_documented_settings(overrides, fits):
    stand_ins = ["model.base=tiny", "env.suite=embedded"]  # as bench/memory_plan.py with --model
    config = load_config(WebRLConfig, ["--config", "webrl_llama8b_webarena", *stand_ins, *overrides])
    plan = _bench().plan_for(config, "meta-llama/Llama-3.1-8B", 80.0)
    assert plan.ranks == 8 * config.fabric.num_nodes and plan.vllm_utilization == 0.85
    assert plan.report()["fits"] is fits
