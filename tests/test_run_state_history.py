"""A run_state.json whose history holds an entry that is not a phase record stops the relaunch, naming the file.

Met only when the phase closes and replaces its own record, such an entry would end the run hours of stages
later with a bare AttributeError.
"""

from __future__ import annotations

import json

import pytest

from webrl.config_checks import ConfigError
from webrl.run_state import RunState


@pytest.mark.parametrize("entry", [1, None, {"time/phase_s": 3.0}, {"phase": "0"}, {"phase": True}])
def test_a_history_entry_that_is_not_a_phase_record_is_one_line_naming_the_file(tmp_path, entry):
    path = tmp_path / "run_state.json"
    path.write_text(json.dumps({"phase": 1, "done": [], "history": [{"phase": 0}, entry]}))
    with pytest.raises(ConfigError) as error:
        RunState.load(path)
    assert str(error.value) == (f"{path}: history entry {entry!r} is not a phase record; fix or restore the file")


def test_phase_records_load_as_they_were_saved(tmp_path):
    path = tmp_path / "run_state.json"
    RunState(phase=2, history=[{"phase": 0, "test/success_rate": 0.5}, {"phase": 1}]).save(path)
    assert RunState.load(path).history == [{"phase": 0, "test/success_rate": 0.5}, {"phase": 1}]
