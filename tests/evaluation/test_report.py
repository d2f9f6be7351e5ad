"""An evaluation's statistics from fixture trajectories: the markdown, the JSON record, pairing with a baseline."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from webrl.data.trajectory import Task, Trajectory, write_trajectories
from webrl.env.episode import Episode
from webrl.evaluation.outcomes import Baseline, load_baseline, load_outcomes, task_outcomes
from webrl.evaluation.report import evaluation_statistics
from webrl.metrics import errored, success_by_site
from webrl.report import format_site_table


def trajectory(task_id: str, site: str, template: int, reward: float | None) -> Trajectory:
    task = Task(task_id, f"intent {task_id}", [site], "http://x/", intent_template_id=template)
    return Trajectory(task, status="exit", eval_reward=reward)


TRAJECTORIES = [
    trajectory("10", "shopping", 101, 1.0),
    trajectory("2", "shopping", 101, 0.0),
    trajectory("3", "gitlab", 310, 1.0),
    trajectory("4", "gitlab", 301, 0.0),
    trajectory("5", "gitlab", 301, None),  # no evaluator verdict: left out, as from the success rates
]
SEEN = {101, 301}


def test_outcomes_follow_the_evaluator_threshold():
    outcomes = task_outcomes(TRAJECTORIES)
    assert [(o.task_id, o.success) for o in outcomes] == [("10", True), ("2", False), ("3", True), ("4", False)]


def test_markdown_and_record_without_baseline():
    record, markdown = evaluation_statistics(TRAJECTORIES, SEEN, "ckpt on test (5 tasks)")
    assert record["outcomes"] == {"2": False, "3": True, "4": False, "10": True}
    assert list(record["outcomes"]) == ["2", "3", "4", "10"]  # numeric order
    assert record["breakdown"]["overall"]["successes"] == 2 and record["breakdown"]["overall"]["n"] == 4
    assert record["breakdown"]["by_seen"]["test-only"]["n"] == 1
    assert "comparison" not in record
    json.dumps(record)  # the record is plain JSON
    # Wilson for 2 of 4: p = 0.5, shrink = 1 + 3.8416/4 = 1.9604, centre = (0.5 + 0.4802)/1.9604 = 0.5;
    # half = 1.96 * sqrt(0.0625 + 0.060025)/1.9604 = 1.96 * 0.3500357/1.9604 = 0.3499643 -> [15.0, 85.0]
    assert "Success: 50.0% (2 of 4 tasks), 95% Wilson interval [15.0, 85.0]%" in markdown
    # gitlab, 1 of 2 (task 5 has no verdict): shrink = 1 + 3.8416/2 = 2.9208, centre = 0.5;
    # half = 1.96 * sqrt(0.125 + 0.2401)/2.9208 = 1.96 * 0.6042351/2.9208 = 0.4054670 -> [9.5, 90.5]
    assert "| gitlab | 2 | 1 | 50.0 | [9.5, 90.5] |" in markdown
    assert "| 310 | gitlab | no | 1 | 1 | 100.0 | [20.7, 100.0] |" in markdown  # 1 of 1: low = 1/(1 + 3.8416)
    assert "Paired comparison" not in markdown


def test_pairing_with_a_baseline_json(tmp_path):
    path = tmp_path / "eval_a.json"
    path.write_text(json.dumps({"success_rate": 0.25, "outcomes": {"2": True, "3": False, "4": False, "10": False}}))
    record, markdown = evaluation_statistics(TRAJECTORIES, SEEN, "B", load_baseline(path))
    # this checkpoint: 10 and 3 succeed; baseline: 2. Only this one: 10, 3 (b = 2); only baseline: 2 (c = 1).
    # Bin(3, 1/2): P[X <= 1] = (1 + 3)/8 = 1/2, doubled = 1.
    assert record["comparison"] == {
        "baseline": str(path),
        "tasks": 4,
        "both": 0,
        "only_a": 2,
        "only_b": 1,
        "p_value": 1.0,
    }
    assert "this checkpoint 2 successes, the baseline 1" in markdown
    assert "exact McNemar two-sided p = 1." in markdown


def test_pairing_with_baseline_trajectories(tmp_path):
    path = tmp_path / "eval.rank0.jsonl"
    write_trajectories(path, TRAJECTORIES)
    assert load_outcomes(path) == {"10": True, "2": False, "3": True, "4": False}
    record, _ = evaluation_statistics(TRAJECTORIES, SEEN, "B", load_baseline(path))
    assert record["comparison"]["p_value"] == 1.0 and record["comparison"]["both"] == 2


def test_a_baseline_is_paired_on_the_tasks_both_scored():
    """Task 10 is missing from the baseline's outcomes (a browser failure there left it out): 3 pairs, not an error."""
    baseline = Baseline("other.json", {"2": True, "3": False, "4": False})
    record, markdown = evaluation_statistics(TRAJECTORIES, SEEN, "B", baseline)
    assert (record["comparison"]["tasks"], record["comparison"]["only_a"], record["comparison"]["only_b"]) == (3, 1, 1)
    assert "On the 3 tasks both evaluated" in markdown


