"""The recipes' command line up to the config: `--help`, overrides, the shipped files, and bad files as one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes import filtered_bc, orm, webrl
from recipes.filtered_bc_config import FilteredBCConfig, FilteredBCRunConfig
from recipes.webrl import CONFIG_DIR, recipe_config
from webrl.loop_config import WebRLConfig

REPO = Path(__file__).resolve().parents[2]


def test_malformed_config_file_ends_the_recipe_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("phases: 2\nactor:\n  train: {lr: 1e-4\n")
    result = subprocess.run(
        [sys.executable, "-m", "recipes.webrl", "--config", str(bad)],
        cwd=REPO,
        env={**os.environ, "WANDB_MODE": "offline"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"config error: {bad}:4:1: not valid YAML: "), last
    assert "',' or '}'" in last and last.endswith("(while parsing a flow mapping at 3:10)"), last


def test_missing_config_file_is_one_line_naming_it(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(SystemExit) as exit_info:
        recipe_config(["--config", str(missing)])
    message = exit_info.value.code
    assert message.startswith(f"config error: config file not found: {missing} (neither a file nor a packaged config: ")
    assert "webrl_tiny" in message and "webrl_smollm2" in message and "\n" not in message


def test_filtered_bc_config_is_the_run_config_plus_its_own_section():
    argv = ["--config", str(CONFIG_DIR / "baseline_filtered_bc.yaml"), "filtered_bc.percentile=50", "phases=2"]
    config = recipe_config(argv, FilteredBCRunConfig)
    assert isinstance(config, WebRLConfig)
    assert config.output_dir == str(Path.cwd() / "runs/filtered_bc") and config.phases == 2  # made absolute once
    source_run = str(Path.cwd() / "runs/webrl_tiny")  # made absolute too (RECIPE_PATH_KEYS)
    assert config.filtered_bc == FilteredBCConfig(source_run=source_run, source_phase=1, percentile=50.0)


@pytest.mark.parametrize(
    ("schema", "override", "named"),
    [
        (FilteredBCRunConfig, "filtered_bc.percentile=120", "filtered_bc.percentile"),
        (FilteredBCRunConfig, "filtered_bc.train.lr=-1", "filtered_bc.train"),
        (FilteredBCRunConfig, "actor.train.lr=-1", "actor.train"),
        (WebRLConfig, "filtered_bc.percentile=50", "filtered_bc"),
    ],
)
def test_bad_recipe_overrides_name_the_key(schema, override, named):
    with pytest.raises(SystemExit) as exit_info:
        recipe_config([override], schema)
    assert named in str(exit_info.value.code)


RUN_KEYS = ["actor.advantage.gamma = 0.9  -- Discount", "output_dir = '{cwd}/runs/webrl_tiny'  -- Run directory"]
"""Lines --help must show; `{cwd}` is the folder it runs in (paths are shown as the run will use them, absolute)."""


@pytest.mark.parametrize(
    ("recipe", "listed"),
    [(webrl, RUN_KEYS), (filtered_bc, [*RUN_KEYS, "filtered_bc.percentile = 70.0  -- Keep rollouts"])],
)
def test_help_lists_every_key_of_each_recipe_with_its_docstring(recipe, listed, capsys):
    with pytest.raises(SystemExit) as exit_info:
        recipe.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for line in listed:
        assert line.format(cwd=Path.cwd()) in text
    assert ("filtered_bc." in text) == (recipe is filtered_bc)


def test_a_launch_lightning_refuses_is_one_line_and_keeps_no_config(tmp_path, monkeypatch):
    """FSDP1 with accelerator auto passes the config check (no GPU is asked for by name) and Lightning refuses it on
    a machine without one: the corrected relaunch must then not be refused as a change of settings."""
    if __import__("torch").cuda.is_available():
        pytest.skip("Lightning runs FSDP1 where there is a GPU")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as refused:
        webrl.main([f"output_dir={run_dir}", "fabric.strategy=fsdp", "fabric.accelerator=auto"])
    message = str(refused.value.code)
    assert message.startswith("config error: fabric.*: ") and "FSDP" in message and "\n" not in message
    assert not (run_dir / "config.json").exists()
    assert webrl.main([f"output_dir={run_dir}", "--dry-run"]) == []


def test_an_accelerator_this_machine_lacks_is_one_line_and_keeps_no_config(tmp_path, monkeypatch):
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as refused:
        webrl.main([f"output_dir={run_dir}", "fabric.accelerator=cuda"])
    message = str(refused.value.code)
    assert message.startswith("config error: fabric.*: ") and "CUDA" in message.upper() and "\n" not in message
    assert not (run_dir / "config.json").exists()


def test_the_orm_recipe_keeps_no_config_when_its_launch_fails(tmp_path, monkeypatch):
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with pytest.raises(SystemExit, match="^config error: fabric"):
        orm.main([f"output_dir={tmp_path}", "fabric.accelerator=cuda"])
    assert not (tmp_path / "orm" / "config.json").exists()


def test_fp16_mixed_precision_on_cpu_is_refused_naming_the_key():
    with pytest.raises(
        SystemExit, match="^config error: fabric.precision='16-mixed': fp16 mixed precision needs a GPU"
    ):
        recipe_config(["fabric.precision=16-mixed"])
    assert recipe_config(["fabric.precision=16-mixed", "fabric.accelerator=cuda"]).fabric.precision == "16-mixed"


@pytest.mark.parametrize("precision", ["16-mixed", "16", "64-true"])
def test_a_precision_fsdp2_refuses_is_refused_at_load_naming_the_key(precision):
    """Lightning's ModelParallelStrategy refuses these at start, in words that name no config key."""
    with pytest.raises(SystemExit, match=f"^config error: fabric.precision='{precision}': fabric.strategy=model_par"):
        recipe_config([f"fabric.precision={precision}", "fabric.strategy=model_parallel", "fabric.accelerator=cuda"])


@pytest.mark.parametrize(
    "overrides",
    [
        ["curriculum.judge_rules={}"],
        ["curriculum.site_descriptions={shopping: a store}", "tracking.wandb_project=off", "env.judge_model=1.10"],
    ],
)
def test_print_config_loads_back_to_the_same_config(tmp_path, capsys, overrides):
    """`--print-config` output (and a run's config.json, the branch relaunch's `--config`) is the config it records."""
    argv = [f"output_dir={tmp_path / 'run'}", *overrides]
    config = recipe_config(argv)
    with pytest.raises(SystemExit):
        recipe_config([*argv, "--print-config"])
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    assert recipe_config(["--config", str(printed)]) == config
