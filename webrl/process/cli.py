"""`python -m webrl.process`: label rollouts (stage 1) and build replay-filtered training steps (stage 2).

This is the release's `process_data.py` in one place, on this project's files:

    # stage 1: rollouts (a VisualAgentBench result dir or our JSONL) -> labelled trajectories
    python -m webrl.process stage=[1] rollouts=results/phase3 orm=runs/orm output=data/phase3.jsonl
    python -m webrl.process stage=[1] rollouts=rollouts.jsonl reward_source=evaluator output=data/p3.jsonl
    # stage 2: earlier phases' successes through the actor-confidence filter + all current steps
    python -m webrl.process stage=[2] output=data/phase3.jsonl \\
        experience=[data/phase1.jsonl,data/phase2.jsonl] actor=runs/actor_phase2   # writes data/phase3_filter.jsonl
    python -m webrl.process --config process.yaml stage=[1,2]                 # both, like the release

Settings come from `ProcessConfig` (`webrl.process.config`) like a recipe's: `--config FILE`,
then key=value overrides; `python -m webrl.process --help` lists every key. Stage 1 sets every
trajectory's `outcome`: with `reward_source=orm` from the ORM's P(YES) >= 0.5, the run's default
`reward.threshold` (also stored as `orm_score` / `orm_reward`), with `reward_source=evaluator` from
the evaluator score >= 0.5. Stage 2 writes a flat, seeded-shuffled JSONL of step samples: the
replayed steps the filter kept plus every step of the current phase (successes and failures), which
is what the critic and the actor train on. `devices=N` scores stage 2's experience on N processes
(DDP); stage 1 then runs on rank 0 only.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from webrl.config import ConfigError, load_config
from webrl.data.labels import label_with_evaluator
from webrl.data.prompts import uses_chat_template
from webrl.data.replay import current_phase_samples, filter_by_perplexity
from webrl.data.steps import write_samples
from webrl.data.traces import import_trace_dir, orm_examples, sft_examples, write_sharegpt
from webrl.data.trajectory import Trajectory, read_trajectories, write_trajectories
from webrl.env.actions import action_record
from webrl.process.config import ProcessConfig


def load_rollouts(path: str | Path) -> list[Trajectory]:
    """Trajectories from a VisualAgentBench result dir (traces/ + actions/) or a trajectory JSONL file."""
    path = Path(path)
    if path.is_dir():
        return import_trace_dir(path, read_action=action_record)
    if not path.is_file():
        raise FileNotFoundError(f"rollouts not found: {path} (expected a trace dir or a .jsonl file)")
    return read_trajectories(path)


def stage1(config: ProcessConfig, fabric: Any = None) -> list[Trajectory]:
    """Label the rollouts; with `reward_source=orm` the ORM scores them on `scoring_device(fabric)`."""
    trajectories = load_rollouts(config.rollouts)
    if config.reward_source == "evaluator":
        label_with_evaluator(trajectories)
    else:
        from webrl.modules.orm import OutcomeRewardModule

        answers = tuple(config.orm_answers) if config.orm_answers else None
        orm = OutcomeRewardModule(config.orm, answer_words=answers, threshold=_default_orm_threshold())
        orm = orm.to(scoring_device(fabric))
        orm.label(trajectories, batch_size=config.batch_size)
    write_trajectories(config.output, trajectories)
    successes = sum(1 for t in trajectories if t.succeeded)
    print(f"stage 1: {len(trajectories)} trajectories, {successes} successful -> {config.output}")
    if config.sft_out:
        print(f"sft data: {write_sharegpt(config.sft_out, sft_examples(trajectories))}")
    if config.orm_data_out:
        print(f"orm data: {write_sharegpt(config.orm_data_out, orm_examples(trajectories))}")
    return trajectories


def _default_orm_threshold() -> float:
    """The run's default `reward.threshold`, which this CLI has no key for; imported here because the
    run's config pulls in Lightning, which stage 1 does not otherwise need."""
    from webrl.loop_config import RewardConfig

    return RewardConfig.threshold


def stage2(config: ProcessConfig, fabric: Any = None) -> None:
    output = Path(config.output)
    if not output.is_file():
        raise FileNotFoundError(
            f"stage 2 reads the current phase from output={output}, which does not exist: run stage 1"
        )
    current = read_trajectories(output)
    experience = [t for path in config.experience for t in load_rollouts(path)]
    from webrl.data.collate import StepTokenizer
    from webrl.modules.lm import actor_scorer, load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(config.actor)
    model = model.to(scoring_device(fabric))
    chat = tokenizer if uses_chat_template(tokenizer) else None
    current_samples = current_phase_samples(current, gamma=config.gamma, chat_template_tokenizer=chat)
    kept = filter_by_perplexity(
        experience,
        actor_scorer(model, tokenizer, batch_size=config.batch_size),
        current_steps=len(current_samples),
        config=config.filter,
        gamma=config.gamma,
        batch_size=config.batch_size,
        fabric=fabric,
        chat_template_tokenizer=chat,
        fit_prompt=StepTokenizer(tokenizer, config.max_length).actor_prompt if config.max_length else None,
    )
    if fabric is not None and fabric.global_rank != 0:
        return
    samples = kept + current_samples
    random.Random(config.filter.seed).shuffle(samples)
    target = output.with_name(output.stem + "_filter.jsonl")
    write_samples(target, samples)
    print(f"stage 2: {len(kept)} replayed + {len(current_samples)} current steps -> {target}")


def scoring_device(fabric: Any = None, cuda_available: bool | None = None) -> Any:
    """Where the ORM and the actor score: this process's Fabric device, else a GPU when the machine has one.

    With `devices=1` no Fabric is built, and the models stayed on the CPU they load on, even on a GPU machine.
    """
    if fabric is not None:
        return fabric.device
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    return "cuda" if cuda_available else "cpu"


def _fabric(devices: int) -> Any:
    """A launched DDP Fabric for `devices` > 1 processes (each re-runs this command), else None."""
    if devices <= 1:
        return None
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="auto", devices=devices, strategy="ddp")
    fabric.launch()
    return fabric


def _report(stage: Callable[..., Any], *args: Any) -> str | None:
    """Run a stage; bad input (missing path, malformed file) becomes a one-line message."""
    try:
        stage(*args)
    except (FileNotFoundError, ValueError) as err:
        return str(err)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; a bad setting or bad input (missing path, malformed file) prints one error line and returns 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = load_config(ProcessConfig, argv)
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    fabric = _fabric(config.devices)
    error = _run_stages(config, fabric)
    if fabric is not None:
        from webrl.distributed import close_process_group  # torch and Lightning only where ranks run

        close_process_group(fabric)
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def _run_stages(config: ProcessConfig, fabric: Any) -> str | None:
    """The configured stages on this rank; the one-line error of the first that failed, else None."""
    error = None
    if 1 in config.stage and (fabric is None or fabric.global_rank == 0):
        error = _report(stage1, config, fabric)
    if fabric is not None:
        # Every rank learns whether rank 0's stage 1 failed, so none waits forever for the others.
        error = fabric.broadcast(error)
    if error is None and 2 in config.stage:
        error = _report(stage2, config, fabric)
    return error
