"""The ORM threshold chosen on calibration rollouts (`webrl.orm_threshold.best_threshold`) against hand counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from lightning.fabric import Fabric
from sample_records import build_trajectory

import webrl.modules.orm
import webrl.orm_threshold as orm_threshold
from tests.calibration_failure_worker import TIMEOUT_S
from tests.test_orm_data import PatientEnvironment
from webrl.config import load_config
from webrl.data.trajectory import read_trajectories
from webrl.inference.scripted import ScriptedEngine
from webrl.loop_config import WebRLConfig
from webrl.modules.model_factory import build_tiny_model
from webrl.orm_data import actor_rollout_tasks
from webrl.orm_threshold import SCORED_FILE, best_threshold, calibration_dir, ensure_orm_threshold, verdict_figures

FAILURE_WORKER = Path(__file__).with_name("calibration_failure_worker.py")


def test_the_threshold_that_separates_the_classes_is_chosen_midway_in_the_gap():
    # Successes score 0.95 and 0.97, failures up to 0.9: only a threshold in (0.9, 0.95] separates them.
    scores = [0.97, 0.95, 0.9, 0.8, 0.6, 0.2]
    successes = [True, True, False, False, False, False]
    choice = best_threshold(scores, successes)
    assert choice.threshold == pytest.approx(0.925)
    assert (choice.balanced_accuracy, choice.precision, choice.recall) == (1.0, 1.0, 1.0)
    assert (choice.positives, choice.negatives) == (2, 4)
    # At the paper's 0.5 the same ORM accepts 3 of 4 failures: balanced accuracy (1 + 1/4) / 2, precision 2/5.
    assert verdict_figures(scores, successes, 0.5) == pytest.approx((0.625, 0.4, 1.0))


def test_overlapping_classes_get_the_best_balanced_accuracy_and_ties_go_to_precision():
    # Sorted: 0.9 S, 0.8 F, 0.7 S, 0.4 S, 0.3 F, 0.1 F. Candidates and (recall, specificity):
    # 0.85 -> (1/3, 1) = 0.667; 0.75 -> (1/3, 2/3); 0.55 -> (2/3, 2/3); 0.35 -> (1, 2/3) = 0.833; 0.2 -> (1, 1/3).
    scores = [0.9, 0.8, 0.7, 0.4, 0.3, 0.1]
    successes = [True, False, True, True, False, False]
    choice = best_threshold(scores, successes)
    assert choice.threshold == pytest.approx(0.35)
    assert choice.balanced_accuracy == pytest.approx(5 / 6)
    assert choice.precision == pytest.approx(3 / 4)
    # A tie in balanced accuracy: 0.85 gives (1/2, 1) and 0.55 gives (1, 1/2), both 0.75; 0.85 is the more precise.
    tie = best_threshold([0.9, 0.8, 0.3, 0.1], [True, False, True, False])
    assert tie.threshold == pytest.approx(0.85) and tie.precision == 1.0


def test_a_tie_in_balanced_accuracy_goes_to_precision_however_the_floats_round():
    # Sorted: S S F S S S F S. 0.845 accepts 2 successes: (2/6 + 1) / 2; 0.565 accepts 5 and a failure: (5/6 + 1/2) / 2.
    # Both are 2/3, which floats make 0.6666666666666666 and 0.6666666666666667; no other candidate reaches 2/3.
    scores = [0.95, 0.88, 0.81, 0.74, 0.67, 0.60, 0.53, 0.46]
    successes = [label == "S" for label in "SSFSSSFS"]
    choice = best_threshold(scores, successes)
    assert choice.threshold == pytest.approx(0.845)
    assert choice.precision == 1.0 and choice.balanced_accuracy == pytest.approx(2 / 3)


def test_calibration_rollouts_with_one_outcome_are_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"reward.calibration_tasks.*0 successes of 3"):
        best_threshold([0.2, 0.5, 0.9], [False, False, False])


@pytest.mark.parametrize(
    ("scores", "successes"),
    [
        ([0.5, 0.5, 0.5, 0.5], [True, False, True, False]),  # one score for all: only "all" or "none"
        ([0.1, 0.2, 0.8, 0.9], [True, True, False, False]),  # every failure ranked above every success
    ],
    ids=["constant", "inverted"],
)
def test_scores_no_threshold_makes_better_than_chance_are_refused(scores, successes):
    # Accepting none and accepting all both give balanced accuracy 1/2, and precision (1 when none is accepted)
    # would pick "none": a run labelling no rollout a success. It must stop instead, naming the key and the way out.
    with pytest.raises(ValueError, match=r"reward.calibration_tasks: no threshold .* 2 successes from the 2 failures"):
        best_threshold(scores, successes)
    # Better than chance is a choice, however weak: 0.85 accepts one success and no failure, (1/2 + 1) / 2.
    weak = best_threshold([0.1, 0.2, 0.8, 0.9], [True, False, False, True])
    assert (weak.threshold, weak.balanced_accuracy) == pytest.approx((0.85, 0.75))


def test_a_negative_calibration_size_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="reward.calibration_tasks"):
        load_config(WebRLConfig, ["reward.calibration_tasks=-1"])


@pytest.mark.timeout(900)
def test_calibration_rolls_out_unseen_train_tasks_scores_them_and_is_reused(tmp_path):
    # A real (untrained, tiny) ORM judges the noisy reference solver's episodes in real Chromium; what it
    # scores is arbitrary, so the test checks the plumbing and the arithmetic on what was recorded.
    corpus = ["Task: open the forum. Answer YES or NO.", "click [3] type [5] exit YES NO"] * 20
    orm = build_tiny_model(tmp_path / "orm", corpus, vocab_size=300, hidden_size=64, num_layers=1, num_heads=1)
    sft = tmp_path / "sft"
    overrides = [
        f"output_dir={tmp_path / 'run'}",
        f"model.cache_dir={tmp_path / 'cache'}",
        "env.max_steps=10",
        "orm.rollout_tasks=560",  # 28 of the 588 train tasks are left for calibration
        "reward.calibration_tasks=10",
    ]
    config = load_config(WebRLConfig, overrides)
    fabric = Fabric(accelerator="cpu", devices=1)
    with PatientEnvironment(config) as env:
        seen = {t.task_id for t in actor_rollout_tasks(config, env)}
        solver = ScriptedEngine.noisy_embedded_sites(0.5, 0.5, seed=0)
        choice = ensure_orm_threshold(config, fabric, env, solver, sft, orm)
        target = calibration_dir(config, sft, orm)
        scored = read_trajectories(target / SCORED_FILE)
        assert len(scored) == 10 and not {t.task.task_id for t in scored} & seen
        successes = [t.eval_reward >= 1.0 for t in scored]
        assert (choice.positives, choice.negatives) == (sum(successes), 10 - sum(successes))
        scores = [t.orm_score for t in scored]
        assert verdict_figures(scores, successes, choice.threshold) == pytest.approx(
            (choice.balanced_accuracy, choice.precision, choice.recall)
        )
        assert choice == best_threshold(scores, successes)
        # Asking again reads the cached choice: with no engine at all, any rollout would fail.
        assert ensure_orm_threshold(config, fabric, env, None, sft, orm) == choice
        too_many = load_config(WebRLConfig, [*overrides, "reward.calibration_tasks=29"])
        with pytest.raises(ValueError, match=r"reward.calibration_tasks=29: only 28 tasks .*\(orm.rollout_tasks\)"):
            ensure_orm_threshold(too_many, fabric, env, solver, sft, orm)


def test_the_calibration_cache_follows_what_shapes_its_episodes(tmp_path):
    def name(*overrides: str) -> str:
        config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", f"model.cache_dir={tmp_path}", *overrides])
        return calibration_dir(config, tmp_path / "sft", tmp_path / "orm").name

    plain = name()
    assert name("env.html_chars=900") != plain and name("reward.calibration_tasks=7") != plain
    assert name("env.reuse_contexts=true") == plain and name("env.screenshots.enabled=false") == plain
    for unrelated in ("env.test_tasks=20", "env.test_split=validation", "orm.data.concurrency=2"):
        assert name(unrelated) == plain, unrelated


def test_the_calibration_of_a_given_orm_follows_the_length_it_scores_prompts_at(tmp_path):
    """A given ORM's path does not hold model.max_length, as that of the ORM a run trains (`orm_dir`) does."""
    orm = tmp_path / "orm"
    orm.mkdir()
    (orm / "config.json").write_text("{}")

    def name(*overrides: str) -> str:
        config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", f"model.cache_dir={tmp_path}", *overrides])
        return calibration_dir(config, tmp_path / "sft", orm).name

    assert name(f"model.orm={orm}", "model.max_length=512") != name(f"model.orm={orm}")
    assert name("model.max_length=512") == name(), "a trained ORM's path already holds it: the default key stays"


