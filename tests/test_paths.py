"""Where runs and caches go: the user cache directory, and a config's paths made absolute once as it is read.

A relaunch of a run directory whose config.json was written before paths were made absolute (a relative
`model.cache_dir` of `.cache/webrl`, a relative `model.actor`) must go on, not be refused for the new spelling.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webrl.config import config_to_dict, load_config
from webrl.config_checks import ConfigError
from webrl.loop_config import WebRLConfig
from webrl.paths import user_cache_dir
from webrl.run_config import check_run_config, keep_run_config


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A home folder of the test's own, with neither cache variable set, run from a folder inside it."""
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("WEBRL_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.chdir(home / "work")
    return home.resolve()


def _model_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_the_cache_is_webrl_cache_dir_else_xdg_cache_home_else_the_home_cache(home, monkeypatch):
    assert user_cache_dir() == home / ".cache" / "webrl"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/xdg")  # the XDG specification: a relative value is ignored
    assert user_cache_dir() == home / ".cache" / "webrl"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg"))
    assert user_cache_dir() == home / "xdg" / "webrl"
    monkeypatch.setenv("WEBRL_CACHE_DIR", "scratch/../models")  # wins over XDG; relative to the current folder
    assert user_cache_dir() == home / "work" / "models"
    monkeypatch.setenv("WEBRL_CACHE_DIR", "~/shared")
    assert user_cache_dir() == home / "shared"


def test_the_default_model_cache_is_the_user_cache_read_when_the_config_is(home, monkeypatch):
    assert load_config(WebRLConfig, []).model.cache_dir == str(home / ".cache" / "webrl")
    monkeypatch.setenv("WEBRL_CACHE_DIR", str(home / "big_disk"))
    assert load_config(WebRLConfig, []).model.cache_dir == str(home / "big_disk")
    given = load_config(WebRLConfig, ["model.cache_dir=/elsewhere/cache"])
    assert given.model.cache_dir == "/elsewhere/cache"


def test_relative_paths_become_absolute_against_the_folder_the_command_starts_in(home):
    _model_dir(home / "work" / "models" / "actor")
    _model_dir(home / "orm")
    relative = ["output_dir=runs/mine", "model.cache_dir=.cache/webrl", "model.actor=models/actor", "model.orm=~/orm"]
    config = load_config(WebRLConfig, relative)
    work = home / "work"
    assert config.output_dir == str(work / "runs" / "mine")
    assert config.model.cache_dir == str(work / ".cache" / "webrl")
    assert (config.model.actor, config.model.orm) == (str(work / "models" / "actor"), str(home / "orm"))
    assert load_config(WebRLConfig, []).model.actor == ""  # unset stays unset, never the current folder
    with pytest.raises(ConfigError, match="model.cache_dir"):
        load_config(WebRLConfig, ["model.cache_dir=''"])


def test_a_leading_tilde_is_the_home_folder_in_every_key_that_holds_a_path(home):
    """A shell leaves `model.base=~/llama` as typed (`model.base` is no variable name), as a YAML file always does."""
    from recipes.filtered_bc_config import FilteredBCRunConfig

    _model_dir(home / "llama")
    (home / "states").mkdir()
    chromium = home / "chrome"
    chromium.write_text("#!/bin/sh\n")
    chromium.chmod(0o755)
    overrides = ["model.base=~/llama", "model.generator=~/llama", "env.storage_state_dir=~/states"]
    config = load_config(WebRLConfig, [*overrides, "env.chromium=~/chrome", "tracking.wandb_dir=~/wandb"])
    assert (config.model.base, config.model.generator) == (str(home / "llama"), str(home / "llama"))
    assert config.env.storage_state_dir == str(home / "states")
    assert (config.env.chromium, config.tracking.wandb_dir) == (str(chromium), str(home / "wandb"))
    (home / "suite").mkdir()
    external = ["env.suite=~/suite", "env.url_map={__X__: 'http://h:1'}", "curriculum_enabled=false"]
    suite = load_config(WebRLConfig, external)
    assert suite.env.suite == str(home / "suite")
    filtered = load_config(FilteredBCRunConfig, ["filtered_bc.source_run=~/runs/x"])
    assert filtered.filtered_bc.source_run == str(home / "runs" / "x")
    # names and URLs are left as they are
    assert load_config(WebRLConfig, ["model.base=smollm2"]).model.base == "smollm2"
    assert load_config(WebRLConfig, ["model.generator=http://host:8000/v1"]).model.generator == "http://host:8000/v1"


def test_a_relative_base_model_or_suite_becomes_absolute_and_relaunches_as_the_same_place(home):
    """The SFT cache key holds model.base and env.suite: `models/llama` named from two folders is two models."""
    _model_dir(home / "work" / "local")
    (home / "work" / "suite").mkdir()
    overrides = ["output_dir=runs/rel", "model.base=local", "env.suite=suite", "env.url_map={__X__: 'http://h:1'}"]
    config = load_config(WebRLConfig, [*overrides, "curriculum_enabled=false"])
    assert (config.model.base, config.env.suite) == (str(home / "work" / "local"), str(home / "work" / "suite"))
    assert load_config(WebRLConfig, ["model.base=tiny", "env.suite=embedded"]).env.suite == "embedded"
    saved = config_to_dict(config)
    saved["model"]["base"], saved["env"]["suite"] = "local", "suite"  # as a launch before this change wrote them
    run_dir = Path(config.output_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(saved))
    assert check_run_config(run_dir, config, []) == {}


def test_config_json_records_the_absolute_paths(home):
    config = load_config(WebRLConfig, ["output_dir=runs/mine"])
    run_dir = Path(config.output_dir)
    assert keep_run_config(run_dir, config, []) is None
    saved = json.loads((home / "work" / "runs" / "mine" / "config.json").read_text())
    assert (saved["output_dir"], saved["model"]["cache_dir"]) == (str(run_dir), str(home / ".cache" / "webrl"))


def test_a_run_started_with_relative_paths_relaunches_with_the_user_cache(home):
    """config.json as a launch before this change wrote it: cache and actor relative to the folder it ran in."""
    _model_dir(home / "work" / "sft")
    old = load_config(WebRLConfig, ["output_dir=runs/old", "model.actor=sft"])
    saved = config_to_dict(old)
    saved["output_dir"], saved["model"]["cache_dir"], saved["model"]["actor"] = "runs/old", ".cache/webrl", "sft"
    run_dir = Path(old.output_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(saved))

    relaunch = load_config(WebRLConfig, ["output_dir=runs/old", "model.actor=sft"])
    assert relaunch.model.cache_dir == str(home / ".cache" / "webrl")
    assert check_run_config(run_dir, relaunch, []) == {}
    _model_dir(home / "other_sft")
    moved = load_config(WebRLConfig, ["output_dir=runs/old", f"model.actor={home / 'other_sft'}", "seed=1"])
    with pytest.raises(ConfigError, match=r"model.actor \"/.*/work/sft\" → \".*/other_sft\", seed 0 → 1"):
        check_run_config(run_dir, moved, [])
