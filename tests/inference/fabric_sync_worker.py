"""Two-process worker: the phase loop's in-memory weight sync under real Fabric (`model_parallel`: FSDP2 on gloo).

Run as `python tests/inference/fabric_sync_worker.py MODEL_DIR OUT_DIR`; Fabric re-launches the script for
rank 1. Both ranks hold an HFEngine on the starting model (`engines.placement=rank`), shard an ActorModule as
the actor stage does (`setup_for_training`: the causal LM is one FSDP2 unit, so its tied embeddings stay
tied), take two optimizer steps of language modelling on the same batch and save the model as the actor
stage does (one gather, its weights kept for the sync). Rank 0 then moves the saved weights file away, so
that a reload from the directory would fail on either rank, and the loop's sync runs on both. Each rank
writes what its engine serves and its `model_path` to `OUT_DIR/rank{r}.pt`; rank 0 also writes the weights
it gathered and saved to `OUT_DIR/trained.pt`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

BATCH = ['# Element: Search\ndo(action="Click", element="3")']


def main(model_dir: str, out_dir: str) -> None:
    from webrl.config import load_config
    from webrl.distributed import build_fabric
    from webrl.inference.hf import HFEngine
    from webrl.inference.weight_sync import full_state_dict
    from webrl.loop import PhaseLoop
    from webrl.loop_config import WebRLConfig
    from webrl.modules.actor import ActorModule
    from webrl.modules.lm import load_model_and_tokenizer
    from webrl.training import save_model_dir, setup_for_training

    out = Path(out_dir)
    overrides = ["fabric.strategy=model_parallel", "fabric.devices=2", "engines.weight_sync=memory"]
    config = load_config(WebRLConfig, [f"output_dir={out / 'run'}", *overrides])
    fabric = build_fabric(config.fabric)
    fabric.launch()
    torch.set_num_threads(1)
    engine = HFEngine(model_dir)
    loop = PhaseLoop(config, fabric, None, engine, sft_dir=Path(model_dir), orm_dir=None, demonstrations=[])
    model, tokenizer = load_model_and_tokenizer(Path(model_dir))
    actor = ActorModule(model, tokenizer, lr=3e-2)
    _, optimizer = setup_for_training(fabric, actor)
    batch = tokenizer(BATCH, return_tensors="pt")
    for _ in range(2):
        fabric.backward(actor.model(**batch, labels=batch["input_ids"]).loss)
        optimizer.step()
        optimizer.zero_grad()
    state = full_state_dict(model)  # a collective: rank 1 gets {}
    actor_dir = save_model_dir(fabric, model, tokenizer, loop.layout.actor_dir(1), {}, state=state)
    loop.engine_link.keep_for_sync(actor_dir, state)
    if fabric.is_global_zero:
        (actor_dir / "model.safetensors").rename(out / "aside.safetensors")
        torch.save(state, out / "trained.pt")
    fabric.barrier()
    loop.engine_link.serve(loop.actor_dir(2))
    served = {name: tensor.clone() for name, tensor in engine.model.state_dict().items()}
    torch.save({"served": served, "model_path": str(engine.model_path)}, out / f"rank{fabric.global_rank}.pt")
    fabric.barrier()


if __name__ == "__main__":
    main(*sys.argv[1:3])
