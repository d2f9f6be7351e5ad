"""The models RL starts from, each built once and cached: demonstrations, the base model, the SFT actor, the ORM.

WebRL starts from an SFT actor and needs an ORM to label rollouts (docs/method.md §2.1, §5). The
paper's SFT data and ORM data were never released; here the project makes both itself: the
embedded sites' reference solver writes demonstrations, SFT trains on them, and the ORM trains on
a balanced set of evaluator-labelled trajectories of several policies (`webrl.orm_data`: the SFT
actor's rollouts, the demonstrations, the reference solver with noise, and demonstrations made
wrong). Each product is cached under `model.cache_dir` by a key of everything it depends on,
so the second run reuses it and a changed setting rebuilds it. Each is built under a lock of its
own (`webrl.cache_builds.build_lock`): of two runs that need the same product at once, one builds it
and the other waits and reuses it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from lightning.fabric import Fabric

from webrl.cache_builds import build_lock, build_once, publish_model_dir, staging_dir
from webrl.code_version import code_version
from webrl.data.atomic_io import write_text_atomic
from webrl.data.datamodule import ReplayDataModule, setup_loader
from webrl.data.length_batches import LengthGroupedBatches
from webrl.data.prompts import trajectory_orm_prompt, uses_chat_template
from webrl.data.trajectory import Trajectory, is_full_score, is_success, read_trajectories, write_trajectories
from webrl.key_fields import key_fields
from webrl.loop_config import EnvConfig, ORMDataConfig, SFTConfig, WebRLConfig
from webrl.modules.lm import load_tokenizer
from webrl.modules.orm import OutcomeRewardModule
from webrl.modules.sft import SFTModule
from webrl.orm_data import ORMDataBuilder, format_counts
from webrl.stage_checkpoint import StageCheckpoint
from webrl.stage_settings import StageSettings
from webrl.training import save_model_dir, setup_for_training, train_module
from webrl.web_environment import WebEnvironment

log = logging.getLogger(__name__)


def cache_key(*parts: Any) -> str:
    """A short stable hash of JSON-able parts (dataclasses included, as `webrl.key_fields` gives them)."""
    plain = [key_fields(part) for part in parts]
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:12]


def collect_demonstrations(
    env: WebEnvironment | None,
    out_path: Path,
    limit: int,
    concurrency: int,
    tokenizer: Any = None,
    *,
    progress: bool = True,
) -> list[Trajectory]:
    """Reference-solver trajectories on the train split (or a seeded sample of `limit` tasks); the successes.

    The solver runs through `env.run_episodes`, the driver of rollouts, standing in for the actor of
    `tokenizer` (None: the completion form): each step records the prompt that actor sees in its
    rollouts, with the same observation budget, limits and browser, and SFT trains on that record.
    Every episode is appended to `out_path` as it ends, so an interrupted collection resumes where it
    stopped; once all are in, each is labelled with its outcome and the file is rewritten in task order,
    with a `.done` marker beside it. Tasks the solver fails (there should be none) are reported and
    left out, not allowed to become demonstrations. `progress` shows the episodes' progress (a bar on a
    terminal, a periodic line elsewhere: `webrl.progress`); ranks other than 0 pass False. The collection
    runs once (`build_once`): two processes appending episodes to one file would interleave them.
    """
    build_once(
        out_path,
        lambda: _run_solver(env, out_path, limit, concurrency, tokenizer, progress),
        done=lambda path: demonstrations_done(path).exists(),
        marker=demonstrations_done,
    )
    trajectories = read_trajectories(out_path)
    # The file keeps the site URLs of the launch that collected it, and the embedded sites take a free port at
    # each launch: a demonstration replayed later (the ORM's hard negatives) must start at this launch's sites.
    # (None reads a finished file as it was stored.)
    if env is not None:
        here = {task.task_id: task for task in env.suite(env.config.env.train_split, 0, env.config.seed)}
        for trajectory in trajectories:
            trajectory.task = here.get(trajectory.task.task_id, trajectory.task)
    successes = [t for t in trajectories if is_full_score(t.eval_reward or 0.0)]
    if len(successes) < len(trajectories):
        failed = sorted({t.task.task_id for t in trajectories} - {t.task.task_id for t in successes})
        log.warning(
            "the reference solver failed %d of %d tasks (%s); they are not demonstrations",
            len(failed),
            len(trajectories),
            ", ".join(failed[:10]),
        )
    if not successes:
        raise RuntimeError(f"{out_path}: no successful demonstration")
    return successes


def _run_solver(
    env: WebEnvironment, out_path: Path, limit: int, concurrency: int, tokenizer: Any, progress: bool
) -> None:
    """The reference solver's episodes into `out_path`, each labelled with its outcome, then the `.done` marker."""
    from webrl.inference.scripted import ScriptedEngine

    tasks = env.suite(env.config.env.train_split, limit, env.config.seed)
    solver = ScriptedEngine.for_embedded_sites(tokenizer)
    trajectories, _ = env.run_episodes(
        solver,
        tasks,
        out_path,
        phase=0,
        evaluation=True,
        seed=env.config.seed,
        concurrency=concurrency,
        progress=progress,
    )
    for trajectory in trajectories:
        _label_with_outcome(trajectory)
    write_trajectories(out_path, trajectories)
    write_text_atomic(demonstrations_done(out_path), json.dumps({"code": code_version()}))


