"""`recipes.evaluate` without a browser or a model: its arguments, and what it writes from fixture episodes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import recipes.evaluate as evaluate
from webrl.code_version import code_version
from webrl.data.trajectory import Task, Trajectory, read_trajectories, write_trajectories
from webrl.evaluation.outcomes import Baseline, load_baseline
from webrl.inference.rollout_metrics import rollout_counts
from webrl.loop_config import WebRLConfig
from webrl.run_layout import RunLayout

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
    [result] = tmp_path.glob("eval_b-*.json")
    record = json.loads(result.read_text())
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
    markdown = result.with_name(result.name.replace(".json", ".md")).read_text()
    assert "| 409 | reddit | no | 1 | 1 | 100.0 | [20.7, 100.0] |" in markdown and "Paired comparison" in markdown


def test_a_baseline_on_other_tasks_stops_before_the_engine_starts(tmp_path, monkeypatch):
    def no_engine(*args, **kwargs):
        raise AssertionError("the engine was built although the baseline cannot be paired")

    monkeypatch.setattr(evaluate, "build_engine", no_engine)
    config = WebRLConfig(output_dir=str(tmp_path))
    baseline = Baseline("eval_a.json", {"1": False, "2": False, "7": True})
    with pytest.raises(SystemExit, match="only in B: 7"):
        evaluate.evaluate_checkpoint(config, FixtureEnvironment(), Path("ckpt"), "b", baseline=baseline)


class ResumingEnvironment(FixtureEnvironment):
    """Resumes like WebEnvironment: a task already in `out_path` is not run again; counts the episodes run."""

    def __init__(self, rewards: dict[str, float]) -> None:
        self.rewards = rewards
        self.episodes = 0

    def run_episodes(self, engine, tasks, out_path, **kwargs):
        done = {t.task.task_id: t for t in read_trajectories(out_path)} if out_path.exists() else {}
        pending = [task for task in tasks if task.task_id not in done]
        new = [Trajectory(task, status="exit", eval_reward=self.rewards[task.task_id]) for task in pending]
        self.episodes += len(new)
        write_trajectories(out_path, [*done.values(), *new])
        done.update({t.task.task_id: t for t in new})
        return [done[task.task_id] for task in tasks], {"time_s": 1.0}


def _checkpoint(path: Path, weights: bytes) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_another_checkpoint_never_resumes_from_an_earlier_ones_results(tmp_path, monkeypatch):
    """phase_003/actor after phase_001/actor into one output dir: its own episodes, its own score."""
    monkeypatch.setattr(evaluate, "build_engine", lambda *args, **kwargs: ClosingEngine())
    config = WebRLConfig(output_dir=str(tmp_path / "out"))
    first = _checkpoint(tmp_path / "run" / "phase_001" / "actor", b"weights of phase 1")
    third = _checkpoint(tmp_path / "run" / "phase_003" / "actor", b"weights of phase 3")
    always = ResumingEnvironment({"1": 1.0, "2": 1.0, "1003": 1.0})
    assert evaluate.evaluate_checkpoint(config, always, first, "actor")["success_rate"] == 1.0
    never = ResumingEnvironment({"1": 0.0, "2": 0.0, "1003": 0.0})
    assert evaluate.evaluate_checkpoint(config, never, third, "actor")["success_rate"] == 0.0
    assert never.episodes == 3
    again = ResumingEnvironment({"1": 0.0, "2": 0.0, "1003": 0.0})  # the same identity resumes: nothing reruns
    assert evaluate.evaluate_checkpoint(config, again, third, "actor")["success_rate"] == 0.0
    assert again.episodes == 0


def test_results_record_what_made_them(tmp_path, monkeypatch):
    monkeypatch.setattr(evaluate, "build_engine", lambda *args, **kwargs: ClosingEngine())
    config = WebRLConfig(output_dir=str(tmp_path / "out"))
    config.env.test_tasks, config.rollout.eval_temperature = 3, 0.5
    checkpoint = _checkpoint(tmp_path / "actor", b"some weights")
    evaluate.evaluate_checkpoint(config, FixtureEnvironment(), checkpoint, "actor")
    [result] = (tmp_path / "out").glob("eval_actor*.json")
    record = json.loads(result.read_text())
    assert record["code"] == code_version()
    identity = record["identity"]
    assert identity["checkpoint"] == str(checkpoint.resolve())
    assert identity["weights_sha256"] == hashlib.sha256(b"model.safetensors\0some weights").hexdigest()
    expected = {"split": "test", "test_tasks": 3, "engine": "hf", "temperature": 0.5}
    assert {key: identity[key] for key in expected} == expected


def test_a_baseline_that_lost_tasks_to_failures_is_paired_on_the_rest(tmp_path, monkeypatch):
    """Its outcomes leave out what the browser or the site failed: that is no other sample (see the test above)."""
    monkeypatch.setattr(evaluate, "build_engine", lambda *args, **kwargs: ClosingEngine())
    config = WebRLConfig(output_dir=str(tmp_path))
    short = Baseline("eval_a.json", {"1": False, "1003": True}, frozenset({"1", "2", "1003"}))
    evaluate.evaluate_checkpoint(config, FixtureEnvironment(), Path("ckpt"), "b", baseline=short)
    [result] = tmp_path.glob("eval_b-*.json")
    assert json.loads(result.read_text())["comparison"]["tasks"] == 2


def test_a_baseline_of_a_smaller_sample_is_refused_naming_both_counts(tmp_path, monkeypatch):
    """A baseline that attempted 2 of these 3 tasks is another sample, not one that lost a task to a failure."""

    def no_engine(*args, **kwargs):
        raise AssertionError("the engine was built although the baseline is of another sample")

    monkeypatch.setattr(evaluate, "build_engine", no_engine)
    config = WebRLConfig(output_dir=str(tmp_path))
    path = tmp_path / "eval_a-0123456789.json"
    path.write_text(json.dumps({"outcomes": {"1": False, "1003": True}, "task_ids": ["1", "1003"]}))
    expected = r"^3 test tasks \(A\) vs 2 tasks of --baseline .*eval_a-0123456789.json \(B\):.*only in A: 2;"
    with pytest.raises(SystemExit, match=expected):
        evaluate.evaluate_checkpoint(config, FixtureEnvironment(), Path("ckpt"), "b", baseline=load_baseline(path))


class FailingOneEnvironment(FixtureEnvironment):
    """Task 2's browser fails (twice): it is attempted, without an outcome."""

    def run_episodes(self, engine, tasks, out_path, **kwargs):
        trajectories, metrics = super().run_episodes(engine, tasks, out_path, **kwargs)
        broken = trajectories[1]
        broken.status, broken.eval_reward, broken.metadata["infra_error"] = "error", None, True
        write_trajectories(out_path, trajectories)
        return trajectories, metrics


