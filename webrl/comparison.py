"""A comparison of methods: each a recipe with its config file, run once into `<output_root>/<method>`, then tabled.

A method's run directory is reused when it already holds the method's final evaluation (made, for a method
that can tell, with its settings now and from the run it reads as it is now: `Method.stale`), so the command
that builds the learning table can be rerun after a crash, with more methods, or only to rebuild the table.
Every method gets the same common arguments (`--config FILE`, `key=value`), so one command tables the tiny
default or SmolLM2 alike; a method's own file goes over the common ones (a common `key=value` of a key it sets
is left out, with a line that says so) and its own overrides (the reward source, where Filtered BC reads its
rollouts, `output_dir`) come last, so no common argument can turn one method into another.

Before anything runs, every method's config is resolved and checked here, exactly as its recipe will
resolve it, so a bad key stops the whole comparison at once rather than after hours; each run directory
that exists is checked against its `config.json` (a relaunch with other settings would stop anyway, and
a reused result must not silently come from other settings), and a WebRL run's evaluation already made is
checked against the evaluation settings it was made with, which `resume.allow_changes` cannot change after
the fact; and all methods must draw the same held-out tasks. After the runs, the task sets are compared
again on the outcomes themselves.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from webrl.config import load_config
from webrl.config_checks import ConfigError, flatten
from webrl.evaluation.identity import evaluation_settings
from webrl.evaluation.learning_table import LearningTable
from webrl.evaluation.run_results import RunResult, loop_result, recipe_result, record_launch, run_progress
from webrl.loop_config import WebRLConfig
from webrl.run_config import (
    changed_keys,
    check_run_config,
    describe_changes,
    effective_config,
    keep_run_config,
    saved_keys,
)
from webrl.run_layout import RunLayout
from webrl.run_state import RunState


@dataclass(frozen=True)
class Method:
    """One row of a comparison: which recipe, with which config file and overrides, and how the paper ranks it."""

    name: str
    label: str
    recipe: str
    """The module run as `python -m <recipe>`."""
    schema: type[WebRLConfig]
    """The recipe's config class, to resolve and check its config before it runs."""
    config_file: Path | None = None
    overrides: tuple[str, ...] = ()
    """key=value after the common ones; `{root}` stands for the comparison's output root."""
    evaluation: str = ""
    """The `eval_<name>-<id>` name of a recipe's evaluation; empty for a WebRL run (its last phase's evaluation)."""
    requires: str = ""
    """A method whose run this one reads (Filtered BC filters WebRL's phase-1 rollouts)."""
    stale: Callable[[WebRLConfig, Path], str] | None = None
    """Given the method's config and run directory: why its result there no longer follows from its settings or the
    run it reads ('' while it does). A change of settings that `resume.allow_changes` accepted can leave the
    evaluation's identity as it was, and the run read can be removed and run again in the same place; a result
    made before is then run again rather than tabled as the new settings' or beside the new run."""
    reference: str = ""
    """The method the paper ranks this one below (an ablation or baseline: full WebRL), when there is one."""
    paper: str = ""
    """The paper's finding for this method, as the table notes it."""


@dataclass(frozen=True)
class PlannedRun:
    """A method resolved for this comparison: its recipe's arguments, its checked config, its run directory."""

    method: Method
    argv: list[str]
    config: WebRLConfig
    run_dir: Path

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", self.method.recipe, *self.argv]


