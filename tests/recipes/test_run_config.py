"""A run directory keeps the config it was started with; relaunching it with other settings stops before any work."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from recipes import webrl
from webrl.config_checks import ConfigError
from webrl.run_config import ABSENT, check_run_config, effective_config, keep_run_config
from webrl.run_state import RunState

REPO = Path(__file__).resolve().parents[2]


class Started(Exception):
    """Raised where the recipe would start its work: the relaunch got past every check and kept its config."""


@pytest.fixture
def launch(monkeypatch, tmp_path):
    keep = webrl.keep_config

    def keep_then_stop(run_dir, config, *, dry_run=False):
        changes = keep(run_dir, config, dry_run=dry_run)
        if not dry_run:  # the config is kept once Fabric has launched, just before the work starts
            raise Started
        return changes

    monkeypatch.setattr(webrl, "launch_fabric", lambda *args, **kwargs: None)
    monkeypatch.setattr(webrl, "keep_config", keep_then_stop)
    run_dir = tmp_path / "run"

    def run(*overrides: str) -> None:
        webrl.main([f"output_dir={run_dir}", "tracking.wandb_mode=disabled", *overrides])

    return run, run_dir


def test_a_relaunch_with_other_settings_stops_naming_each_key_and_keeps_the_first_config(launch):
    run, run_dir = launch
    with pytest.raises(Started):
        run()
    started_with = (run_dir / "config.json").read_text()
    with pytest.raises(SystemExit) as exit_info:
        neutral = ("engines.sleep=false", "engines.gpu_memory_utilization=0.5", "fabric.activation_checkpointing=true")
        run("actor.train.lr=0.001", "env.test_tasks=20", "phases=5", "tracking.sample_trajectories=2", *neutral)
    message = str(exit_info.value.code)
    assert "\n" not in message
    assert "actor.train.lr 0.0001 → 0.001, env.test_tasks 60 → 20" in message, message
    assert "phases" not in message.split("resume.allow_changes")[0] and "tracking" not in message
    assert "engines" not in message and "activation_checkpointing" not in message  # GPU memory only
    assert "output_dir" in message and "resume.allow_changes=[actor.train.lr,env.test_tasks]" in message
    assert (run_dir / "config.json").read_text() == started_with


def test_a_run_whose_config_json_is_gone_is_not_relaunched_with_whatever_settings_come(launch):
    """Stages ran, then config.json was deleted: a relaunch with another learning rate wrote it anew and went on."""
    run, run_dir = launch
    with pytest.raises(Started):
        run()
    RunState(phase=0, done=["curriculum", "rollouts"]).save(run_dir / "run_state.json")
    (run_dir / "config.json").unlink()
    with pytest.raises(SystemExit, match=r"run_state.json records finished stages but .*config.json is missing"):
        run("actor.train.lr=0.5")
    assert not (run_dir / "config.json").exists()


def test_allowed_changes_continue_and_are_recorded_beside_the_first_config(launch):
    run, run_dir = launch
    with pytest.raises(Started):
        run()
    started_with = (run_dir / "config.json").read_text()
    for _ in range(2):  # the same relaunch twice is recorded once
        with pytest.raises(Started):
            run("env.test_tasks=20", "resume.allow_changes=[env]")
    assert (run_dir / "config.json").read_text() == started_with
    changes = json.loads((run_dir / "config_changes.json").read_text())
    assert changes == [{"from_phase": 0, "changes": {"env.test_tasks": [60, 20]}}]
    # The accepted value is the run's now: the first command again is a change back, not a silent return.
    with pytest.raises(SystemExit, match=r"env.test_tasks 20 → 60"):
        run()


@dataclass
class Section:
    old: int = 1
    new: bool = False


@dataclass
class Schema:
    """A config whose `section.new` and `added` came after runs that lack them in config.json."""

    lr: float = 0.1
    section: Section = field(default_factory=Section)
    added: list[str] = field(default_factory=list)


def _started_before_new_keys(run_dir: Path) -> None:
    (run_dir / "config.json").write_text(json.dumps({"lr": 0.1, "section": {"old": 1}}))


def test_a_key_the_saved_config_lacks_is_no_change_at_its_default(tmp_path):
    _started_before_new_keys(tmp_path)
    assert keep_run_config(tmp_path, Schema(), []) == {}
    assert not (tmp_path / "config_changes.json").exists(), "nothing changed, so nothing is recorded"


def test_a_key_the_saved_config_lacks_is_a_change_away_from_its_default(tmp_path):
    _started_before_new_keys(tmp_path)
    relaunch = Schema(section=Section(new=True), added=["x"])
    with pytest.raises(ConfigError, match=r'added \(absent\) → \["x"\], section.new \(absent\) → true\. '):
        check_run_config(tmp_path, relaunch, [])
    assert keep_run_config(tmp_path, relaunch, ["section.new", "added"]) == {
        "added": (ABSENT, ["x"]),
        "section.new": (ABSENT, True),
    }
    changes = json.loads((tmp_path / "config_changes.json").read_text())
    assert changes == [{"from_phase": 0, "changes": {"added": [None, ["x"]], "section.new": [None, True]}}]


def test_a_saved_key_with_another_value_is_a_change_even_back_to_its_default(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"lr": 0.5, "section": {"old": 1, "new": False}, "added": []}))
    with pytest.raises(ConfigError, match=r"lr 0\.5 → 0\.1\. "):
        check_run_config(tmp_path, Schema(), [])
    with pytest.raises(ConfigError, match=r"section.old 1 → 2\. "):
        check_run_config(tmp_path, Schema(lr=0.5, section=Section(old=2)), [])


def test_a_run_started_before_a_key_existed_relaunches_with_its_default(launch):
    run, run_dir = launch
    with pytest.raises(Started):
        run()
    saved = json.loads((run_dir / "config.json").read_text())
    del saved["env"]["reuse_contexts"]  # as a launch before env.reuse_contexts wrote it
    (run_dir / "config.json").write_text(json.dumps(saved))
    with pytest.raises(Started):
        run()
    with pytest.raises(SystemExit, match=r"env\.reuse_contexts \(absent\) → true"):
        run("env.reuse_contexts=true")
    assert not (run_dir / "config_changes.json").exists()


def test_a_value_changed_back_and_then_again_is_the_runs_value_each_time(tmp_path):
    keep_run_config(tmp_path, Schema(), [])
    for lr in (0.2, 0.1, 0.2):  # the third record equals the first, and is needed all the same
        assert keep_run_config(tmp_path, Schema(lr=lr), ["lr"])
        assert effective_config(tmp_path)["lr"] == lr
    assert keep_run_config(tmp_path, Schema(lr=0.2), []) == {}


def test_an_entry_added_to_a_dict_relaunches_once_accepted_and_leaving_it_out_again_is_a_change_back(launch):
    """`env.url_map` from `{}` to one entry is recorded as `env.url_map` removed and `env.url_map.__X__` set."""
    run, run_dir = launch
    with pytest.raises(Started):
        run()
    added = ("env.url_map={__X__: 'http://h:1'}", "resume.allow_changes=[env.url_map]")
    for _ in range(2):  # accepted, then the same command again finds nothing changed
        with pytest.raises(Started):
            run(*added)
    assert effective_config(run_dir)["env"]["url_map"] == {"__X__": "http://h:1"}
    with pytest.raises(SystemExit, match=r'env\.url_map\.__X__ "http://h:1" → \(absent\)\. '):
        run()
    for _ in range(2):
        with pytest.raises(Started):
            run("resume.allow_changes=[env.url_map]")
    assert effective_config(run_dir)["env"].get("url_map", {}) == {}


@dataclass
class WithRules:
    rules: dict[str, str] = field(default_factory=lambda: {"shop": "s", "wiki": "w"})


def test_an_entry_left_out_of_a_dict_relaunches_once_accepted_and_putting_it_back_is_a_change_back(tmp_path):
    keep_run_config(tmp_path, WithRules(), [])
    without_shop = WithRules(rules={"wiki": "w"})
    with pytest.raises(ConfigError, match=r'rules\.shop "s" → \(absent\)\. .*allow_changes=\[rules\.shop\] '):
        check_run_config(tmp_path, without_shop, [])
    assert keep_run_config(tmp_path, without_shop, ["rules"]) == {"rules.shop": ("s", ABSENT)}
    assert keep_run_config(tmp_path, without_shop, ["rules"]) == {}
    assert effective_config(tmp_path) == {"rules": {"wiki": "w"}}
    with pytest.raises(ConfigError, match=r'rules\.shop \(absent\) → "s"\. '):
        check_run_config(tmp_path, WithRules(), [])
    # Every entry left out: the empty dict is the run's value, not a dict missing its entries.
    assert keep_run_config(tmp_path, WithRules(rules={}), ["rules"]) == {
        "rules": (ABSENT, {}),
        "rules.wiki": ("w", ABSENT),
    }
    assert keep_run_config(tmp_path, WithRules(rules={}), ["rules"]) == {}
    assert effective_config(tmp_path) == {"rules": {}}


def test_a_record_from_before_removals_were_recorded_still_applies(tmp_path):
    """Such a record sets a dict that gained entries to null, then its entries (its key was never removed)."""
    (tmp_path / "config.json").write_text(json.dumps({"env": {"url_map": {}}}))
    record = {"from_phase": 0, "changes": {"env.url_map": [{}, None], "env.url_map.__X__": [None, "http://h:1"]}}
    (tmp_path / "config_changes.json").write_text(json.dumps([record]))
    assert effective_config(tmp_path) == {"env": {"url_map": {"__X__": "http://h:1"}}}


def test_a_key_dropped_from_the_schema_may_be_allowed_and_the_same_relaunch_then_goes_on(launch):
    run, run_dir = launch
    with pytest.raises(Started):
        run()
    saved = json.loads((run_dir / "config.json").read_text())
    saved["env"]["retired_knob"] = 1  # as a launch when env.retired_knob and the legacy section existed wrote it
    saved["legacy"] = {"knob": 5}
    (run_dir / "config.json").write_text(json.dumps(saved))
    with pytest.raises(SystemExit, match=r"allow_changes=\[env\.retired_knob,legacy\.knob\] "):
        run()
    for _ in range(2):  # accepted, then the same command again finds nothing changed
        with pytest.raises(Started):
            run("resume.allow_changes=[env.retired_knob,legacy]")
    with pytest.raises(Started):
        run()
    assert effective_config(run_dir).keys() == saved.keys() - {"legacy"}
    assert "retired_knob" not in effective_config(run_dir)["env"]


def test_an_unknown_key_to_allow_is_a_config_error(launch):
    run, _ = launch
    with pytest.raises(SystemExit) as exit_info:
        run("resume.allow_changes=[env.test_taks]")
    assert str(exit_info.value.code).startswith("config error: resume.allow_changes=['env.test_taks']: ")


def _no_work(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a dry run started real work")

    monkeypatch.setattr(webrl, "run", refuse)


def test_dry_run_prints_the_stage_plan_and_writes_nothing(tmp_path, monkeypatch, capsys):
    _no_work(monkeypatch)
    run_dir = tmp_path / "run"
    assert webrl.main(["--dry-run", f"output_dir={run_dir}", "phases=2", "env.test_tasks=20"]) == []
    text = capsys.readouterr().out
    assert not run_dir.exists()
    assert f"run directory {run_dir}: new" in text
    assert "phase 0: to run" in text and "phase 2: to run" in text and "phase 3" not in text
    assert "64 train tasks" in text and "20 test tasks" in text
    assert f"writes {run_dir / 'phase_002'}" in text
    assert "page facts" not in text
    assert webrl.main(["--dry-run", f"output_dir={run_dir}", "phases=1", "curriculum.page_facts=8"]) == []
    assert "tasks from the template curriculum and up to 8 page facts" in capsys.readouterr().out


def test_dry_run_of_a_started_run_shows_what_is_done_and_what_a_relaunch_would_refuse(tmp_path, monkeypatch, capsys):
    _no_work(monkeypatch)
    run_dir = tmp_path / "run"
    webrl.keep_config(run_dir, webrl.recipe_config([f"output_dir={run_dir}"]))
    state = {"phase": 1, "done": ["curriculum", "rollouts"], "history": [{"phase": 0}]}
    (run_dir / "run_state.json").write_text(json.dumps(state))
    webrl.main(["--dry-run", f"output_dir={run_dir}"])
    text = capsys.readouterr().out
    assert "config.json matches" in text
    assert "phase 0: done" in text and "phase 1: done curriculum, rollouts; next labels" in text
    with pytest.raises(SystemExit, match=r"env\.test_tasks 60 → 20"):
        webrl.main(["--dry-run", f"output_dir={run_dir}", "env.test_tasks=20"])


HEAVY = ("torch", "lightning", "lightning_fabric", "transformers", "peft", "openai", "vllm", "matplotlib")
"""What a run loads to train and roll out; a dry run needs none of it."""


def test_a_dry_run_of_a_started_run_imports_no_model_library_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    webrl.keep_config(run_dir, webrl.recipe_config([f"output_dir={run_dir}"]))
    state = {"phase": 1, "done": ["curriculum", "rollouts"], "history": [{"phase": 0}]}
    (run_dir / "run_state.json").write_text(json.dumps(state))
    command = [sys.executable, "-X", "importtime", "-m", "recipes.webrl", "--dry-run", f"output_dir={run_dir}"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "phase 1: done curriculum, rollouts; next labels" in result.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert "recipes" in imported and "omegaconf" in imported  # the import log was read
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
    assert sorted(path.name for path in run_dir.iterdir()) == ["config.json", "run_state.json"]