def test_an_evaluation_that_lost_a_task_is_a_baseline_for_the_same_tasks(tmp_path, monkeypatch):
    """Its JSON records every task attempted, so a later evaluation of the same 3 is paired, on the 2 both scored."""
    monkeypatch.setattr(evaluate, "build_engine", lambda *args, **kwargs: ClosingEngine())
    config = WebRLConfig(output_dir=str(tmp_path))
    evaluate.evaluate_checkpoint(config, FailingOneEnvironment(), Path("a"), "a")
    [written] = tmp_path.glob("eval_a-*.json")
    record = json.loads(written.read_text())
    assert record["task_ids"] == ["1", "2", "1003"] and record["outcomes"] == {"1": True, "1003": True}
    for path in (written, written.with_suffix(".jsonl")):
        baseline = load_baseline(path)
        assert baseline.tasks == {"1", "2", "1003"} and baseline.outcomes == {"1": True, "1003": True}
    evaluate.evaluate_checkpoint(config, FixtureEnvironment(), Path("b"), "b", baseline=load_baseline(written))
    [paired] = tmp_path.glob("eval_b-*.json")
    assert json.loads(paired.read_text())["comparison"]["tasks"] == 2


def test_a_webrl_phase_shard_as_baseline_brings_every_ranks_tasks(tmp_path):
    """`phase_001/eval.rank0.jsonl` holds rank 0's share of the tasks: the baseline is the phase's, all ranks."""
    layout = RunLayout(tmp_path)
    episodes = [Trajectory(task, status="exit", eval_reward=REWARDS[task.task_id]) for task in TASKS]
    write_trajectories(layout.eval_path(1, 0), episodes[:2])
    write_trajectories(layout.eval_path(1, 1), episodes[2:])
    baseline = load_baseline(layout.eval_path(1, 0))
    assert baseline.outcomes == {"1": True, "2": False, "1003": True} and baseline.tasks == {"1", "2", "1003"}
    evaluate.require_baseline_tasks(TASKS, baseline, "test")


class CountingEnvironment(ResumingEnvironment):
    """As WebEnvironment: the metrics it returns count only the episodes this launch ran (none: no metrics)."""

    def run_episodes(self, engine, tasks, out_path, **kwargs):
        before = self.episodes
        trajectories, _ = super().run_episodes(engine, tasks, out_path, **kwargs)
        ran = self.episodes - before
        return trajectories, (rollout_counts(trajectories[-ran:]) if ran else {})


def test_a_resumed_evaluation_counts_its_rollouts_over_every_episode(tmp_path, monkeypatch):
    """Tasks 1 and 2 done before a kill, 1003 run on resume: 3 episodes, 2/3 solved (shopping 1/2, reddit 1/1), not
    the resume's 1 of 1; and a relaunch with nothing left to run records the same."""
    monkeypatch.setattr(evaluate, "build_engine", lambda *args, **kwargs: ClosingEngine())
    config = WebRLConfig(output_dir=str(tmp_path / "out"))
    stem = f"eval_b-{evaluate.identity_tag(evaluate.evaluation_identity(config, Path('ckpt')))}"
    done = [Trajectory(task, status="exit", eval_reward=REWARDS[task.task_id]) for task in TASKS[:2]]
    write_trajectories(tmp_path / "out" / f"{stem}.jsonl", done)
    for expected_run in (1, 0):
        env = CountingEnvironment(REWARDS)
        evaluate.evaluate_checkpoint(config, env, Path("ckpt"), "b")
        assert env.episodes == expected_run
        record = json.loads((tmp_path / "out" / f"{stem}.json").read_text())
        assert (record["rollout/episodes"], record["rollout/status/exit"]) == (3, 3)
        assert record["rollout/success_rate"] == pytest.approx(2 / 3)
        assert (record["rollout/success_rate/shopping"], record["rollout/success_rate/reddit"]) == (0.5, 1.0)
