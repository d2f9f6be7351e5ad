"""Batches of similar length, so that padding does not eat the compute of a training step.

Step prompts vary from about 100 to 900 tokens (SmolLM2's tokenizer on the embedded sites'
demonstrations: median 351, p90 672). A random batch of 8 is padded to its longest member, so
about half of a step's tokens are padding. `LengthGroupedBatches` shuffles the examples with a
seed, cuts the order into pools of `pool_batches` batches, sorts each pool by length, cuts it
into batches and shuffles the batch order: each batch holds neighbours in length while every
epoch still sees the examples in a new, seeded order. With several processes every rank builds the
same batch order and takes every `world`-th batch, the list padded by repeating its first batches so
that every rank runs the same number of steps (a rank that stopped early would hang a collective).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from torch.utils.data import Sampler


class LengthGroupedBatches(Sampler[list[int]]):
    """A batch sampler over `lengths` (one per example) that groups examples of similar length.

    On one process every index appears exactly once per epoch; the last batch of a pool may be
    smaller. The order depends only on `seed` and the epoch number (`set_epoch`), so a run is
    reproducible.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        seed: int = 0,
        pool_batches: int = 16,
        rank: int = 0,
        world: int = 1,
    ) -> None:
        if batch_size < 1 or pool_batches < 1:
            raise ValueError(f"batch_size and pool_batches must be >= 1, got {batch_size} and {pool_batches}")
        if not 0 <= rank < world:
            raise ValueError(f"rank must lie in [0, world={world}), got {rank}")
        self.rank, self.world = rank, world
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.pool_batches = pool_batches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _batches(self) -> list[list[int]]:
        rng = random.Random(f"{self.seed}/{self.epoch}")
        order = list(range(len(self.lengths)))
        rng.shuffle(order)
        pool_size = self.batch_size * self.pool_batches
        batches: list[list[int]] = []
        for start in range(0, len(order), pool_size):
            pool = sorted(order[start : start + pool_size], key=lambda index: self.lengths[index])
            batches.extend(pool[i : i + self.batch_size] for i in range(0, len(pool), self.batch_size))
        rng.shuffle(batches)
        # Cyclic: with fewer batches than ranks, a plain prefix would leave some ranks none.
        padded = batches + [batches[i % len(batches)] for i in range(-len(batches) % self.world)] if batches else []
        return padded[self.rank :: self.world]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches()
        self.epoch += 1
        return iter(batches)

    def __len__(self) -> int:
        pool_size = self.batch_size * self.pool_batches
        full_pools, rest = divmod(len(self.lengths), pool_size)
        batches = full_pools * self.pool_batches + -(-rest // self.batch_size)
        return -(-batches // self.world)
