"""The CSV side of tracking: the launch's metrics CSV keeps every logged row through a crash, and phases.csv
keeps small metrics to their significant digits."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from webrl.tracking import write_phase_row

ROOT = Path(__file__).resolve().parents[1]

CRASH_AFTER_LOGGING = """
import os, sys
from pathlib import Path
from webrl.tracking import TrackingConfig, build_loggers

[csv_logger] = build_loggers(Path(sys.argv[1]), TrackingConfig(wandb_mode="disabled"), {}, "crash")
for i in range(50):
    csv_logger.log_metrics({"critic/loss": 1.0 / (i + 1)}, step=100_000 + i)
os._exit(86)  # a kill -9: no finalize, no flush
"""
"""Fifty critic batches logged, then the process dies the way a crash or kill -9 ends it."""


@pytest.mark.timeout(120)
def test_rows_logged_before_a_crash_are_in_the_metrics_csv(tmp_path):
    # A resumed stage goes on from its checkpoint and never logs these batches again, so a row lost here is lost.
    rows = _rows_after_dying_in(CRASH_AFTER_LOGGING, tmp_path)
    assert [int(row["step"]) for row in rows] == list(range(100_000, 100_050))
    assert float(rows[3]["critic/loss"]) == 0.25


DIE_IN_THE_HEADER_REWRITE = """
import csv, os, sys
from pathlib import Path
from webrl.tracking import TrackingConfig, build_loggers

[csv_logger] = build_loggers(Path(sys.argv[1]), TrackingConfig(wandb_mode="disabled"), {}, "crash")
for i in range(5):
    csv_logger.log_metrics({"critic/loss": 1.0 / (i + 1)}, step=100_000 + i)
write_rows = csv.DictWriter.writerows


def dying(self, rows):
    if len(rows) == 5:  # the five saved rows, written again under the wider header
        os._exit(86)
    return write_rows(self, rows)


csv.DictWriter.writerows = dying
csv_logger.log_metrics({"actor/loss": 0.5}, step=150_000)  # a new column: the file is rewritten
"""
"""Five critic batches saved, then the first actor batch's new column, and the process dies inside that rewrite."""


@pytest.mark.timeout(120)
def test_a_crash_while_a_new_column_rewrites_the_metrics_csv_keeps_its_rows(tmp_path):
    rows = _rows_after_dying_in(DIE_IN_THE_HEADER_REWRITE, tmp_path)
    assert [(row["step"], row["critic/loss"]) for row in rows][:2] == [("100000", "1.0"), ("100001", "0.5")]
    assert len(rows) == 5


def test_phase_rows_keep_small_metrics_to_six_significant_digits(tmp_path):
    path = tmp_path / "phases.csv"
    record = {
        "phase": 0,
        "time/critic_s": 2.844000846380368e-06,  # from a real run: 6 decimals wrote 3e-06
        "curriculum/critic_value_mean": 7.017895527698197e-05,  # 6 decimals wrote 7e-05
        "actor/kl": 4.2e-07,  # 6 decimals wrote 0.0
        "time/phase_s": 12345.678901234,  # 1 and above: 6 decimals, as before
        "replay/buffer_steps": 2345678.0,
        "orm/agreement": 0.8645833134651184,
    }
    write_phase_row(path, record)
    with path.open(newline="") as handle:
        [row] = list(csv.DictReader(handle))
    assert row == {
        "phase": "0",
        "time/critic_s": "2.844e-06",
        "curriculum/critic_value_mean": "7.0179e-05",
        "actor/kl": "4.2e-07",
        "time/phase_s": "12345.678901",
        "replay/buffer_steps": "2345678.0",
        "orm/agreement": "0.864583",
    }


def _rows_after_dying_in(script: str, tmp_path) -> list[dict[str, str]]:
    """Run `script` in a process of its own, which must die with status 86; the rows its metrics CSV kept."""
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, cwd=ROOT)
    assert result.returncode == 86
    [path] = tmp_path.glob("metrics/version_*/metrics.csv")
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))
