"""The ORM stage reads its examples in the order its config asks for, on one process or several.

On several processes Lightning's own replacement sampler was seeded from `PL_GLOBAL_SEED` (never set by webrl), so
`seed` changed nothing and `orm.train.group_by_length` was dropped. Each rank now reads its share through a sampler
of the stage's own, as the actor and critic stages do; one process shuffles as it always did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from webrl.data.length_batches import LengthGroupedBatches
from webrl.starting_models import base_model_dir

WORKER = Path(__file__).with_name("orm_order_worker.py")
sys.path.insert(0, str(WORKER.parent))
from orm_order_worker import BATCH_SIZE, config_for, trajectories  # noqa: E402

SEEDS = (1, 2)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return base_model_dir(config_for(str(tmp_path_factory.mktemp("base")), 1, False, 0), trajectories())


def _orders(base: Path, out: Path, devices: int, grouped: bool) -> dict[tuple[int, int], dict]:
    """{(seed, rank): what the worker recorded}, for every seed of `SEEDS` and every rank."""
    env = {**os.environ, "PYTHONPATH": f"{WORKER.parent.parent}:{WORKER.parent}", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(WORKER), str(base), str(out), str(devices), str(grouped).lower(), *map(str, SEEDS)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return {
        (seed, rank): json.loads((out / f"seed{seed}-rank{rank}.json").read_text())
        for seed in SEEDS
        for rank in range(devices)
    }


def _epochs(sampler, count: int = 2) -> list[list[int]]:
    batches = []
    for epoch in range(count):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        order = list(sampler)
        batches += (
            order if order and isinstance(order[0], list) else [order[i : i + 2] for i in range(0, len(order), 2)]
        )
    return batches


def test_two_processes_group_the_orm_batches_by_length_in_a_seeded_order(base, tmp_path):
    orders = _orders(base, tmp_path, 2, grouped=True)
    lengths = orders[SEEDS[0], 0]["lengths"]
    assert len(set(lengths)) > 2, "prompts of several lengths to group"
    for (seed, rank), seen in orders.items():
        expected = _epochs(LengthGroupedBatches(lengths, BATCH_SIZE, seed=seed, rank=rank, world=2))
        assert seen["batches"] == expected, (seed, rank)
    assert orders[SEEDS[0], 0]["batches"] != orders[SEEDS[1], 0]["batches"], "the seed sets the order"


def test_two_processes_shuffle_the_orm_examples_by_the_seed(base, tmp_path):
    orders = _orders(base, tmp_path, 2, grouped=False)
    count = len(orders[SEEDS[0], 0]["lengths"])
    for (seed, rank), seen in orders.items():
        expected = _epochs(DistributedSampler(range(count), num_replicas=2, rank=rank, shuffle=True, seed=seed))
        assert seen["batches"] == expected, (seed, rank)
    assert orders[SEEDS[0], 0]["batches"] != orders[SEEDS[1], 0]["batches"], "the seed sets the order"


def test_one_process_shuffles_the_orm_examples_by_a_generator_of_its_own(base, tmp_path):
    """The order single-process runs (the embedded default) always had, the loader's shuffle drawing from its own
    generator (which also seeds the loader's workers): their ORM stays the same model."""
    orders = _orders(base, tmp_path, 1, grouped=False)
    for seed in SEEDS:
        count = len(orders[seed, 0]["lengths"])
        loader = DataLoader(
            range(count), batch_size=BATCH_SIZE, shuffle=True, generator=torch.Generator().manual_seed(seed)
        )
        assert orders[seed, 0]["batches"] == [batch.tolist() for _ in range(2) for batch in loader], seed
