"""The WebRL run's configuration schema: one dataclass per part, each field documented.

`python -m recipes.webrl --help` prints every key below with its docstring. Defaults describe the
embedded default (tiny model, embedded sites, CPU); `recipes/configs/*.yaml` override them for the
SmolLM2 and paper-scale runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webrl.data.curriculum_config import CurriculumConfig
from webrl.data.replay import ReplayFilterConfig
from webrl.distributed import FabricConfig
from webrl.modules.losses import ActorLossConfig, AdvantageConfig
from webrl.training import StageSettings

REWARD_SOURCES = ("orm", "evaluator")
ENGINES = ("hf", "vllm", "openai")


@dataclass
class ModelConfig:
    """Which networks the run starts from."""

    base: str = "tiny"
    """Model SFT starts from: `tiny` (built from a config), `smollm2` (SmolLM2-135M-Instruct), or a local HF dir."""
    actor: str = ""
    """Actor to start WebRL from: a local HF dir; empty = the SFT checkpoint recipes.sft builds and caches."""
    orm: str = ""
    """ORM directory; empty = the ORM recipes.orm trains and caches (used when reward.source=orm)."""
    generator: str = "smollm2"
    """Curriculum task generator and feasibility judge (llm/mixed modes): `smollm2`, a local HF dir, or an
    OpenAI-compatible base URL (http://...) such as a vLLM server of a large model."""
    cache_dir: str = ".cache/webrl"
    """Where the tiny model, SFT and ORM checkpoints are cached between runs."""
    max_length: int = 1024
    """Token budget of a prompt plus its action; longer prompts lose page HTML, never history or action."""
    tiny_hidden_size: int = 256
    """Tiny model: hidden size (head_dim is fixed at 64 for vLLM)."""
    tiny_layers: int = 4
    """Tiny model: decoder layers."""
    tiny_vocab_size: int = 2048
    """Tiny model: BPE vocabulary trained on the embedded sites' pages and the action language."""


@dataclass
class EnvConfig:
    """Websites, task suites and episode limits."""

    suite: str = "embedded"
    """`embedded` (the project's sites) or a directory/file of WebArena task configs."""
    train_split: str = "train"
    """Embedded split for phase 0's tasks: train, or train_fit (train minus the validation tasks) when tuning."""
    test_split: str = "test"
    """Embedded split for held-out evaluation: test, or validation (60 fixed train tasks) for choosing settings."""
    url_map: dict[str, str] = field(default_factory=dict)
    """For an external suite: placeholder -> base URL, e.g. {__SHOPPING__: http://host:7770}."""
    train_tasks: int = 64
    """Phase-0 tasks sampled from the train split (0 = all)."""
    test_tasks: int = 60
    """Held-out tasks evaluated after each phase (0 = all)."""
    max_steps: int = 8
    """Steps per episode before it is cut (WebRL uses 30)."""
    html_chars: int = 1500
    """Character budget of a page observation."""
    chromium: str = ""
    """Chromium executable; empty = system chromium or Playwright's browser."""


@dataclass
class RolloutConfig:
    """Sampling actions in the browser."""

    engine: str = "hf"
    """hf (transformers generate) | vllm (in-process vLLM) | openai (a served OpenAI-compatible model)."""
    concurrency: int = 8
    """Episodes run at once per process (their observations are batched into one engine call)."""
    temperature: float = 1.0
    """Training rollouts' temperature (WebRL: 1.0)."""
    top_p: float = 0.9
    """Training rollouts' nucleus threshold (the release's harness: 0.9)."""
    eval_temperature: float = 0.0
    """Evaluation temperature (0 = greedy)."""
    max_tokens: int = 48
    """Tokens per action."""
    openai_url: str = ""
    """Base URL of the OpenAI-compatible server (engine=openai)."""


@dataclass
class RewardConfig:
    """Where a trajectory's training outcome comes from."""

    source: str = "orm"
    """orm (WebRL: the ORM labels every rollout) | evaluator (programmatic evaluators, where tasks have them)."""
    threshold: float = 0.5
    """ORM P(YES) at or above which a trajectory counts as a success."""
    orm_labels: bool = True
    """Train (or reuse) the ORM and label every rollout with it. Required by source=orm; with source=evaluator the
    ORM's labels are only compared with the evaluators (`orm/agreement`) and scored for Filtered BC."""


@dataclass
class SFTConfig:
    """Supervised fine-tuning on the reference solver's demonstrations (the starting actor)."""

    train: StageSettings = field(
        default_factory=lambda: StageSettings(lr=2e-3, epochs=6.0, batch_size=16, warmup_ratio=0.05, schedule="cosine")
    )
    demo_concurrency: int = 8
    """Browser episodes at once while the reference solver writes demonstrations."""
    demo_tasks: int = 0
    """Train-split tasks to demonstrate (0 = all; a seeded sample otherwise, for quick runs and tests)."""


@dataclass
class ORMConfig:
    """The outcome reward model, trained on the SFT actor's evaluator-labelled rollouts."""

    train: StageSettings = field(
        default_factory=lambda: StageSettings(lr=1e-3, epochs=4.0, batch_size=8, warmup_ratio=0.05, schedule="cosine")
    )
    rollout_tasks: int = 256
    """Train-split tasks the SFT actor is rolled out on (temperature 1) to make ORM data."""


@dataclass
class ActorConfig:
    """The actor update."""

    train: StageSettings = field(default_factory=lambda: StageSettings(lr=1e-4, epochs=1.0, batch_size=8))
    loss: ActorLossConfig = field(default_factory=ActorLossConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)


@dataclass
class CriticConfig:
    """The critic update (runs before the actor's in each phase)."""

    train: StageSettings = field(default_factory=lambda: StageSettings(lr=1e-4, epochs=2.0, batch_size=8))


@dataclass
class ReplayConfig:
    """The replay buffer of earlier phases' successes."""

    enabled: bool = True
    """Mix replayed steps into each phase (False = the 'without replay' ablation)."""
    max_scored_steps: int = 0
    """Score at most this many candidate steps per phase, from a seeded sample of whole trajectories (0 = all)."""
    filter: ReplayFilterConfig = field(default_factory=ReplayFilterConfig)


@dataclass
class TrackingConfig:
    """Where metrics go."""

    wandb_project: str = "webrl"
    """W&B project."""
    wandb_mode: str = "offline"
    """online | offline | disabled (offline needs no key; CSV is always written)."""
    sample_trajectories: int = 8
    """Sample trajectories logged as a table per phase."""


@dataclass
class WebRLConfig:
    """A whole WebRL run: phases of curriculum, rollouts, labels, replay, critic, actor, sync, evaluation."""

    output_dir: str = "runs/webrl_tiny"
    """Run directory: phases, replay, checkpoints, metrics; rerunning the same command resumes from it."""
    seed: int = 0
    """Seed of every random choice (derived per phase and stage)."""
    phases: int = 3
    """WebRL phases after phase 0 (the paper runs 8)."""
    curriculum_enabled: bool = True
    """Generate new tasks from failures (False = the 'without curriculum' ablation: reuse phase-0 tasks)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    orm: ORMConfig = field(default_factory=ORMConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    curriculum: CurriculumConfig = field(default_factory=lambda: CurriculumConfig(mode="template", tasks_per_phase=48))
    fabric: FabricConfig = field(default_factory=FabricConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def validate(self) -> None:
        """Cross-field checks; each error names the key."""
        if self.phases < 0:
            raise ValueError(f"phases must be >= 0, got {self.phases}")
        if self.reward.source not in REWARD_SOURCES:
            raise ValueError(f"reward.source must be one of {REWARD_SOURCES}, got {self.reward.source!r}")
        if self.reward.source == "orm" and not self.reward.orm_labels:
            raise ValueError("reward.source=orm needs reward.orm_labels=true")
        if self.rollout.engine not in ENGINES:
            raise ValueError(f"rollout.engine must be one of {ENGINES}, got {self.rollout.engine!r}")
        if self.rollout.engine == "openai" and not self.rollout.openai_url:
            raise ValueError("rollout.engine=openai needs rollout.openai_url")
        if self.rollout.concurrency < 1:
            raise ValueError(f"rollout.concurrency must be >= 1, got {self.rollout.concurrency}")
        if self.env.suite != "embedded" and not self.env.url_map:
            raise ValueError(f"env.suite={self.env.suite!r} needs env.url_map (placeholder -> base URL)")
        if self.env.max_steps < 1:
            raise ValueError(f"env.max_steps must be >= 1, got {self.env.max_steps}")
        self.sft.train.validate("sft.train")
        self.orm.train.validate("orm.train")
        self.actor.train.validate("actor.train")
        self.critic.train.validate("critic.train")
        self.fabric.validate()