class Comparison:
    """The methods of one comparison in `output_root`, resolved and checked; runs what is missing; builds the table."""

    def __init__(
        self,
        methods: list[Method],
        output_root: Path,
        config_files: list[str],
        overrides: list[str],
        *,
        default_file: Path,
        environment: Mapping[str, str],
        family: Sequence[Method] = (),
    ) -> None:
        """`family`: every method the command knows, selected or not (default: `methods`). An override of a
        section that only an unselected one has (`filtered_bc.*` with `--methods sft,webrl`) is then left unused
        rather than refused, so one command line serves every subset of its methods."""
        for item in overrides:
            if item.partition("=")[0].strip() == "output_dir":
                raise ConfigError(f"{item!r}: each method runs in <output_root>/<method>; set --output-root instead")
        self.output_root = Path(output_root)
        self.warnings: dict[str, str] = {}
        """Methods whose launch by `run_missing` exited with an error after writing the final evaluation, which
        is tabled (it exists and has the settings): what went wrong, for the record beside the table."""
        schemas = [_sections(method.schema) for method in [*methods, *family]]
        known, shared = set().union(*schemas), set.intersection(*schemas)
        self.runs = [
            self._plan(method, config_files, overrides, (known, shared), default_file, environment)
            for method in methods
        ]
        self._require_same_held_out_tasks()

    def _plan(
        self,
        method: Method,
        config_files: list[str],
        overrides: list[str],
        sections: tuple[set[str], set[str]],
        default_file: Path,
        environment: Mapping[str, str],
    ) -> PlannedRun:
        """The method's argv (common files, its file, the common overrides for it, its own) and its checked config.

        An override of a section only some methods have (`filtered_bc.*`) goes to those; one of a section
        that no method has goes to all, so that their config check names the unknown key. `sections`: those
        any method has, and those every method has. A common override of a key of the latter kind that the
        method's own file sets is left out (and named): `replay.enabled=true` must not turn the no-replay
        ablation into full WebRL; `filtered_bc.percentile=50` is meant for Filtered BC and goes to it.
        """
        known, shared = sections
        mine = [item for item in overrides if _section(item) in _sections(method.schema) or _section(item) not in known]
        own_keys = _file_keys(method.config_file) if method.config_file else set()
        overridden = [item for item in mine if _section(item) in shared and _overlaps(_key(item), own_keys)]
        if overridden:
            print(f"[compare] {method.name}: {method.config_file} goes over {', '.join(overridden)}", flush=True)
        mine = [item for item in mine if item not in overridden]
        files = [*config_files, *([str(method.config_file)] if method.config_file else [])]
        run_dir = self.output_root / method.name
        own = [item.format(root=self.output_root) for item in method.overrides]
        argv = [*(arg for path in files for arg in ("--config", path)), *mine, *own, f"output_dir={run_dir}"]
        try:
            config = load_config(method.schema, argv, default_file=default_file, environment=environment)
            # Every method trains; its recipe will check as this does.
            config.require_for_recipe(trains=True, runs_phases=method.recipe == "recipes.webrl")
        except (ConfigError, ValueError) as err:
            raise ConfigError(f"method {method.name}: {err}") from None
        return PlannedRun(method, argv, config, run_dir)

    def _require_same_held_out_tasks(self) -> None:
        """Every method's config draws the same held-out tasks (suite, split, count and, for a sample, the seed)."""

        def held_out(config: WebRLConfig) -> tuple[object, ...]:
            env = config.env
            return env.suite, env.test_split, env.test_tasks, config.seed if env.test_tasks else None

        first = self.runs[0]
        for run in self.runs[1:]:
            if held_out(run.config) != held_out(first.config):
                names = "env.suite, env.test_split, env.test_tasks, seed"
                raise ConfigError(
                    f"methods {first.method.name} and {run.method.name} would be evaluated on different held-out "
                    f"tasks ({names}: {held_out(first.config)} vs {held_out(run.config)})"
                )

    def check_run_dirs(self) -> None:
        """Stop, naming the method and the keys, if an existing run directory was started with other settings."""
        for run in self.runs:
            try:
                check_run_config(run.run_dir, run.config, run.config.resume.allow_changes)
            except ConfigError as err:
                raise ConfigError(f"method {run.method.name}: {err}") from None
            if not run.method.evaluation:
                _require_evaluated_as_configured(run)

    def result(self, run: PlannedRun) -> RunResult | None:
        """The method's final evaluation with its config's settings, or None while it has none or it is `stale`."""
        config = run.config
        if not run.method.evaluation:
            return loop_result(
                run.method.name, run.run_dir, config.phases, suite=config.env.suite, split=config.env.test_split
            )
        found = recipe_result(run.method.name, run.run_dir, run.method.evaluation, evaluation_settings(config))
        return None if found is None or self.stale(run) else found

    def stale(self, run: PlannedRun) -> str:
        """Why the method's result no longer follows from its settings or the run it reads (`Method.stale`); '' when it
        does."""
        check = run.method.stale
        return check(run.config, run.run_dir) if check is not None else ""

    def run_missing(self, *, reuse_only: bool = False) -> dict[str, str]:
        """Run, in order, each method without a final evaluation (none with `reuse_only`); returns the failures.

        A method that fails is named and the others still run (those that read its run are skipped), so one
        crash does not cost the rest of a comparison of several hours; the table then shows what finished. One that
        exits with an error after writing its final evaluation has finished: it is no failure (nor are the methods
        that read it skipped), and its exit status goes to `warnings`.
        """
        self.check_run_dirs()
        failures: dict[str, str] = {}
        for run in self.runs:
            name = run.method.name
            if run.method.requires in failures:
                failures[name] = f"not run: it reads the run of {run.method.requires}, which failed"
                print(f"[compare] {name}: {failures[name]}", flush=True)
                continue
            if self.result(run) is not None:
                print(f"[compare] {name}: reusing {run.run_dir}", flush=True)
                continue
            if why := self.stale(run):
                print(f"[compare] {name}: not reusing {run.run_dir}: {why}", flush=True)
            if reuse_only:
                print(f"[compare] {name}: no finished evaluation in {run.run_dir} (--reuse-only: not run)", flush=True)
                continue
            print(f"[compare] {name}: running {' '.join(run.command)}", flush=True)
            before = run_progress(run.run_dir)
            if run.method.evaluation:
                # The SFT and evaluation recipes keep no config.json themselves; the comparison keeps one for them.
                keep_run_config(run.run_dir, run.config, run.config.resume.allow_changes)
            started, returncode = time.monotonic(), None
            try:
                returncode = subprocess.run(run.command, check=False).returncode
            finally:
                # Also when interrupted (Ctrl-C, or SIGTERM through recipes.compare; returncode None): the resume
                # keeps what the launch finished, so its time belongs to the method's wall time too.
                seconds = time.monotonic() - started
                record_launch(run.run_dir, run.command, seconds, returncode, (before, run_progress(run.run_dir)))
            command, finished = " ".join(run.command), self.result(run) is not None
            if finished and returncode != 0:
                self.warnings[name] = f"exited with status {returncode} after writing its final evaluation: {command}"
                print(f"[compare] {name}: warning: {self.warnings[name]} (tabled)", flush=True)
            elif returncode != 0:
                failures[name] = f"failed (exit status {returncode}): {command}"
            elif not finished:
                failures[name] = f"ended without its final evaluation in {run.run_dir}"
            if name in failures:
                print(f"[compare] {name}: {failures[name]}", flush=True)
        return failures

    def table(self, shown: list[str]) -> LearningTable:
        """The learning table of the methods in `shown` (in this comparison's order) that have a final evaluation.

        A method run only because a shown one reads it (WebRL, for `--methods sft,filtered_bc`) gets no row, but
        its result still fills the cells of the shown rows that pair with it ("vs WebRL here").
        """
        runs = [run for run in self.runs if run.method.name in shown]
        results = [result for result in map(self.result, runs) if result is not None]
        references = self._references()
        paired = {references[result.method] for result in results if result.method in references}
        unshown = [run for run in self.runs if run.method.name in paired - set(shown)]
        methods = {run.method.name: run.method for run in self.runs}
        return LearningTable.build(
            results,
            train_templates(self.runs[0].config),
            labels={name: method.label for name, method in methods.items()},
            references=references,
            paper={name: method.paper for name, method in methods.items()},
            missing=[run.method.name for run in runs],
            unshown=[result for result in map(self.result, unshown) if result is not None],
        )

    def _references(self) -> dict[str, str]:
        """Each ablation's or baseline's reference: of the full variants of the method it names (those naming none,
        run by the same recipe), the one with its reward source, since an ablation keeps the common reward source;
        none when this comparison runs no such variant (its "vs WebRL" cell stays empty rather than compare with
        another reward source).
        """
        by_name = {run.method.name: run for run in self.runs}
        references: dict[str, str] = {}
        for run in self.runs:
            named = by_name.get(run.method.reference)
            if named is None:
                continue
            variants = [other for other in self.runs if other.method.recipe == named.method.recipe]
            matching = [
                other.method.name
                for other in variants
                if not other.method.reference and other.config.reward.source == run.config.reward.source
            ]
            if matching:
                references[run.method.name] = matching[0]
        return references


