"""The memory plan against a real GPU: measured peak memory and tokens/s of the actor and critic steps.

`webrl.memory_plan` predicts each rank's bytes from a model's shape; this script trains the same
shapes on one CUDA device and compares. Each case runs in a fresh process: the project's
`ActorModule` or `CriticModule` on a randomly initialised model of the published shape (SmolLM2-135M,
or Llama-3.1-8B cut to a few decoder layers so that one GPU holds it; the plan scales per layer), set
up by `webrl.training.setup_for_training` under Fabric's `model_parallel` strategy (FSDP2) in
bf16-mixed, stepping AdamW on left-padded random batches. Measured: `torch.cuda.max_memory_allocated`
over the steps (the first step creates the optimizer's moments) and tokens/s from the median step
after warm-up. Predicted: the plan's stage total less its runtime reserve (CUDA context, NCCL buffers
and fragmentation, which the allocator's count does not include) and less vLLM (not running here).

    python bench/gpu_memory_check.py                     # every case; JSON in bench/results/
    python bench/gpu_memory_check.py --cases smollm2-actor-ckpt
    python bench/gpu_memory_check.py --cases smollm2-actor --snapshot-dir snapshots   # for pytorch.org/memory_viz
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "gpu_memory_check.json"
ACTION_TOKENS = 64
PRECISION = "bf16-mixed"
CASES: dict[str, dict] = {
    "smollm2-actor": {"model": "smollm2", "stage": "actor", "batch": 4, "seq_len": 2048, "checkpointing": False},
    "smollm2-actor-ckpt": {"model": "smollm2", "stage": "actor", "batch": 4, "seq_len": 2048, "checkpointing": True},
    "smollm2-critic": {"model": "smollm2", "stage": "critic", "batch": 4, "seq_len": 2048, "checkpointing": False},
    "llama8b-2layers-actor": {
        "model": "meta-llama/Llama-3.1-8B",
        "layers": 2,
        "stage": "actor",
        "batch": 1,
        "seq_len": 8192,
        "checkpointing": False,
    },
    "llama8b-4layers-actor-ckpt": {
        "model": "meta-llama/Llama-3.1-8B",
        "layers": 4,
        "stage": "actor",
        "batch": 1,
        "seq_len": 16384,
        "checkpointing": True,
    },
}
STEPS, WARMUP = 4, 1


def model_shape(case: dict):
    from webrl.memory_plan import model_config

    config = model_config(case["model"])
    if "layers" in case:
        config.num_hidden_layers = case["layers"]
    return config


def batches(case: dict, vocab: int, count: int) -> list[dict[str, torch.Tensor]]:
    """Left-padded random batches, 90–100 % full, the last ACTION_TOKENS positions the action (seeded)."""
    generator = torch.Generator().manual_seed(0)
    size, length = case["batch"], case["seq_len"]
    out = []
    for _ in range(count):
        lengths = torch.randint(int(0.9 * length), length + 1, (size,), generator=generator)  # (B,)
        positions = torch.arange(length).expand(size, length)  # (B, T)
        mask = (positions >= length - lengths.unsqueeze(1)).long()  # (B, T)
        ids = torch.randint(1, vocab, (size, length), generator=generator).masked_fill(mask == 0, 0)  # (B, T)
        batch = {"input_ids": ids, "attention_mask": mask}
        if case["stage"] == "actor":
            batch["action_mask"] = (positions >= length - ACTION_TOKENS).long()
            batch["advantage"] = torch.where(torch.rand(size, generator=generator) < 0.5, 1.0, -1.0)
        else:
            batch["outcome"] = (torch.rand(size, generator=generator) < 0.5).float()
        out.append(batch)
    return out


def predicted_bytes(case: dict, config) -> dict[str, int]:
    from webrl.memory_plan import MemoryPlan, count_on_meta

    plan = MemoryPlan(
        counts=count_on_meta(config),
        strategy="model_parallel",
        ranks=1,
        precision=PRECISION,
        actor_batch=case["batch"],
        critic_batch=case["batch"],
        seq_len=case["seq_len"],
        action_tokens=ACTION_TOKENS,
        activation_checkpointing=case["checkpointing"],
        device_bytes=torch.cuda.get_device_properties(0).total_memory,
    )
    rows = plan.stage(case["stage"])
    rows.pop("runtime_reserve")
    rows.pop("vllm")
    return rows


def worker(name: str, snapshot_dir: Path | None) -> dict:
    """One case in this process: the plan's figure, then the measured one."""
    from transformers import AutoModelForCausalLM

    from webrl.distributed import build_fabric
    from webrl.fabric_config import FabricConfig
    from webrl.modules.actor import ActorModule
    from webrl.modules.critic import CriticModule
    from webrl.training import setup_for_training

    case = CASES[name]
    config = model_shape(case)
    fabric = build_fabric(FabricConfig(accelerator="cuda", devices=1, strategy="model_parallel", precision=PRECISION))
    fabric.launch()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config)
    tokenizer = SimpleNamespace(pad_token_id=0)  # the batches are token ids already; nothing is encoded
    module_class = ActorModule if case["stage"] == "actor" else CriticModule
    module = module_class(model, tokenizer, lr=1e-6)
    module, optimizer = setup_for_training(fabric, module, activation_checkpointing=case["checkpointing"])
    times, tokens, parts = [], [], {}
    for index, batch in enumerate(batches(case, config.vocab_size, WARMUP + STEPS)):
        batch = {key: value.to(fabric.device) for key, value in batch.items()}
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated()  # weights, reference, optimizer moments (after the first step)
        if index == WARMUP and snapshot_dir:
            torch.cuda.memory._record_memory_history(max_entries=200_000)
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        with fabric.autocast():  # as `webrl.training.train_micro_batch` does: FSDP2 has no wrapper forward to enter it
            loss, _ = module.compute_loss(batch)
        fabric.backward(loss)
        torch.cuda.synchronize()
        backward_peak, after_backward = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        optimizer.step()
        optimizer.zero_grad()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
        tokens.append(int(batch["attention_mask"].sum()))
        if index == WARMUP and snapshot_dir:
            snapshot_dir.mkdir(parents=True, exist_ok=True)
            torch.cuda.memory._dump_snapshot(str(snapshot_dir / f"{name}.pickle"))
            torch.cuda.memory._record_memory_history(enabled=None)
        if index == WARMUP:  # a step with the moments in place: the split of the steady state
            parts = {
                "held_gib": held / 2**30,
                "forward_backward_gib": (backward_peak - held) / 2**30,
                "gradients_gib": (after_backward - held) / 2**30,
                "optimizer_step_gib": (torch.cuda.max_memory_allocated() - after_backward) / 2**30,
                "peak_gib": max(backward_peak, torch.cuda.max_memory_allocated()) / 2**30,
            }
    rows = predicted_bytes(case, config)
    measured, predicted = parts["peak_gib"] * 2**30, sum(rows.values())
    return {
        "case": name,
        **case,
        "trained_params": sum(p.numel() for p in module.parameters() if p.requires_grad),
        "measured_gib": measured / 2**30,
        "predicted_gib": predicted / 2**30,
        "predicted_over_measured": predicted / measured,
        "attention": model.config._attn_implementation,
        "measured_parts": parts,
        "predicted_rows_gib": {key: value / 2**30 for key, value in rows.items()},
        "tokens_per_s": statistics.mean(tokens[WARMUP:]) / statistics.median(times[WARMUP:]),
        "step_s": statistics.median(times[WARMUP:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--snapshot-dir", type=Path, default=None, help="dump each case's measured step here")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker, args.snapshot_dir)), flush=True)
        return
    if not torch.cuda.is_available():
        raise SystemExit("gpu_memory_check: no CUDA device; run it on a GPU machine")
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cases": []}
    for name in args.cases:
        command = [sys.executable, __file__, "--worker", name]
        command += ["--snapshot-dir", str(args.snapshot_dir)] if args.snapshot_dir else []
        proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "offline"})
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            print(f"{name}: failed\n{proc.stderr[-3000:]}", flush=True)
            results["cases"].append({"case": name, "error": proc.stderr[-3000:]})
            continue
        row = json.loads(lines[-1][len("RESULT ") :])
        results["cases"].append(row)
        print(
            f"{name:28s} measured {row['measured_gib']:7.2f} GiB  predicted {row['predicted_gib']:7.2f} GiB "
            f"(x{row['predicted_over_measured']:.2f})  {row['tokens_per_s']:9.0f} tok/s",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