def test_a_task_with_two_outcomes_is_refused_naming_the_file(tmp_path):
    """Task 2 twice (a success, then a failure): a map would keep the failure while the rates count both episodes."""
    path = tmp_path / "joined.jsonl"
    write_trajectories(path, [*TRAJECTORIES, trajectory("2", "shopping", 101, 1.0)])
    with pytest.raises(ValueError, match=r"joined\.jsonl: tasks 2 have more than one outcome"):
        load_baseline(path)
    with pytest.raises(ValueError, match="B: tasks 2 have more than one outcome"):
        evaluation_statistics([*TRAJECTORIES, trajectory("2", "shopping", 101, 1.0)], SEEN, "B")


def test_a_baseline_without_outcomes_says_what_to_give(tmp_path):
    path = tmp_path / "old_eval.json"
    path.write_text(json.dumps({"success_rate": 0.1}))
    with pytest.raises(ValueError, match="no per-task `outcomes`"):
        load_outcomes(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_outcomes(tmp_path / "missing.json")


def test_errored_episodes_are_counted_in_the_record_the_markdown_and_the_site_table():
    broken = Trajectory(
        Task("6", "intent 6", ["gitlab"], "http://x/", intent_template_id=301),
        status="error",
        eval_reward=0.0,  # even with a verdict, a browser failure says nothing about the policy
        metadata={"infra_error": True},
    )
    evaluator_failed = Trajectory(
        Task("7", "intent 7", ["gitlab"], "http://x/", intent_template_id=301), status="error", eval_reward=0.0
    )
    episodes = [*TRAJECTORIES, broken, evaluator_failed]
    record, markdown = evaluation_statistics(episodes, SEEN, "ckpt on test (7 tasks)")
    assert record["errors"] == {"errored": 2, "infra_errors": 1}
    assert record["breakdown"]["overall"]["n"] == 5 and "6" not in record["outcomes"]  # 4 + the evaluator failure
    line = "Errored episodes: 2 (1 browser, site or engine failures left out of every rate, 1 counted as failures)."
    assert line in markdown
    metrics = {**success_by_site(episodes, key="eval_reward"), "errors": errored(episodes)}
    table = format_site_table(metrics, "ckpt on test")
    assert table.splitlines()[-1] == "errored episodes: 2 (1 browser/site failures, not in the rates)"
    assert "(5 episodes)" in table


class _LivePage:
    def is_closed(self) -> bool:
        return False


class _RaisingEvaluator:
    """A site backend whose evaluator cannot run (as a WebArena `func:` helper webrl lacks)."""

    def allowed_origins(self, task: Task) -> list[str]:
        return []

    async def evaluate(self, page, task: Task, answer: str | None) -> float:
        raise ValueError("func:helper webrl lacks")


def evaluator_failed(task_id: str) -> Trajectory:
    """An episode the agent ended with an answer, scored by `Episode.evaluate` with an evaluator that raises."""
    task = Task(task_id, f"intent {task_id}", ["shopping"], "http://x/", intent_template_id=101)
    episode = Episode(task, _RaisingEvaluator(), SimpleNamespace(context=None))
    episode.page, episode.trajectory.status = _LivePage(), "exit"
    assert asyncio.run(episode.evaluate()) == 0.0
    return episode.trajectory


def test_an_evaluator_that_fails_counts_as_a_failure_and_a_browser_failure_not_at_all():
    """One success, one failure, one evaluator error, one browser failure: 1 of 3, as the errors line says."""
    broken = trajectory("4", "shopping", 101, None)
    broken.status, broken.metadata["infra_error"] = "error", True
    failed = evaluator_failed("3")
    assert failed.status == "error" and failed.eval_reward == 0.0 and not failed.infra_error
    episodes = [trajectory("1", "shopping", 101, 1.0), trajectory("2", "shopping", 101, 0.0), failed, broken]
    record, markdown = evaluation_statistics(episodes, SEEN, "ckpt on test (4 tasks)")
    assert record["outcomes"] == {"1": True, "2": False, "3": False}
    assert "Success: 33.3% (1 of 3 tasks)" in markdown
    errors = "Errored episodes: 2 (1 browser, site or engine failures left out of every rate, 1 counted as failures)."
    assert errors in markdown
    assert record["errors"] == {"errored": 2, "infra_errors": 1}
