"""Two-process gloo worker: weight sync from an FSDP2-sharded (`fully_shard`) model into an HFEngine.

Run as `python tests/inference/fsdp_worker.py MODEL_DIR OUT_DIR`; it spawns ranks 0 and 1. Both
shard the tiny model, take two optimizer steps on the same batch, and save it with the phase loop's
`save_model_dir` (a collective); rank 0, which holds the engine, then reloads the saved directory.
Rank 0 writes `result.json`: whether the gathered state dict has every parameter of the unsharded
model, what rank 1 got, how far the sharded model's logits are from an unsharded model carrying the
gathered weights, and whether the engine's greedy output equals that model's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank: int, model_dir: str, out_dir: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from webrl.inference.engine import SamplingParams
    from webrl.inference.hf import HFEngine
    from webrl.inference.weight_sync import full_state_dict
    from webrl.training import save_model_dir

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    names = sorted(model.state_dict())
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    batch = tokenizer(['# Element: Search\ndo(action="Click", element="3")'], return_tensors="pt")
    for _ in range(2):
        model(**batch, labels=batch["input_ids"]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    engine = HFEngine(model_dir) if rank == 0 else None
    prompts = ["Task Instruction: click Home", "Round 0"]
    greedy = SamplingParams(temperature=0, max_tokens=10)
    before = [c.token_ids for c in engine.generate(prompts, greedy)] if engine else None
    fabric = SimpleNamespace(is_global_zero=rank == 0, barrier=dist.barrier)
    written = save_model_dir(fabric, model, tokenizer, Path(out_dir) / "actor", {})
    if engine is not None:
        engine.reload(written)
    gathered = full_state_dict(model)
    probe = tokenizer(prompts[:1], return_tensors="pt")
    with torch.no_grad():
        sharded_logits = model(**probe).logits  # (1, T, V); a collective forward on both ranks
    if rank == 1:
        dist.send(torch.tensor([len(gathered)]), dst=0)
    else:
        from_rank1 = torch.zeros(1, dtype=torch.long)
        dist.recv(from_rank1, src=1)
        reference = HFEngine(model_dir)
        reference.load_state_dict(gathered)
        with torch.no_grad():
            plain_logits = reference.model(**probe).logits  # (1, T, V)
        expected = [c.token_ids for c in reference.generate(prompts, greedy)]
        after = [c.token_ids for c in engine.generate(prompts, greedy)]
        result = {
            "missing": sorted(set(names) - set(gathered)),
            "extra": sorted(set(gathered) - set(names)),
            "rank1_len": int(from_rank1[0]),
            "written": str(written),
            "max_logit_diff": float((sharded_logits - plain_logits).abs().max()),
            "changed": before != expected,
            "synced": after == expected,
        }
        (Path(out_dir) / "result.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    model_dir, out_dir = sys.argv[1], sys.argv[2]
    mp.spawn(run, args=(model_dir, out_dir, int(sys.argv[3]) if len(sys.argv) > 3 else 29533), nprocs=2)
