"""A run directory's config.json, config_changes.json and run_state.json, edited by hand into something the run cannot
read, stop a dry run or a relaunch with one line naming the file, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipes import webrl
from webrl.config_checks import ConfigError
from webrl.run_state import RunState

BROKEN = [
    (b"{bad", "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    (b"\xff{}", "not UTF-8 text (invalid start byte at byte 0)"),
    (b"[1, 2]", "must hold a JSON object, got list"),
]
"""File contents a run cannot read, and what the error says of each."""


def _started(run_dir: Path) -> webrl.WebRLConfig:
    """A run directory as a first launch leaves it (config.json), and the config of its relaunch."""
    config = webrl.recipe_config([f"output_dir={run_dir}"])
    assert webrl.keep_config(run_dir, config) is None
    return config


def _one_line(stop: pytest.ExceptionInfo[SystemExit], path: Path, says: str) -> None:
    message = str(stop.value.code)
    assert message.startswith(f"config error: {path}: {says}"), message
    assert "\n" not in message and message.endswith("fix or restore the file"), message


def _stops_both(run_dir: Path, config: webrl.WebRLConfig, path: Path, says: str) -> None:
    """A dry run and a relaunch (rank 0's, which would write) both stop with one line naming `path`."""
    with pytest.raises(SystemExit) as dry_run:
        webrl.main([f"output_dir={run_dir}", "--dry-run"])
    _one_line(dry_run, path, says)
    with pytest.raises(SystemExit) as relaunch:
        webrl.keep_config(run_dir, config)
    _one_line(relaunch, path, says)


def _broken(tmp_path: Path, name: str, content: bytes) -> tuple[Path, webrl.WebRLConfig, Path]:
    """A started run whose file `name` then holds `content`: its directory, its config and that file."""
    run_dir = tmp_path / "run"
    config = _started(run_dir)
    path = run_dir / name
    path.write_bytes(content)
    return run_dir, config, path


@pytest.mark.parametrize(("content", "says"), BROKEN, ids=["not-json", "not-utf8", "not-an-object"])
def test_a_config_json_that_does_not_read_is_one_line_naming_it(tmp_path, content, says):
    _stops_both(*_broken(tmp_path, "config.json", content), says)


def test_a_config_changes_json_that_does_not_read_is_one_line_naming_it(tmp_path):
    run_dir = tmp_path / "run"
    config = _started(run_dir)
    path = run_dir / "config_changes.json"
    path.write_text("[{")
    _stops_both(run_dir, config, path, "not valid JSON")
    path.write_text('[{"from_phase": 1, "changes": {"seed": 3}}]')
    _stops_both(run_dir, config, path, "{'from_phase': 1, 'changes': {'seed': 3}} is not a record of accepted changes")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        *BROKEN,
        (b'{"phase": "1"}', "phase must be a whole number >= 0, got '1'"),
        (b'{"phase": 1, "done": "critic"}', "done and history must be JSON arrays"),
        (b'{"phase": 1, "done": ["critc"]}', "unknown stages ['critc']"),
    ],
    ids=["not-json", "not-utf8", "not-an-object", "phase-a-string", "done-a-string", "unknown-stage"],
)
def test_a_run_state_json_that_does_not_read_is_one_line_naming_it(tmp_path, content, says):
    run_dir, config, path = _broken(tmp_path, "run_state.json", content)
    _stops_both(run_dir, config, path, says)
    with pytest.raises(ConfigError, match="^" + str(path)):
        RunState.load(path)


def test_a_run_state_json_the_run_wrote_reads_back(tmp_path):
    path = tmp_path / "run_state.json"
    RunState(phase=2, done=["curriculum"], history=[{"phase": 0}]).save(path)
    assert RunState.load(path) == RunState(phase=2, done=["curriculum"], history=[{"phase": 0}])
    assert RunState.load(tmp_path / "none.json") == RunState()
