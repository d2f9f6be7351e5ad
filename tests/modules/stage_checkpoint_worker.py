"""Two-process worker: the critic's stage under DDP or FSDP2, saving its state after every optimiser step.

Run as `python tests/modules/stage_checkpoint_worker.py STRATEGY MODEL_DIR CHECKPOINT_DIR OUT_FILE [AVERAGE_TAIL]`;
Fabric re-launches the script for rank 1. With `WEBRL_FAULT=stage_checkpoint:critic` both ranks end hard right
after the first save; a relaunch resumes from it. Rank 0 writes the gathered full weights and how many
batches this launch trained to OUT_FILE. With AVERAGE_TAIL 1.0 the stage ends on the mean of all its steps' weights
(0, the last weights, when left out).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

STATES = ["<html>cart</html>", '<a id="1">Home</a>', "<p>order placed</p>", "<input id=3>"] * 2
OUTCOMES = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]


def main(strategy: str, model_dir: str, checkpoint_dir: str, out_file: str, average_tail: str = "0") -> None:
    from torch.utils.data import DataLoader

    from webrl.distributed import build_fabric, close_process_group
    from webrl.fabric_config import FabricConfig
    from webrl.inference.weight_sync import full_state_dict
    from webrl.modules.critic import CriticModule
    from webrl.stage_checkpoint import StageCheckpoint
    from webrl.stage_settings import StageSettings
    from webrl.training import setup_for_training, train_module

    fabric = build_fabric(FabricConfig(strategy=strategy, devices=2))
    fabric.launch()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    module = CriticModule(model_dir, lr=1e-3)
    triples = [(s, STATES[(i + 1) % 8], o) for i, (s, o) in enumerate(zip(STATES, OUTCOMES, strict=True))]
    loader = DataLoader(
        triples, batch_size=2, shuffle=True, collate_fn=lambda rows: CriticModule.collate(module.tokenizer, rows)
    )
    wrapped, optimizer = setup_for_training(fabric, module)
    trained = []
    compute_loss = module.compute_loss
    module.compute_loss = lambda batch: trained.append(1) or compute_loss(batch)
    settings = StageSettings(lr=1e-3, epochs=1.5, batch_size=2, grad_clip=0.0, average_tail=float(average_tail))
    checkpoint = StageCheckpoint(Path(checkpoint_dir), every_s=1e-9)
    train_module(
        fabric, wrapped, optimizer, fabric.setup_dataloaders(loader), settings, name="critic", checkpoint=checkpoint
    )
    state = full_state_dict(module, merge_lora=False)
    if fabric.is_global_zero:
        torch.save({"weights": state, "trained": len(trained)}, out_file)
    close_process_group(fabric)


if __name__ == "__main__":
    main(*sys.argv[1:6])
