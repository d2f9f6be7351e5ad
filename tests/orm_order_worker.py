"""Worker: the ORM stage (`train_orm`) on DEVICES gloo processes, recording the examples of every batch it trains.

Run as `python tests/orm_order_worker.py BASE_DIR OUT_DIR DEVICES GROUP_BY_LENGTH SEED...`; Fabric re-launches
the script for the other ranks. For each SEED, rank r trains the ORM of `trajectories()` for two epochs and writes
`OUT_DIR/seed{SEED}-rank{r}.json`: the example lengths and the indices (into `train_orm`'s examples) of each batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BATCH_SIZE = 2


def trajectories() -> list:
    """12 evaluator-labelled trajectories of 1 to 4 steps: ORM prompts of several lengths."""
    from sample_records import build_trajectory

    return [build_trajectory(f"t{i}", num_steps=1 + i % 4, eval_reward=float(i % 2)) for i in range(12)]


def config_for(out_dir: str, devices: int, group_by_length: bool, seed: int):
    from webrl.config import load_config
    from webrl.loop_config import WebRLConfig

    overrides = [
        f"output_dir={Path(out_dir) / 'run'}",
        f"model.cache_dir={Path(out_dir) / 'cache'}",
        *("model.tiny_hidden_size=64", "model.tiny_layers=1", "model.tiny_vocab_size=300"),
        *("fabric.accelerator=cpu", f"fabric.strategy={'ddp' if devices > 1 else 'auto'}", f"fabric.devices={devices}"),
        f"orm.train.batch_size={BATCH_SIZE}",
        "orm.train.epochs=2.0",
        f"orm.train.group_by_length={group_by_length}",
        f"seed={seed}",
    ]
    return load_config(WebRLConfig, overrides)


def main(base: str, out_dir: str, devices: str, group_by_length: str, *seeds: str) -> None:
    import torch

    from webrl.distributed import build_fabric
    from webrl.modules.lm import load_tokenizer
    from webrl.modules.orm import OutcomeRewardModule
    from webrl.starting_models import orm_training_pairs, train_orm

    grouped = group_by_length == "true"
    fabric = build_fabric(config_for(out_dir, int(devices), grouped, 0).fabric)
    fabric.launch()
    torch.set_num_threads(1)
    collate, seen = OutcomeRewardModule.collate, []
    OutcomeRewardModule.collate = staticmethod(
        lambda tokenizer, rows, *a: seen.append(rows) or collate(tokenizer, rows, *a)
    )
    for seed in map(int, seeds):
        config = config_for(out_dir, int(devices), grouped, seed)
        seen.clear()
        train_orm(config, fabric, Path(base), trajectories(), Path(out_dir) / f"orm-{seed}")
        examples = orm_training_pairs(trajectories(), load_tokenizer(base))
        index = {prompt: i for i, (prompt, _) in enumerate(examples)}
        record = {"lengths": [len(p) for p, _ in examples], "batches": [[index[p] for p, _ in rows] for rows in seen]}
        (Path(out_dir) / f"seed{seed}-rank{fabric.global_rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(*sys.argv[1:])