def demonstrations_done(path: Path) -> Path:
    """The marker written once every demonstration of `path` is in: it holds the code that recorded them."""
    return path.with_name(path.name + ".done")


def _label_with_outcome(trajectory: Trajectory) -> None:
    """The evaluator's score is the outcome, and WebRL copies the outcome onto every step."""
    trajectory.outcome = trajectory.eval_reward or 0.0
    for step in trajectory.steps:
        step.reward = trajectory.outcome


def demonstration_tokenizer(config: WebRLConfig) -> Any:
    """The tokenizer of the actor that demonstrations stand in for; None for the tiny model.

    It decides the prompt form demonstrations record (the chat form with a chat template), so SFT
    trains on the prompts its actor sees in rollouts. The tiny model's tokenizer is trained on the
    demonstrations themselves and has no chat template: they are recorded in the completion form.
    """
    if config.model.actor:
        path = Path(config.model.actor)
    elif config.model.base == "tiny":
        return None
    else:
        path = base_model_dir(config, [])
    return load_tokenizer(path)


def demonstrations_path(config: WebRLConfig, tokenizer: Any) -> Path:
    """The demonstrations' cache file, keyed by what their records depend on.

    Besides the suite and the sample, that is how the driver records them: the prompt form (the chat
    template, if any), the observation budget and region and the episode limits (the other limits than the step
    limit only away from their defaults, so that the files made before they were settings keep their names).
    """
    recording = {
        "chat_template": tokenizer.chat_template if uses_chat_template(tokenizer) else None,
        "html_chars": config.env.html_chars,
        "observe_region": config.env.observe_region,
        "max_steps": config.env.max_steps,
        **config.env.changed_limits(),
    }
    key = cache_key(suite_fingerprint(config), config.env.train_split, config.sft.demo_tasks, config.seed, recording)
    return Path(config.model.cache_dir) / f"demos-{key}.jsonl"


def ensure_demonstrations(config: WebRLConfig, fabric: Fabric, env: WebEnvironment) -> tuple[Path, list[Trajectory]]:
    """The cached demonstrations' file and successes (the reference solver runs on first use only)."""
    tokenizer = demonstration_tokenizer(config)
    path = demonstrations_path(config, tokenizer)
    if fabric.is_global_zero:
        fabric.print(f"[sft] demonstrations: {path} (the reference solver runs once, then it is cached)")
    demo_tasks, concurrency = config.sft.demo_tasks, config.sft.demo_concurrency
    return path, collect_demonstrations(env, path, demo_tasks, concurrency, tokenizer, progress=fabric.is_global_zero)


