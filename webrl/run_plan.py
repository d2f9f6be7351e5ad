"""The stage plan of a run, from its config and its directory alone: what `recipes.webrl --dry-run` prints.

It starts no browser and loads no model, so it shows in a second what a launch would do: which
phases and stages are done, which come next, and on which tasks each phase rolls out and evaluates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webrl.config_checks import ConfigError
from webrl.loop_config import WebRLConfig
from webrl.run_branch import read_branch_point
from webrl.run_config import describe_changes
from webrl.run_layout import RunLayout
from webrl.run_state import STAGES, RunState


def _count(limit: int, split: str) -> str:
    return f"{limit or 'all'} {split} tasks"


def _phase_work(config: WebRLConfig, phase: int) -> str:
    """What a phase rolls out, trains and evaluates on."""
    evaluation = f"evaluates on {_count(config.env.test_tasks, config.env.test_split)}"
    if phase == 0:
        tasks = _count(config.env.train_tasks, config.env.train_split)
        return f"the starting actor on {tasks}, no training; {evaluation}"
    if config.curriculum_enabled:
        tasks = f"{config.curriculum.tasks_per_phase} tasks from the {config.curriculum.mode} curriculum"
        if config.curriculum.page_facts:
            tasks += f" and up to {config.curriculum.page_facts} page facts"
    else:
        tasks = "phase 0's tasks again"
    return f"{tasks}, rewards from {config.reward.source}, critic then actor; {evaluation}"


def _phase_status(state: RunState, phase: int) -> str:
    if phase < state.phase:
        return "done"
    if phase > state.phase or not state.done:
        return "to run"
    following = [stage for stage in STAGES if stage not in state.done]
    return f"done {', '.join(state.done)}; next {following[0]}"


def _branch_line(path: Path) -> str:
    """Where the run was branched from, as `branched_from.json` says; what is wrong with the file where it cannot say.

    The run itself never reads the file (`recipes.branch` writes it as a record), so a hand-edited one is shown in
    the plan rather than ending the dry run with a traceback where the launch would go ahead.
    """
    try:
        branch = read_branch_point(path)
    except ConfigError as err:
        return f"branched, but {err}"
    return f"branched from {branch['source']} after phase {branch['phase']}'s {branch['after']}"


def describe_plan(config: WebRLConfig, changes: dict[str, tuple[Any, Any]] | None) -> str:
    """The plan as text; `changes` is `check_run_config`'s answer (None: the directory has no config.json)."""
    run_dir = Path(config.output_dir)
    layout = RunLayout(run_dir)
    state = RunState.load(layout.state_path)
    if changes is None:
        directory = "new (config.json would be written)"
    elif changes:
        directory = f"resumes with the allowed changes {describe_changes(changes)}"
    else:
        directory = "resumes, its config.json matches"
    starts = config.model.actor or f"the SFT actor (built once, cached under {config.model.cache_dir})"
    lines = [
        "Dry run: nothing is started or written.",
        f"run directory {run_dir}: {directory}",
        f"starting actor: {starts}; rollouts with {config.rollout.engine}",
    ]
    if layout.branch_path.is_file():
        lines.insert(2, _branch_line(layout.branch_path))
    if config.reward.orm_labels:
        lines.append(f"ORM: {config.model.orm or f'trained once, cached under {config.model.cache_dir}'}")
    for phase in range(config.phases + 1):
        work = f"{_phase_work(config, phase)}; writes {layout.phase_dir(phase)}"
        lines.append(f"phase {phase}: {_phase_status(state, phase)} -- {work}")
    return "\n".join(lines)
