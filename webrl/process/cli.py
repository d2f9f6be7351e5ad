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
then key=value overrides; `python -m webrl.process --help` lists every key. Stage 1 keeps the episodes
a run's labels stage keeps (`webrl.data.labels.labelable`: no browser, site or engine failure, and with
`reward_source=evaluator` none its evaluator did not judge), says how many it left out and why, and
sets each kept trajectory's `outcome`: with `reward_source=orm` from the ORM's P(YES) >= 0.5, the run's
default `reward.threshold` (also stored as `orm_score` / `orm_reward`), its prompts fitted to `max_length`
as the run fits them to `model.max_length`; with `reward_source=evaluator` from the evaluator score >= 0.5.
`orm_data_out` exports the evaluators' verdicts, never the ORM's (`webrl.data.traces.orm_examples`).
Stage 2 writes a flat, seeded-shuffled JSONL of step samples: the
replayed steps the filter kept plus every step of the current phase (successes and failures), which
is what the critic and the actor train on. `devices=N` scores stage 2's experience on N processes
(DDP); stage 1 then runs on rank 0 only. A path that cannot be read or written ends the command with
one error line that names its key.
"""

from __future__ import annotations

import random
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from webrl.config import ConfigError, load_config
from webrl.data.labels import label_with_evaluator, label_with_orm, labelable
from webrl.data.prompts import uses_chat_template
from webrl.data.replay import PeerScoringError, current_phase_samples, filter_by_perplexity
from webrl.data.steps import write_samples
from webrl.data.traces import import_trace_dir, orm_examples, sft_examples, write_sharegpt
from webrl.data.trajectory import Trajectory, read_trajectories, write_trajectories
from webrl.env.actions import action_record
from webrl.process.config import ProcessConfig


class PathError(Exception):
    """A path setting that could not be read or written, or held a malformed file; the message starts with its key."""


@contextmanager
def _path_of(key: str) -> Iterator[None]:
    """Name `key` in the error of what reads or writes its path inside the block, so that the one error line says
    which setting to fix (a missing file, a directory where a file goes, a model directory without a model)."""
    try:
        yield
    except (OSError, ValueError) as err:
        raise PathError(f"{key}: {err}") from err


def load_rollouts(path: str | Path) -> list[Trajectory]:
    """Trajectories from a VisualAgentBench result dir (traces/ + actions/) or a trajectory JSONL file."""
    path = Path(path)
    if path.is_dir():
        return import_trace_dir(path, read_action=action_record)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (expected a trace dir or a .jsonl file)")
    return read_trajectories(path)


def stage1(config: ProcessConfig, fabric: Any = None) -> list[Trajectory]:
    """Label the rollouts a run would label; with `reward_source=orm` the ORM scores on `scoring_device(fabric)`."""
    with _path_of("rollouts"):
        rollouts = load_rollouts(config.rollouts)
    trajectories = _labelable(config, rollouts)
    if config.reward_source == "evaluator":
        label_with_evaluator(trajectories)
    else:
        _label_with_orm(config, trajectories, fabric)
    with _path_of("output"):
        write_trajectories(config.output, trajectories)
    successes = sum(1 for t in trajectories if t.succeeded)
    print(f"stage 1: {len(trajectories)} trajectories, {successes} successful -> {config.output}")
    if config.sft_out:
        sft = sft_examples(trajectories)
        with _path_of("sft_out"):
            print(f"sft data: {write_sharegpt(config.sft_out, sft)}")
    if config.orm_data_out:
        examples = orm_examples(trajectories)
        with _path_of("orm_data_out"):
            path = write_sharegpt(config.orm_data_out, examples)
        print(f"orm data: {len(examples)} of {len(trajectories)} trajectories, labelled by their evaluator -> {path}")
    return trajectories


def _labelable(config: ProcessConfig, rollouts: list[Trajectory]) -> list[Trajectory]:
    """The rollouts the run's labels stage would label (`labelable`); those left out are counted by reason.

    The checks that make labelling pointless come before the ORM is loaded: no rollout left to label, or an
    `orm_data_out` with no evaluator's verdict to export (ORM data is labelled by the evaluators, docs/method.md
    §5.2; the ORM's own verdicts would teach a new ORM its mistakes).
    """
    trajectories, left_out = labelable(rollouts, by_evaluator=config.reward_source == "evaluator")
    reasons = ", ".join(f"{count} {reason}" for reason, count in left_out.most_common())
    if rollouts and not trajectories:
        hint = (
            "; rollouts without evaluator rewards need reward_source=orm" if config.reward_source == "evaluator" else ""
        )
        raise ValueError(f"rollouts: none of the {len(rollouts)} trajectories can be labelled ({reasons}){hint}")
    if left_out:
        left = sum(left_out.values())
        print(f"stage 1: left {left} of {len(rollouts)} trajectories unlabelled, as a run does: {reasons}")
    if config.orm_data_out and not any(t.judged_by_evaluator and t.steps for t in trajectories):
        raise ValueError(
            "orm_data_out: ORM data is labelled by the evaluators, and none of the rollouts has an evaluator's "
            "verdict; leave orm_data_out empty"
        )
    return trajectories


def _label_with_orm(config: ProcessConfig, trajectories: list[Trajectory], fabric: Any) -> None:
    """The ORM's labels at the run's default `reward.threshold`, scored as the run's labels stage scores them
    (`webrl.modules.orm.orm_scorer`, prompts fitted to `max_length` as the run fits them to `model.max_length`):
    scored whole, a long page would give another P(YES), so another label, than the run gives the same episode."""
    from webrl.modules.orm import orm_scorer

    answers = tuple(config.orm_answers) if config.orm_answers else None
    with _path_of("orm"):
        score, chat = orm_scorer(
            config.orm,
            batch_size=config.batch_size,
            answer_words=answers,
            max_length=config.max_length or None,
            device=scoring_device(fabric),
        )
    label_with_orm(trajectories, score, chat_template_tokenizer=chat, threshold=_default_orm_threshold())


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
    with _path_of("output"):
        current = read_trajectories(output)
    with _path_of("experience"):
        experience = [t for path in config.experience for t in load_rollouts(path)]
    from webrl.data.collate import StepTokenizer
    from webrl.modules.lm import actor_scorer, load_model_and_tokenizer

    with _path_of("actor"):
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
    with _path_of("output"):
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
    """Run a stage; bad input (a path that cannot be read or written, a malformed file) becomes a one-line message.

    Any OSError counts, not only a missing file: uncaught, it would end rank 0 with a traceback before the broadcast
    of its stage 1 error, and leave the other ranks of `devices=N` waiting for it.
    """
    try:
        stage(*args)
    except (PathError, OSError, ValueError, PeerScoringError) as err:
        return str(err)
    return None


def _report_to_ranks(where: str, stage: Callable[..., Any], *args: Any) -> str | None:
    """`_report` on one rank of several, where an unexpected error (a bug, a model that fails mid-scoring) is told too.

    Raised, the error would end this rank and leave the others waiting for it (in stage 1's broadcast, or in the
    barrier that closes the process group) until the group's timeout. Its traceback goes to stderr here, and one
    line, `<where>: <error>`, is returned, so that this rank, too, reaches the end with the others.
    """
    try:
        return _report(stage, *args)
    except Exception as err:
        traceback.print_exc()
        return f"{where}: {type(err).__name__}: {err}"


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
        # The whole line in one write, flushed: every rank reports here into one shared stderr, where a CI run saw
        # one rank's line run into the other's (print writes the text and its newline apart).
        sys.stderr.write(f"error: {error}\n")
        sys.stderr.flush()
        return 2
    return 0


def _run_stages(config: ProcessConfig, fabric: Any) -> str | None:
    """The configured stages on this rank; the one-line error of the first that failed, else None."""
    error = None
    if 1 in config.stage and fabric is None:
        error = _report(stage1, config, fabric)
    elif 1 in config.stage and fabric.global_rank == 0:
        error = _report_to_ranks("stage 1 failed on rank 0", stage1, config, fabric)
    if fabric is not None:
        # Every rank learns whether rank 0's stage 1 failed, so none waits forever for the others.
        error = fabric.broadcast(error)
    if error is None and 2 in config.stage and fabric is None:
        error = _report(stage2, config, fabric)
    elif error is None and 2 in config.stage:
        # A rank whose shard of the scoring fails tells the others in the gather (`score_samples`), and they stop too.
        error = _report_to_ranks(f"stage 2 failed on rank {fabric.global_rank}", stage2, config, fabric)
    return error
