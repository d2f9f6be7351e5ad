"""Which recipe a rule of the run config binds: the phases' rules bind `recipes.webrl`, never an evaluation.

A served model (`rollout.engine=openai`) cannot load each phase's new actor, so a WebRL run with one stops at
load, not at phase 0's rollouts after the SFT actor and the ORM were built; the curriculum's rules, which only the
phases read, do not refuse an evaluation on a WebArena suite.
"""

from __future__ import annotations

import pytest

import recipes.compare as compare
import recipes.evaluate as evaluate
import recipes.webrl as webrl
import webrl.comparison as comparison
from recipes.webrl import recipe_config

SERVED = ["rollout.engine=openai", "rollout.openai_url=http://127.0.0.1:9/v1"]
REFUSED = (
    "config error: rollout.engine='openai': must be one of hf, vllm for WebRL's phases: a served model cannot load "
    "each phase's new actor (openai fits recipes.evaluate, recipes.orm and model.generator)"
)


def _model_dir(tmp_path):
    model = tmp_path / "actor"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


def test_a_webrl_run_through_a_served_model_stops_at_load_naming_the_engine(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        webrl.main([*SERVED, f"output_dir={run_dir}", "--dry-run"])
    assert str(exit_info.value.code) == REFUSED
    assert not run_dir.exists()


def test_the_recipes_that_run_no_phase_take_a_served_model(tmp_path):
    config = recipe_config([*SERVED, f"output_dir={tmp_path}"], runs_phases=False)
    assert config.rollout.engine == "openai"


def test_a_comparison_refuses_a_served_model_before_any_method_runs(tmp_path, monkeypatch):
    def no_launch(command, **kwargs):
        raise AssertionError(f"a method was launched: {command}")

    monkeypatch.setattr(comparison.subprocess, "run", no_launch)
    with pytest.raises(SystemExit) as exit_info:
        compare.main(["--methods", "sft,webrl", "--output-root", str(tmp_path), *SERVED])
    assert str(exit_info.value.code) == f"compare: method webrl: {REFUSED.removeprefix('config error: ')}"
    assert not list(tmp_path.iterdir())


class NoBrowser:
    def __init__(self, config) -> None:
        self.config = config

    def __enter__(self) -> NoBrowser:
        return self

    def __exit__(self, *exc) -> None:
        return None


@pytest.mark.parametrize("mode", ["template", "mixed"])
def test_an_evaluation_on_an_external_suite_is_not_refused_over_the_curriculum(tmp_path, monkeypatch, mode):
    """The default config's template curriculum and evaluator rewards are the phases' business, not an evaluation's."""
    suite = tmp_path / "suite"
    suite.mkdir()
    evaluated = {}

    def evaluate_checkpoint(config, env, checkpoint, name, baseline=None):
        evaluated.update(suite=config.env.suite, engine=config.rollout.engine, checkpoint=checkpoint)
        return {}

    monkeypatch.setattr(evaluate, "WebEnvironment", NoBrowser)
    monkeypatch.setattr(evaluate, "evaluate_checkpoint", evaluate_checkpoint)
    model = _model_dir(tmp_path)
    argv = [f"model.actor={model}", f"output_dir={tmp_path / 'out'}", f"env.suite={suite}", f"curriculum.mode={mode}"]
    evaluate.main([*argv, "env.url_map={__SHOPPING__: 'http://shop:7770'}", *SERVED])
    assert evaluated == {"suite": str(suite), "engine": "openai", "checkpoint": model}


def test_evaluate_help_lists_the_engine_and_device_keys_it_reads(capsys):
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for key in ("fabric.accelerator = 'cpu'", "fabric.devices = 1", "engines.gpu_memory_utilization = 0.9"):
        assert key in text, key
    assert "engines.episodes_per_core = 0.0" in text and "actor.train.lr" not in text


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ('{"source": "/runs/a", "phase": 1', "not valid JSON (Expecting ',' delimiter at line 1 column 33)"),
        ('{"source": "/runs/a"}', "no 'phase' entry"),
        ("[1]", "must hold a JSON object, got list"),
    ],
)
def test_a_dry_run_shows_a_hand_edited_branch_record_instead_of_a_traceback(tmp_path, capsys, content, named):
    """The run never reads branched_from.json, so its dry run names what is wrong with it and goes on."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "branched_from.json").write_text(content)
    webrl.main([f"output_dir={run_dir}", "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith(f"branched, but {run_dir / 'branched_from.json'}: "), lines[2]
    assert named in lines[2] and lines[3].startswith("starting actor: ")
    assert lines[-1].startswith("phase 3: to run")


def test_a_dry_run_names_the_branch_point_of_a_branched_run(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "branched_from.json").write_text('{"source": "/runs/a", "phase": 1, "after": "critic"}')
    webrl.main([f"output_dir={run_dir}", "--dry-run"])
    assert capsys.readouterr().out.splitlines()[2] == "branched from /runs/a after phase 1's critic"
