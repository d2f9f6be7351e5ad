"""Two-process worker: an SFT stage under Fabric DDP (gloo) whose loss turns NaN on rank 1's third micro-batch only.

Run as `python tests/modules/nonfinite_loss_worker.py MODEL_DIR OUT_DIR`; Fabric re-launches the script for rank 1.
Each rank trains 4 micro-batches at `accumulate=2` through `webrl.training.train_module` and writes what ended its
stage to `OUT_DIR/rank{r}.txt`: the `FloatingPointError`'s message, or `finished`. SIGUSR1 prints each rank's
stacks to stderr, which the test shows when the ranks outlive its limit.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
from pathlib import Path

import torch

POISONED_RANK, POISONED_BATCH = 1, 2


def poisonable_sft(model_dir: str):
    """The SFT module on the tiny model, its loss NaN for a batch that carries the `poisoned` mark: bad data."""
    from webrl.modules.sft import SFTModule

    class PoisonableSFT(SFTModule):
        def compute_loss(self, batch):
            loss, metrics = super().compute_loss({key: value for key, value in batch.items() if key != "poisoned"})
            return (loss * float("nan"), metrics) if "poisoned" in batch else (loss, metrics)

    torch.manual_seed(0)
    return PoisonableSFT(model_dir, lr=0.1)


def main(model_dir: str, out_dir: str) -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for every rank's stacks if they hang
    from step_weights_worker import micro_batches

    from webrl.distributed import build_fabric, close_process_group
    from webrl.fabric_config import FabricConfig
    from webrl.stage_settings import StageSettings
    from webrl.training import setup_for_training, train_module

    fabric = build_fabric(FabricConfig(strategy="ddp", devices=2))
    fabric.launch()
    torch.set_num_threads(1)
    module = poisonable_sft(model_dir)
    batches = [dict(micro_batches(module.tokenizer)[0]) for _ in range(4)]
    if fabric.global_rank == POISONED_RANK:
        batches[POISONED_BATCH]["poisoned"] = torch.ones(1)
    wrapped, optimizer = setup_for_training(fabric, module)
    settings = StageSettings(lr=0.1, epochs=1.0, batch_size=1, accumulate=2, grad_clip=1.0)
    try:
        train_module(fabric, wrapped, optimizer, batches, settings, name="sft", progress=False)
        outcome = "finished"
    except FloatingPointError as err:
        outcome = str(err)
    (Path(out_dir) / f"rank{fabric.global_rank}.txt").write_text(outcome)
    close_process_group(fabric)


if __name__ == "__main__":
    main(*sys.argv[1:3])
