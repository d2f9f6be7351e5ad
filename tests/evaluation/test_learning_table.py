"""The learning table from hand-made outcomes: Wilson intervals, differences and exact McNemar p-values by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webrl.data.trajectory import Task, Trajectory, write_trajectories
from webrl.evaluation.breakdown import TaskOutcome
from webrl.evaluation.identity import weights_sha256
from webrl.evaluation.learning_table import LearningTable
from webrl.evaluation.outcomes import read_evaluation
from webrl.evaluation.run_results import RunResult, launch_seconds, loop_result, recipe_result, record_launch
from webrl.run_layout import RunLayout
from webrl.run_state import STAGES, RunState

SEEN_TEMPLATE, TEST_ONLY_TEMPLATE = 101, 104
TASKS = [str(i) for i in range(1, 11)]
"""Tasks 1-5 of a seen template, 6-10 of a test-only one."""


def template(task_id: str) -> int:
    return SEEN_TEMPLATE if int(task_id) <= 5 else TEST_ONLY_TEMPLATE


def result(method: str, solved: set[str], tasks: list[str] = TASKS, split: str = "test") -> RunResult:
    outcomes = [TaskOutcome(task, "shopping", template(task), task in solved) for task in tasks]
    return RunResult(method, outcomes, f"{method}.jsonl", "embedded", split, wall_s=120.0, wall_source="launches")


SFT = result("sft", {"1", "2"})
WEBRL = result("webrl", {"1", "3", "4", "5", "6"})
NO_KL = result("no_kl", {"1"})


def build(*results: RunResult, missing: tuple[str, ...] = ()) -> LearningTable:
    return LearningTable.build(
        list(results),
        {SEEN_TEMPLATE},
        labels={"sft": "SFT", "webrl": "WebRL", "no_kl": "no KL"},
        references={"no_kl": "webrl"},
        paper={"no_kl": "below WebRL"},
        missing=missing,
    )


def test_rows_hold_intervals_differences_and_paired_tests():
    table = build(SFT, WEBRL, NO_KL, missing=("sft", "webrl", "no_kl", "no_replay"))
    record = table.to_dict()
    assert record["held_out"] == {"suite": "embedded", "split": "test", "tasks": 10, "task_ids": TASKS}
    assert record["missing"] == ["no_replay"]
    sft, webrl, no_kl = record["methods"]
    # Wilson, n = 10, z^2 = 3.8416, shrink = 1.38416. 5/10: centre = (0.5 + 0.19208)/1.38416 = 0.5,
    # half = 1.96 * sqrt(0.025 + 0.009604)/1.38416 = 0.26341 -> [0.23659, 0.76341].
    assert (webrl["successes"], webrl["n"], webrl["rate"]) == (5, 10, 0.5)
    assert webrl["low"] == pytest.approx(0.23659, abs=1e-5) and webrl["high"] == pytest.approx(0.76341, abs=1e-5)
    # 2/10: centre = (0.2 + 0.19208)/1.38416 = 0.28326, half = 1.96 * sqrt(0.016 + 0.009604)/1.38416 = 0.22658.
    assert sft["low"] == pytest.approx(0.05668, abs=1e-5) and sft["high"] == pytest.approx(0.50984, abs=1e-5)
    # WebRL vs SFT: only WebRL 3, 4, 5, 6 (b = 4), only SFT 2 (c = 1), both 1; p = 2 (1 + 5)/32 = 0.375.
    assert webrl["vs_baseline"] == {
        "against": "sft",
        "diff_points": pytest.approx(30.0),
        "tasks": 10,
        "both": 1,
        "only_a": 4,
        "only_b": 1,
        "p_value": 0.375,
    }
    # no KL vs SFT: b = 0, c = 1 -> p = 2 * 1/2 = 1; vs WebRL: b = 0, c = 4 -> p = 2/16 = 0.125, -40 points.
    assert (no_kl["vs_baseline"]["p_value"], no_kl["vs_baseline"]["diff_points"]) == (1.0, pytest.approx(-10.0))
    assert no_kl["vs_reference"]["against"] == "webrl"
    assert (no_kl["vs_reference"]["only_b"], no_kl["vs_reference"]["p_value"]) == (4, 0.125)
    assert no_kl["vs_reference"]["diff_points"] == pytest.approx(-40.0)
    assert webrl["vs_reference"] is None and no_kl["paper"] == "below WebRL"
    # WebRL on seen templates: 1, 3, 4, 5 of 1-5; test-only: 6 of 6-10.
    assert (webrl["seen_templates"]["successes"], webrl["seen_templates"]["n"]) == (4, 5)
    assert (webrl["test_only_templates"]["successes"], webrl["test_only_templates"]["n"]) == (1, 5)
    json.dumps(record)


def test_markdown_rows():
    markdown = build(SFT, WEBRL, NO_KL).to_markdown()
    assert markdown.startswith("# Learning table: 10 held-out tasks (test split, embedded suite)")
    # 1/10: centre = (0.1 + 0.19208)/1.38416 = 0.21102, half = 1.96 * sqrt(0.009 + 0.009604)/1.38416 = 0.19314.
    assert "| SFT | 20.0 (2/10) | [5.7, 51.0] | 10 |  |  | 40.0 (2/5) | 0.0 (0/5) |  |  | 2.0 |" in markdown
    assert (
        "| WebRL | 50.0 (5/10) | [23.7, 76.3] | 10 | +30.0 | 0.375 (b 4, c 1) | 80.0 (4/5) | 20.0 (1/5) |" in markdown
    )
    assert "| no KL | 10.0 (1/10) | [1.8, 40.4] | 10 | -10.0 | 1 (b 0, c 1) | 20.0 (1/5) | 0.0 (0/5) |" in markdown
    assert "| -40.0 (p 0.125) | below WebRL | 2.0 |" in markdown


def test_without_sft_the_paired_columns_stay_empty():
    record = build(WEBRL, NO_KL).to_dict()
    assert all(row["vs_baseline"] is None for row in record["methods"])
    assert record["methods"][1]["vs_reference"]["p_value"] == 0.125


def test_different_task_sets_are_refused_naming_the_methods():
    short = result("no_replay", {"1"}, tasks=TASKS[:9])
    with pytest.raises(ValueError, match=r"no_replay \(9 tasks\) vs sft \(10 tasks\).*only in B: 10"):
        build(SFT, WEBRL, short)
    with pytest.raises(ValueError, match="sft on the test split of embedded, no_replay on the validation split"):
        build(SFT, result("no_replay", {"1"}, split="validation"))
    with pytest.raises(ValueError, match="no method has a finished evaluation"):
        build()


def test_a_task_a_failure_kept_out_of_one_methods_outcomes_is_paired_on_the_others():
    """no_kl attempted all 10 tasks; a browser failure (twice) left task 10 out of its outcomes: 9 pairs, no error."""
    lost = result("no_kl", {"1"}, tasks=TASKS[:9])
    lost = RunResult(lost.method, lost.outcomes, lost.source, lost.suite, lost.split, attempted=frozenset(TASKS))
    table = build(SFT, WEBRL, lost).to_dict()
    no_kl = table["methods"][2]
    assert no_kl["n"] == 9 and no_kl["vs_baseline"]["tasks"] == 9 and no_kl["vs_reference"]["tasks"] == 9


def lost_to_failures(method: str, solved: set[str], scored: list[str]) -> RunResult:
    """A method that attempted all of TASKS but scored only `scored` (the others: browser failures, twice)."""
    partial = result(method, solved, tasks=scored)
    return RunResult(method, partial.outcomes, partial.source, partial.suite, partial.split, attempted=frozenset(TASKS))


def test_the_held_out_tasks_are_those_attempted_when_the_first_row_lost_some():
    """SFT scored 8 of its 10 tasks: the table is still of 10 held-out tasks, as every row attempted."""
    table = build(lost_to_failures("sft", {"1", "2", "3", "4"}, TASKS[:8]), WEBRL)
    assert table.to_dict()["held_out"] == {"suite": "embedded", "split": "test", "tasks": 10, "task_ids": TASKS}
    assert table.to_markdown().startswith("# Learning table: 10 held-out tasks (test split, embedded suite)")


def test_a_difference_over_fewer_tasks_than_the_success_column_names_the_paired_count():
    """SFT solves 1-4 of the 8 it scored (50%), WebRL 1-4, 9 and 10 of 10 (60%): on the 8 both scored they are equal,
    so the +0.0 beside a 10-point gap in the success column says it is over 8 paired tasks."""
    sft = lost_to_failures("sft", {"1", "2", "3", "4"}, TASKS[:8])
    webrl = result("webrl", {"1", "2", "3", "4", "9", "10"})
    markdown = build(sft, webrl).to_markdown()
    assert "| SFT | 50.0 (4/8) | [21.5, 78.5] | 8 |  |  |" in markdown
    assert "| WebRL | 60.0 (6/10) | [31.3, 83.2] | 10 | +0.0 on 8 paired | 1 (b 0, c 0) |" in markdown
    assert "'on N paired'" in markdown
    # every row scored all 10: the cell is the difference alone
    assert "| WebRL | 50.0 (5/10) | [23.7, 76.3] | 10 | +30.0 | 0.375 (b 4, c 1) |" in build(SFT, WEBRL).to_markdown()


def test_a_paired_difference_is_a_share_of_the_paired_tasks_not_of_the_success_column():
    """On the 8 tasks SFT scored, WebRL alone solves 5: +1/8 = +12.5 points (1/10 of its success column would be 10)."""
    sft = lost_to_failures("sft", {"1", "2", "3", "4"}, TASKS[:8])
    webrl = result("webrl", {"1", "2", "3", "4", "5", "9", "10"})
    # McNemar b = 1, c = 0: p = 2 * (1/2)^1 = 1.
    assert "| 10 | +12.5 on 8 paired | 1 (b 1, c 0) |" in build(sft, webrl).to_markdown()


def trajectory(task_id: str, reward: float) -> Trajectory:
    task = Task(task_id, f"intent {task_id}", ["shopping"], "http://x/", intent_template_id=template(task_id))
    return Trajectory(task, status="exit", eval_reward=reward)


def test_loop_result_reads_the_last_phase_once_evaluated(tmp_path):
    layout = RunLayout(tmp_path)
    assert loop_result("webrl", tmp_path, 1, suite="embedded", split="test") is None
    write_trajectories(layout.eval_path(1, 0), [trajectory("1", 1.0), trajectory("3", 0.0)])
    write_trajectories(layout.eval_path(1, 1), [trajectory("2", 0.0)])
    state = RunState(phase=1, done=list(STAGES[:7]), history=[{"phase": 0, "time/phase_s": 60.0}])
    state.save(layout.state_path)
    assert loop_result("webrl", tmp_path, 1, suite="embedded", split="test") is None  # evaluation not marked done
    state.history.append({"phase": 1, "time/phase_s": 120.0})
    RunState(phase=2, history=state.history).save(layout.state_path)
    found = loop_result("webrl", tmp_path, 1, suite="embedded", split="test")
    assert found.successes == {"1": True, "2": False, "3": False}  # both ranks' shards
    assert (found.wall_s, found.wall_source) == (180.0, "phases")
    record_launch(tmp_path, ["python", "-m", "recipes.webrl"], 90.0, 1)
    record_launch(tmp_path, ["python", "-m", "recipes.webrl"], 30.0, 0)
    assert launch_seconds(tmp_path) == 120.0
    assert loop_result("webrl", tmp_path, 1, suite="embedded", split="test").wall_source == "launches"


def test_a_shard_left_by_an_earlier_launch_is_not_read_as_the_evaluation(tmp_path):
    """Evaluated on 2 ranks (tasks 1-4), then relaunched on 1 rank on tasks 1-2 (`resume.allow_changes`): rank 1's
    file still holds tasks 3 and 4 of the first launch; the phase's evaluation is the recorded tasks 1 and 2."""
    layout = RunLayout(tmp_path)
    write_trajectories(layout.eval_path(1, 0), [trajectory("1", 1.0), trajectory("2", 0.0)])
    write_trajectories(layout.eval_path(1, 1), [trajectory("3", 1.0), trajectory("4", 1.0)])
    layout.record_eval_tasks(1, ["1", "2"])
    RunState(phase=2, history=[{"phase": p, "time/phase_s": 60.0} for p in range(2)]).save(layout.state_path)
    found = loop_result("webrl", tmp_path, 1, suite="embedded", split="test")
    assert found.successes == {"1": True, "2": False}
    assert found.tasks == {"1", "2"}
    assert [t.task.task_id for t in read_evaluation(layout.eval_path(1, 1))] == ["1", "2"]