def suite_fingerprint(config: WebRLConfig) -> str:
    """What demonstrations depend on: the task suite and, for the embedded sites, the sites and solver code."""
    if config.env.suite != "embedded":
        return config.env.suite
    import webrl.env.sites as sites

    root = Path(sites.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json", ".html", ".css"):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def base_model_dir(config: WebRLConfig, demonstrations: list[Trajectory], demos_path: Path | None = None) -> Path:
    """The model SFT starts from: a tiny Llama built from config, SmolLM2-135M, or a given directory.

    The tiny model's tokenizer is trained on `demonstrations`, the successes of the file `demos_path` (by default
    the one this config records, `demonstrations_path`), and cached under `tiny_model_dir`; it is built under a
    `build_once`, so that a second process asking for it at the same time waits and reuses it.
    """
    model = config.model
    if model.base == "smollm2":
        from webrl.modules.model_factory import SMOLLM2_DIR_NAME, convert_smollm2

        return convert_smollm2(Path(model.cache_dir) / SMOLLM2_DIR_NAME)
    if model.base != "tiny":
        path = Path(model.base)
        if not (path / "config.json").exists():
            raise ValueError(f"model.base={model.base!r} is neither tiny, smollm2 nor a model directory")
        return path
    from webrl.modules.model_factory import build_tiny_model

    if demos_path is None:
        demos_path = demonstrations_path(config, demonstration_tokenizer(config))
    target = tiny_model_dir(config, demos_path)

    def build() -> None:
        corpus = [text for t in demonstrations for step in t.steps for text in (step.prompt, step.response)]
        tmp = staging_dir(target)
        build_tiny_model(
            tmp,
            corpus,
            vocab_size=model.tiny_vocab_size,
            hidden_size=model.tiny_hidden_size,
            num_layers=model.tiny_layers,
            num_heads=max(1, model.tiny_hidden_size // 64),
            seed=config.seed,
        )
        shape = (model.tiny_vocab_size, model.tiny_hidden_size, model.tiny_layers, config.seed)
        publish_model_dir(tmp, target, {"shape": shape, "demonstrations": demos_path.name})

    build_once(target, build)
    return target


def tiny_model_dir(config: WebRLConfig, demos_path: Path) -> Path:
    """The tiny base model's cache dir: keyed by its shape, the seed and the demonstrations file its BPE tokenizer
    is trained on.

    The file's name is the demonstrations' own key (`demonstrations_path`): a quick run's few demonstrations (a
    tokenizer trained on a small corpus has a smaller vocabulary) or another split's (`train` holds the validation
    tasks' pages that `train_fit` must not see) make a tokenizer of their own, not one every later run reuses.
    """
    model = config.model
    shape = (model.tiny_vocab_size, model.tiny_hidden_size, model.tiny_layers, config.seed)
    return Path(model.cache_dir) / f"tiny-{cache_key(shape, demos_path.name)}"


def sft_dir(config: WebRLConfig, base: Path, demos_path: Path) -> Path:
    """The SFT checkpoint's cache dir: keyed by its start model, settings, numeric precision, number of training
    processes (`training_layout`) and demonstrations file.

    `sft.demo_concurrency` is held at its default: how many solver episodes ran at once changes no demonstration
    (their file's key leaves it out too), so it cannot change the SFT actor.
    """
    key = cache_key(
        str(base),
        demos_path.name,
        dataclasses.replace(config.sft, demo_concurrency=SFTConfig().demo_concurrency),
        config.model.max_length,
        config.env.suite,
        config.seed,
        config.fabric.precision,
        *training_layout(config),
    )
    return Path(config.model.cache_dir) / f"sft-{key}"


def training_layout(config: WebRLConfig) -> tuple[dict[str, int], ...]:
    """The key part of a trained cache entry (SFT, ORM) that says how many processes trained it, where not one.

    A stage's `batch_size` is per process, so two processes train on batches twice as large in half as many steps:
    another model. Left out for one process, so that the keys built before it was a part stay.
    """
    world_size = config.fabric.devices * config.fabric.num_nodes
    return ({"world_size": world_size},) if world_size > 1 else ()


def train_sft(
    config: WebRLConfig,
    fabric: Fabric,
    base: Path,
    trajectories: list[Trajectory],
    target: Path,
    *,
    settings: StageSettings,
    name: str = "sft",
    inputs: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Behaviour cloning on every step of `trajectories` (demonstrations, or Filtered BC's kept rollouts).

    `inputs`: the settings the result depends on that `target`'s path does not encode (`StageCheckpoint.inputs`).
    """
    module = SFTModule(base, lr=settings.lr)
    data = ReplayDataModule(
        module.tokenizer,
        current=trajectories,
        batch_size=settings.batch_size,
        max_length=config.model.max_length,
        seed=config.seed,
        group_by_length=settings.group_by_length,
    )
    data.setup()
    wrapped, optimizer = setup_for_training(
        fabric, module, activation_checkpointing=config.fabric.activation_checkpointing
    )
    loader = setup_loader(fabric, data.actor_dataloader())
    checkpoint = StageCheckpoint.beside(target, config.resume.stage_checkpoint_minutes, inputs)
    metrics = train_module(fabric, wrapped, optimizer, loader, settings, name=name, checkpoint=checkpoint)
    save_model_dir(fabric, module.model, module.tokenizer, target, {"base": str(base), "metrics": metrics})
    checkpoint.discard(fabric)
    return metrics


def orm_training_pairs(trajectories: list[Trajectory], tokenizer: Any) -> list[tuple[str, float]]:
    """(ORM prompt, label) pairs of already balanced trajectories (`orm_data.balance`), labels from the evaluators."""
    chat = tokenizer if uses_chat_template(tokenizer) else None
    return [
        (trajectory_orm_prompt(t, chat_template_tokenizer=chat), 1.0 if is_success(t.eval_reward) else 0.0)
        for t in trajectories
        if t.judged_by_evaluator and t.steps
    ]


def train_orm(
    config: WebRLConfig,
    fabric: Fabric,
    base: Path,
    trajectories: list[Trajectory],
    target: Path,
    data: dict[str, dict[str, int]] | None = None,
) -> dict[str, float]:
    """SFT of the YES/NO verdict on balanced evaluator-labelled trajectories; saves a model directory at `target`.

    `data` (the per-source counts of `orm_data.source_counts`) is recorded beside the model.
    """
    settings = config.orm.train
    module = OutcomeRewardModule(
        base, lr=settings.lr, max_length=config.model.max_length, threshold=config.reward.threshold
    )
    examples = orm_training_pairs(trajectories, module.tokenizer)
    loader = orm_loader(
        fabric,
        examples,
        settings,
        config.seed,
        lambda rows: OutcomeRewardModule.collate(module.tokenizer, rows, config.model.max_length),
    )
    wrapped, optimizer = setup_for_training(
        fabric, module, activation_checkpointing=config.fabric.activation_checkpointing
    )
    checkpoint = StageCheckpoint.beside(target, config.resume.stage_checkpoint_minutes)
    metrics = train_module(fabric, wrapped, optimizer, loader, settings, name="orm", checkpoint=checkpoint)
    metrics["orm/examples"] = float(len(examples))
    info = {"base": str(base), "metrics": metrics, "data": data or {}}
    save_model_dir(fabric, module.model, module.tokenizer, target, info)
    checkpoint.discard(fabric)
    return metrics


def orm_loader(
    fabric: Fabric, examples: list[tuple[str, float]], settings: StageSettings, seed: int, collate: Any
) -> Any:
    """The ORM's loader, set up under `fabric`: this rank's share of `examples` in an order that only `seed` sets.

    Sampled as the actor and critic stages are (`ReplayDataModule`): under `group_by_length`, batches of similar
    prompt lengths (`LengthGroupedBatches`, rank-aware); otherwise, on several processes, a `DistributedSampler`
    seeded by `seed`, and on one a shuffle by a generator of its own, so that the order depends neither on what
    the process drew before nor on Lightning's replacement sampler, seeded from `PL_GLOBAL_SEED` (never set here).
    """
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    world, rank = fabric.world_size, fabric.global_rank
    if settings.group_by_length:
        lengths = [len(prompt) for prompt, _ in examples]
        batches = LengthGroupedBatches(lengths, settings.batch_size, seed=seed, rank=rank, world=world)
        return setup_loader(fabric, DataLoader(examples, batch_sampler=batches, collate_fn=collate))
    if world > 1:
        sampler = DistributedSampler(examples, num_replicas=world, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(examples, batch_size=settings.batch_size, sampler=sampler, collate_fn=collate)
    else:
        generator = torch.Generator().manual_seed(seed)
        loader = DataLoader(
            examples, batch_size=settings.batch_size, shuffle=True, generator=generator, collate_fn=collate
        )
    return setup_loader(fabric, loader)


def ensure_sft(config: WebRLConfig, fabric: Fabric, env: WebEnvironment) -> tuple[Path, list[Trajectory]]:
    """The cached SFT actor (built on first use, once: `build_once`) and the demonstrations it was trained on.

    On another suite than the embedded sites the reference solver, the only source of demonstrations, knows no task:
    the starting actor is `model.actor` (`WebRLConfig.require_starting_actor`) and there are no demonstrations.
    """
    if config.env.suite != "embedded" and config.model.actor:
        return Path(config.model.actor), []
    if fabric.is_global_zero:
        demos_path, demos = ensure_demonstrations(config, fabric, env)
        base_model_dir(config, demos, demos_path)
    fabric.barrier()
    if not fabric.is_global_zero:  # rank 0 built them above; the others read the finished file
        demos_path, demos = ensure_demonstrations(config, fabric, env)
    base = base_model_dir(config, demos, demos_path)
    if config.model.actor:
        return Path(config.model.actor), demos
    target = sft_dir(config, base, demos_path)

    def build() -> None:
        fabric.print(f"[sft] training {target.name} on {sum(len(t.steps) for t in demos)} demonstration steps")
        train_sft(config, fabric, base, demos, target, settings=config.sft.train)

    build_once(target, build, fabric)
    discard_left_checkpoint(config, fabric, target)
    return target, demos


def discard_left_checkpoint(config: WebRLConfig, fabric: Fabric, target: Path) -> None:
    """Remove the training state `<target>.resume` that a build killed between publishing `target` and discarding its
    checkpoint left behind (1.6 GB for SmolLM2): once `target` is built, nothing will ever resume from it."""
    StageCheckpoint.beside(target, config.resume.stage_checkpoint_minutes).discard(fabric)


ORM_NEUTRAL_ENV_KEYS = ("test_split", "test_tasks")
"""`EnvConfig` fields that shape the run's evaluation, which no source of the ORM's data or of its threshold's
calibration reads (they sample their tasks from `env.train_split` by `orm.rollout_tasks` and their own counts):
`orm_episode_settings` holds them at their defaults. `env.train_tasks` is not one of them although those sources do
not read it either: held at its default, it would rename the ORM caches of `webrl_smollm2`, which sets it to 48."""


def orm_episode_settings(config: WebRLConfig) -> dict[str, Any]:
    """The env settings the ORM's caches are keyed by: `EnvConfig.episode_settings`, those of `ORM_NEUTRAL_ENV_KEYS`
    at their defaults (held rather than left out, so that a config at the defaults keeps the keys built before)."""
    default = EnvConfig()
    return {**config.env.episode_settings(), **{key: getattr(default, key) for key in ORM_NEUTRAL_ENV_KEYS}}


def orm_data_fields(config: WebRLConfig) -> dict[str, Any]:
    """What the ORM's keys hash of `orm.data` (`ORMDataConfig.cache_fields`), its `concurrency` at the default:
    how many scripted episodes run at once changes none of them (the noisy solver draws from a generator seeded by
    task and step), so it moves no cache."""
    return dataclasses.replace(config.orm.data, concurrency=ORMDataConfig().concurrency).cache_fields()


def orm_dir(config: WebRLConfig, sft: Path) -> Path:
    """The ORM's cache dir: keyed by the SFT actor, the demonstrations (`orm_demonstrations`), every setting of its
    data (`orm.data`) and training, and how many processes train it (`training_layout`).

    Of `env`, only what shapes the ORM's episodes counts (`orm_episode_settings`): another browser build, context
    reuse or evaluation split makes the same ORM; nor does `orm.data.concurrency` count (`orm_data_fields`).
    """
    key = cache_key(
        str(sft),
        {**config.orm.cache_fields(), "data": orm_data_fields(config)},
        orm_episode_settings(config),
        config.rollout.sampling_fields(),
        config.model.max_length,
        config.seed,
        config.fabric.precision,
        *orm_demonstrations(config),
        *training_layout(config),
    )
    return Path(config.model.cache_dir) / f"orm-{key}"


def orm_demonstrations(config: WebRLConfig) -> tuple[str, ...]:
    """The key part of the ORM's caches that names the demonstrations its data holds, where the actor's path does not.

    The ORM's data holds the demonstrations and the hard negatives made of them (`orm.data`). A built SFT actor's
    path already names them (`sft_dir`), so nothing is added then and the keys built before stay; a given actor's
    (`model.actor`) does not, and `sft.demo_tasks` or another version of the sites changes the demonstrations only.
    """
    data = config.orm.data
    if not config.model.actor or not (data.demonstrations or data.truncated or data.wrong_answer):
        return ()
    return (demonstrations_path(config, demonstration_tokenizer(config)).name,)


def orm_data_dir(config: WebRLConfig, sft: Path) -> Path:
    """Where the ORM's training episodes are kept: keyed by what makes them, not by how the ORM trains on them,
    so that a change of `orm.train` reuses them (for SmolLM2 they are 8 minutes of rollouts); of `env`, only what
    shapes these episodes counts (`orm_episode_settings`), and of `orm.data` what `orm_data_fields` gives. The hard
    negatives are replays of the demonstrations: a given actor's key names them (`orm_demonstrations`)."""
    key = cache_key(
        str(sft),
        config.orm.rollout_tasks,
        orm_data_fields(config),
        orm_episode_settings(config),
        config.rollout.sampling_fields(),
        config.seed,
        config.fabric.precision,
        *orm_demonstrations(config),
    )
    return Path(config.model.cache_dir) / f"orm-data-{key}"


def ensure_orm(
    config: WebRLConfig, fabric: Fabric, env: WebEnvironment, engine: Any, sft: Path, demos: list[Trajectory]
) -> Path:
    """The cached ORM, built on first use from the evaluator-labelled trajectories of `orm.data`'s sources.

    The sources' episodes are kept under `orm_data_dir` beside it, so an interrupted build resumes and a build
    with other training settings reuses them. The ORM is built once (`build_once`): a run that needs it while
    another builds it waits and reuses it; its data is written under a `build_lock` of its own, so that two ORMs of
    one data set (other training settings) never write its episodes at once.
    """
    if config.model.orm:
        return Path(config.model.orm)
    target = orm_dir(config, sft)

    def build() -> None:
        data_dir = orm_data_dir(config, sft)
        with build_lock(data_dir, fabric):
            builder = ORMDataBuilder(config, fabric, env, data_dir, demonstration_tokenizer(config))
            trajectories, counts = builder.build(engine, demos)
        if config.engines.sleep and hasattr(engine, "sleep"):
            engine.sleep()  # the ORM trains on the GPU the engine shares; the loop wakes it for rollouts
        fabric.print(f"[orm] training on {len(trajectories)} balanced trajectories\n{format_counts(counts)}")
        train_orm(config, fabric, sft, trajectories, target, data=counts)

    build_once(target, build, fabric)
    discard_left_checkpoint(config, fabric, target)
    return target
