"""The optimisation settings of a training stage, apart from the training code that uses them.

The run config (`webrl.loop_config`) holds one per stage (critic, actor, ORM, SFT) and is read by
`--help`, `--print-config` and `--dry-run` without loading torch or Lightning, which
`webrl.training` needs; so the settings live here and `webrl.training` imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webrl.config_checks import at_least, one_of, positive, within
from webrl.key_fields import OMITTED_AT_DEFAULT

SCHEDULES = ("constant", "cosine")
"""Learning-rate schedules after the warmup (`webrl.training.lr_factor`)."""


@dataclass
class StageSettings:
    """Optimisation settings of one training stage (critic, actor, ORM or SFT)."""

    lr: float = 1e-5
    """AdamW learning rate"""
    epochs: float = 1.0
    """passes over the stage's data (fractions allowed: 0.5 = half an epoch)"""
    batch_size: int = 4
    """examples per process per optimiser micro-step"""
    accumulate: int = 1
    """micro-batches per optimiser step"""
    grad_clip: float = 1.0
    """max gradient norm (0 = no clipping)"""
    warmup_ratio: float = 0.0
    """fraction of steps with a linear learning-rate warmup"""
    schedule: str = "constant"
    """constant | cosine (after warmup)"""
    group_by_length: bool = False
    """batch steps of similar length together: less padding (SmolLM2 SFT: ~40% of tokens), another batch order"""
    average_tail: float = field(default=0.0, metadata=OMITTED_AT_DEFAULT)
    """fraction of the last optimiser steps whose weights are averaged into the result (0 = the last weights;
    0.5 = the mean after each step of the second half): where a stage stops depends less on its last batches"""

    def validate(self, name: str) -> None:
        """Raise ConfigError naming `name.<key>`, its value and what is allowed."""
        positive(f"{name}.lr", self.lr)
        positive(f"{name}.epochs", self.epochs)
        at_least(f"{name}.batch_size", self.batch_size, 1)
        at_least(f"{name}.accumulate", self.accumulate, 1)
        at_least(f"{name}.grad_clip", self.grad_clip, 0, "(0 = no clipping)")
        within(f"{name}.warmup_ratio", self.warmup_ratio, 0, 1, open_high=True)
        one_of(f"{name}.schedule", self.schedule, SCHEDULES)
        within(f"{name}.average_tail", self.average_tail, 0, 1)
