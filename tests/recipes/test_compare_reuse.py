"""`python -m recipes.compare` reusing finished runs: never one evaluated with other settings than the table's."""

from __future__ import annotations

import dataclasses
import json

import pytest

from recipes import compare
from recipes.webrl import DEFAULT_CONFIG, recipe_config
from tests.recipes.test_compare import keep_loop_configs, write_loop_run, write_sft_run
from webrl.comparison import Comparison, Method, evaluated_settings
from webrl.data.atomic_io import write_json_atomic
from webrl.evaluation.identity import evaluation_settings
from webrl.evaluation.run_results import launch_seconds
from webrl.loop_config import WebRLConfig
from webrl.run_layout import RunLayout
from webrl.run_state import RunState


def test_a_finished_webrl_evaluation_made_with_other_evaluation_settings_is_not_reused(tmp_path, quick):
    """The table's runs evaluated with env.max_steps=5; `env.max_steps=6 resume.allow_changes=[env.max_steps]` lets the
    run directory check through (the change applies from a relaunch's next stage), SFT is evaluated again with 6
    steps, and WebRL's 5-step evaluation, made already, must not be paired with it as if made with 6."""
    root = tmp_path / "cmp"
    write_loop_run(root / "webrl", solved={"1", "2"})
    keep_loop_configs(root, quick, "webrl")
    changed = [*quick, "env.max_steps=6", "resume.allow_changes=[env.max_steps]"]
    write_sft_run(root / "sft", evaluation_settings(recipe_config(changed)), solved={"1"})
    argv = ["--reuse-only", "--output-root", str(root), "--methods", "sft,webrl", *changed]
    with pytest.raises(SystemExit, match=r"method webrl: the phase-1 evaluation .* other evaluation settings "):
        compare.main(argv)
    with pytest.raises(SystemExit, match=r"env\.max_steps 5 → 6"):
        compare.main(argv)
    assert not (root / "learning_table.json").exists()


def test_a_change_recorded_after_the_tables_phase_leaves_its_evaluation_out(tmp_path, quick):
    """A longer run changed env.max_steps from phase 2 on (config_changes.json) and is read at phase 1 (`phases=1`):
    its phase-1 evaluation was made with 5 steps, not the 6 the run's settings now hold."""
    root = tmp_path / "cmp"
    write_loop_run(root / "webrl", solved={"1"})
    keep_loop_configs(root, quick, "webrl")
    record = {"from_phase": 2, "changes": {"env.max_steps": [5, 6]}}
    RunLayout(root / "webrl").config_changes_path.write_text(json.dumps([record]))
    with pytest.raises(SystemExit, match=r"method webrl: the phase-1 evaluation .*env\.max_steps 5 → 6"):
        compare.main(["--reuse-only", "--output-root", str(root), "--methods", "webrl", *quick, "env.max_steps=6"])


def test_a_webrl_evaluations_settings_are_rebuilt_from_the_settings_the_run_kept(tmp_path, quick):
    """config.json holds a key and a section since dropped from the schema and lacks one added since (its default
    keeps the behaviour from before it); a change accepted from phase 2 on applies to phase 2's evaluation only."""
    root = tmp_path / "cmp"
    keep_loop_configs(root, quick, "webrl")
    layout = RunLayout(root / "webrl")
    saved = json.loads(layout.config_path.read_text())
    saved["env"]["dropped_key"], saved["dropped_section"] = 3, {"x": 1}
    del saved["env"]["max_repeated_actions"]
    write_json_atomic(layout.config_path, saved)
    write_json_atomic(layout.config_changes_path, [{"from_phase": 2, "changes": {"env.max_steps": [5, 6]}}])
    started = evaluation_settings(recipe_config(quick))
    assert evaluated_settings(layout.root, 1) == started
    assert evaluated_settings(layout.root, 2) == {**started, "max_steps": 6}
    assert evaluated_settings(tmp_path / "elsewhere", 1) is None


def test_a_change_of_other_settings_keeps_the_evaluation(tmp_path, quick):
    """An allowed change that no evaluation reads (the actor's learning rate) leaves the finished run reused."""
    root = tmp_path / "cmp"
    write_loop_run(root / "webrl", solved={"1"})
    keep_loop_configs(root, quick, "webrl")
    changed = [*quick, "actor.train.lr=3e-6", "resume.allow_changes=[actor.train.lr]"]
    record = compare.main(["--reuse-only", "--output-root", str(root), "--methods", "webrl", *changed])
    assert [row["method"] for row in record["methods"]] == ["webrl"]


def resume_from(staging, monkeypatch, tmp_path):
    """A recipe that "runs" a method by copying the finished run in `staging` into its output_dir."""
    recipe = "import os, shutil, sys\n"
    recipe += "shutil.copytree(os.environ['STAGED_RUN'], sys.argv[-1].split('=', 1)[1], dirs_exist_ok=True)\n"
    (tmp_path / "copying_recipe.py").write_text(recipe)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("STAGED_RUN", str(staging))
    return Method("webrl", "WebRL", "copying_recipe", WebRLConfig)


def test_a_run_the_comparison_resumed_but_did_not_start_is_timed_by_its_phases(tmp_path, monkeypatch, quick):
    """`recipes.webrl` ran phase 0 (30 s) itself; the comparison resumed it for phase 1 (90 s): its launch timed
    phase 1 alone, so the wall time is the phases' 120 s (marked as such), not the launch's fraction of a second."""
    staging = tmp_path / "finished"
    write_loop_run(staging, solved={"1"})  # phases 0 and 1 closed: 30 s + 90 s
    method = resume_from(staging, monkeypatch, tmp_path)
    comparison = Comparison([method], tmp_path / "cmp", [], quick, default_file=DEFAULT_CONFIG, environment={})
    run = comparison.runs[0]
    write_json_atomic(RunLayout(run.run_dir).config_path, dataclasses.asdict(run.config))
    RunState(phase=1, history=[{"phase": 0, "time/phase_s": 30.0}]).save(RunLayout(run.run_dir).state_path)
    assert comparison.run_missing() == {}
    found = comparison.result(run)
    assert (found.wall_s, found.wall_source) == (120.0, "phases")


def test_a_run_the_comparisons_launches_ran_from_the_start_is_timed_by_them(tmp_path, monkeypatch, quick):
    staging = tmp_path / "finished"
    write_loop_run(staging, solved={"1"})
    comparison = Comparison(
        [resume_from(staging, monkeypatch, tmp_path)],
        tmp_path / "cmp",
        [],
        quick,
        default_file=DEFAULT_CONFIG,
        environment={},
    )
    assert comparison.run_missing() == {}
    found = comparison.result(comparison.runs[0])
    assert found.wall_source == "launches" and found.wall_s < 60
    assert found.wall_s == launch_seconds(comparison.runs[0].run_dir)
