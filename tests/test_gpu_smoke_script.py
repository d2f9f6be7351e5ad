"""scripts/gpu_smoke.sh on a machine without a GPU: it says so and exits 2 before it installs or writes anything.

Its GPU path (the `gpu` tests, a phase on cuda, the peak memory against the memory plan) can only run where
nvidia-smi lists a GPU; here the test checks the script parses and refuses cleanly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_smoke.sh"


def test_the_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine would run the whole smoke test")
def test_without_a_gpu_it_exits_2_naming_the_reason_and_writes_nothing(tmp_path):
    out = tmp_path / "smoke"
    done = subprocess.run(
        ["bash", str(SCRIPT)], env={**os.environ, "OUT": str(out)}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "no NVIDIA GPU found" in done.stderr
    assert not out.exists()
