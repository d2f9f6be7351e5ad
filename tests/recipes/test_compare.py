"""`python -m recipes.compare`: the learning table from run directories, reused or run end to end."""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from recipes import compare
from recipes.webrl import DEFAULT_CONFIG, recipe_config
from webrl.comparison import Comparison, Method, train_templates
from webrl.config import load_config
from webrl.config_checks import ConfigError
from webrl.data import atomic_io
from webrl.data.atomic_io import write_json_atomic
from webrl.data.trajectory import Task, Trajectory, write_trajectories
from webrl.evaluation.identity import evaluation_settings, weights_sha256
from webrl.evaluation.run_results import launch_seconds
from webrl.loop_config import WebRLConfig
from webrl.run_layout import RunLayout
from webrl.run_state import RunState
from webrl.tracking import WANDB_ENVIRONMENT

TASKS = ["1", "2", "3", "4"]


def trajectory(task_id: str, solved: set[str]) -> Trajectory:
    template = 101 if task_id in ("1", "2") else 104  # 101 is a train template, 104 only in the test split
    task = Task(task_id, f"intent {task_id}", ["shopping"], "http://x/", intent_template_id=template)
    return Trajectory(task, status="exit", eval_reward=1.0 if task_id in solved else 0.0)


def write_loop_run(run_dir: Path, solved: set[str], tasks: list[str] = TASKS) -> None:
    """A WebRL run as the loop leaves it after phase 1: run_state, phase records, the last evaluation."""
    layout = RunLayout(run_dir)
    write_trajectories(layout.eval_path(1, 0), [trajectory(task, solved) for task in tasks])
    RunState(phase=2, history=[{"phase": 0, "time/phase_s": 30.0}, {"phase": 1, "time/phase_s": 90.0}]).save(
        layout.state_path
    )


def keep_loop_configs(root: Path, quick: list[str], names: str) -> None:
    """config.json of the WebRL-loop methods `names` as their first launch under `root` would have written it."""
    methods, _ = compare.select(names)
    comparison = Comparison(
        methods, root, [], quick, default_file=DEFAULT_CONFIG, environment=WANDB_ENVIRONMENT, family=compare.METHODS
    )
    for run in comparison.runs:
        write_json_atomic(RunLayout(run.run_dir).config_path, dataclasses.asdict(run.config))


def write_sft_run(run_dir: Path, settings: dict, solved: set[str]) -> None:
    """The SFT recipe's evaluation as recipes.evaluate writes it: the JSON with its identity, the trajectories."""
    run_dir.mkdir(parents=True)
    checkpoint = run_dir.parent / "sft_checkpoint"
    checkpoint.mkdir(exist_ok=True)
    (checkpoint / "model.safetensors").write_bytes(b"sft weights")
    identity = {"checkpoint": str(checkpoint), "weights_sha256": weights_sha256(checkpoint), **settings}
    (run_dir / "eval_sft-0123456789.json").write_text(json.dumps({"identity": identity}))
    write_trajectories(run_dir / "eval_sft-0123456789.jsonl", [trajectory(task, solved) for task in TASKS])


