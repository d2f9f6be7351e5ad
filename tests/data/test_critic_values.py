"""The critic's kept values come back exactly, and only under the key they were made with."""

from __future__ import annotations

import logging

from webrl.data.critic_values import read_critic_values, state_key, write_critic_values

KEY = {"critic_sha256": "abc", "trunk_sha256": "def", "model.max_length": 256, "fabric.precision": "32-true"}


def test_values_come_back_exactly_under_their_key(tmp_path):
    path = tmp_path / "critic_values.json"
    values = {state_key("page one"): 0.1234567890123, state_key("page two"): 0.75}
    write_critic_values(path, KEY, values)
    assert read_critic_values(path, dict(KEY)) == values  # floats round-trip, not merely approximately
    assert state_key("page one") != state_key("page one ") and len(state_key("")) == 64


def test_values_made_under_another_key_or_unreadable_are_not_used(tmp_path, caplog):
    path = tmp_path / "critic_values.json"
    assert read_critic_values(path, KEY) == {}  # none kept yet
    write_critic_values(path, KEY, {state_key("page"): 0.5})
    with caplog.at_level(logging.INFO, logger="webrl.data.critic_values"):
        assert read_critic_values(path, {**KEY, "critic_sha256": "other", "model.max_length": 512}) == {}
    assert "scored with another critic_sha256, model.max_length" in caplog.text
    path.write_text('{"key": {"critic_sha256": "abc"')  # cut short by hand
    with caplog.at_level(logging.WARNING, logger="webrl.data.critic_values"):
        assert read_critic_values(path, KEY) == {}
    assert "does not read" in caplog.text


def test_a_key_holding_a_tuple_matches_the_list_the_file_reads_back(tmp_path):
    key = {**KEY, "critic.lora": {"target_modules": ("q_proj", "v_proj")}}
    write_critic_values(tmp_path / "v.json", key, {state_key("page"): 0.5})
    assert read_critic_values(tmp_path / "v.json", key) == {state_key("page"): 0.5}
