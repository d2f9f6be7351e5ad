"""A stage stops on every rank, with the same error, when the loss is not finite on one rank only.

A rank that raised alone would leave the others waiting in the gradient all-reduce: with NCCL until the process
group's 30-minute timeout. An empty dataloader is refused by name instead of looping on nothing for ever.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from lightning.fabric import Fabric

from webrl.stage_settings import StageSettings
from webrl.training import setup_for_training, train_module

WORKER = Path(__file__).with_name("nonfinite_loss_worker.py")
HANG_S = 120
"""Far below the old hang (NCCL's 30 minutes), far above the run (about 10 s here)."""


def _run_two_ranks(model_dir: Path, out_dir: Path) -> None:
    """The worker's two processes in a session of their own, all ended if they outlive `HANG_S`."""
    env = {**os.environ, "PYTHONPATH": str(WORKER.parents[2]), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(WORKER), str(model_dir), str(out_dir)]
    process = subprocess.Popen(command, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = process.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGUSR1)  # each rank prints its threads' stacks (the worker's faulthandler)
        time.sleep(3)
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
        pytest.fail(
            f"the ranks still ran after {HANG_S} s: one waits in a collective for a rank that left, or for one "
            f"that failed; the ranks' stderr ends:\n{stderr[-6000:]}"
        )
    assert process.returncode == 0, stderr[-4000:]


def test_a_nan_loss_on_one_rank_stops_both_ranks_with_the_same_error(tiny_dir, tmp_path):
    _run_two_ranks(tiny_dir, tmp_path)
    messages = [(tmp_path / f"rank{rank}.txt").read_text() for rank in (0, 1)]
    assert messages[0] == messages[1], messages
    assert messages[0].startswith("stage 'sft', optimizer step 2 of 2, batches 3-4 of 4: PoisonableSFT: "), messages[0]
    assert "not finite on rank 1 of 2" in messages[0], messages[0]
    assert messages[0].endswith("no gradient of it was applied on any rank"), messages[0]


@pytest.mark.timeout(60)  # the old stage looped on the empty loader for ever
def test_an_empty_dataloader_is_refused_by_the_stage_s_name():
    fabric = Fabric(accelerator="cpu", devices=1)
    module, optimizer = setup_for_training(fabric, _Constant())
    with pytest.raises(ValueError, match=r"^stage 'critic': the dataloader has no batch"):
        train_module(fabric, module, optimizer, [], StageSettings(), name="critic", progress=False)


class _Constant(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def compute_loss(self, batch):
        return self.weight.sum(), {}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
