"""The WebRL run's configuration schema: one dataclass per part, each field documented.

`python -m recipes.webrl --help` prints every key below with its docstring. Defaults describe the
embedded default (tiny model, embedded sites, CPU); `recipes/configs/*.yaml` override them for the
SmolLM2 and paper-scale runs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from webrl.config_checks import at_least, flatten, invalid, one_of, positive, require, within
from webrl.curriculum.config import CurriculumConfig
from webrl.data.replay import ReplayFilterConfig
from webrl.engine_placement import EnginePlacement
from webrl.env.observation import REGIONS
from webrl.env.screenshots import ScreenshotConfig
from webrl.env.splits import TRAIN_FIT, VALIDATION
from webrl.fabric_config import FabricConfig
from webrl.key_fields import OMITTED_AT_DEFAULT, key_fields
from webrl.modules.settings import HEAD_INIT_STD, ActorLossConfig, AdvantageConfig, LoraSettings
from webrl.paths import user_cache_dir
from webrl.run_config import KEYWORD_PATH_KEYS, PATH_KEYS, ResumeConfig, absolute_unless_keyword
from webrl.stage_settings import StageSettings
from webrl.tracking import TrackingConfig

HOME_PATH_KEYS = (
    "model.base",
    "model.generator",
    "env.suite",
    "env.storage_state_dir",
    "env.chromium",
    "tracking.wandb_dir",
)
"""Keys that may hold a path beside other values (a model's name, a URL, `embedded`): a leading `~` is expanded as
the config is read (`WebRLConfig.resolve`), which changes no other value, rather than checked or used as a folder
named `~`. `model.base` and `env.suite` are then also made absolute where they name a path (`KEYWORD_PATH_KEYS`)."""
REWARD_SOURCES = ("orm", "evaluator")
ENGINES = ("hf", "vllm", "openai")
RELOADABLE_ENGINES = ("hf", "vllm")
"""Engines that load the actor each phase trains (`webrl.engine_link.EngineLink.serve`); a served model cannot."""
BUILT_MODELS = ("tiny", "smollm2")
EMBEDDED_SPLITS = ("train", "test", VALIDATION, TRAIN_FIT)
HEAD_DIM = 64


def is_model_dir(path: str) -> bool:
    """A saved Hugging Face model directory (it holds config.json)."""
    return bool(path) and (Path(path) / "config.json").is_file()


def is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


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
    cache_dir: str = field(default_factory=lambda: str(user_cache_dir()))
    """Cache of demonstrations, tiny/SmolLM2 models, SFT and ORM checkpoints, shared by every run of the user:
    $WEBRL_CACHE_DIR, else $XDG_CACHE_HOME/webrl, else ~/.cache/webrl (never a folder of wherever a command starts)."""
    max_length: int = 1024
    """Token budget of a prompt plus its action; longer prompts lose page HTML, never history or action."""
    tiny_hidden_size: int = 256
    """Tiny model: hidden size (head_dim is fixed at 64 for vLLM)."""
    tiny_layers: int = 4
    """Tiny model: decoder layers."""
    tiny_vocab_size: int = 2048
    """Tiny model: BPE vocabulary trained on the embedded sites' pages and the action language."""

    def validate(self) -> None:
        model_dir = "a model directory (with config.json)"
        require(
            self.base in BUILT_MODELS or is_model_dir(self.base),
            "model.base",
            self.base,
            f"must be tiny, smollm2 or {model_dir}",
        )
        for key in ("actor", "orm"):
            value = getattr(self, key)
            require(not value or is_model_dir(value), f"model.{key}", value, f"must be empty or {model_dir}")
        generator_ok = self.generator == "smollm2" or is_url(self.generator) or is_model_dir(self.generator)
        require(generator_ok, "model.generator", self.generator, f"must be smollm2, an http(s):// URL or {model_dir}")
        require(bool(self.cache_dir), "model.cache_dir", self.cache_dir, "must name a directory")
        at_least("model.max_length", self.max_length, 1)
        hidden_ok = self.tiny_hidden_size >= HEAD_DIM and self.tiny_hidden_size % HEAD_DIM == 0
        require(
            hidden_ok, "model.tiny_hidden_size", self.tiny_hidden_size, f"must be a multiple of {HEAD_DIM} (head_dim)"
        )
        at_least("model.tiny_layers", self.tiny_layers, 1)
        at_least("model.tiny_vocab_size", self.tiny_vocab_size, 1)


EPISODE_NEUTRAL_ENV_KEYS = ("strict_tasks", "chromium", "reuse_contexts", "judge_api_key_env", "screenshots")
"""`EnvConfig` fields that cannot change what an episode contains, so the caches of products made of episodes
(`EnvConfig.episode_settings`) are not keyed by them: strict_tasks loads the same tasks or stops; chromium only
names the build of the same browser (an empty value already finds a different one on each machine); reuse_contexts
runs each episode in a context wiped to the state of a fresh one; judge_api_key_env names where the judge's key is
read, not which judge answers; screenshots are pictures for the report, which neither the agent nor the ORM sees."""
EPISODE_LIMIT_KEYS = ("max_repeated_actions", "max_parse_failures", "episode_timeout_s")
"""`EnvConfig` episode limits that were fixed in code before they were settings. They shape episodes, so caches of
episodes and evaluations' identities count them, but only away from their defaults (the values they had in code):
every key made before they were settings stays the same."""


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
    strict_tasks: bool = False
    """Stop on any bad task config of an external suite instead of skipping it (each is named either way)."""
    train_tasks: int = 64
    """Phase-0 tasks sampled from the train split (0 = all)."""
    test_tasks: int = 60
    """Held-out tasks evaluated after each phase (0 = all)."""
    max_steps: int = 8
    """Steps per episode before it is cut (WebRL uses 30)."""
    max_repeated_actions: int = 5
    """Identical consecutive actions (comments ignored) that end an episode as "repeated_action". 5 as in WebRL
    (docs/method.md §4.4): an agent that repeats an action five times is stuck, and its steps left would repeat it."""
    max_parse_failures: int = 5
    """Consecutive unparsable responses that end an episode as "parse_failures". 5 as in WebRL (docs/method.md §4.4):
    each failure is shown to the agent on its next turn, and five in a row is a policy that does not recover."""
    episode_timeout_s: float = 300.0
    """Wall-clock seconds from an episode's start after which its next step ends it as "timeout". 300 leaves 10 s a
    step to WebRL's 30 steps and keeps one hung page or slow site from holding a rollout slot. A timeout is labelled
    as the policy's outcome, so raise it where a loaded machine or high concurrency (WebArena) slows the steps."""
    html_chars: int = 1500
    """Character budget of a page observation."""
    observe_region: str = "from_viewport"
    """page | viewport | from_viewport (default: same as page when a page fits html_chars, but Scroll reaches more)."""
    chromium: str = ""
    """Chromium executable; empty = system chromium or Playwright's browser."""
    reuse_contexts: bool = False
    """Run each episode in a wiped browser context of an earlier one (webrl.env.episode_context) instead of a
    fresh one: 22 % less CPU per env step at concurrency 16 (bench/env_throughput.py --reuse-contexts). Off,
    because a fresh context is isolation by construction and a wiped one isolation by a tested list of clears."""
    storage_state_dir: str = ""
    """Directory of logged-in sessions (`<site>_state.json`, `python -m webrl.env.login`) for require_login tasks."""
    judge_url: str = ""
    """OpenAI-compatible URL (ending in /v1) of the LLM judge for fuzzy_match; empty = fuzzy tasks go unjudged."""
    judge_model: str = ""
    """Model name the judge server serves (required with env.judge_url)."""
    judge_api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the judge's API key (the key itself never goes in a config)."""
    screenshots: ScreenshotConfig = field(default_factory=ScreenshotConfig)
    """Per-step JPEGs of evaluation episodes and a sample of training rollouts, shown in the run report."""

    def validate(self) -> None:
        if self.suite == "embedded":
            one_of("env.train_split", self.train_split, EMBEDDED_SPLITS)
            one_of("env.test_split", self.test_split, EMBEDDED_SPLITS)
        else:
            suite_ok = bool(self.suite) and Path(self.suite).exists()  # Path("") is the current folder
            require(suite_ok, "env.suite", self.suite, "must be embedded or a directory/file of WebArena task configs")
            require(bool(self.url_map), "env.url_map", self.url_map, "must map placeholders to base URLs (env.suite)")
        for placeholder, url in self.url_map.items():
            require(is_url(url), f"env.url_map.{placeholder}", url, "must be an http(s):// base URL")
        at_least("env.train_tasks", self.train_tasks, 0, "(0 = all)")
        at_least("env.test_tasks", self.test_tasks, 0, "(0 = all)")
        at_least("env.max_steps", self.max_steps, 1)
        at_least("env.max_repeated_actions", self.max_repeated_actions, 1)
        at_least("env.max_parse_failures", self.max_parse_failures, 1)
        positive("env.episode_timeout_s", self.episode_timeout_s)
        at_least("env.html_chars", self.html_chars, 1)
        one_of("env.observe_region", self.observe_region, REGIONS)
        executable = Path(self.chromium).is_file() and os.access(self.chromium, os.X_OK)
        require(not self.chromium or executable, "env.chromium", self.chromium, "must be empty or an executable file")
        state_dir_ok = not self.storage_state_dir or Path(self.storage_state_dir).is_dir()
        require(state_dir_ok, "env.storage_state_dir", self.storage_state_dir, "must be empty or a directory")
        if self.judge_url:
            require(is_url(self.judge_url), "env.judge_url", self.judge_url, "must be an http(s):// URL ending in /v1")
            require(bool(self.judge_model), "env.judge_model", self.judge_model, "must name a model (env.judge_url)")
        self.screenshots.validate("env.screenshots")

    def episode_settings(self) -> dict[str, Any]:
        """The fields as a dict, those of `EPISODE_NEUTRAL_ENV_KEYS` at their defaults: the key of a cache of episodes.

        The neutral fields are held at their defaults rather than left out so that naming one more of them moves no
        cache key already built: a config that leaves it at its default (nearly all do) keeps its key. The limits of
        `EPISODE_LIMIT_KEYS` are left out at their defaults, for the same reason.
        """
        default = EnvConfig()
        neutral = {key: getattr(default, key) for key in EPISODE_NEUTRAL_ENV_KEYS}
        changed = self.changed_limits()
        settings = dataclasses.asdict(dataclasses.replace(self, **neutral))
        return {key: value for key, value in settings.items() if key not in EPISODE_LIMIT_KEYS or key in changed}

    def changed_limits(self) -> dict[str, Any]:
        """Those of `EPISODE_LIMIT_KEYS` that differ from their defaults: the ones the keys of caches count."""
        default = EnvConfig()
        return {key: getattr(self, key) for key in EPISODE_LIMIT_KEYS if getattr(self, key) != getattr(default, key)}


@dataclass
class RolloutConfig:
    """Sampling actions in the browser."""

    engine: str = "hf"
    """hf (transformers generate) | vllm (in-process vLLM) | openai (a served OpenAI-compatible model: evaluation and
    the ORM's data only, as a server cannot load each phase's new actor; recipes.webrl refuses it)."""
    concurrency: int = 8
    """Episodes run at once per process (their observations are batched into one engine call)."""
    temperature: float = 1.0
    """Training rollouts' temperature (WebRL: 1.0)."""
    top_p: float = 0.9
    """Training rollouts' nucleus threshold (the release's harness: 0.9)."""
    samples_per_task: int = 1
    """Training episodes of each phase task (WebRL: 1). Above 1, each task also runs as copies `ID~k`, each with
    its own sampling seed, so that a task the actor sometimes solves shows both outcomes in one phase."""
    eval_temperature: float = 0.0
    """Evaluation temperature (0 = greedy)."""
    max_tokens: int = 48
    """Tokens per action."""
    openai_url: str = ""
    """Base URL of the OpenAI-compatible server (engine=openai)."""

    def sampling_fields(self) -> tuple[float, float, int]:
        """What shapes a training rollout's samples (temperature, top_p, max_tokens): the cache keys of what is
        built from rollouts (the ORM's data and the ORM, its threshold) hold them."""
        return self.temperature, self.top_p, self.max_tokens

    def validate(self) -> None:
        one_of("rollout.engine", self.engine, ENGINES)
        at_least("rollout.concurrency", self.concurrency, 1)
        at_least("rollout.temperature", self.temperature, 0)
        within("rollout.top_p", self.top_p, 0, 1, open_low=True)
        at_least("rollout.samples_per_task", self.samples_per_task, 1)
        at_least("rollout.eval_temperature", self.eval_temperature, 0, "(0 = greedy)")
        at_least("rollout.max_tokens", self.max_tokens, 1)
        if self.engine == "openai" or self.openai_url:
            allowed = "must be an http(s):// URL (engine=openai needs one)"
            require(is_url(self.openai_url), "rollout.openai_url", self.openai_url, allowed)


@dataclass
class RewardConfig:
    """Where a trajectory's training outcome comes from."""

    source: str = "orm"
    """orm (WebRL: the ORM labels every rollout) | evaluator (programmatic evaluators, where tasks have them)."""
    threshold: float = 0.5
    """ORM P(YES) at or above which a trajectory counts as a success (replaced by the calibrated one, below)."""
    calibration_tasks: int = 0
    """Train tasks (outside the ORM's own rollouts) on which the SFT actor's rollouts choose the threshold that
    maximises the ORM's balanced accuracy (`webrl.orm_threshold`); 0 keeps `threshold`. 0 by default: the embedded
    default takes rewards from the evaluators, and its ORM's agreement is compared across runs at 0.5."""
    orm_labels: bool = True
    """Train (or reuse) the ORM and label every rollout with it. Required by source=orm; with source=evaluator the
    ORM's labels are only compared with the evaluators (`orm/agreement`) and scored for Filtered BC."""

    def validate(self) -> None:
        one_of("reward.source", self.source, REWARD_SOURCES)
        within("reward.threshold", self.threshold, 0, 1)
        at_least("reward.calibration_tasks", self.calibration_tasks, 0, "(0 = keep reward.threshold)")
        ok = self.source != "orm" or self.orm_labels
        require(ok, "reward.orm_labels", self.orm_labels, "must be true when reward.source=orm")


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

    def validate(self) -> None:
        self.train.validate("sft.train")
        at_least("sft.demo_concurrency", self.demo_concurrency, 1)
        at_least("sft.demo_tasks", self.demo_tasks, 0, "(0 = all)")


@dataclass
class ORMDataConfig:
    """The ORM's training trajectories: several policies' episodes, every one labelled by the task's evaluator."""

    actor_rollouts: bool = True
    """Roll out the SFT actor (orm.rollout_tasks, rollout.temperature): its mistakes are the ones the ORM will judge."""
    actor_variants: int = field(default=0, metadata=OMITTED_AT_DEFAULT)
    """Also roll the actor out on this many fresh-value variants of each of those tasks (embedded sites): a fitted actor
    repeats its training tasks (the SmolLM2 two-epoch actor: 85 % success at temperature 1) and shows its mistakes on
    new values, the tasks the curriculum hands it and the ORM judges. 0 = none."""
    demonstrations: bool = True
    """Add the demonstrations (evaluator-scored successes): the cleanest positives there are."""
    solver_noise: list[float] = field(default_factory=lambda: [0.1, 0.3, 0.5])
    """Detour chances of the reference solver (embedded sites), one run each ([] = none): low succeed, high fail."""
    solver_answer_noise: float = 0.2
    """Chance the noisy solver's answer is perturbed: 0.2 adds wrong answers on the right page, leaving most intact."""
    solver_tasks: int = 128
    """Train-split tasks per noise level (0 = all; a seeded sample per level): 128 keeps a level near a minute."""
    truncated: bool = True
    """Hard negatives: demonstrations cut before their last action (or answer), then an empty exit."""
    wrong_answer: bool = True
    """Hard negatives: demonstrations whose answer is another task's of the template, or a perturbed value."""
    hard_negative_tasks: int = 128
    """Demonstrations the hard negatives are made from (0 = all; a seeded sample): enough to teach the cases."""
    positive_fraction: float = 0.5
    """Share of successes in the training set, the larger class subsampled: 0.5 gives the ORM no prior verdict."""
    concurrency: int = 8
    """Browser episodes at once for the solver and hard-negative runs: 8, as demonstrations run on 2 cores."""

    def validate(self) -> None:
        for i, noise in enumerate(self.solver_noise):
            within(f"orm.data.solver_noise[{i}]", noise, 0, 1)
        within("orm.data.solver_answer_noise", self.solver_answer_noise, 0, 1)
        at_least("orm.data.solver_tasks", self.solver_tasks, 0, "(0 = all)")
        at_least("orm.data.hard_negative_tasks", self.hard_negative_tasks, 0, "(0 = all)")
        within("orm.data.positive_fraction", self.positive_fraction, 0, 1, open_low=True, open_high=True)
        at_least("orm.data.concurrency", self.concurrency, 1)
        at_least("orm.data.actor_variants", self.actor_variants, 0, "(0 = none)")

    def cache_fields(self) -> dict[str, Any]:
        """What an ORM cache key hashes: `actor_variants` only when set, so caches built before it keep their keys."""
        return key_fields(self)


@dataclass
class ORMConfig:
    """The outcome reward model, trained on evaluator-labelled trajectories of several policies (orm.data)."""

    train: StageSettings = field(
        default_factory=lambda: StageSettings(lr=1e-3, epochs=4.0, batch_size=8, warmup_ratio=0.05, schedule="cosine")
    )
    rollout_tasks: int = 256
    """Train-split tasks the SFT actor is rolled out on (temperature 1) to make ORM data (0 = all)."""
    data: ORMDataConfig = field(default_factory=ORMDataConfig)

    def validate(self) -> None:
        self.train.validate("orm.train")
        at_least("orm.rollout_tasks", self.rollout_tasks, 0, "(0 = all)")
        self.data.validate()

    def cache_fields(self) -> dict[str, Any]:
        """What the ORM's cache key hashes: every field, `data` as `ORMDataConfig.cache_fields` gives it."""
        return key_fields(self)


@dataclass
class LoraConfig(LoraSettings):
    """LoRA adapters on a frozen base (off by default: every weight trains)."""

    enabled: bool = False
    """Train LoRA adapters instead of every weight; a saved actor has them merged (a plain model directory)."""

    def active(self) -> LoraSettings | None:
        """The adapter settings when enabled, else None (full fine-tuning)."""
        return self if self.enabled else None

    def validate(self, key: str) -> None:
        at_least(f"{key}.r", self.r, 1)
        positive(f"{key}.alpha", self.alpha)
        within(f"{key}.dropout", self.dropout, 0, 1, open_high=True)
        require(bool(self.target_modules), f"{key}.target_modules", self.target_modules, "must name a layer")


@dataclass
class ActorConfig:
    """The actor update."""

    train: StageSettings = field(default_factory=lambda: StageSettings(lr=1e-4, epochs=1.0, batch_size=8))
    loss: ActorLossConfig = field(default_factory=ActorLossConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    order_seed: int | None = None
    """Seed of this stage's batch order in place of the run's `seed` (None: `seed`). Changing it alone reruns the
    stage on the same data in another order, nothing else: how far a stage's outcome moves between runs is measured
    this way, on a branch of a finished run (`recipes.branch`, docs/experiments.md)."""

    def validate(self) -> None:
        """The stage's settings, the loss's and advantage's own checks, and the values those leave unchecked."""
        self.train.validate("actor.train")
        self.lora.validate("actor.lora")
        self.loss.validate("actor.loss")
        self.advantage.validate("actor.advantage")
        within("actor.loss.positive_confidence", self.loss.positive_confidence, 0, 1)
        within("actor.loss.negative_confidence", self.loss.negative_confidence, 0, 1)
        at_least("actor.loss.sft_weight", self.loss.sft_weight, 0)
        within("actor.advantage.gamma", self.advantage.gamma, 0, 1)
        within("actor.advantage.margin", self.advantage.margin, 0, 1)
        at_least("actor.advantage.positive", self.advantage.positive, 0)
        require(self.advantage.negative <= 0, "actor.advantage.negative", self.advantage.negative, "must be <= 0")


@dataclass
class CriticConfig:
    """The critic update (runs before the actor's in each phase)."""

    train: StageSettings = field(default_factory=lambda: StageSettings(lr=1e-4, epochs=2.0, batch_size=8))
    lora: LoraConfig = field(default_factory=LoraConfig)
    head_init_std: float = HEAD_INIT_STD
    """Std of the value heads' first two Linear weights (the release's 0.2); the heads' logits scale with its square,
    so a smaller value starts V nearer 1/2 and the critic's loss nearer ln 2 per head (docs/method.md §7.2)."""
    order_seed: int | None = None
    """Seed of this stage's batch order in place of the run's `seed` (None: `seed`). Changing it alone reruns the
    stage on the same data in another order, nothing else: how far a stage's outcome moves between runs is measured
    this way, on a branch of a finished run (`recipes.branch`, docs/experiments.md)."""

    def validate(self) -> None:
        self.train.validate("critic.train")
        self.lora.validate("critic.lora")
        positive("critic.head_init_std", self.head_init_std)


@dataclass
class ReplayConfig:
    """The replay buffer of earlier phases' successes."""

    enabled: bool = True
    """Mix replayed steps into each phase (False = the 'without replay' ablation)."""
    max_scored_steps: int = 0
    """Score at most this many candidate steps per phase (0 = all): a seeded sample of whole trajectories drawn
    from those the filter could keep (the first success per intent), so no budget goes to failures."""
    filter: ReplayFilterConfig = field(default_factory=ReplayFilterConfig)

    def validate(self) -> None:
        at_least("replay.max_scored_steps", self.max_scored_steps, 0, "(0 = all)")
        self.filter.validate("replay.filter")


@dataclass
class WebRLConfig:
    """A whole WebRL run: phases of curriculum, rollouts, labels, replay, critic, actor, sync, evaluation."""

    output_dir: str = "runs/webrl_tiny"
    """Run directory (phases, replay, checkpoints, metrics), relative to the current folder unless absolute;
    rerunning the same command resumes from it."""
    seed: int = 0
    """Seed of the run's random choices: the starting models' (demonstration sample, tiny model's weights, SFT and ORM
    data samples and order, the ORM threshold's calibration tasks), the samples of phase 0's training tasks
    (env.train_tasks) and of the evaluation tasks (env.test_tasks), the evaluation's sampling, and, derived per phase
    and stage (`run_state.stage_seed`): python/numpy/torch at the start of every stage, the rollouts' sampling, the
    replay sample, the critic's and actor's batch order, and the top-up of a short curriculum phase from unused
    training tasks. The curriculum's own draws (the failures shown to the generator, its sampling seed, new template
    values, the page facts' order, the choice of kept tasks) come from `curriculum.seed` alone, not from this seed."""
    phases: int = 3
    """WebRL phases after phase 0 (the paper runs 8)."""
    curriculum_enabled: bool = True
    """Generate new tasks from failures (False = the 'without curriculum' ablation: reuse phase-0 tasks)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    orm: ORMConfig = field(default_factory=ORMConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    engines: EnginePlacement = field(default_factory=EnginePlacement)
    reward: RewardConfig = field(default_factory=RewardConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    curriculum: CurriculumConfig = field(default_factory=lambda: CurriculumConfig(mode="template", tasks_per_phase=48))
    fabric: FabricConfig = field(default_factory=FabricConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    resume: ResumeConfig = field(default_factory=ResumeConfig)

    def validate(self) -> None:
        """Every value, section by section, then the rules across sections; each error names the key."""
        require(bool(self.output_dir), "output_dir", self.output_dir, "must name a directory")
        at_least("seed", self.seed, 0)
        at_least("phases", self.phases, 0)
        for section in (self.model, self.sft, self.orm, self.env, self.rollout, self.reward, self.actor, self.critic):
            section.validate()
        for section in (self.replay, self.curriculum, self.fabric, self.engines, self.tracking):
            section.validate()
        self.resume.validate(flatten(dataclasses.asdict(self)))
        self.engines.validate_engine(self.rollout.engine)
        if self.rollout.max_tokens >= self.model.max_length:
            raise invalid(
                "rollout.max_tokens",
                self.rollout.max_tokens,
                f"must be below model.max_length ({self.model.max_length}), which also holds the prompt",
            )

    def require_for_recipe(self, *, trains: bool, runs_phases: bool) -> None:
        """The rules beyond `validate` of a recipe that `trains` (`require_held_out_apart`, `require_starting_actor`)
        and of one that `runs_phases` (`require_phase_loop`), in the order their errors are reported; a recipe and a
        comparison planning it check the same."""
        if trains:
            self.require_held_out_apart()
        if runs_phases:
            self.require_phase_loop()
        if trains:
            self.require_starting_actor()

    def require_phase_loop(self) -> None:
        """For a recipe that runs WebRL's phases (`recipes.webrl`): the rules of the parts only the phases use.

        The curriculum's task sources and an engine that takes each phase's new actor matter to the phases alone:
        `recipes.evaluate` on a WebArena suite or through a served model (`rollout.engine=openai`) reads neither the
        curriculum nor a trained actor, and is not refused over them. A run of the phases is refused at load, not at
        phase 0's rollouts, after the SFT actor and the ORM have been built.
        """
        if self.rollout.engine not in RELOADABLE_ENGINES:
            raise invalid(
                "rollout.engine",
                self.rollout.engine,
                f"must be one of {', '.join(RELOADABLE_ENGINES)} for WebRL's phases: a served model cannot load each "
                "phase's new actor (openai fits recipes.evaluate, recipes.orm and model.generator)",
            )
        template_tasks = self.curriculum.mode in ("template", "mixed")
        if self.curriculum_enabled and template_tasks and self.env.suite != "embedded":
            # `reinstantiate` knows only the embedded sites' templates: an external task would stop phase 1, or, when
            # its template id matches an embedded one, silently become a task of the embedded site.
            raise invalid(
                "curriculum.mode",
                self.curriculum.mode,
                f"must be llm with env.suite={self.env.suite!r}: template and mixed modes draw new values from the "
                "embedded sites' templates only (or turn the curriculum off: curriculum_enabled=false)",
            )
        if self.curriculum_enabled and self.curriculum.mode != "template" and self.reward.source == "evaluator":
            # An LLM-made task has no evaluator, so its episodes would be rolled out and never labelled: no training
            # signal, and no failures to grow the next phase from.
            raise invalid(
                "curriculum.mode",
                self.curriculum.mode,
                "makes tasks with an LLM, which have no evaluator: use reward.source=orm, or curriculum.mode=template",
            )

    def require_starting_actor(self) -> None:
        """For a recipe that trains: on a suite other than the embedded sites, a starting actor (`model.actor`).

        SFT's demonstrations come from the embedded sites' reference solver, which has a plan for their tasks only:
        on a WebArena suite it would fail every task, on the live sites, and stop with no demonstration.
        """
        if self.env.suite != "embedded" and not self.model.actor:
            raise invalid(
                "model.actor",
                self.model.actor,
                f"must name a starting actor with env.suite={self.env.suite!r}: demonstrations come from the embedded "
                "sites' reference solver, which has no plan for another suite's tasks (fine-tune one on that suite's "
                "demonstrations first)",
            )

    def require_held_out_apart(self) -> None:
        """For a recipe that trains: its held-out tasks are none of its training tasks (embedded splits).

        `validation` is carved from `train`, so choosing settings on it needs `env.train_split=train_fit`;
        training on `test` or `validation`, or evaluating on `train`, would score tasks the model trained on.
        Evaluation alone (`recipes.evaluate`) may read any split, e.g. `train` to see how well SFT fits it.
        """
        env = self.env
        if env.suite != "embedded":
            return
        require(
            env.train_split in ("train", TRAIN_FIT),
            "env.train_split",
            env.train_split,
            f"a training recipe trains on train or {TRAIN_FIT}, never on tasks it is evaluated on",
        )
        require(
            env.test_split in ("test", VALIDATION),
            "env.test_split",
            env.test_split,
            f"a training recipe evaluates on test or {VALIDATION}, never on tasks it trained on",
        )
        require(
            not (env.test_split == VALIDATION and env.train_split != TRAIN_FIT),
            "env.test_split",
            env.test_split,
            f"the validation tasks are part of {env.train_split}: train on env.train_split={TRAIN_FIT} to evaluate "
            "on them",
        )

    def resolve(self) -> None:
        """Fix what depends on where the config is read, once (`load_config` calls this): paths and `auto` precision.

        Each path of `PATH_KEYS` and `KEYWORD_PATH_KEYS` (`model.base`, `env.suite` unless a keyword) becomes
        absolute, so that every stage, every process a launcher starts, config.json and the cache keys name the same
        places, whatever folder each of them runs in; an empty path (model.actor, model.orm unset) stays empty; a
        leading `~` of each path of `HOME_PATH_KEYS` is the home folder, which a shell
        leaves unexpanded in `model.base=~/llama` (`model.base` is no variable name) and a YAML file always does.
        `fabric.precision=auto` becomes this machine's precision, so that
        config.json, the cache keys of the SFT and ORM checkpoints and a resume see the precision that ran.
        """
        self.fabric.precision = self.fabric.concrete_precision()
        for key in HOME_PATH_KEYS:
            self._convert(key, os.path.expanduser)
        for key in (*PATH_KEYS, *KEYWORD_PATH_KEYS):
            self._convert(key, partial(absolute_unless_keyword, key))

    def _convert(self, key: str, convert: Callable[[str], str]) -> None:
        """Replace the value of the dotted `key` (one level of section at most) with `convert(value)`."""
        section, _, name = key.rpartition(".")
        owner = getattr(self, section) if section else self
        setattr(owner, name, convert(getattr(owner, name)))
