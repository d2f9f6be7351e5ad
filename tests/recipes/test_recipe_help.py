"""What a recipe shows before it runs: `--help` with the values it would use, `--print-config`, W&B settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from recipes import evaluate, webrl
from recipes.webrl import recipe_config
from webrl.config import config_to_dict

REPO = Path(__file__).resolve().parents[2]
RECIPES = ("webrl", "sft", "orm", "evaluate", "filtered_bc", "compare", "report", "branch", "pair", "average_weights")
CONFIG_RECIPES = ("webrl", "sft", "orm", "evaluate", "filtered_bc")
"""The recipes that read their config through `recipe_config`, and so answer `--print-config` too."""
HEAVY = ("torch", "lightning", "transformers", "peft")
"""What training loads; torch alone takes seconds to import, which `--help` should not wait for."""
PROBE = """
import contextlib, io, json, runpy, sys
module, flag = sys.argv[1:]
sys.argv = [module, flag]
out = io.StringIO()
code = None
with contextlib.redirect_stdout(out):
    try:
        runpy.run_module(module, run_name="__main__")
    except SystemExit as exit:
        code = exit.code
print(json.dumps({"code": code, "printed": bool(out.getvalue().strip()), "loaded": sorted(sys.modules)}))
"""


def _help_text(recipe, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        recipe.main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_help_shows_the_values_after_the_default_file_and_config_grouped_by_section(tmp_path, capsys):
    settings = tmp_path / "mine.yaml"
    settings.write_text("rollout:\n  concurrency: 3\n")
    text = _help_text(webrl, ["--config", str(settings), "env.test_tasks=7"], capsys)
    assert "phases = 3  -- WebRL phases" in text  # the recipe's default file
    assert "rollout.concurrency = 3  -- Episodes run at once" in text  # --config
    assert "env.test_tasks = 7  -- Held-out tasks" in text  # the command line
    assert "reward.source = 'evaluator'" in text  # the default file, not the dataclass default ('orm')
    lines = text.splitlines()
    header = lines.index("[rollout] Sampling actions in the browser.")
    assert lines[header + 1].startswith("  rollout.engine = ")
    assert "[actor.train] " in text and "python -m recipes.webrl" in text


def test_evaluate_help_is_its_own(capsys):
    text = _help_text(evaluate, [], capsys)
    assert "--baseline PATH" in text and "model.actor = ''" in text and "env.test_split = 'test'" in text
    assert "actor.train.lr" not in text and "phases =" not in text


@pytest.mark.parametrize(
    ("recipe", "flag"),
    [*((recipe, "--help") for recipe in RECIPES), *((recipe, "--print-config") for recipe in CONFIG_RECIPES)],
)
def test_help_and_print_config_load_no_model_library(recipe, flag):
    """In a fresh process, as a user runs it: an import in a test process would find torch loaded by other tests."""
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, f"recipes.{recipe}", flag],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    answer = json.loads(probe.stdout.strip().splitlines()[-1])
    assert answer["code"] in (0, None) and answer["printed"], answer["code"]
    heavy = [name for name in HEAVY if name in answer["loaded"]]
    assert not heavy, f"recipes.{recipe} {flag} imported {', '.join(heavy)}"


def test_print_config_prints_the_resolved_yaml_which_loads_back(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        webrl.main(["env.test_tasks=7", "--print-config"])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert yaml.safe_load(printed)["env"]["test_tasks"] == 7
    again = tmp_path / "printed.yaml"
    again.write_text(printed)
    printed_back = recipe_config(["--config", str(again)])
    assert config_to_dict(printed_back) == config_to_dict(recipe_config(["env.test_tasks=7"]))


def test_print_config_validates_first():
    with pytest.raises(SystemExit) as exit_info:
        webrl.main(["rollout.top_p=7", "--print-config"])
    assert str(exit_info.value.code).startswith("config error: rollout.top_p=7.0")


WANDB_ENVIRONMENT = {"WANDB_MODE": "disabled", "WANDB_PROJECT": "p2", "WANDB_ENTITY": "team", "WANDB_DIR": "/tmp/w"}


def test_wandb_environment_wins_over_config_files_and_loses_to_the_command_line(monkeypatch):
    for name, value in WANDB_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    tracking = recipe_config([]).tracking
    assert (tracking.wandb_mode, tracking.wandb_project, tracking.wandb_entity, tracking.wandb_dir) == (
        "disabled",
        "p2",
        "team",
        "/tmp/w",
    )
    assert recipe_config(["tracking.wandb_mode=offline", "tracking.wandb_project=cli"]).tracking.wandb_mode == "offline"
    assert recipe_config(["tracking.wandb_project=cli"]).tracking.wandb_project == "cli"


def test_a_bad_wandb_mode_from_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    with pytest.raises(SystemExit) as exit_info:
        recipe_config([])
    assert str(exit_info.value.code) == (
        "config error: tracking.wandb_mode='sometimes': must be one of online, offline, disabled (from $WANDB_MODE)"
    )


def test_online_without_a_wandb_key_runs_offline(monkeypatch, tmp_path):
    from webrl.tracking import effective_wandb_mode

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "missing-netrc"))
    assert effective_wandb_mode("online") == "offline"
    assert effective_wandb_mode("disabled") == "disabled"
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert effective_wandb_mode("online") == "online"
