"""bench/train_throughput.py's settings: what the command line sets wins over the model's defaults, a 0 too."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_a_zero_on_the_command_line_is_kept():
    spec = importlib.util.spec_from_file_location("train_throughput_bench", BENCH / "train_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = argparse.Namespace(batch_size=None, seq_len=64, steps=None, warmup=0)
    assert bench.settings_for("tiny", args) == {"batch_size": 8, "seq_len": 64, "steps": 6, "warmup": 0}
