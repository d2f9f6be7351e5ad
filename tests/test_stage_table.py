"""The end of a run prints where its wall time went: minutes per stage of each phase, and the SFT actor's."""

from __future__ import annotations

import json

from recipes.webrl import sft_training_time
from webrl.cache_builds import DONE_MARKER
from webrl.report import format_stage_table

HISTORY = [
    {"phase": 0, "time/rollouts_s": 198.0, "time/evaluate_s": 558.0, "time/phase_s": 756.0},
    {"phase": 1, "time/rollouts_s": 210.0, "time/replay_s": 834.0, "time/critic_s": 3300.0, "time/phase_s": 4344.0},
]


def _cells(table: str) -> dict[str, list[str]]:
    header, rule, *rows = table.splitlines()
    width = len(rule.split()[0])  # the first column's, left-aligned
    return {"header": header.split(), **{row[:width].strip(): row[width:].split() for row in rows}}


def test_minutes_per_stage_in_run_order_with_phase_and_run_totals():
    cells = _cells(format_stage_table(HISTORY, {"SFT actor": 2602.2}))
    assert cells["header"] == ["rollouts", "replay", "critic", "evaluate", "all", "(min)"]
    assert cells["phase 0"] == ["3.3", "-", "-", "9.3", "12.6"]  # 198 s, 558 s; 756 s
    assert cells["phase 1"] == ["3.5", "13.9", "55.0", "-", "72.4"]  # 210, 834, 3300 s; 4344 s
    assert cells["SFT actor"] == ["43.4"]  # 2602.2 s, a total alone
    assert cells["total"] == ["128.4"]  # (2602.2 + 756 + 4344) / 60 = 128.37


def test_a_record_without_a_phase_total_sums_its_stages():
    cells = _cells(format_stage_table([{"phase": 2, "time/critic_s": 60.0, "time/actor_s": 120.0}]))
    assert cells["phase 2"] == ["1.0", "2.0", "3.0"] and cells["total"] == ["3.0"]


def test_sft_time_comes_from_the_cache_entry_and_an_actor_given_by_path_has_none(tmp_path):
    built = tmp_path / "sft-abc"
    built.mkdir()
    (built / DONE_MARKER).write_text(json.dumps({"metrics": {"sft/seconds": 2602.2, "sft/steps": 160.0}}))
    assert sft_training_time(built) == {"SFT actor": 2602.2}
    given = tmp_path / "my-actor"
    given.mkdir()
    assert sft_training_time(given) == {}
    (given / DONE_MARKER).write_text("not json")
    assert sft_training_time(given) == {}
