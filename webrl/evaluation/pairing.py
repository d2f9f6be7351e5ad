"""Evaluations of the same tasks side by side: each one's rate, and every pair's gained, lost, p and episode lengths.

A branch of a run (`recipes.branch`) reruns one stage with one setting changed; whether the change did anything is a
paired question on the held-out tasks both evaluated, and on a few hundred tasks the answer can hide in the noise. The
flipped tasks also say how the agent changed: an actor that loses tasks by ending its episodes earlier than the one
it is compared with (an early exit where an action was due) loses them in fewer steps. So each pair reports, besides
the exact McNemar test, how many of its lost and gained tasks ended in fewer, as many and more steps.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webrl.data.trajectory import Trajectory, is_success
from webrl.evaluation.breakdown import TaskOutcome, rate_of
from webrl.evaluation.outcomes import (
    attempted_ids,
    read_evaluation,
    scored_episodes,
    success_map,
    task_outcomes,
)
from webrl.evaluation.stats import require_same_tasks, shared_mcnemar
from webrl.run_layout import RunLayout


@dataclass(frozen=True)
class Evaluation:
    """One held-out evaluation: its name, where it was read, its scored episodes by task id, every task it ran."""

    name: str
    source: str
    episodes: dict[str, Trajectory]
    """The episodes with an evaluator verdict; a browser, site or engine failure has none and pairs with nothing."""
    attempted: frozenset[str]

    @property
    def outcomes(self) -> dict[str, bool]:
        return {task: is_success(episode.eval_reward) for task, episode in self.episodes.items()}


def load_evaluation(spec: str) -> Evaluation:
    """`[NAME=]PATH`: a trajectories JSONL file (a phase's `eval.rankR.jsonl` is read with its other ranks' shards) or
    a run directory (its last evaluated phase). NAME defaults to the run directory's or the file's name; a PATH that
    exists is read as a path even when it holds a `=`."""
    name, path_text = ("", spec) if Path(spec).exists() or "=" not in spec else spec.split("=", 1)
    path = Path(path_text)
    if path.is_dir():
        episodes, source = _last_phase_evaluation(path)
        name = name or path.name
    elif path.is_file():
        episodes, source = read_evaluation(path), str(path)
        name = name or path.stem
    else:
        raise FileNotFoundError(f"evaluation {path} does not exist (give a run directory or an eval .jsonl file)")
    scored = scored_episodes(episodes)
    success_map(task_outcomes(scored), source)  # raises, naming the tasks, where one has two episodes
    return Evaluation(name, source, {episode.task.task_id: episode for episode in scored}, attempted_ids(episodes))


def _last_phase_evaluation(run_dir: Path) -> tuple[list[Trajectory], str]:
    """The episodes of the last phase of `run_dir` that has evaluation files, and the phase's directory."""
    layout = RunLayout(run_dir)
    evaluated = [phase for phase in layout.phases() if layout.eval_paths(phase)]
    if not evaluated:
        raise FileNotFoundError(f"run directory {run_dir} has no phase with an evaluation (phase_NNN/eval.rank*.jsonl)")
    return layout.evaluations(evaluated[-1]), str(layout.phase_dir(evaluated[-1]))


def summarise(evaluation: Evaluation) -> dict[str, Any]:
    """Successes of the scored tasks with their 95 % Wilson interval, mean episode steps, success per site."""
    outcomes = task_outcomes(list(evaluation.episodes.values()))
    overall = rate_of(evaluation.name, outcomes)
    sites: dict[str, list[TaskOutcome]] = defaultdict(list)
    for outcome in outcomes:
        sites[outcome.site].append(outcome)
    by_site = [rate_of(site, members) for site, members in sorted(sites.items())]
    steps = sum(len(episode.steps) for episode in evaluation.episodes.values())
    return {
        "name": evaluation.name,
        "source": evaluation.source,
        "tasks": overall.n,
        "successes": overall.successes,
        "rate": overall.rate,
        "wilson_95": list(overall.interval) if overall.n else [0.0, 0.0],
        "mean_steps": steps / overall.n if overall.n else 0.0,
        "sites": {rate.label: {"successes": rate.successes, "tasks": rate.n} for rate in by_site},
    }


def pair(before: Evaluation, after: Evaluation) -> dict[str, Any]:
    """`after` against `before` on the tasks both scored: gained, lost, the exact McNemar p, and for the lost and the
    gained tasks how many of `after`'s episodes were shorter, as long and longer than `before`'s.

    Both must have attempted the same tasks (another split or sample is an error naming the task ids); a task one side
    lost to an infrastructure failure is left out of the pairing.
    """
    require_same_tasks(before.attempted, after.attempted)
    old, new = before.outcomes, after.outcomes
    test = shared_mcnemar(new, old)
    lost = [task for task, won in old.items() if won and task in new and not new[task]]
    gained = [task for task, won in new.items() if won and task in old and not old[task]]
    return {
        "before": before.name,
        "after": after.name,
        "tasks": test.tasks,
        "gained": test.only_a,
        "lost": test.only_b,
        "p_value": test.p_value,
        "lost_steps": _length_change(before, after, lost),
        "gained_steps": _length_change(before, after, gained),
    }


def _length_change(before: Evaluation, after: Evaluation, tasks: list[str]) -> dict[str, int]:
    """How many of `tasks` `after` ended in fewer, as many and more steps than `before`."""
    change = {"shorter": 0, "same": 0, "longer": 0}
    for task in tasks:
        old, new = len(before.episodes[task].steps), len(after.episodes[task].steps)
        change["shorter" if new < old else "longer" if new > old else "same"] += 1
    return change
