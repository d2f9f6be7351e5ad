"""Advantages of a whole actor dataset, computed once before the actor trains.

The critic is frozen during the actor stage, so V(s) and V(s') of a step are the same at every
actor step and in every epoch. Computing them inside the actor step (`ActorModule.critic_advantage`)
runs the critic's trunk twice per step on top of the policy's forward and backward and the
reference's forward; on a CPU that is a third of the step. `precompute_advantages` instead scores
each distinct state of the dataset once (s'_t is s_{t+1}, so most states are shared between two
steps), in no-grad batches sorted by length so that little of a batch is padding, and writes each
sample's advantage onto it; `webrl.data.collate.ActorCollator` then hands the advantages to the
actor and skips the critic's view of the states.

A state is tokenised exactly as in an actor batch (`StepTokenizer.fit_state`), and the critic's value
of a state does not depend on padding or batch neighbours, so the advantages equal those the actor
step would have computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch

from webrl.data.collate import StepTokenizer, pad, step_labels
from webrl.data.critic_values import state_key
from webrl.data.steps import StepSample
from webrl.modules.critic import CriticModule
from webrl.modules.losses import compute_advantage
from webrl.modules.settings import AdvantageConfig
from webrl.progress import progress_bar


def state_values(
    critic: CriticModule,
    samples: Sequence[StepSample],
    *,
    max_length: int,
    batch_size: int = 8,
    autocast: AbstractContextManager | None = None,
    progress: bool = False,
    known: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """V of every distinct state (s and s') of `samples`, keyed by the state's recorded text.

    `autocast` (e.g. `fabric.autocast()`) is entered around the forwards, so values come at the
    precision the actor step would have used. `progress` shows the batches' progress (`webrl.progress`): a phase's
    states took 11.5 min on a 2-core CPU, too long to pass in silence. A state whose `state_key` is in `known`
    (values this critic gave before, `webrl.data.critic_values`) takes that value and is not scored again.
    """
    known = known or {}
    steps = StepTokenizer(critic.tokenizer, max_length)
    rows: dict[str, list[int]] = {}
    values: dict[str, float] = {}
    for sample in samples:
        for next_state in (False, True):
            text = sample.next_prompt if next_state else sample.prompt
            if text in rows or text in values:
                continue
            if (kept := known.get(state_key(text))) is not None:
                values[text] = kept
            else:
                rows[text] = steps.fit_state(sample, next_state=next_state)
    texts = sorted(rows, key=lambda text: len(rows[text]))
    device = critic.heads[0][0].weight.device
    was_training = critic.training
    critic.eval()
    try:
        with autocast or nullcontext():
            starts = range(0, len(texts), batch_size)
            for start in progress_bar(starts, desc="advantage scoring", unit="batch", enabled=progress):
                chunk = texts[start : start + batch_size]
                batch = [rows[text] for text in chunk]
                ids = pad(batch, critic.tokenizer.pad_token_id)  # (b, T), left padded
                mask = pad([[1] * len(row) for row in batch], 0)  # (b, T)
                scored = critic.state_values(ids.to(device), mask.to(device)).float().cpu()  # (b,)
                values.update(zip(chunk, scored.tolist(), strict=True))
    finally:
        critic.train(was_training)
    return values


@dataclass
class StepScores:
    """The critic's view of N steps: V(s), V(s') and the advantage they give, each (N,), in sample order, and
    the value of each distinct state by its text (what `webrl.data.critic_values` keeps)."""

    value: torch.Tensor
    next_value: torch.Tensor
    advantage: torch.Tensor
    states: dict[str, float] = field(default_factory=dict)


def score_steps(
    critic: CriticModule,
    samples: Sequence[StepSample],
    config: AdvantageConfig,
    *,
    max_length: int,
    batch_size: int = 8,
    autocast: AbstractContextManager | None = None,
    progress: bool = False,
    known: Mapping[str, float] | None = None,
) -> StepScores:
    """V(s), V(s') and the advantage of every sample; sets `advantage` on each (see `precompute_advantages`).
    States in `known` are not scored again (`state_values`)."""
    if not samples:
        return StepScores(torch.zeros(0), torch.zeros(0), torch.zeros(0))
    values = state_values(
        critic,
        samples,
        max_length=max_length,
        batch_size=batch_size,
        autocast=autocast,
        progress=progress,
        known=known,
    )
    value = torch.tensor([values[sample.prompt] for sample in samples])  # (N,)
    next_value = torch.tensor([values[sample.next_prompt] for sample in samples])  # (N,)
    advantage = compute_advantage(value, next_value, step_labels(samples), config).float()  # (N,)
    for sample, item in zip(samples, advantage.tolist(), strict=True):
        sample.advantage = item
    return StepScores(value, next_value, advantage, values)


def precompute_advantages(
    critic: CriticModule,
    samples: Sequence[StepSample],
    config: AdvantageConfig,
    *,
    max_length: int,
    batch_size: int = 8,
    autocast: AbstractContextManager | None = None,
) -> torch.Tensor:
    """Set `advantage` on every sample from the critic's V(s), V(s') and the step labels; returns them, (N,).

    `max_length` must be the actor batches' (`ReplayDataModule.max_length`), so that states are cut
    to the same page HTML as there.
    """
    return score_steps(
        critic, samples, config, max_length=max_length, batch_size=batch_size, autocast=autocast
    ).advantage
