"""Training under `model_parallel` (FSDP2, 2 gloo processes) takes the same step as one process on the whole batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fsdp2_worker import build

WORKER = Path(__file__).with_name("fsdp2_worker.py")


@pytest.fixture(scope="module")
def sharded_results(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fsdp2")
    env = {**os.environ, "PYTHONPATH": str(WORKER.parent.parents[1]), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(WORKER), str(tiny_dir), str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return out


@pytest.mark.parametrize("name", ["critic", "orm"])
def test_two_rank_fsdp2_step_equals_the_whole_batch_step(name, tiny_dir, sharded_results):
    module, batch = build(name, str(tiny_dir))
    before = {key: value.detach().clone() for key, value in module.state_dict().items()}
    optimizer = module.configure_optimizers()
    loss, _ = module.compute_loss(batch)
    loss.backward()
    optimizer.step()
    expected = module.state_dict()
    sharded = torch.load(sharded_results / f"{name}.pt", weights_only=True)
    assert sorted(sharded) == sorted(expected)
    moved = [key for key in expected if not torch.equal(expected[key], before[key])]
    assert moved, "the step changed no weight"
    for key in expected:
        torch.testing.assert_close(sharded[key], expected[key], rtol=1e-4, atol=1e-5, msg=key)
