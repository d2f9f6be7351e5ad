"""`recipes.evaluate` without a browser or a model: its arguments, and what it writes from fixture episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import recipes.evaluate as evaluate
from webrl.data.trajectory import Task, Trajectory
from webrl.evaluation.outcomes import Baseline
from webrl.loop_config import WebRLConfig

TASKS = [
    Task("1", "a", ["shopping"], "http://x/", intent_template_id=101),
    Task("2", "b", ["shopping"], "http://x/", intent_template_id=101),
    Task("1003", "c", ["reddit"], "http://x/", intent_template_id=409),
]
REWARDS = {"1": 1.0, "2": 0.0, "1003": 1.0}


class FixtureEnvironment:
    """Stands in for WebEnvironment: the test split is TASKS, train holds template 101 only."""

    def suite(self, split: str, limit: int, seed: int) -> list[Task]:
        return TASKS if split == "test" else [TASKS[0]]

    def run_episodes(self, engine, tasks, out_path, **kwargs):
        return [Trajectory(task, status="exit", eval_reward=REWARDS[task.task_id]) for task in tasks], {"time_s": 1.0}


class ClosingEngine:
    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--baseline", "a.json", "model.actor=m", "--config", "c.yaml"],
            ("a.json", ["model.actor=m", "--config", "c.yaml"]),
        ),
        (["model.actor=m", "--baseline=runs/eval.rank0.jsonl"], ("runs/eval.rank0.jsonl", ["model.actor=m"])),
        (["model.actor=m", "--help"], (None, ["model.actor=m", "--help"])),
    ],
)
def test_split_baseline(argv, expected):
    baseline, rest = evaluate.split_baseline(argv)
    assert (str(baseline) if baseline else None, rest) == expected


def test_a_missing_baseline_stops_before_anything_runs(tmp_path, monkeypatch):
    model = tmp_path / "actor"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setattr(evaluate, "WebEnvironment", None)  # would fail if reached
    with pytest.raises(SystemExit, match="--baseline: .*missing.json does not exist"):
        evaluate.main([f"model.actor={model}", f"output_dir={tmp_path}", "--baseline", str(tmp_path / "missing.json")])


def test_evaluation_writes_statistics_and_outcomes(tmp_path, monkeypatch):
    monkeypatch.setattr(evaluate, "build_engine", lambda *args, **kwargs: ClosingEngine())
    config = WebRLConfig(output_dir=str(tmp_path))
    baseline = Baseline("eval_a.json", {"1": False, "2": False, "1003": True})
    metrics = evaluate.evaluate_checkpoint(config, FixtureEnvironment(), Path("ckpt"), "b", baseline=baseline)
    assert metrics["success_rate"] == pytest.approx(2 / 3) and metrics["success_rate/reddit"] == 1.0
    record = json.loads((tmp_path / "eval_b.json").read_text())
    assert record["checkpoint"] == "ckpt" and record["success_rate/shopping"] == 0.5 and record["time_s"] == 1.0
    assert record["outcomes"] == {"1": True, "2": False, "1003": True}
    by_seen = record["breakdown"]["by_seen"]  # template 101 is in train, 409 is not
    assert [(by_seen[group]["n"], by_seen[group]["successes"]) for group in ("seen", "test-only")] == [(2, 1), (1, 1)]
    # only task 1 differs, and only this checkpoint succeeded there: b = 1, c = 0, p = 2 * 1/2 = 1 (capped)
    assert record["comparison"] == {
        "baseline": "eval_a.json",
        "tasks": 3,
        "both": 1,
        "only_a": 1,
        "only_b": 0,
        "p_value": 1.0,
    }
    markdown = (tmp_path / "eval_b.md").read_text()
    assert "| 409 | reddit | no | 1 | 1 | 100.0 | [20.7, 100.0] |" in markdown and "Paired comparison" in markdown


def test_a_baseline_on_other_tasks_stops_before_the_engine_starts(tmp_path, monkeypatch):
    def no_engine(*args, **kwargs):
        raise AssertionError("the engine was built although the baseline cannot be paired")

    monkeypatch.setattr(evaluate, "build_engine", no_engine)
    config = WebRLConfig(output_dir=str(tmp_path))
    baseline = Baseline("eval_a.json", {"1": False, "2": False, "7": True})
    with pytest.raises(SystemExit, match="only in A: 1003; only in B: 7"):
        evaluate.evaluate_checkpoint(config, FixtureEnvironment(), Path("ckpt"), "b", baseline=baseline)
