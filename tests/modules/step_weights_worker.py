"""Two-process worker: one SFT optimizer step under Fabric DDP (gloo), each rank with one micro-batch of its own.

Run as `python tests/modules/step_weights_worker.py MODEL_DIR OUT_DIR`; Fabric re-launches the script for rank 1.
Rank r trains on `micro_batches(...)[r]` through `webrl.training.train_module`, and rank 0 writes the weights to
`OUT_DIR/sft.pt`. The two micro-batches hold different numbers of action tokens, so the step equals the
whole-data step only if each rank's loss is weighed by its tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

LR = 0.5
EXAMPLES = [
    [("Task Instruction: buy the red shirt\n", 'do(action="Click", element="2")')],
    [
        ("Task Instruction: find the cheapest laptop\n", 'do(action="Type", argument="red shirt", element="3")'),
        ("Round 0\n", 'exit(message="The order total is 42 dollars")'),
    ],
]
"""Rank 0's micro-batch (one short action) and rank 1's (two longer ones)."""


def micro_batches(tokenizer) -> list[dict[str, torch.Tensor]]:
    from webrl.modules.lm import collate_actions

    return [collate_actions(tokenizer, [(p, a, 0.0) for p, a in rows]) for rows in EXAMPLES]


def build(model_dir: str):
    """The SFT module on the tiny model, with plain SGD so that a step is lr × the gradient."""
    from webrl.modules.sft import SFTModule

    torch.manual_seed(0)
    module = SFTModule(model_dir)
    module.configure_optimizers = lambda: torch.optim.SGD(module.parameters(), lr=LR)
    return module


def main(model_dir: str, out_dir: str) -> None:
    from webrl.distributed import build_fabric, close_process_group
    from webrl.fabric_config import FabricConfig
    from webrl.stage_settings import StageSettings
    from webrl.training import setup_for_training, train_module

    fabric = build_fabric(FabricConfig(strategy="ddp", devices=2))
    fabric.launch()
    torch.set_num_threads(1)
    module = build(model_dir)
    batch = micro_batches(module.tokenizer)[fabric.global_rank]
    wrapped, optimizer = setup_for_training(fabric, module)
    settings = StageSettings(lr=LR, epochs=1.0, batch_size=2, grad_clip=0.0)
    train_module(fabric, wrapped, optimizer, [batch], settings, name="sft", progress=False)
    if fabric.is_global_zero:
        torch.save(module.state_dict(), Path(out_dir) / "sft.pt")
    close_process_group(fabric)


if __name__ == "__main__":
    main(*sys.argv[1:3])