def test_reuse_only_tables_the_finished_runs(tmp_path, capsys, quick):
    root = tmp_path / "cmp"
    settings = evaluation_settings(recipe_config(quick))
    write_sft_run(root / "sft", settings, solved={"1"})
    write_loop_run(root / "webrl", solved={"1", "2", "3"})
    write_loop_run(root / "no_kl", solved={"2"})
    keep_loop_configs(root, quick, "webrl,no_kl")
    record = compare.main(
        [
            "--reuse-only",
            "--output-root",
            str(root),
            "--methods",
            "sft,webrl,no_kl,no_replay,filtered_bc",
            *quick,
            "filtered_bc.percentile=50",
        ]
    )
    assert [row["method"] for row in record["methods"]] == ["sft", "webrl", "no_kl"]
    assert record["missing"] == ["filtered_bc", "no_replay"]
    sft, webrl, no_kl = record["methods"]
    # WebRL vs SFT on 4 tasks: only WebRL 2, 3 (b = 2), none only SFT (c = 0): p = 2 * 1/4 = 0.5, +50 points.
    assert (webrl["vs_baseline"]["only_a"], webrl["vs_baseline"]["only_b"]) == (2, 0)
    assert (webrl["vs_baseline"]["p_value"], webrl["vs_baseline"]["diff_points"]) == (0.5, 50.0)
    # no KL vs WebRL: only WebRL 1, 3 (c = 2): p = 0.5, -50 points; the paper ranks it below WebRL.
    assert no_kl["vs_reference"]["against"] == "webrl" and no_kl["vs_reference"]["p_value"] == 0.5
    assert (no_kl["paper"], webrl["seen_templates"]["successes"], webrl["test_only_templates"]["successes"]) == (
        "below WebRL (Fig. 5)",
        2,
        1,
    )
    assert (sft["wall_s"], webrl["wall_s"], webrl["wall_source"]) == (None, 120.0, "phases")
    assert record["held_out"]["task_ids"] == TASKS
    assert json.loads((root / "learning_table.json").read_text()) == record
    markdown = (root / "learning_table.md").read_text()
    assert "| WebRL (evaluator rewards) | 75.0 (3/4) |" in markdown and "no_replay" in markdown
    assert markdown in capsys.readouterr().out
    # Each method's command: common args, then its own file and overrides, then its run directory.
    no_kl_command = record["commands"]["no_kl"]
    assert no_kl_command[no_kl_command.index("--config") + 1].endswith("ablation_no_kl.yaml")
    assert record["commands"]["webrl"][-2:] == ["reward.source=evaluator", f"output_dir={root / 'webrl'}"]
    # A filtered_bc.* override goes to Filtered BC only, before its own overrides (it reads webrl's rollouts).
    assert "filtered_bc.percentile=50" in record["commands"]["filtered_bc"]
    assert not any(item.startswith("filtered_bc.") for item in record["commands"]["webrl"])
    assert f"filtered_bc.source_run={root / 'webrl'}" in record["commands"]["filtered_bc"]
    assert not (root / "no_replay").exists()  # --reuse-only ran nothing
    # The same command line with a subset that leaves Filtered BC out: its keys are unused, not refused.
    subset = ["--reuse-only", "--output-root", str(root), "--methods", "sft,webrl", *quick, "filtered_bc.percentile=50"]
    assert [row["method"] for row in compare.main(subset)["methods"]] == ["sft", "webrl"]


def test_results_on_other_tasks_or_settings_are_refused(tmp_path, quick):
    root = tmp_path / "cmp"
    write_loop_run(root / "webrl", solved={"1"})
    write_loop_run(root / "no_kl", solved={"1"}, tasks=TASKS[:3])
    keep_loop_configs(root, quick, "webrl,no_kl")
    with pytest.raises(SystemExit, match=r"different held-out tasks: no_kl \(3 tasks\) vs webrl \(4 tasks\)"):
        compare.main(["--reuse-only", "--output-root", str(root), "--methods", "webrl,no_kl", *quick])
    (root / "no_kl" / "config.json").write_text(json.dumps({"seed": 5}))
    with pytest.raises(SystemExit, match="method no_kl: .* was started with other settings: .*seed 5 → 0"):
        compare.main(["--reuse-only", "--output-root", str(root), "--methods", "webrl,no_kl", *quick])


def test_methods_must_draw_the_same_held_out_tasks(tmp_path, quick):
    validation = tmp_path / "validation.yaml"
    validation.write_text("env:\n  test_split: validation\n  train_split: train_fit\n")  # env.test_tasks=6 goes over it
    methods = [
        Method("webrl", "WebRL", "recipes.webrl", WebRLConfig),
        Method("x", "X", "recipes.webrl", WebRLConfig, validation),
    ]
    with pytest.raises(ConfigError, match=r"methods webrl and x would be evaluated on different held-out tasks"):
        Comparison(methods, tmp_path, [], quick, default_file=DEFAULT_CONFIG, environment=WANDB_ENVIRONMENT)


def test_bad_arguments_stop_before_anything_runs(tmp_path):
    for argv, message in (
        (["--methods", "sft,bogus"], "unknown bogus"),
        (["output_dir=x"], "set --output-root"),
        (["actor.train.lr=-1"], "method sft: actor.train.lr"),
        (["rolout.engine=hf"], "method sft: command-line override 'rolout.engine=hf'"),
        (["--methods", "webrl", "filterd_bc.percentile=50"], "method webrl: command-line override 'filterd_bc"),
    ):
        with pytest.raises(SystemExit, match=message):
            compare.main(["--output-root", str(tmp_path / "cmp"), *argv])
    assert not (tmp_path / "cmp").exists()