def test_a_threshold_asked_for_twice_at_once_is_calibrated_once(tmp_path, monkeypatch):
    """Two runs on one cache: the second waits for the first's choice instead of rolling out into its files."""
    config = load_config(
        WebRLConfig, [f"output_dir={tmp_path / 'run'}", f"model.cache_dir={tmp_path}", "reward.calibration_tasks=2"]
    )
    runs: list[str] = []

    class Builder:
        def __init__(self, config, fabric, env, data_dir, tokenizer=None) -> None:
            pass

        def run(self, name, engine, tasks, *, evaluation=True):
            runs.append(name)
            time.sleep(0.5)  # the other thread arrives while this one rolls out
            return [build_trajectory("a", eval_reward=1.0), build_trajectory("b", eval_reward=0.0)]

    monkeypatch.setattr(orm_threshold, "calibration_tasks", lambda config, env: [])
    monkeypatch.setattr(orm_threshold, "ORMDataBuilder", Builder)
    monkeypatch.setattr(webrl.modules.orm, "orm_scorer", lambda *args, **kwargs: (lambda prompts: [0.9, 0.1], None))
    fabric = Fabric(accelerator="cpu", devices=1)
    choices = []
    threads = [
        threading.Thread(
            target=lambda: choices.append(ensure_orm_threshold(config, fabric, None, None, tmp_path / "s", tmp_path))
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert runs == ["calibration"] and len(choices) == 2 and choices[0] == choices[1]
    assert (choices[0].positives, choices[0].negatives) == (1, 1)


@pytest.mark.timeout(8 * TIMEOUT_S)
def test_a_calibration_that_fails_on_rank_0_stops_every_rank_at_once(tmp_path):
    """Real two-process gloo Fabric: rank 0's choice raises (rollouts of one outcome); rank 1 raises with it, naming
    the error, instead of waiting in a collective until the process group's timeout."""
    env = {**os.environ, "PYTHONPATH": str(FAILURE_WORKER.parent.parent)}
    command = [sys.executable, str(FAILURE_WORKER), str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=6 * TIMEOUT_S)
    records = {rank: tmp_path / f"rank{rank}.json" for rank in (0, 1)}
    assert all(path.exists() for path in records.values()), result.stderr[-3000:]
    for rank, path in records.items():
        record = json.loads(path.read_text())
        assert "reward.calibration_tasks" in str(record["error"]) and "0 successes of 2" in str(record["error"]), rank
        assert record["seconds"] < TIMEOUT_S / 2, (rank, record)
    assert result.returncode == 0, result.stderr[-3000:]
