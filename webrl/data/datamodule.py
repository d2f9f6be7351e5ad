"""ReplayDataModule: the step datasets that the critic and the actor train on in one phase.

One phase trains on the current phase's steps (successes and failures) plus the replayed steps
that passed the experience filter (`webrl.data.replay.filter_by_perplexity`). The critic reads
single states with their outcome, each distinct state of a trajectory once
(`webrl.data.critic_states`: s'_t is s_{t+1}, so pairs would run interior states twice); the
actor reads (s, a) with the advantage inputs (reward, mc_return, done) and the critic's view of s
and s', or the advantage when the samples carry one. Collation is in `webrl.data.collate`.

It works three ways: with `lightning.Trainer` (`train_dataloader` serves `target`), under
Fabric (the phase loop calls `critic_dataloader()` / `actor_dataloader()` and
`fabric.setup_dataloaders`), or with nothing at all (call `setup()` and iterate). With more than
one process each rank reads its own shard through a `DistributedSampler`, padded so every rank
gets the same number of batches (collectives in the step would otherwise hang), or, with
`group_by_length`, its slice of `LengthGroupedBatches`. So Fabric or a Trainer must not add a
sampler of its own: `setup_loader(fabric, loader)`, or `Trainer(use_distributed_sampler=False)`.

Usage without a Trainer::

    dm = ReplayDataModule(tokenizer, current=trajectories, replay=kept_samples, batch_size=4)
    dm.setup()
    for batch in dm.critic_dataloader(): ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, SequentialSampler

from webrl.data.collate import ActorCollator, CriticStateCollator
from webrl.data.critic_states import CriticState, critic_states
from webrl.data.length_batches import LengthGroupedBatches
from webrl.data.prompts import uses_chat_template
from webrl.data.steps import DEFAULT_GAMMA, StepSample, trajectory_to_samples
from webrl.data.trajectory import Trajectory

TARGETS = ("actor", "critic")


class StepDataset(Dataset):
    """A list of step samples; tokenisation happens in the collator, per batch."""

    def __init__(self, samples: Sequence[StepSample]) -> None:
        self.samples = list(samples)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> StepSample:
        return self.samples[index]


class ReplayDataModule(L.LightningDataModule):
    """Critic and actor step datasets of one phase: current steps plus filtered replay.

    `current` holds the current phase's labelled trajectories (or their step samples), `replay`
    the replayed samples the filter kept. `max_length` caps prompt + action tokens; longer
    prompts lose the end of their page HTML, never history or action. `target` picks what
    `train_dataloader` serves under a Trainer. Batches are left padded unless `padding_side`
    says "right". `group_by_length` batches steps of similar length together (see
    `webrl.data.length_batches`; the critic's length is its state's, the actor's its prompt and
    action), which cuts padding but changes the batch order.
    """

    def __init__(
        self,
        tokenizer: Any,
        current: Sequence[Trajectory | StepSample] = (),
        replay: Sequence[StepSample] = (),
        *,
        target: str = "actor",
        batch_size: int = 1,
        max_length: int = 16384,
        gamma: float = DEFAULT_GAMMA,
        shuffle: bool = True,
        seed: int = 0,
        num_workers: int = 0,
        critic_tokenizer: Any = None,
        padding_side: str = "left",
        group_by_length: bool = False,
    ) -> None:
        super().__init__()
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_length < 2:
            raise ValueError(f"max_length must be >= 2, got {max_length}")
        self.tokenizer = tokenizer
        self.critic_tokenizer = critic_tokenizer or tokenizer
        self.current = list(current)
        self.replay = list(replay)
        self.target = target
        self.batch_size = batch_size
        self.max_length = max_length
        self.gamma = gamma
        self.shuffle = shuffle
        self.seed = seed
        self.num_workers = num_workers
        self.padding_side = padding_side
        self.group_by_length = group_by_length
        self.dataset: StepDataset | None = None
        self.critic_states: list[CriticState] = []

    def setup(self, stage: str | None = None) -> None:
        """Turn the current trajectories into samples and join them with the replayed ones."""
        samples: list[StepSample] = []
        for item in self.current:
            if isinstance(item, Trajectory):
                samples.extend(trajectory_to_samples(item, gamma=self.gamma, chat_template_tokenizer=self._chat()))
            elif isinstance(item, StepSample):
                samples.append(item)
            else:
                raise TypeError(f"current items must be Trajectory or StepSample, got {type(item).__name__}")
        samples.extend(self.replay)
        if not samples:
            raise ValueError("no training steps: the current phase and the replay are both empty")
        self.dataset = StepDataset(samples)
        self.critic_states = critic_states(samples)

    def critic_dataloader(self) -> DataLoader:
        """Batches of single states and their outcomes, each of `critic_states` once: see `CriticStateCollator`."""
        self._check_setup()
        collate = CriticStateCollator(self.critic_tokenizer, self.max_length, self.padding_side)
        return self._loader(self.critic_states, [len(state.text) for state in self.critic_states], collate)

    def actor_dataloader(self) -> DataLoader:
        """Batches of prompt + action with advantage inputs: see `ActorCollator`."""
        self._check_setup()
        collate = ActorCollator(self.tokenizer, self.max_length, self.critic_tokenizer, self.padding_side)
        lengths = [len(sample.prompt) + len(sample.action) for sample in self.dataset.samples]
        return self._loader(self.dataset, lengths, collate)

    def train_dataloader(self) -> DataLoader:
        return self.actor_dataloader() if self.target == "actor" else self.critic_dataloader()

    def _chat(self) -> Any:
        return self.tokenizer if uses_chat_template(self.tokenizer) else None

    def _check_setup(self) -> None:
        if self.dataset is None:
            raise RuntimeError("call setup() before asking for a dataloader")

    def _loader(self, items: Sequence[Any], lengths: Sequence[int], collate: Any) -> DataLoader:
        """A loader over `items`; `lengths` (characters, one per item) group batches under `group_by_length`."""
        world, rank = self._world()
        if self.group_by_length and self.shuffle:
            batches = LengthGroupedBatches(lengths, self.batch_size, seed=self.seed, rank=rank, world=world)
            return DataLoader(items, batch_sampler=batches, collate_fn=collate, num_workers=self.num_workers)
        if world > 1:
            sampler = DistributedSampler(items, num_replicas=world, rank=rank, shuffle=self.shuffle, seed=self.seed)
        elif self.shuffle:
            sampler = RandomSampler(items, generator=torch.Generator().manual_seed(self.seed))
        else:
            sampler = SequentialSampler(items)
        return DataLoader(
            items, batch_size=self.batch_size, sampler=sampler, collate_fn=collate, num_workers=self.num_workers
        )

    def _world(self) -> tuple[int, int]:
        if self.trainer is not None:
            return self.trainer.world_size, self.trainer.global_rank
        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size(), dist.get_rank()
        return 1, 0


def setup_loader(fabric: Any, loader: DataLoader) -> Any:
    """`fabric.setup_dataloaders` for a loader of this module, which already reads only this rank's share.

    Fabric's own distributed sampler would split the data a second time, and cannot be put into a batch
    sampler such as `LengthGroupedBatches` at all (Lightning raises a TypeError under DDP or FSDP).
    """
    return fabric.setup_dataloaders(loader, use_distributed_sampler=False)
