"""bench/rollout_throughput.py's CPU reading: the browser's processes that ended count, as Chromium's renderers do."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_children_cpu_counts_a_grandchild_that_ended_reaped_by_its_parent():
    spec = importlib.util.spec_from_file_location("rollout_throughput_bench", BENCH / "rollout_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # The child spawns a grandchild that burns 0.4 s of CPU and waits for it (reaping it), then sleeps: the CPU
    # is only in the child's reaped time, as a closed context's renderer is in Chromium's zygote.
    burn = "import time; t = time.process_time(); exec('while time.process_time() - t < 0.4: pass')"
    script = f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {burn!r}]); print(flush=True); "
    script += "time.sleep(30)"
    _, before = bench.tree_cpu()
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()  # the grandchild has ended and been reaped
        _, after = bench.tree_cpu()
    finally:
        child.kill()
        child.wait()
    assert 0.4 <= after - before < 5.0
