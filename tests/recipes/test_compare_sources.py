"""`python -m recipes.compare` and the runs a method reads or ends: a Filtered BC result of WebRL rollouts no longer
there, a method that exits with an error after its evaluation, WebRL run for Filtered BC but not shown."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from recipes import compare
from recipes.webrl import DEFAULT_CONFIG, recipe_config
from tests.recipes.test_compare import TASKS, keep_loop_configs, trajectory, write_loop_run, write_sft_run
from tests.sample_records import build_trajectory
from webrl.cache_builds import DONE_MARKER
from webrl.comparison import Comparison, Method, PlannedRun
from webrl.data.trajectory import write_trajectories
from webrl.evaluation.identity import evaluation_settings, weights_sha256
from webrl.loop_config import WebRLConfig
from webrl.run_config import keep_run_config
from webrl.run_layout import RunLayout
from webrl.tracking import WANDB_ENVIRONMENT


def write_rollouts(webrl_dir: Path, prefix: str) -> None:
    """The WebRL run's labelled phase-1 rollouts, which Filtered BC filters."""
    rollouts = [build_trajectory(f"{prefix}{i}", orm_score=i / 10) for i in range(10)]
    write_trajectories(RunLayout(webrl_dir).labelled_path(1), rollouts)


def filtered_bc_run(root: Path, arguments: list[str]) -> PlannedRun:
    """Filtered BC's run under `root` as the comparison plans it with the common `arguments`."""
    methods = [method for method in compare.METHODS if method.name == "filtered_bc"]
    comparison = Comparison(
        methods, root, [], arguments, default_file=DEFAULT_CONFIG, environment=WANDB_ENVIRONMENT, family=compare.METHODS
    )
    return comparison.runs[0]


def write_filtered_bc_run(root: Path, quick: list[str], solved: set[str]) -> None:
    """Filtered BC's run as its recipe leaves it: its config.json, the actor (its marker records the settings it was
    trained with and the rollouts' digest), evaluated."""
    run = filtered_bc_run(root, quick)
    config, run_dir = run.config, run.run_dir
    keep_run_config(run_dir, config, [])
    actor = run_dir / "actor"
    actor.mkdir(parents=True)
    (actor / "model.safetensors").write_bytes(b"filtered bc weights")
    digest = hashlib.sha256(RunLayout(root / "webrl").labelled_path(1).read_bytes()).hexdigest()
    trained = {"filtered_bc": dataclasses.asdict(config.filtered_bc), "seed": config.seed, "sft": str(root / "sft")}
    (actor / DONE_MARKER).write_text(json.dumps({"inputs": {**trained, "rollouts_sha256": digest}}))
    settings = evaluation_settings(config)
    identity = {"checkpoint": str(actor), "weights_sha256": weights_sha256(actor), **settings}
    (run_dir / "eval_filtered_bc-0123456789.json").write_text(json.dumps({"identity": identity}))
    write_trajectories(run_dir / "eval_filtered_bc-0123456789.jsonl", [trajectory(task, solved) for task in TASKS])


@pytest.fixture
def compared(tmp_path: Path, quick: list[str]) -> Path:
    """SFT, WebRL and Filtered BC finished under one output root."""
    root = tmp_path / "cmp"
    write_sft_run(root / "sft", evaluation_settings(recipe_config(quick)), solved={"1"})
    write_loop_run(root / "webrl", solved={"1", "2", "3"})
    write_rollouts(root / "webrl", "old")
    keep_loop_configs(root, quick, "webrl")
    write_filtered_bc_run(root, quick, solved={"1", "2"})
    return root


def test_a_filtered_bc_result_of_rollouts_the_webrl_run_no_longer_holds_is_not_tabled(compared, quick, capsys):
    argv = ["--reuse-only", "--output-root", str(compared), "--methods", "sft,webrl,filtered_bc", *quick]
    assert [row["method"] for row in compare.main(argv)["methods"]] == ["sft", "webrl", "filtered_bc"]
    write_rollouts(compared / "webrl", "new")  # webrl removed and run again: other rollouts
    record = compare.main(argv)
    assert [row["method"] for row in record["methods"]] == ["sft", "webrl"] and record["missing"] == ["filtered_bc"]
    out = capsys.readouterr().out
    assert f"filtered_bc: not reusing {compared / 'filtered_bc'}: it was trained on other phase-1 rollouts" in out
    assert f"rollouts of {compared / 'webrl'} than those it holds now" in out


