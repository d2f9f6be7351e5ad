"""The Filtered BC recipe's config: the WebRL run's config plus the baseline's own section.

It extends the run config because Filtered BC builds (or reuses) the same SFT actor and evaluates
on the same held-out tasks, so those keys mean the same here; `filtered_bc.*` is its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from webrl.config_checks import at_least, one_of, within
from webrl.loop_config import WebRLConfig
from webrl.run_config import absolute_unless_keyword
from webrl.stage_settings import StageSettings


@dataclass
class FilteredBCConfig:
    """The Filtered BC baseline (recipes.filtered_bc): behaviour cloning on a WebRL run's best-scored rollouts.

    As in the paper (App. B.2): offline on the interaction data of WebRL's phase 1, keeping the
    rollouts whose ORM score reaches the given percentile, together with the SFT data; training
    continues from the SFT actor.
    """

    source_run: str = "runs/webrl_tiny"
    """The WebRL run whose labelled rollouts are filtered (its `phase_NNN/labelled.jsonl`); made absolute when read."""
    source_phase: int = 1
    """Phase of `source_run` whose rollouts are used."""
    score: str = "orm"
    """What ranks the rollouts: `orm` (the paper: the ORM score's `percentile`) or `outcome` (the successes by the
    reward the run trained on, for runs without ORM labels; `percentile` is then unused)."""
    percentile: float = 70.0
    """Keep rollouts whose ORM score is at or above this percentile of the phase's scores."""
    train: StageSettings = field(default_factory=lambda: StageSettings(lr=1e-4, epochs=1.0, batch_size=8))


@dataclass
class FilteredBCRunConfig(WebRLConfig):
    """A Filtered BC run: the WebRL run's keys (model, env, SFT, evaluation) and `filtered_bc.*`."""

    filtered_bc: FilteredBCConfig = field(default_factory=FilteredBCConfig)

    def validate(self) -> None:
        """The run's checks, then the baseline's; each error names the key."""
        super().validate()
        self.filtered_bc.train.validate("filtered_bc.train")
        one_of("filtered_bc.score", self.filtered_bc.score, ("orm", "outcome"))
        within("filtered_bc.percentile", self.filtered_bc.percentile, 0, 100)
        at_least("filtered_bc.source_phase", self.filtered_bc.source_phase, 0)

    def resolve(self) -> None:
        """The run's paths, then `filtered_bc.source_run`: its leading `~` expanded, as `HOME_PATH_KEYS`' are (a shell
        leaves `filtered_bc.source_run=~/runs/x` as typed, which would name a folder `~` of the current one), and the
        path made absolute, as those of `PATH_KEYS` are (`RECIPE_PATH_KEYS`): a relative one kept as typed would read
        another run when the directory is relaunched from another folder."""
        super().resolve()
        source_run = os.path.expanduser(self.filtered_bc.source_run)
        self.filtered_bc.source_run = absolute_unless_keyword("filtered_bc.source_run", source_run)
