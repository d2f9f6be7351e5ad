"""A stage resumed under two processes (DDP, and FSDP2 whose state is saved in shards) ends as one never stopped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from webrl.data.atomic_io import FAULT_ENV, FAULT_EXIT_CODE

WORKER = Path(__file__).with_name("stage_checkpoint_worker.py")


def _launch(strategy: str, model_dir: Path, checkpoint: Path, out: Path, fault: str = "") -> int:
    env = {**os.environ, "PYTHONPATH": str(WORKER.parents[2]), "OMP_NUM_THREADS": "1"}
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    command = [sys.executable, str(WORKER), strategy, str(model_dir), str(checkpoint), str(out)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode in (0, FAULT_EXIT_CODE), result.stderr[-4000:]
    return result.returncode


@pytest.mark.parametrize("strategy", ["ddp", "model_parallel"])
def test_a_two_process_stage_resumes_to_the_weights_of_an_uninterrupted_one(strategy, tiny_dir, tmp_path):
    assert _launch(strategy, tiny_dir, tmp_path / "straight.resume", tmp_path / "straight.pt") == 0
    stopped = _launch(strategy, tiny_dir, tmp_path / "run.resume", tmp_path / "stopped.pt", "stage_checkpoint:critic")
    assert stopped == FAULT_EXIT_CODE and not (tmp_path / "stopped.pt").exists()
    assert _launch(strategy, tiny_dir, tmp_path / "run.resume", tmp_path / "resumed.pt") == 0
    straight, resumed = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("straight", "resumed"))
    assert straight["trained"] == 3 and resumed["trained"] == 2, "6 batches of 2 over 2 ranks; the first was saved"
    assert sorted(resumed["weights"]) == sorted(straight["weights"])
    for name, weight in straight["weights"].items():
        assert torch.equal(resumed["weights"][name], weight), name