def _require_evaluated_as_configured(run: PlannedRun) -> None:
    """Stop, naming the settings, if a WebRL run's evaluation of the table's phase is already made, with evaluation
    settings other than the comparison's.

    The run directory check compares the run's latest settings, and lets `resume.allow_changes` through: a change it
    allowed applies from a relaunch's next stage, and an evaluation already made is not made again, nor is one
    made before a later phase's recorded change. Reused, that evaluation would be paired with methods evaluated
    with the new settings (a silent mix of identities) or, on another task count, refused after they all ran.
    """
    phase, layout = run.config.phases, RunLayout(run.run_dir)
    if not layout.state_path.exists() or not RunState.load(layout.state_path).is_done(phase, "evaluate"):
        return
    made = evaluated_settings(run.run_dir, phase, type(run.config))
    differing = changed_keys(made, evaluation_settings(run.config), {}) if made is not None else {}
    if not differing:
        return
    saved = effective_config(run.run_dir, (phase, "evaluate")) or {}
    current, defaults = dataclasses.asdict(run.config), dataclasses.asdict(type(run.config)())
    changes = changed_keys(saved, current, defaults, saved_keys(run.run_dir))
    raise ConfigError(
        f"method {run.method.name}: the phase-{phase} evaluation in {run.run_dir} was made with other evaluation "
        f"settings ({describe_changes(differing)}; the changes accepted since it was made: {describe_changes(changes)})"
        f" and is not made again; table these settings from another --output-root, or remove {run.run_dir}"
    )


