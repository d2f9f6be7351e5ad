"""The recipes' command line up to the config: a bad or missing config file ends the program with one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.webrl import recipe_config

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
    assert exit_info.value.code == f"config error: config file not found: {missing}"
