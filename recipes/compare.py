"""The learning table in one command: SFT, WebRL, Filtered BC and the ablations, run or reused, then compared.

    python -m recipes.compare                                              # embedded default (webrl_tiny.yaml)
    python -m recipes.compare --config webrl_smollm2 --output-root runs/compare_smollm2
    python -m recipes.compare --methods sft,webrl,no_kl phases=1 env.test_tasks=20
    python -m recipes.compare --reuse-only                                 # only the table, from what exists

Each method runs as its own recipe into `<output-root>/<method>` (a run directory that already holds the
method's final evaluation is reused; an unfinished one resumes), with the common `--config` files and
key=value overrides, then its own config file and overrides:

    sft             recipes.sft, its evaluation of the cached SFT actor
    webrl           recipes.webrl with reward.source=evaluator
    webrl_orm       recipes.webrl with reward.source=orm and reward.orm_labels=true (the paper's setting)
    filtered_bc     recipes.filtered_bc with baseline_filtered_bc.yaml on webrl's phase-1 rollouts (runs webrl too)
    no_curriculum   recipes.webrl with ablation_no_curriculum.yaml
    no_replay       recipes.webrl with ablation_no_replay.yaml
    no_kl           recipes.webrl with ablation_no_kl.yaml

Every method is evaluated on the same held-out tasks (the common env.test_split, env.test_tasks, seed);
results on different task sets are refused, naming the methods. The table (success with its 95% Wilson
interval, the difference to SFT in points and the exact McNemar p on the same tasks, success on templates
seen in training vs test-only, wall time) is printed and written to `<output-root>/learning_table.md`
and `.json`.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from recipes.filtered_bc_config import FilteredBCRunConfig
from recipes.webrl import CONFIG_DIR, DEFAULT_CONFIG
from webrl.baselines import rollouts_change, settings_change, trained_settings
from webrl.cache_builds import is_built
from webrl.comparison import Comparison, Method
from webrl.config_checks import ConfigError
from webrl.data.atomic_io import write_json_atomic, write_text_atomic
from webrl.loop_config import WebRLConfig
from webrl.tracking import WANDB_ENVIRONMENT, setup_logging


def filtered_bc_change(config: FilteredBCRunConfig, run_dir: Path) -> str:
    """Why Filtered BC's result in `run_dir` was not made with the settings configured now or from the WebRL rollouts
    it reads now ('' when it was); the recipe, run again, trains again for the same reasons.

    A change of `filtered_bc.*` or the seed that `resume.allow_changes` accepted leaves the run directory check
    and the evaluation's identity (the tasks and sampling) as they were, so the old actor's evaluation would be
    found; unlike a WebRL run's evaluation (refused: the loop does not make it again), this one the recipe makes
    again, as an SFT evaluation of other settings is, so the result is stale rather than refused (`settings_change`
    is the recipe's own test). A WebRL run removed and run again leaves new rollouts where the old ones were
    (`rollouts_change`). The SFT actor the recipe starts from is named by a cache key of its demonstrations, which
    only the recipe builds, so it is not compared here.
    """
    actor = run_dir / "actor"
    if not is_built(actor):
        return ""
    settings = trained_settings(config.filtered_bc, config.seed)
    source, phase = Path(config.filtered_bc.source_run), config.filtered_bc.source_phase
    return settings_change(actor, settings, run_dir) or rollouts_change(actor, source, phase)


BELOW_WEBRL = "below WebRL"
"""The paper ranks Filtered BC, and each ablation (its Fig. 5), below full WebRL."""
METHODS = (
    Method("sft", "SFT", "recipes.sft", WebRLConfig, evaluation="sft", paper="the baseline"),
    Method("webrl", "WebRL (evaluator rewards)", "recipes.webrl", WebRLConfig, overrides=("reward.source=evaluator",)),
    Method(
        "webrl_orm",
        "WebRL (ORM rewards)",
        "recipes.webrl",
        WebRLConfig,
        overrides=("reward.source=orm", "reward.orm_labels=true"),  # ORM rewards are its labels, whatever the rest use
    ),
    Method(
        "filtered_bc",
        "Filtered BC",
        "recipes.filtered_bc",
        FilteredBCRunConfig,
        CONFIG_DIR / "baseline_filtered_bc.yaml",
        overrides=("filtered_bc.source_run={root}/webrl",),
        evaluation="filtered_bc",
        requires="webrl",
        stale=filtered_bc_change,
        reference="webrl",
        paper=BELOW_WEBRL,
    ),
    *(
        Method(
            name,
            label,
            "recipes.webrl",
            WebRLConfig,
            CONFIG_DIR / f"ablation_{name}.yaml",
            reference="webrl",
            paper=f"{BELOW_WEBRL} (Fig. 5)",
        )
        for name, label in (
            ("no_curriculum", "WebRL without curriculum"),
            ("no_replay", "WebRL without replay"),
            ("no_kl", "WebRL without KL"),
        )
    ),
)
"""Every method of the table, in the order they run and show (a method after the ones it reads)."""
TABLE_NAME = "learning_table"


def parse_arguments(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The comparison's own options, and the common key=value overrides every method gets."""
    parser = argparse.ArgumentParser(
        prog="python -m recipes.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--output-root", type=Path, default=Path("runs/compare"), help="one run directory per method")
    parser.add_argument("--methods", default="", help="comma-separated subset of the methods (default: all)")
    parser.add_argument("--reuse-only", action="store_true", help="run nothing; table the finished evaluations")
    parser.add_argument("--config", action="append", default=[], help="common config file or name (repeatable)")
    known, overrides = parser.parse_known_args(argv)
    unknown = [item for item in overrides if item.startswith("-") or "=" not in item]
    if unknown:
        parser.error(f"not an option or key=value: {' '.join(unknown)}")
    return known, overrides


def select(names: str) -> tuple[list[Method], list[str]]:
    """The methods to run (those asked for and those they read, in table order) and the ones to show."""
    by_name = {method.name: method for method in METHODS}
    asked = [name.strip() for name in names.split(",") if name.strip()] or list(by_name)
    unknown = [name for name in asked if name not in by_name]
    if unknown:
        raise ConfigError(f"--methods: unknown {', '.join(unknown)} (known: {', '.join(by_name)})")
    needed = set(asked) | {by_name[name].requires for name in asked if by_name[name].requires}
    return [method for method in METHODS if method.name in needed], [m.name for m in METHODS if m.name in asked]


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM ends a comparison the way Ctrl-C does, so that the running method's launch is recorded first."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> dict:
    setup_logging()
    signal.signal(signal.SIGTERM, _interrupt)
    options, overrides = parse_arguments(list(sys.argv[1:] if argv is None else argv))
    try:
        methods, shown = select(options.methods)
        comparison = Comparison(
            methods,
            options.output_root,
            options.config,
            overrides,
            default_file=DEFAULT_CONFIG,
            environment=WANDB_ENVIRONMENT,
            family=METHODS,
        )
        failures = comparison.run_missing(reuse_only=options.reuse_only)
        table = comparison.table(shown)
    except (ConfigError, ValueError, RuntimeError) as err:
        raise SystemExit(f"compare: {err}") from None
    except KeyboardInterrupt:
        raise SystemExit("compare: interrupted; the same command resumes the unfinished method") from None
    record = {
        **table.to_dict(),
        "commands": {run.method.name: run.command for run in comparison.runs},
        "failures": failures,
        "warnings": comparison.warnings,
    }
    markdown = table.to_markdown()
    write_json_atomic(options.output_root / f"{TABLE_NAME}.json", record)
    write_text_atomic(options.output_root / f"{TABLE_NAME}.md", markdown)
    print(markdown)
    print(f"table: {options.output_root / TABLE_NAME}.md (.json)")
    for name, why in comparison.warnings.items():
        print(f"compare: warning: {name} {why}; its evaluation is in the table")
    if failures:
        named = "; ".join(f"{name} {why}" for name, why in failures.items())
        raise SystemExit(f"compare: the table holds the methods that finished; {len(failures)} did not: {named}")
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