def evaluated_settings(run_dir: Path, phase: int, schema: type[WebRLConfig] = WebRLConfig) -> dict[str, object] | None:
    """The evaluation settings (`evaluation_settings`) the WebRL run in `run_dir` made its phase-`phase` held-out
    evaluation with: those of its config.json with the changes in force at that stage; None without config.json.

    The loop records no identity with its evaluations (a recipe's `eval_<name>-<id>.json` does), so they are
    rebuilt from the settings the run kept, as the whole config: the settings derive from several sections.
    """
    saved = effective_config(run_dir, (phase, "evaluate"))
    return None if saved is None else evaluation_settings(_saved_config(schema, saved))


def _saved_config(schema: type[WebRLConfig], settings: Mapping[str, object]) -> WebRLConfig:
    """A `schema` config as `settings` (a run's saved config, as config.json holds it) records it, `resolve`d.

    A key the schema no longer has is left out, and one the settings lack (added to the schema since) keeps its
    default, which keeps the behaviour from before it (as `changed_keys` reads them); nothing is checked, since
    values a run was started with are what they were, even where the schema's checks have since grown stricter.
    """
    config = schema()
    _fill(config, settings)
    config.resolve()
    return config


def _fill(section: object, values: Mapping[str, object]) -> None:
    """Set each field of the dataclass `section` that `values` holds, a section's fields one by one (a mapping
    field, `env.url_map`, whole)."""
    for item in dataclasses.fields(section):
        if item.name not in values:
            continue
        value, current = values[item.name], getattr(section, item.name)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            _fill(current, value)
        else:
            setattr(section, item.name, value)


def _key(override: str) -> str:
    return override.partition("=")[0].strip()


def _section(override: str) -> str:
    """The top-level section of a key=value override: `actor` for `actor.train.lr=1e-5`."""
    return _key(override).split(".")[0]


def _file_keys(path: Path) -> set[str]:
    """The dotted keys a config file sets (`replay.enabled`), `output_dir` aside (the comparison sets it)."""
    from omegaconf import OmegaConf

    return set(flatten(OmegaConf.to_container(OmegaConf.load(path)))) - {"output_dir"}


def _overlaps(key: str, keys: set[str]) -> bool:
    """Whether `key` is one of `keys`, holds one (`actor.loss` holds `actor.loss.objective`) or lies inside one."""
    return any(key == other or other.startswith(f"{key}.") or key.startswith(f"{other}.") for other in keys)


def _sections(schema: type) -> set[str]:
    return {item.name for item in dataclasses.fields(schema)}


def train_templates(config: WebRLConfig) -> set[int]:
    """Template ids of the train split: the held-out tasks' templates among them are the ones training saw."""
    if config.env.suite == "embedded":
        from webrl.env.splits import load_split

        tasks = load_split(config.env.train_split)
    else:
        from webrl.env.tasks import load_tasks

        tasks = load_tasks(Path(config.env.suite) / config.env.train_split, config.env.url_map)
    return {task.intent_template_id for task in tasks if task.intent_template_id is not None}
