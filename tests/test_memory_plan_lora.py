"""Under LoRA the memory plan counts the adapters' gradients and moments, not every weight's, and no pi_ref copy.

The plan counted full gradients, AdamW moments and a frozen pi_ref for every parameter whatever `actor.lora` and
`critic.lora` said, so a LoRA layout looked as costly as full fine-tuning. The hand-sized model is
`test_memory_plan.HAND` (one layer 592 = q 64 + k 32 + v 32 + o 64 + MLP 384 + norms 16; root 1608 = embeddings
800 + norm 8 + LM head 800; 2792 in all; the critic's value heads 324). LoRA r=4 on q_proj (in 8, out 8) and
v_proj (in 8, out 4): 4 x (8 + 8) + 4 x (8 + 4) = 64 + 48 = 112 adapter parameters a layer, 224 in both.
"""

from __future__ import annotations

from test_memory_plan import HAND, _bench, hand_plan

from webrl.config import load_config
from webrl.loop_config import WebRLConfig
from webrl.memory_plan import RUNTIME_RESERVE, AdapterCounts, count_adapters
from webrl.modules.settings import LoraSettings

QV = LoraSettings(r=4, target_modules=["q_proj", "v_proj"])


def lora_plan(**changes):
    adapters = count_adapters(HAND, QV)
    return hand_plan(actor_adapters=adapters, critic_adapters=adapters, **changes)


def test_the_adapters_are_counted_on_the_meta_model_as_by_hand():
    assert count_adapters(HAND, QV) == AdapterCounts(layer_params=112, root_params=0, head_params=0)
    assert count_adapters(HAND, None) is None  # LoRA off: every weight trains, as before
    # An adapted LM head (in 8, out 100): 4 x (8 + 100) = 432, outside the layers.
    head = count_adapters(HAND, LoraSettings(r=4, target_modules=["q_proj", "v_proj", "lm_head"]))
    assert head == AdapterCounts(layer_params=112, root_params=432, head_params=432)


def test_the_actor_stage_under_lora_trains_only_the_adapters_and_holds_no_reference():
    # fsdp over 2 ranks, bf16-mixed (fp32 master), 2 sequences of 10 tokens, 3 action positions, as in HAND's test.
    # Stored: 2792 + 224 = 3016, x 4 / 2 = 6032. Trained: 224, x 4 / 2 = 448 of gradients, twice that of moments.
    # No pi_ref: the reference is the network with its adapters off. Gathered: root 1608 + one adapted layer
    # 592 + 112 = 704, plus the unsharded gradients of that layer's adapters 112: (1608 + 704 + 112) x 4 = 9696.
    # Weight casts: both adapted layers and the head, 2 x (2 x 704 + 800) = 4416. Activations (17920), backward
    # buffers (2560) and logits (6000) as without LoRA; the step's temporary (448) adds nothing.
    assert lora_plan().stage("actor") == {
        "parameters": 6032,
        "gradients": 448,
        "optimizer": 896,
        "reference": 0,
        "gathered_units": 9696,
        "weight_casts": 4416,
        "activations": 17920,
        "backward_buffers": 2560,
        "logits": 6000,
        "optimizer_step": 0,
        "runtime_reserve": RUNTIME_RESERVE,
        "vllm": 0,
    }


def test_the_critic_stage_under_lora_also_trains_its_value_heads():
    # Stored: 2792 - 800 (no LM head) + 324 + 224 = 2540, x 4 / 2 = 5080. Trained: adapters 224 + value heads 324
    # = 548, x 4 / 2 = 1096 of gradients, 2192 of moments. Gathered: root 1608 - 800 + 324 = 1132 and a layer
    # of 704, plus unsharded gradients of heads and one layer's adapters 324 + 112: (1132 + 704 + 436) x 4 = 9088.
    # Casts: 2 x 2 x 704 = 2816 (no head). One sequence of 10 tokens: activations 10 x 448 x 2 = 8960, buffers
    # 10 x 16 x 8 = 1280.
    assert lora_plan().stage("critic") == {
        "parameters": 5080,
        "gradients": 1096,
        "optimizer": 2192,
        "reference": 0,
        "gathered_units": 9088,
        "weight_casts": 2816,
        "activations": 8960,
        "backward_buffers": 1280,
        "logits": 0,
        "optimizer_step": 0,
        "runtime_reserve": RUNTIME_RESERVE,
        "vllm": 0,
    }


def test_one_rank_gathers_no_gradients_and_ddp_keeps_whole_copies():
    # fsdp on 1 rank: the root and an adapted layer in fp32, (1608 + 704) x 4 = 9248, no unsharded gradients.
    assert lora_plan(ranks=1).stage("actor")["gathered_units"] == 9248
    # ddp: whole on each rank, 3016 x 4 = 12064 stored and 224 x 4 = 896 of gradients.
    whole = lora_plan(strategy="ddp").stage("actor")
    assert (whole["parameters"], whole["gradients"], whole["gathered_units"]) == (12064, 896, 0)


def test_an_adapted_lm_head_trains_in_the_actor_and_is_dropped_with_the_critics_head():
    adapters = count_adapters(HAND, LoraSettings(r=4, target_modules=["q_proj", "v_proj", "lm_head"]))
    plan = hand_plan(actor_adapters=adapters, critic_adapters=adapters)
    # actor: 224 + 432 = 656 trained, x 4 / 2 = 1312; its head cast 2 x (800 + 432) beside 2 x 2 x 704.
    actor = plan.stage("actor")
    assert (actor["gradients"], actor["weight_casts"]) == (1312, 2 * (2 * 704 + 800 + 432))
    assert plan.stage("critic") == lora_plan().stage("critic")


def test_the_bench_takes_each_stages_lora_from_the_config():
    stand_ins = ["model.base=tiny", "env.suite=embedded"]  # as bench/memory_plan.py with --model
    lora = ["actor.lora.enabled=true", "critic.lora.enabled=true", "critic.lora.r=8"]

    def plan(*overrides):
        config = load_config(WebRLConfig, ["--config", "webrl_llama8b_webarena", *stand_ins, *overrides])
        return _bench().plan_for(config, "meta-llama/Llama-3.1-8B", 80.0)

    adapted, full = plan(*lora), plan()
    # r x (in + out) a layer on q (4096 -> 4096), k and v (4096 -> 1024), o (4096 -> 4096): r x 26624.
    assert adapted.actor_adapters == AdapterCounts(layer_params=16 * 26624, root_params=0, head_params=0)
    assert adapted.critic_adapters == AdapterCounts(layer_params=8 * 26624, root_params=0, head_params=0)
    assert full.actor_adapters is None and full.critic_adapters is None
    # The actor sheds its full gradients, moments and pi_ref (4 x 3.74 GiB) and the gathered units' unsharded
    # gradients (4.7 GiB): 45.1 GiB down to 25.4.
    assert adapted.report()["peaks"]["actor"] < full.report()["peaks"]["actor"] - 19 * 2**30
