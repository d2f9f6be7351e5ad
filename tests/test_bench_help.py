"""Each bench script answers --help without loading the model libraries (torch alone takes seconds to import).

bench/train_throughput.py and bench/gpu_memory_check.py are left out: they measure torch itself and import it
at the top.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
HEAVY = ("torch", "transformers", "lightning", "peft", "vllm")
TORCH_BOUND = {"train_throughput.py", "gpu_memory_check.py"}
PROBE = """
import contextlib, io, json, runpy, sys
script = sys.argv[1]
sys.argv = [script, "--help"]
sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit:
        code = exit.code
print(json.dumps({"code": code, "usage": out.getvalue().startswith("usage:"), "loaded": sorted(sys.modules)}))
"""


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py") if p.name not in TORCH_BOUND))
def test_help_loads_no_model_library(script):
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(BENCH / script)], capture_output=True, text=True, check=True, timeout=120
    )
    answer = json.loads(probe.stdout.strip().splitlines()[-1])
    assert answer["code"] in (0, None) and answer["usage"]
    assert not [name for name in HEAVY if name in answer["loaded"]]