def test_a_launch_stopped_by_sigterm_still_counts_in_the_wall_time(tmp_path, monkeypatch, quick):
    """SIGTERM (as recipes.compare handles it) interrupts a running method; its launch is recorded before it stops."""
    (tmp_path / "sleeping_recipe.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    method = Method("webrl", "WebRL", "sleeping_recipe", WebRLConfig)
    comparison = Comparison([method], tmp_path / "cmp", [], quick, default_file=DEFAULT_CONFIG, environment={})
    previous = signal.signal(signal.SIGTERM, compare._interrupt)
    # To the main thread, which waits on the child, as an outside SIGTERM reaches a comparison's single thread.
    timer = threading.Timer(1.5, signal.pthread_kill, (threading.main_thread().ident, signal.SIGTERM))
    started = time.monotonic()
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            comparison.run_missing()
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    assert time.monotonic() - started < 30  # the sleeping child was stopped, not waited for
    launches = json.loads((tmp_path / "cmp" / "webrl" / "launches.json").read_text())
    assert [launch["returncode"] for launch in launches] == [None]
    assert launches[0]["command"][:3] == [sys.executable, "-m", "sleeping_recipe"]
    assert 1.0 < launch_seconds(tmp_path / "cmp" / "webrl") < 30


def test_a_methods_own_file_goes_over_a_common_override_of_its_keys(tmp_path, capsys, quick):
    common = [*quick, "replay.enabled=true", "actor.loss={objective: squared}", "curriculum_enabled=true"]
    comparison = Comparison(
        compare.METHODS, tmp_path, [], common, default_file=DEFAULT_CONFIG, environment=WANDB_ENVIRONMENT
    )
    config = {run.method.name: run.config for run in comparison.runs}
    assert config["webrl"].replay.enabled and config["webrl"].actor.loss.objective == "squared"
    assert not config["no_replay"].replay.enabled
    assert config["no_kl"].actor.loss.objective == "policy_gradient"
    assert not config["no_curriculum"].curriculum_enabled and config["no_replay"].curriculum_enabled
    out = capsys.readouterr().out
    assert "ablation_no_replay.yaml goes over replay.enabled=true" in out
    assert "ablation_no_kl.yaml goes over actor.loss={objective: squared}" in out


def test_orm_rewards_keep_their_labels_when_the_other_methods_turn_labels_off(tmp_path, quick):
    """The evaluator-rewarded methods may skip ORM labels; WebRL with ORM rewards cannot (its reward is the label)."""
    common = [*quick, "reward.orm_labels=false"]
    methods = [method for method in compare.METHODS if method.name in ("webrl", "webrl_orm")]
    comparison = Comparison(methods, tmp_path, [], common, default_file=DEFAULT_CONFIG, environment=WANDB_ENVIRONMENT)
    rewards = {run.method.name: run.config.reward for run in comparison.runs}
    assert (rewards["webrl"].source, rewards["webrl"].orm_labels) == ("evaluator", False)
    assert (rewards["webrl_orm"].source, rewards["webrl_orm"].orm_labels) == ("orm", True)


def test_an_ablation_is_set_against_the_full_webrl_of_its_own_reward_source_or_none(tmp_path, quick):
    def references(*names: str) -> dict[str, str]:
        methods = [method for method in compare.METHODS if method.name in names]
        common = [*quick, "reward.source=orm"]
        return Comparison(
            methods, tmp_path, [], common, default_file=DEFAULT_CONFIG, environment=WANDB_ENVIRONMENT
        )._references()

    assert references("webrl", "webrl_orm", "no_kl") == {"no_kl": "webrl_orm"}
    assert references("webrl", "no_kl") == {}  # webrl takes the evaluator's rewards: no pair to report


def test_a_failed_method_is_named_and_the_independent_ones_still_run(tmp_path, monkeypatch, quick):
    (tmp_path / "failing_recipe.py").write_text("raise SystemExit(3)\n")
    (tmp_path / "silent_recipe.py").write_text("open(__import__('sys').argv[-1].split('=')[1] + '.ran', 'w')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    methods = [
        Method("webrl", "WebRL", "failing_recipe", WebRLConfig),
        Method("reader", "Reads webrl", "silent_recipe", WebRLConfig, requires="webrl"),
        Method("other", "Independent", "silent_recipe", WebRLConfig),
    ]
    comparison = Comparison(methods, tmp_path / "cmp", [], quick, default_file=DEFAULT_CONFIG, environment={})
    failures = comparison.run_missing()
    assert failures["webrl"].startswith("failed (exit status 3)")
    assert failures["reader"] == "not run: it reads the run of webrl, which failed"
    assert failures["other"].startswith("ended without its final evaluation")
    assert (tmp_path / "cmp" / "other.ran").exists() and not (tmp_path / "cmp" / "reader.ran").exists()


def test_seen_templates_of_a_webarena_suite_resolve_its_placeholders(tmp_path):
    for split, template in (("train", 7), ("test", 9)):
        (tmp_path / "suite" / split).mkdir(parents=True)
        config = {
            "task_id": template,
            "intent": "What is the price of X?",
            "intent_template_id": template,
            "sites": ["shopping"],
            "start_url": "__SHOPPING__/",
            "eval": {"eval_types": ["string_match"], "reference_answers": {"exact_match": "1"}},
        }
        (tmp_path / "suite" / split / f"{template}.json").write_text(json.dumps(config))
    suite = [f"env.suite={tmp_path / 'suite'}", "env.url_map={__SHOPPING__: 'http://shop:7770'}"]
    suite.append("curriculum_enabled=false")  # template tasks come from the embedded sites only
    assert train_templates(load_config(WebRLConfig, suite, default_file=DEFAULT_CONFIG)) == {7}


@pytest.mark.slow
def test_the_whole_table_on_a_tiny_setting(tmp_path, model_cache, run_recipe, quick):
    """Every method runs (tiny model, one phase, 6 held-out tasks), then a second command reuses them all."""
    root = tmp_path / "cmp"
    command = [compare.sys.executable, "-m", "recipes.compare", "--output-root", str(root)]
    command += [f"model.cache_dir={model_cache}", *quick]
    result = run_recipe(command, timeout=3600)
    assert result.returncode == 0, result.stderr[-4000:]
    record = json.loads((root / "learning_table.json").read_text())
    names = [method.name for method in compare.METHODS]
    assert [row["method"] for row in record["methods"]] == names and record["missing"] == []
    assert record["held_out"]["tasks"] == 6
    for row in record["methods"]:
        assert row["n"] == 6 and row["wall_source"] == "launches" and row["wall_s"] > 0
        assert (row["vs_baseline"] or {}).get("tasks") == 6
    filtered_bc = json.loads((root / "filtered_bc" / "config.json").read_text())
    assert filtered_bc["filtered_bc"]["source_run"] == str(root / "webrl")
    assert json.loads((root / "webrl_orm" / "config.json").read_text())["reward"]["source"] == "orm"
    assert (root / "learning_table.md").read_text() in result.stdout

    again = run_recipe(command, timeout=600)
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.stdout.count("reusing") == len(names) and "[phase" not in again.stdout
    assert json.loads((root / "learning_table.json").read_text()) == record


def test_the_markdown_table_is_written_atomically(tmp_path, monkeypatch, quick):
    """A write of learning_table.md that fails before its rename leaves the previous table whole."""
    root = tmp_path / "cmp"
    write_loop_run(root / "webrl", solved={"1"})
    keep_loop_configs(root, quick, "webrl")
    (root / "learning_table.md").write_text("the previous table\n")
    rename = atomic_io.os.replace

    def failing_for_markdown(source, target):
        if str(target).endswith(".md"):
            raise OSError("disk full")
        rename(source, target)

    monkeypatch.setattr(atomic_io.os, "replace", failing_for_markdown)
    with pytest.raises(OSError, match="disk full"):
        compare.main(["--reuse-only", "--output-root", str(root), "--methods", "webrl", *quick])
    assert (root / "learning_table.md").read_text() == "the previous table\n"
    assert not (root / ".learning_table.md.tmp").exists()