def test_a_longer_run_reused_for_fewer_phases_times_only_those_phases(tmp_path):
    """A finished 4-phase run (0-3, 10 minutes each) read at phase 1: 20 minutes, not the 40 of every phase, and its
    launches (which ran all four) give way to that sum."""
    layout = RunLayout(tmp_path)
    write_trajectories(layout.eval_path(1, 0), [trajectory("1", 1.0)])
    RunState(phase=4, history=[{"phase": p, "time/phase_s": 600.0} for p in range(4)]).save(layout.state_path)
    found = loop_result("webrl", tmp_path, 1, suite="embedded", split="test")
    assert (found.wall_s, found.wall_source) == (1200.0, "phases")
    record_launch(tmp_path, ["python", "-m", "recipes.webrl"], 2450.0, 0)
    found = loop_result("webrl", tmp_path, 1, suite="embedded", split="test")
    assert (found.wall_s, found.wall_source) == (1200.0, "phases")
    assert build(found).to_markdown().splitlines()[4].endswith("| 20.0* |")
    # the same run read at its last phase: the launch that ran it
    assert loop_result("webrl", tmp_path, 3, suite="embedded", split="test").wall_s == 2450.0


def evaluated_checkpoint(folder: Path, weights: bytes) -> dict[str, str | None]:
    """A checkpoint folder holding `weights`, and the part of an evaluation's identity that names it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(weights)
    return {"checkpoint": str(folder), "weights_sha256": weights_sha256(folder)}


def test_recipe_result_reads_only_an_evaluation_with_the_same_settings(tmp_path):
    settings = {"suite": "embedded", "split": "test", "test_tasks": 3, "seed": 0}
    checkpoint = evaluated_checkpoint(tmp_path / "sft", b"weights")
    for name, split, solved in (("eval_sft-aaa", "validation", "2"), ("eval_sft-bbb", "test", "1")):
        identity = {**checkpoint, **settings, "split": split}
        (tmp_path / f"{name}.json").write_text(json.dumps({"identity": identity}))
        write_trajectories(tmp_path / f"{name}.jsonl", [trajectory(t, float(t == solved)) for t in ("1", "2", "3")])
    found = recipe_result("sft", tmp_path, "sft", settings)
    assert found.source.endswith("eval_sft-bbb.jsonl") and found.successes == {"1": True, "2": False, "3": False}
    assert found.wall_s is None
    assert recipe_result("sft", tmp_path, "sft", {**settings, "seed": 1}) is None
    assert recipe_result("filtered_bc", tmp_path, "filtered_bc", settings) is None


def test_recipe_result_is_not_reused_once_its_checkpoint_holds_other_weights(tmp_path, caplog):
    settings = {"suite": "embedded", "split": "test", "test_tasks": 3, "seed": 0}
    folder = tmp_path / "sft"
    identity = {**evaluated_checkpoint(folder, b"first training"), **settings}
    (tmp_path / "eval_sft-aaa.json").write_text(json.dumps({"identity": identity}))
    write_trajectories(tmp_path / "eval_sft-aaa.jsonl", [trajectory("1", 1.0)])
    assert recipe_result("sft", tmp_path, "sft", settings).successes == {"1": True}
    (folder / "model.safetensors").write_bytes(b"trained again")  # the SFT cache rebuilt in the same folder
    assert recipe_result("sft", tmp_path, "sft", settings) is None
    assert f"{folder} no longer holds the weights it evaluated" in caplog.text
    (folder / "model.safetensors").unlink()  # or deleted
    assert recipe_result("sft", tmp_path, "sft", settings) is None


def test_a_phase_evaluated_but_not_checkpointed_is_not_finished(tmp_path):
    """Killed between phase 1's evaluate and checkpoint: no result (the comparison resumes the run), where the
    evaluation alone gave a wall time of 60 s, phase 0's only."""
    layout = RunLayout(tmp_path)
    write_trajectories(layout.eval_path(1, 0), [trajectory("1", 1.0)])
    RunState(phase=1, done=list(STAGES[:8]), history=[{"phase": 0, "time/phase_s": 60.0}]).save(layout.state_path)
    assert STAGES[7] == "evaluate"
    assert loop_result("webrl", tmp_path, 1, suite="embedded", split="test") is None


def test_a_missing_phase_record_leaves_the_wall_time_unknown(tmp_path):
    """Phase 1 closed, phase 0's record gone: 120 s would be one phase of two; no time rather than half of it."""
    layout = RunLayout(tmp_path)
    write_trajectories(layout.eval_path(1, 0), [trajectory("1", 1.0)])
    RunState(phase=2, history=[{"phase": 1, "time/phase_s": 120.0}]).save(layout.state_path)
    found = loop_result("webrl", tmp_path, 1, suite="embedded", split="test")
    assert (found.wall_s, found.wall_source) == (None, "")
