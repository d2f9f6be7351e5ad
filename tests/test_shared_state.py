"""Every rank of a run goes by one reading of run_state.json, however late it reads (real two-process Fabric)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.state_race_worker import STAGES

WORKER = Path(__file__).with_name("state_race_worker.py")


def test_a_rank_that_reads_late_still_runs_the_stage_rank_0_has_not_finished(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(WORKER.parent.parent)}
    result = subprocess.run(
        [sys.executable, str(WORKER), str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    expected = [list(STAGES[: i + 1]) for i in range(len(STAGES))]
    assert rank0 == expected
    assert rank1 == expected  # reading the file itself, rank 1 found the next stage already marked
