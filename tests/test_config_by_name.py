"""`--config NAME` finds a packaged config from any folder; a path still works and wins over a name."""

from __future__ import annotations

import pytest

from webrl.config import ConfigError, load_config, packaged_config_dir, resolve_config_file
from webrl.loop_config import WebRLConfig


def test_a_packaged_config_by_name_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing of the checkout is reachable by a relative path from here
    by_name = load_config(WebRLConfig, ["--config", "webrl_smollm2"])
    by_file_name = load_config(WebRLConfig, ["--config", "webrl_smollm2.yaml"])
    by_path = load_config(WebRLConfig, ["--config", str(packaged_config_dir() / "webrl_smollm2.yaml")])
    assert by_name == by_file_name == by_path
    assert (by_name.phases, by_name.model.max_length) == (2, 1536)
    assert by_name.output_dir == str(tmp_path.resolve() / "runs" / "webrl_smollm2")  # under the folder it ran in


def test_a_file_in_the_folder_wins_over_the_packaged_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "webrl_smollm2.yaml").write_text("phases: 5\n")
    assert resolve_config_file("webrl_smollm2.yaml").resolve() == (tmp_path / "webrl_smollm2.yaml").resolve()
    assert load_config(WebRLConfig, ["--config", "webrl_smollm2.yaml"]).phases == 5


def test_an_unknown_name_lists_the_packaged_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"config file not found: webrl_huge \(.*webrl_smollm2.*webrl_tiny"):
        load_config(WebRLConfig, ["--config", "webrl_huge"])
    with pytest.raises(ConfigError, match="config file not found: sub/webrl_tiny"):
        load_config(WebRLConfig, ["--config", "sub/webrl_tiny"])  # a path with a folder is never a name
