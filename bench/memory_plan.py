"""Per-GPU memory of a WebRL config's training stages and colocated vLLM, without a GPU (`webrl.memory_plan`).

The model is built on the meta device from its config (a local model dir, the local Hugging Face
cache, or the published shape of Llama-3.1-8B / SmolLM2-135M: nothing is downloaded); the sharding,
precision, activation checkpointing, micro-batches, sequence length, vLLM budget and the LoRA adapters
(`actor.lora`, `critic.lora`, where enabled) come from the recipe config. Prints a GiB table per rank
and the same as JSON; exits 1 when a peak does not fit.

    python bench/memory_plan.py --config webrl_llama8b_webarena --model meta-llama/Llama-3.1-8B
    python bench/memory_plan.py --config webrl_llama8b_webarena --model meta-llama/Llama-3.1-8B fabric.num_nodes=2
    python bench/memory_plan.py --config webrl_llama8b_webarena --model meta-llama/Llama-3.1-8B \
        actor.lora.enabled=true critic.lora.enabled=true
    python bench/memory_plan.py --config webrl_smollm2 --model smollm2 fabric.accelerator=cuda fabric.strategy=fsdp
    python bench/memory_plan.py                                # the tiny default, as configured (CPU, one process)

`--model` defaults to the config's `model.base` (`tiny`, `smollm2` or a model dir); the 8B config
takes its base model from the command line, so name it here. `--device-gib` is the memory of one
device (80 for an H100 or A100 80GB).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from webrl.config import ConfigError, load_config
from webrl.loop_config import WebRLConfig
from webrl.memory_plan import GIB, MemoryPlan, count_adapters, count_on_meta, model_config

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "recipes" / "configs" / "webrl_tiny.yaml"


def plan_for(config: WebRLConfig, model: str, device_gib: float) -> MemoryPlan:
    """The memory plan of `config`'s layout with `model`'s shape on devices of `device_gib` GiB."""
    shape = model_config(model, tiny=config.model)
    counts = count_on_meta(shape)
    fabric = config.fabric
    on_gpu = fabric.accelerator in ("cuda", "gpu") and config.rollout.engine == "vllm"
    return MemoryPlan(
        counts=counts,
        strategy=fabric.strategy,
        ranks=fabric.devices * fabric.num_nodes,
        precision=fabric.precision,
        actor_batch=config.actor.train.batch_size,
        critic_batch=config.critic.train.batch_size,
        seq_len=config.model.max_length,
        action_tokens=config.rollout.max_tokens + 1,
        activation_checkpointing=fabric.activation_checkpointing,
        device_bytes=int(device_gib * GIB),
        vllm_utilization=config.engines.gpu_memory_utilization if on_gpu else 0.0,
        vllm_sleeps=config.engines.sleep,
        # As the stages build their modules (`phase_training`): the adapters only where a section enables them.
        actor_adapters=count_adapters(shape, config.actor.lora.active()),
        critic_adapters=count_adapters(shape, config.critic.lora.active()),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="tiny, smollm2, a published name or a model dir")
    parser.add_argument("--device-gib", type=float, default=80.0, help="memory of one device, GiB")
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON report here")
    known, overrides = parser.parse_known_args(argv)
    try:
        # The plan reads neither the base model's weights nor the tasks: with --model, a config that requires them
        # (the 8B one marks model.base and env.suite `???`) gets stand-ins, which the command line can still set.
        stand_ins = ["model.base=tiny", "env.suite=embedded"] if known.model else []
        config = load_config(WebRLConfig, [*stand_ins, *overrides], default_file=DEFAULT_CONFIG)
    except (ConfigError, ValueError) as err:
        raise SystemExit(f"config error: {err}") from None
    model = known.model or config.model.base
    plan = plan_for(config, model, known.device_gib)
    report = plan.report() | {"model_name": model}
    fabric = config.fabric
    print(
        f"{model}: {plan.counts.params:,} parameters; {fabric.strategy} over {plan.ranks} ranks "
        f"({fabric.num_nodes} node(s) x {fabric.devices}), {fabric.precision}, "
        f"activation checkpointing {'on' if fabric.activation_checkpointing else 'off'}, "
        f"sequence {plan.seq_len}, vLLM {plan.vllm_utilization:g} of the GPU (sleeps: {plan.vllm_sleeps})"
    )
    for stage, adapters in (("actor", plan.actor_adapters), ("critic", plan.critic_adapters)):
        if adapters is not None:
            lora = getattr(config, stage).lora
            trained = plan.weights(stage).trained
            print(f"{stage} LoRA r={lora.r} on {', '.join(lora.target_modules)}: {trained:,} trained parameters")
    print(plan.table())
    print(json.dumps(report, indent=1))
    if known.json:
        known.json.write_text(json.dumps(report, indent=1))
    return 0 if report["fits"] else 1


if __name__ == "__main__":
    sys.exit(main())