def test_a_filtered_bc_result_of_settings_accepted_since_is_not_tabled_until_trained_with_them(compared, quick, capsys):
    """A launch of the recipe with `filtered_bc.percentile=30 resume.allow_changes=[filtered_bc.percentile]` recorded
    the change, then stopped before its actor was trained again: the 70th percentile's actor and its evaluation stay,
    with the identity (tasks, sampling) the new cut keeps, and must not be tabled as the 30th's."""
    changed = [*quick, "filtered_bc.percentile=30"]
    accepted = filtered_bc_run(compared, [*changed, "resume.allow_changes=[filtered_bc.percentile]"])
    keep_run_config(accepted.run_dir, accepted.config, accepted.config.resume.allow_changes)
    argv = ["--reuse-only", "--output-root", str(compared), "--methods", "sft,webrl,filtered_bc", *changed]
    record = compare.main(argv)
    assert [row["method"] for row in record["methods"]] == ["sft", "webrl"] and record["missing"] == ["filtered_bc"]
    out = capsys.readouterr().out
    assert f"filtered_bc: not reusing {compared / 'filtered_bc'}: it was trained with other settings" in out
    assert "(filtered_bc.percentile 70.0 → 30.0)" in out
    marker_path = compared / "filtered_bc" / "actor" / DONE_MARKER
    marker = json.loads(marker_path.read_text())
    marker["inputs"]["filtered_bc"]["percentile"] = 30.0  # as the recipe, run again, records the actor it trains
    marker_path.write_text(json.dumps(marker))
    assert [row["method"] for row in compare.main(argv)["methods"]] == ["sft", "webrl", "filtered_bc"]


def test_filtered_bc_is_set_against_the_webrl_it_reads_even_when_webrl_is_not_shown(compared, quick):
    """`--methods sft,filtered_bc` runs WebRL for its rollouts: its result fills "vs WebRL here", without a row."""
    argv = ["--reuse-only", "--output-root", str(compared), "--methods", "sft,filtered_bc", *quick]
    record = compare.main(argv)
    assert [row["method"] for row in record["methods"]] == ["sft", "filtered_bc"] and record["missing"] == []
    # Filtered BC solved 1, 2; WebRL 1, 2, 3: only WebRL 3 (c = 1), -25 points.
    reference = record["methods"][1]["vs_reference"]
    assert (reference["against"], reference["only_a"], reference["only_b"], reference["diff_points"]) == (
        "webrl",
        0,
        1,
        -25.0,
    )
    markdown = (compared / "learning_table.md").read_text()
    assert "| Filtered BC | 50.0 (2/4) |" in markdown and "| -25.0 (p 1) | below WebRL |" in markdown
    assert "| WebRL (evaluator rewards) |" not in markdown and "pairs with webrl" in markdown


def test_a_method_that_exits_with_an_error_after_its_evaluation_is_tabled_with_a_warning(
    tmp_path, monkeypatch, quick, capsys
):
    """Its evaluation exists and has the table's settings: a result, not a method that "did not finish"."""
    staging = tmp_path / "staging"
    write_sft_run(staging, evaluation_settings(recipe_config(quick)), solved={"1"})
    recipe = "import os, shutil, sys\n"
    recipe += "shutil.copytree(os.environ['STAGED_RUN'], sys.argv[-1].split('=', 1)[1], dirs_exist_ok=True)\n"
    recipe += "raise SystemExit(3)\n"
    (tmp_path / "failing_after_evaluation.py").write_text(recipe)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("STAGED_RUN", str(staging))
    method = Method("sft", "SFT", "failing_after_evaluation", WebRLConfig, evaluation="sft")
    monkeypatch.setattr(compare, "METHODS", (method,))
    record = compare.main(["--output-root", str(tmp_path / "cmp"), *quick])
    assert [row["method"] for row in record["methods"]] == ["sft"] and record["failures"] == {}
    assert record["warnings"]["sft"].startswith("exited with status 3 after writing its final evaluation")
    out = capsys.readouterr().out
    assert "compare: warning: sft exited with status 3" in out and "did not finish" not in out
