"""A stage state saved in shards (FSDP2) and found by a DDP launch of the same stage starts the stage over, with a line.

The critic's stage is stopped under `model_parallel` right after its first save, which writes the state as a folder
of shards; the relaunch under `ddp` (same world size, so the stage's shape matches) cannot read shards. It stopped
on `IsADirectoryError: ... state.ckpt`, at every relaunch, until someone found and removed the `.resume` folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from webrl.data.atomic_io import FAULT_ENV, FAULT_EXIT_CODE
from webrl.stage_checkpoint import STATE_NAME

WORKER = Path(__file__).with_name("stage_checkpoint_worker.py")


def _launch(
    strategy: str, model_dir: Path, checkpoint: Path, out: Path, fault: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(WORKER.parents[2]), "OMP_NUM_THREADS": "1"}
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    command = [sys.executable, str(WORKER), strategy, str(model_dir), str(checkpoint), str(out)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def test_a_sharded_state_found_under_ddp_starts_the_stage_over_with_a_line(tiny_dir, tmp_path):
    checkpoint = tmp_path / "critic.pt.resume"
    stopped = _launch("model_parallel", tiny_dir, checkpoint, tmp_path / "stopped.pt", "stage_checkpoint:critic")
    assert stopped.returncode == FAULT_EXIT_CODE, stopped.stderr[-4000:]
    assert (checkpoint / STATE_NAME).is_dir(), "FSDP2 saved the state in shards"
    resumed = _launch("ddp", tiny_dir, checkpoint, tmp_path / "resumed.pt")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "was saved in shards (fabric.strategy fsdp or model_parallel)" in resumed.stdout
    assert "which DDPStrategy cannot read; starting the stage over" in resumed.stdout
    assert torch.load(tmp_path / "resumed.pt", weights_only=True)["trained"] == 3, "every batch of its share again"
