"""Two-process worker: one SGD step of the critic and the ORM under Fabric's `model_parallel` (FSDP2).

Run as `python tests/modules/fsdp2_worker.py MODEL_DIR OUT_DIR`; Fabric re-launches the script
for rank 1. The modules go through the loop's own `build_fabric` and `setup_for_training`, each
rank takes its half of `BATCH`, and rank 0 writes the gathered full weights to `OUT_DIR/<name>.pt`.
The test takes the same step in one process on the whole batch and compares: with losses that
are means over equal halves, FSDP2's averaged gradient is the whole batch's gradient.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

LR = 0.5
STATES = ["<html>cart</html>", '<a id="1">Home</a>', "<p>order placed</p>", "<input id=3>"]
OUTCOMES = [1.0, 0.0, 1.0, 0.0]


def build(name: str, model_dir: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The module `name` with seeded fresh heads, SGD as its optimiser, and its 4-example batch."""
    from webrl.modules.critic import CriticModule
    from webrl.modules.orm import OutcomeRewardModule

    torch.manual_seed(0)
    if name == "critic":
        module = CriticModule(model_dir)
        triples = [(s, STATES[(i + 1) % 4], o) for i, (s, o) in enumerate(zip(STATES, OUTCOMES, strict=True))]
        batch = CriticModule.collate(module.tokenizer, triples)
    else:
        module = OutcomeRewardModule(model_dir)
        batch = OutcomeRewardModule.collate(module.tokenizer, list(zip(STATES, OUTCOMES, strict=True)))
    module.configure_optimizers = lambda: torch.optim.SGD(module.parameters(), lr=LR)
    return module, batch


def main(model_dir: str, out_dir: str) -> None:
    from webrl.distributed import build_fabric, close_process_group
    from webrl.fabric_config import FabricConfig
    from webrl.inference.weight_sync import full_state_dict
    from webrl.training import setup_for_training

    fabric = build_fabric(FabricConfig(strategy="model_parallel", devices=2))
    fabric.launch()
    torch.set_num_threads(1)
    for name in ("critic", "orm"):
        module, batch = build(name, model_dir)
        half = {key: value[2 * fabric.global_rank : 2 * fabric.global_rank + 2] for key, value in batch.items()}
        wrapped, optimizer = setup_for_training(fabric, module)
        loss, _ = wrapped.compute_loss(half)
        fabric.backward(loss)
        optimizer.step()
        state = full_state_dict(module, merge_lora=False)
        if fabric.is_global_zero:
            torch.save(state, Path(out_dir) / f"{name}.pt")
        fabric.barrier()
    close_process_group(fabric)


if __name__ == "__main__":
    main(*sys.argv[1:3])
