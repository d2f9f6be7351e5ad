"""The typed config of `python -m webrl.process`, loaded like a recipe's (YAML, then key=value overrides).

Its settings that the WebRL run also has come from the same dataclasses, so they share defaults and
docstrings: `filter.*` is the run's `replay.filter`, and `gamma` defaults to `actor.advantage.gamma`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webrl.config_checks import within
from webrl.data.replay import ReplayFilterConfig
from webrl.data.steps import DEFAULT_GAMMA

STAGES = (1, 2)
LABEL_SOURCES = ("orm", "evaluator")


@dataclass
class ProcessConfig:
    """Label one phase's rollouts (stage 1), then build its replay-filtered training steps (stage 2)."""

    stage: list[int] = field(default_factory=list)
    """Stages to run, in order: [1] labels the rollouts, [2] builds the training steps, [1, 2] does both."""
    output: str = ""
    """Stage 1's output .jsonl (labelled trajectories), which stage 2 reads; stage 2 writes <stem>_filter.jsonl."""
    rollouts: str = ""
    """Stage 1's input: a VisualAgentBench result dir or a trajectory .jsonl."""
    reward_source: str = "orm"
    """Stage 1's label: orm (the ORM's P(YES) >= 0.5) | evaluator (the evaluator's score >= 0.5). As in a run,
    episodes the browser, the site or the engine failed get no label, nor, with evaluator, those no evaluator judged."""
    orm: str = ""
    """ORM checkpoint directory (stage 1 with reward_source=orm)."""
    orm_answers: list[str] = field(default_factory=list)
    """The ORM's two single-token answer words, quoted (YAML reads bare YES/NO as true/false): ["YES", "NO"]; empty =
    YES NO, or Yes No."""
    actor: str = ""
    """The current actor's directory (stage 2): it scores the replayed actions."""
    experience: list[str] = field(default_factory=list)
    """Earlier phases' stage-1 outputs or trace dirs: stage 2's replay candidates."""
    gamma: float = DEFAULT_GAMMA
    """Discount of each step's mc_return (the run's actor.advantage.gamma, whose default this is)."""
    filter: ReplayFilterConfig = field(default_factory=ReplayFilterConfig)
    """Stage 2's experience filter (the run's replay.filter); its seed also shuffles the output."""
    max_length: int = 0
    """The run's model.max_length, the token limit of its models; set it to label and filter as that run would.
    Stage 1: each ORM prompt over it is scored with less of its final page, as the run's labels stage scores it.
    Stage 2: each replayed action is scored after the prompt the actor's batches hold, its page HTML cut to fit,
    rather than after the whole prompt, which the scorer would cut from the left (instruction first). 0 = no limit."""
    batch_size: int = 8
    """Scoring batch size (the ORM in stage 1, the actor in stage 2)."""
    devices: int = 1
    """Processes that score stage 2 in parallel (DDP); stage 1 runs on the first."""
    sft_out: str = ""
    """Stage 1: also export the successful steps as ShareGPT SFT JSON to this file (empty = no export)."""
    orm_data_out: str = ""
    """Stage 1: also export ORM ShareGPT JSON to this file (empty = no export), labelled by the evaluators as the
    run's ORM data is, whatever reward_source labels the rollouts; trajectories no evaluator judged are left out."""

    def validate(self) -> None:
        """What each stage needs; each error names the key."""
        if not self.stage or any(stage not in STAGES for stage in self.stage):
            raise ValueError(f"stage must list stages to run, [1], [2] or [1, 2]; got {self.stage}")
        if not self.output:
            raise ValueError("output=PATH is needed: stage 1 writes it, stage 2 reads it")
        if self.reward_source not in LABEL_SOURCES:
            raise ValueError(f"reward_source must be one of {LABEL_SOURCES}, got {self.reward_source!r}")
        if 1 in self.stage and not self.rollouts:
            raise ValueError("stage 1 needs rollouts=PATH")
        if 1 in self.stage and self.reward_source == "orm" and not self.orm:
            raise ValueError("reward_source=orm needs orm=PATH (or use reward_source=evaluator)")
        if 2 in self.stage and not self.actor:
            raise ValueError("stage 2 needs actor=PATH (the current actor, which scores the replayed actions)")
        if self.orm_answers and (len(self.orm_answers) != 2 or {"True", "False"} & set(self.orm_answers)):
            raise ValueError(
                f'orm_answers must be two quoted words, e.g. \'["YES", "NO"]\' (YAML reads bare YES and NO as '
                f"booleans); got {self.orm_answers}"
            )
        within("gamma", self.gamma, 0, 1)
        self.filter.validate("filter")
        if self.max_length < 0:
            raise ValueError(f"max_length must be >= 0 (0 = no limit), got {self.max_length}")
        if self.batch_size < 1 or self.devices < 1:
            raise ValueError(f"batch_size and devices must be >= 1, got {self.batch_size} and {self.devices}")
