"""Evaluate a checkpoint on a task suite at temperature 0: success per site, with intervals, as tables and JSON.

    python -m recipes.evaluate model.actor=runs/webrl_tiny/phase_003/actor
    python -m recipes.evaluate model.actor=PATH env.test_split=validation     # choosing settings: never on test
    python -m recipes.evaluate model.actor=PATH env.test_split=train env.test_tasks=0   # all train tasks
    python -m recipes.evaluate model.actor=B --baseline runs/webrl_tiny/eval_A-<id>.json   # paired test of B vs A
    python -m recipes.evaluate --compare runs/x/eval_A-<id>.json runs/x/eval_B-<id>.json   # report of two, no run

Results go to `<output_dir>/eval_<name>-<id>.json`, `.md`, the trajectories `.jsonl` and the report `.html`
(success per site and per template with intervals, and a trajectory browser with the screenshots that
`env.screenshots` recorded under `<output_dir>/screenshots/`), where <name> is
the checkpoint folder's name and <id> a digest of what made them: the checkpoint's path and a SHA-256
of its weight files, the suite, split, task count and seed, the engine and its sampling settings (all
recorded as `identity` in the JSON, beside `code`: webrl's version and the checkout's commit). An
evaluation resumes from its own trajectories after a kill, and never from another checkpoint's or
another setting's.

Beside the success per site, the JSON and the markdown hold the 95% Wilson interval of every rate,
success per template (templates of `env.train_split` marked seen, the others test-only), and the
JSON holds each task's outcome so that later evaluations can be paired with it.

`--baseline PATH` pairs this evaluation with an earlier one on the same tasks (exact McNemar test):
PATH is an `eval_<name>-<id>.json` written by this recipe or an evaluation's trajectories `.jsonl`
(e.g. a WebRL run's `phase_NNN/eval.rank0.jsonl`, read with the phase's other ranks). Differing task
sets are an error, found before any episode runs: the baseline must have attempted these very tasks,
so another split or sample, even one of these tasks' subsets, is refused rather than paired on the part
shared; tasks a browser or site failure left without an outcome on either side are left out of the pairs.

`--compare A B` runs nothing: it writes the report of two finished evaluations on the same tasks (each an
`eval_<name>-<id>.json` with its `.jsonl`, a trajectories `.jsonl`, or a WebRL run's `phase_NNN` folder),
side by side, with the paired counts and McNemar p overall and per site, to `--output` (default
`compare-<A>-vs-<B>.html` beside A). Differing task sets are an error naming the tasks.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from recipes.webrl import engine_options, recipe_config
from webrl.checkpoint_report import CheckpointReport, Evaluation
from webrl.code_version import code_version
from webrl.data.atomic_io import write_json_atomic, write_text_atomic
from webrl.data.trajectory import Task
from webrl.evaluation.identity import evaluation_identity, identity_tag
from webrl.evaluation.outcomes import Baseline, load_baseline
from webrl.evaluation.stats import require_same_tasks
from webrl.inference.engine import build_engine
from webrl.inference.rollout_metrics import rollout_counts
from webrl.loop_config import WebRLConfig
from webrl.report import format_site_table
from webrl.web_environment import WebEnvironment

HELP_KEYS = ("output_dir", "seed", "model.actor", "env", "rollout", "engines", "fabric.accelerator", "fabric.devices")
"""The keys an evaluation reads, the ones its `--help` lists: the engine's device and GPU budget (`engines`,
`fabric.accelerator`, `fabric.devices`: `engine_options`) and its browser pool (`engines.episodes_per_core`) too."""


def evaluate_checkpoint(
    config: WebRLConfig, env: WebEnvironment, checkpoint: Path, name: str, baseline: Baseline | None = None
) -> dict[str, float]:
    """Greedy episodes of `checkpoint` on `env.test_split`; prints and saves success per site and its statistics.

    `webrl.metrics` and `webrl.evaluation.report` import torch and transformers: imported here, they leave the
    `--help` and `--print-config` of this recipe, and of those that import it (`recipes.sft`), quick.
    """
    from webrl.evaluation.report import evaluation_statistics
    from webrl.metrics import errored, success_by_site

    tasks = env.suite(config.env.test_split, config.env.test_tasks, config.seed)
    if baseline is not None:
        require_baseline_tasks(tasks, baseline, config.env.test_split)
    identity = evaluation_identity(config, checkpoint)
    out_dir, stem = Path(config.output_dir), f"eval_{name}-{identity_tag(identity)}"
    engine = build_engine(config.rollout.engine, checkpoint, **engine_options(config))
    try:
        trajectories, rollout_metrics = env.run_episodes(
            engine, tasks, out_dir / f"{stem}.jsonl", phase=-1, evaluation=True, seed=config.seed
        )
    finally:
        engine.close()
    metrics = {**success_by_site(trajectories, key="eval_reward"), "errors": errored(trajectories)}
    title = f"{name}: {checkpoint} on {config.env.test_split} ({len(tasks)} tasks)"
    seen_templates = {task.intent_template_id for task in env.suite(config.env.train_split, 0, config.seed)}
    statistics, markdown = evaluation_statistics(trajectories, seen_templates, title, baseline)
    record = {"checkpoint": str(checkpoint), "identity": identity, "code": code_version()}
    # `run_episodes` counts only this launch's episodes: a resumed evaluation's counts are redone over all of them,
    # as the loop does (a launch with nothing left to run has no metrics of its own).
    record.update({**metrics, **rollout_metrics, **rollout_counts(trajectories), **statistics})
    write_json_atomic(out_dir / f"{stem}.json", record)
    write_text_atomic(out_dir / f"{stem}.md", markdown)
    CheckpointReport([Evaluation(name, out_dir / f"{stem}.jsonl", out_dir, trajectories)]).write(
        out_dir / f"{stem}.html"
    )
    print(format_site_table(metrics, title))
    print(markdown)
    print(f"results: {out_dir / stem}.json (.md, .jsonl, .html)")
    return metrics


def require_baseline_tasks(tasks: list[Task], baseline: Baseline, split: str) -> None:
    """Stop, naming both task counts, unless `baseline` attempted exactly `tasks`.

    Its attempted tasks, not its outcomes: those leave out what the browser or the site failed, and the pairing
    (`shared_mcnemar`) leaves such tasks out itself. A baseline of another split or sample, smaller or larger,
    would otherwise be paired on the tasks the two share, a narrower test than either evaluation.
    """
    ids = {task.task_id for task in tasks}
    try:
        require_same_tasks(ids, baseline.tasks)
    except ValueError as err:
        raise SystemExit(
            f"{len(ids)} {split} tasks (A) vs {len(baseline.tasks)} tasks of --baseline {baseline.source} (B): {err}"
        ) from None


def split_baseline(argv: list[str]) -> tuple[Path | None, list[str]]:
    """`--baseline PATH` (or `--baseline=PATH`) taken out of `argv`; the rest is for the config loader."""
    parser = argparse.ArgumentParser(prog="python -m recipes.evaluate", add_help=False, allow_abbrev=False)
    parser.add_argument("--baseline", type=Path, default=None)
    known, rest = parser.parse_known_args(argv)
    return known.baseline, rest


def compare(argv: list[str]) -> Path:
    """`--compare A B [--output PATH] [--embed-screenshot-mb N]`: the report of two finished evaluations."""
    parser = argparse.ArgumentParser(prog="python -m recipes.evaluate --compare", allow_abbrev=False)
    parser.add_argument("--compare", nargs=2, type=Path, required=True, metavar=("A", "B"))
    parser.add_argument("--output", type=Path, default=None, help="the report (default: beside A)")
    parser.add_argument("--embed-screenshot-mb", type=float, default=20.0, help="screenshots embedded up to this")
    args = parser.parse_args(argv)
    try:
        first, second = (Evaluation.read(path) for path in args.compare)
        report = CheckpointReport([first, second], args.embed_screenshot_mb)
    except (OSError, ValueError) as err:
        raise SystemExit(f"--compare: {err}") from None
    slug = "-vs-".join(re.sub(r"[^\w.-]+", "_", label) for label in (first.label, second.label))
    path = report.write(args.output or first.directory / f"compare-{slug}.html")
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)")
    return path


def main(argv: list[str] | None = None) -> dict[str, float] | Path:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--compare" in argv:
        return compare(argv)
    baseline_path, rest = split_baseline(argv)
    config = recipe_config(rest, usage=__doc__, help_keys=HELP_KEYS, trains=False, runs_phases=False)
    checkpoint = Path(config.model.actor)
    if not config.model.actor or not (checkpoint / "config.json").exists():
        raise SystemExit(f"model.actor={config.model.actor!r}: give the model directory to evaluate (with config.json)")
    try:
        baseline = load_baseline(baseline_path) if baseline_path is not None else None
    except (OSError, ValueError) as err:
        raise SystemExit(f"--baseline: {err}") from None
    with WebEnvironment(config) as env:
        return evaluate_checkpoint(config, env, checkpoint, name=checkpoint.name, baseline=baseline)


if __name__ == "__main__":
    main(sys.argv[1:])
