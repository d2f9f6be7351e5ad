"""bench/env_profile.py's arithmetic (the split of wall and CPU time) against figures computed by hand, no browser."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def profile():
    """bench/env_profile.py as a module (it imports its sibling env_throughput by name, as a script does)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("env_profile_bench", BENCH / "env_profile.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def test_overlapping_intervals_count_once(profile):
    # (0, 2) and (1, 3) cover 0..3; (5.5, 5.8) lies inside (5, 6): 3 + 1 seconds.
    assert profile.union_seconds([(5.5, 5.8), (0, 2), (5, 6), (1, 3)]) == pytest.approx(4.0)
    assert profile.union_seconds([]) == 0.0


def test_phase_rows_split_slot_time_and_wall(profile):
    intervals = {"step": [(0.0, 1.0), (0.5, 2.5)], "step/action": [(0.0, 0.5), (0.5, 1.5)]}
    rows = profile.phase_rows(intervals, wall=4.0, concurrency=2, steps=2)
    # Steps last 1 s and 2 s: 3 s of the 8 slot-seconds, 1.5 s per step; in flight from 0 to 2.5 of 4 s.
    assert rows["step"] == {
        "calls": 2,
        "total_s": 3.0,
        "p50_ms": 1000.0,
        "p95_ms": 2000.0,
        "ms_per_step": 1500.0,
        "slot_share": 0.375,
        "in_flight_share": 0.625,
    }
    assert rows["step/action"]["total_s"] == 1.5
    assert rows["step/action"]["in_flight_share"] == 0.375


def test_remainders_are_what_the_inner_calls_leave(profile):
    rows = {
        "step": {"calls": 2, "total_s": 2.0},
        "step/observe": {"calls": 4, "total_s": 0.6},
        "step/observe/page.evaluate": {"calls": 4, "total_s": 0.2},
        "step/action": {"calls": 4, "total_s": 1.0},
        "reset": {"calls": 2, "total_s": 1.0},
    }
    derived = profile.remainders(rows, wall=4.0, concurrency=2, steps=2)
    # observe: 0.6 - 0.2 = 0.4 s over 4 calls, 2 steps, 8 slot-seconds; step: 2.0 - 0.6 - 1.0 = 0.4 s over 2 calls.
    # reset and the leaves have no timed calls inside them: no row.
    assert derived == {
        "step/observe/(rest)": {
            "calls": 4,
            "total_s": 0.4,
            "ms_per_call": 100.0,
            "ms_per_step": 200.0,
            "slot_share": 0.05,
        },
        "step/(rest)": {"calls": 2, "total_s": 0.4, "ms_per_call": 200.0, "ms_per_step": 200.0, "slot_share": 0.05},
    }


def test_loop_lag_counts_stalls_above_a_millisecond(profile):
    ticks = [(0.0002, 0.0001), (0.003, 0.002), (0.010, 0.001), (0.0005, 0.0)]
    summary = profile.lag_summary(ticks, wall=1.3)
    # Lags sorted: 0.2, 0.5, 3, 10 ms; the stalls are 3 and 10 ms (13 ms of 1.3 s), with 3 ms of loop CPU.
    assert summary == {
        "wakes": 4,
        "p50_ms": 3.0,
        "p95_ms": 10.0,
        "max_ms": 10.0,
        "stalls": 2,
        "stall_s": 0.013,
        "stall_share_of_wall": 0.01,
        "loop_cpu_in_stalled_ticks_s": 0.003,
    }


def test_concurrency_achieved_sums_the_top_level_calls(profile):
    rows = {
        "new context": {"total_s": 1.0},
        "reset": {"total_s": 3.0},
        "step": {"total_s": 6.0},
        "step/action": {"total_s": 5.0},
    }
    achieved = profile.achieved_concurrency(rows, wall=1.0, concurrency=16)
    assert achieved["steps_in_flight"] == 6.0
    assert achieved["episodes_in_flight"] == 10.0
    assert achieved["slot_time_outside_env_calls"] == 0.375


def test_child_processes_are_grouped_by_role(profile):
    group = sys.modules["env_throughput"].process_group
    assert group(["node", "/x/package/cli.js", "run-driver"]) == "playwright driver"
    assert group(["/usr/bin/chrome", "--type=renderer", "--lang=en"]) == "chromium renderer"
    assert group(["/usr/bin/chrome-headless-shell", "--headless"]) == "chromium browser"


def test_a_trees_cpu_counts_a_grandchild_that_ended_reaped_by_its_parent(profile):
    # The child spawns a grandchild that burns 0.4 s of CPU, waits for it (reaping it), then sleeps: the CPU
    # appears only in the child's reaped time, as a closed context's renderer does in Chromium's zygote.
    burn = "import time; t = time.process_time(); exec('while time.process_time() - t < 0.4: pass')"
    spawn = f"subprocess.run([sys.executable, '-c', {burn!r}])"
    script = f"import subprocess, sys, time; {spawn}; print(flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()  # the grandchild has ended and been reaped
        total = sys.modules["env_throughput"].tree_cpu_total(child.pid)
    finally:
        child.kill()
        child.wait()
    assert 0.4 <= total < 5.0
    assert sys.modules["env_throughput"].tree_cpu_total(child.pid) == 0.0  # gone: nothing to read


def test_cpu_split_takes_differences_and_counts_new_and_ended_processes(profile):
    before = {
        "python": 1.0,
        "loop": 0.6,
        "tree": {10: ("chromium browser", 2.0, 0.0), 11: ("chromium zygote", 0.1, 1.0)},
    }
    after = {
        "python": 2.0,
        "loop": 1.2,
        "tree": {
            10: ("chromium browser", 3.0, 0.0),
            11: ("chromium zygote", 0.1, 4.0),
            12: ("chromium renderer", 0.5, 0.0),
        },
    }
    split = profile.cpu_split(before, after, wall=2.0)
    # The zygote itself used nothing (left out); the renderers it reaped used 3 s; pid 12 is new.
    assert {group: row["cpu_s"] for group, row in split.items()} == {
        "chromium zygote's ended children": 3.0,
        "chromium browser": 1.0,
        "python event-loop thread": 0.6,
        "chromium renderer": 0.5,
        "python other threads": 0.4,
    }
    assert list(split) == sorted(split, key=lambda group: -split[group]["cpu_s"])
    assert split["chromium browser"]["cores"] == 0.5
