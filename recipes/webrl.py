"""WebRL end to end: SFT (cached), ORM (cached), then curriculum phases of rollouts and training.

Embedded default (tiny model, embedded sites, CPU; the first run also builds the SFT and ORM
checkpoints and caches them in model.cache_dir, ~/.cache/webrl by default):

    python -m recipes.webrl

The run that shows learning on a 2-core CPU (`make run`: SmolLM2-135M, a short SFT, one WebRL phase, all 230 test
tasks; it ends by pairing the last phase with phase 0 on those tasks, also kept in `<output_dir>/gain.json`):

    python -m recipes.webrl --config webrl_smollm2 --config webrl_release_loss --config webrl_learning

Other configs and overrides (YAML then key=value; `--help` lists every key with the value it would take,
`--print-config` prints the resolved config as YAML; W&B's WANDB_MODE, WANDB_PROJECT, WANDB_ENTITY
and WANDB_DIR override the files, and key=value overrides them):

    python -m recipes.webrl --config webrl_smollm2 phases=2 rollout.concurrency=4
    python -m recipes.webrl fabric.strategy=ddp fabric.devices=2            # 2 processes (gloo on CPU)
    python -m recipes.webrl --config webrl_llama8b_webarena model.base=... model.actor=... env.suite=... env.url_map=...
                                                               # GPUs, WebArena-Lite (README: a real deployment)

Rerunning the same command resumes from `output_dir` after a crash or a kill. The directory keeps the
config it was started with (`config.json`): relaunching it with settings that change results stops and
names them; `resume.allow_changes=[key, ...]` accepts such changes on purpose. `--dry-run` checks the
config and prints the stage plan (done, next, on which tasks) without starting a browser or a model.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from webrl.cache_builds import build_metrics
from webrl.config import ConfigError, config_to_dict, load_config
from webrl.evaluation.phase_gain import format_phase_gain, phase_gain, write_phase_gain
from webrl.loop_config import WebRLConfig
from webrl.run_config import check_run_config, keep_run_config
from webrl.run_layout import RunLayout
from webrl.run_plan import describe_plan
from webrl.run_state import RunState
from webrl.tracking import WANDB_ENVIRONMENT, setup_logging

if TYPE_CHECKING:
    from lightning.fabric import Fabric

CONFIG_DIR = Path(__file__).parent / "configs"
DEFAULT_CONFIG = CONFIG_DIR / "webrl_tiny.yaml"
RecipeConfig = TypeVar("RecipeConfig", bound=WebRLConfig)


def recipe_config(
    argv: list[str] | None,
    schema: type[RecipeConfig] = WebRLConfig,
    *,
    usage: str = "",
    help_keys: tuple[str, ...] = (),
    trains: bool = True,
    runs_phases: bool = True,
) -> RecipeConfig:
    """Set up logging and read a recipe's config (the default file, `--config`, W&B's variables, then key=value).

    `schema` is the run config or a recipe's extension of it. A bad key or value ends the program
    with one line that names it, never a traceback. `usage` and `help_keys` are what `--help` shows.
    A recipe that `trains` must hold its evaluation tasks apart from its training tasks and have a starting actor
    for its suite; one that `runs_phases` (`recipes.webrl`) must have a curriculum and an engine the phases can use,
    which the other recipes never read (`WebRLConfig.require_for_recipe`).
    """
    setup_logging()
    try:
        config = load_config(
            schema,
            argv,
            default_file=DEFAULT_CONFIG,
            environment=WANDB_ENVIRONMENT,
            usage=usage,
            help_keys=help_keys,
        )
        config.require_for_recipe(trains=trains, runs_phases=runs_phases)
        return config
    except (ConfigError, ValueError) as err:
        raise SystemExit(f"config error: {err}") from None


def keep_config(run_dir: Path, config: WebRLConfig, *, dry_run: bool = False) -> dict | None:
    """The run directory's config.json on a first launch; on a relaunch, one line and exit if settings changed.

    A dry run checks without writing, and so does every rank but rank 0: on several nodes they all start
    at once on the shared directory. Returns `check_run_config`'s answer (None for a new directory). A run file
    that does not read (config.json, config_changes.json or run_state.json, edited by hand) is one line naming
    it, here, before any stage starts; run_state.json is read here for that alone.
    """
    if dry_run:
        keep = check_run_config
    else:
        from webrl.distributed import launch_rank

        keep = check_run_config if launch_rank(config.fabric) != 0 else keep_run_config
    try:
        changes = keep(run_dir, config, config.resume.allow_changes)
        RunState.load(RunLayout(run_dir).state_path)
        return changes
    except ConfigError as err:
        raise SystemExit(f"config error: {err}") from None


def launch_fabric(config: WebRLConfig, loggers: list | None = None) -> Fabric:
    """The run's Fabric, launched: with several devices this starts the other processes, which rerun the recipe.

    Lightning's refusal of a layout this machine cannot run (FSDP1 with `fabric.accelerator=auto` and no GPU,
    `fabric.accelerator=cuda` without CUDA) is a config error, one line, and so is a torchrun or srun layout other
    than `fabric.devices` x `fabric.num_nodes` (`webrl.distributed.check_launcher`).
    """
    from webrl.distributed import build_fabric

    try:
        try:
            fabric = build_fabric(config.fabric, loggers=loggers)
        except RuntimeError as err:  # Lightning's: an accelerator this machine lacks (`cuda` without CUDA)
            raise ValueError(str(err).splitlines()[0]) from None
        fabric.launch()
    except ConfigError as err:
        raise SystemExit(f"config error: {err}") from None
    except ValueError as err:
        raise SystemExit(f"config error: fabric.*: {err}") from None
    return fabric


def launch_and_keep(run_dir: Path, config: WebRLConfig, loggers: list | None = None) -> Fabric:
    """Check `config` against the one `run_dir` keeps, launch Fabric, then keep it.

    Kept only once Fabric has launched: a launch that fails (a GPU this machine lacks) leaves no config.json to
    refuse the corrected relaunch as a change of settings.
    """
    keep_config(run_dir, config, dry_run=True)
    fabric = launch_fabric(config, loggers)
    keep_config(run_dir, config)
    return fabric


def main(argv: list[str] | None = None) -> list[dict]:
    argv = list(sys.argv[1:] if argv is None else argv)
    dry_run = "--dry-run" in argv
    config = recipe_config([item for item in argv if item != "--dry-run"], usage=__doc__)
    # Checked here, kept once Fabric has launched (`run`): a launch that fails leaves no config.json to refuse
    # the corrected relaunch.
    changes = keep_config(Path(config.output_dir), config, dry_run=True)
    if dry_run:
        print(describe_plan(config, changes))
        return []
    return run(config)


def run(config: WebRLConfig) -> list[dict]:
    """The run itself, once its config is checked and kept: SFT and ORM (cached), then the phases.

    torch, Lightning, the models, the engines and Playwright are imported here rather than at the
    top, so that `--help`, `--print-config` and `--dry-run` answer in a second or two without them.
    """
    from webrl.distributed import close_process_group, launch_rank
    from webrl.inference.engine import build_engine
    from webrl.loop import PhaseLoop
    from webrl.orm_threshold import ensure_orm_threshold
    from webrl.report import format_phase_table, format_stage_table
    from webrl.starting_models import ensure_orm, ensure_sft
    from webrl.tracking import build_loggers
    from webrl.web_environment import WebEnvironment

    run_dir = Path(config.output_dir)
    primary = launch_rank(config.fabric) == 0
    loggers = build_loggers(run_dir, config.tracking, config_to_dict(config), run_dir.name, primary=primary)
    fabric = launch_and_keep(run_dir, config, loggers)
    with WebEnvironment(config) as env:
        sft, demos = ensure_sft(config, fabric, env)
        has_engine = config.engines.engine_index(fabric) is not None
        options = engine_options(config, fabric.local_rank)
        engine = build_engine(config.rollout.engine, sft, **options) if has_engine else None
        orm = ensure_orm(config, fabric, env, engine, sft, demos) if config.reward.orm_labels else None
        choice = ensure_orm_threshold(config, fabric, env, engine, sft, orm) if orm is not None else None
        threshold = choice.threshold if choice is not None else None
        loop = PhaseLoop(
            config, fabric, env, engine, sft_dir=sft, orm_dir=orm, demonstrations=demos, orm_threshold=threshold
        )
        history = loop.run()
        if engine is not None:
            engine.close()
    if fabric.is_global_zero:
        print(format_phase_table(history))
        print(format_stage_table(history, sft_training_time(sft)))
        report_gain(run_dir, history, config.env.test_split)
    for logger in loggers:
        logger.finalize("success")
    close_process_group(fabric)
    return history


def sft_training_time(sft: Path) -> dict[str, float]:
    """The SFT actor's training seconds as its cache entry recorded them, for the stage table; {} for an actor
    given by path, which records none."""
    seconds = build_metrics(Path(sft)).get("sft/seconds")
    return {"SFT actor": float(seconds)} if isinstance(seconds, (int, float)) else {}


def report_gain(run_dir: Path, history: list[dict], split: str) -> None:
    """Print (and keep in gain.json) the last phase against phase 0 on the same held-out tasks, when both exist."""
    last_phase = max((int(record.get("phase", 0)) for record in history), default=0)
    gain = phase_gain(run_dir, last_phase)
    if gain is not None:
        print(format_phase_gain(gain, split))
        write_phase_gain(run_dir, gain)


def engine_options(config: WebRLConfig, local_rank: int | None = None) -> dict:
    """Constructor options of the configured engine, built by the process of local rank `local_rank`.

    The local rank places an hf engine on its rank's own GPU in a CUDA run (`EnginePlacement.engine_options`);
    None takes it from the launcher's variables, for a recipe that has not launched Fabric.
    """
    if config.rollout.engine == "openai":
        return {"base_url": config.rollout.openai_url}
    if local_rank is None:
        from webrl.distributed import launch_local_rank

        local_rank = launch_local_rank()
    placed = config.engines.engine_options(config.rollout.engine, config.fabric, local_rank)
    if config.rollout.engine == "hf":
        return {"batch_size": config.rollout.concurrency, **placed}
    return placed


if __name__ == "__main__":
    main(sys.argv[1:])
