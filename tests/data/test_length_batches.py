"""LengthGroupedBatches: every example once, neighbours in length per batch, seeded, sharded evenly over ranks."""

from __future__ import annotations

import random

import pytest

from webrl.data.length_batches import LengthGroupedBatches


def _lengths(n: int = 203, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(50, 900) for _ in range(n)]


def test_each_example_once_and_len_matches():
    sampler = LengthGroupedBatches(_lengths(), batch_size=8, seed=3, pool_batches=4)
    batches = list(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(203))
    # 203 = 6 pools of 32 (4 batches each) + 11 left over (2 batches): 26 batches.
    assert len(batches) == len(sampler) == 26


def test_batches_pad_far_less_than_random_batches():
    lengths = _lengths()
    grouped = list(LengthGroupedBatches(lengths, batch_size=8, seed=0))
    order = list(range(len(lengths)))
    random.Random(0).shuffle(order)
    plain = [order[i : i + 8] for i in range(0, len(order), 8)]

    def padded_tokens(batches: list[list[int]]) -> int:
        return sum(max(lengths[i] for i in batch) * len(batch) for batch in batches)

    real = sum(lengths)
    # Uniform lengths in [50, 900]: a random batch of 8 pads to about its 8/9 quantile, a sorted pool of
    # 128 to within a few percent of each member.
    assert padded_tokens(grouped) < 1.1 * real < padded_tokens(plain)


def test_order_is_seeded_and_changes_per_epoch():
    a = LengthGroupedBatches(_lengths(), batch_size=8, seed=5)
    b = LengthGroupedBatches(_lengths(), batch_size=8, seed=5)
    first_a, first_b = list(a), list(b)
    assert first_a == first_b
    assert list(a) != first_a  # the second epoch draws a new order
    assert list(LengthGroupedBatches(_lengths(), batch_size=8, seed=6)) != first_a


@pytest.mark.parametrize(("world", "examples"), [(2, 101), (3, 101), (4, 3), (4, 5)])
def test_ranks_get_equal_counts_and_cover_every_example(world, examples):
    """Also with fewer batches than ranks (3 examples in batches of 4 over 4 ranks): every rank gets one."""
    lengths = _lengths(examples)
    shards = [list(LengthGroupedBatches(lengths, batch_size=4, seed=0, rank=r, world=world)) for r in range(world)]
    assert len({len(shard) for shard in shards}) == 1
    assert len(shards[0]) == len(LengthGroupedBatches(lengths, batch_size=4, rank=0, world=world))
    assert {i for shard in shards for batch in shard for i in batch} == set(range(examples))


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="batch_size"):
        LengthGroupedBatches([1, 2], batch_size=0)
    with pytest.raises(ValueError, match="rank"):
        LengthGroupedBatches([1, 2], batch_size=1, rank=2, world=2)
