"""A stage resumed under two processes (DDP, and FSDP2 whose state is saved in shards) ends as one never stopped.

Under DDP the stage also averages its steps' weights (`average_tail`), whose running mean must come back from the
saved state; under FSDP2 an averaging stage makes no saves within itself and still ends on the mean.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from webrl.data.atomic_io import FAULT_ENV, FAULT_EXIT_CODE

WORKER = Path(__file__).with_name("stage_checkpoint_worker.py")
STOP_AT_FIRST_SAVE = "stage_checkpoint:critic"


def _launch(
    strategy: str, model_dir: Path, checkpoint: Path, out: Path, fault: str = "", average_tail: float = 0.0
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(WORKER.parents[2]), "OMP_NUM_THREADS": "1"}
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    command = [sys.executable, str(WORKER), strategy, str(model_dir), str(checkpoint), str(out), str(average_tail)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode in (0, FAULT_EXIT_CODE), result.stderr[-4000:]
    return result


@pytest.mark.parametrize(("strategy", "average_tail"), [("ddp", 1.0), ("model_parallel", 0.0)])
def test_a_two_process_stage_resumes_to_the_weights_of_an_uninterrupted_one(strategy, average_tail, tiny_dir, tmp_path):
    def launch(name: str, fault: str = "") -> int:
        run = tmp_path / ("straight" if name == "straight" else "run")
        out = tmp_path / f"{name}.pt"
        return _launch(strategy, tiny_dir, run.with_suffix(".resume"), out, fault, average_tail).returncode

    assert launch("straight") == 0
    assert launch("stopped", STOP_AT_FIRST_SAVE) == FAULT_EXIT_CODE and not (tmp_path / "stopped.pt").exists()
    assert launch("resumed") == 0
    straight, resumed = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("straight", "resumed"))
    assert straight["trained"] == 3 and resumed["trained"] == 2, "6 batches of 2 over 2 ranks; the first was saved"
    assert sorted(resumed["weights"]) == sorted(straight["weights"])
    for name, weight in straight["weights"].items():
        assert torch.equal(resumed["weights"][name], weight), name


def test_an_averaging_stage_under_fsdp2_saves_nothing_within_itself_and_ends_on_the_mean(tiny_dir, tmp_path):
    sharded = _launch(
        "model_parallel", tiny_dir, tmp_path / "a.resume", tmp_path / "fsdp2.pt", STOP_AT_FIRST_SAVE, average_tail=1.0
    )
    assert sharded.returncode == 0, "no save, so the stop at the first save never came"
    assert "no saves within the stage" in sharded.stderr and not (tmp_path / "a.resume").exists()
    _launch("ddp", tiny_dir, tmp_path / "b.resume", tmp_path / "ddp.pt", average_tail=1.0)
    _launch("ddp", tiny_dir, tmp_path / "c.resume", tmp_path / "last.pt")
    fsdp2, ddp, last = (
        torch.load(tmp_path / f"{n}.pt", weights_only=True)["weights"] for n in ("fsdp2", "ddp", "last")
    )
    for name, weight in ddp.items():
        assert torch.allclose(fsdp2[name], weight, atol=1e-6), name
    assert any(not torch.allclose(ddp[name], last[name]) for name in ddp), "the mean is not the last weights"
