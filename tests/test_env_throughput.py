"""bench/env_throughput.py and its BrowserGym child: what their clocks and CPU figures cover, no browser.

The child runs with stand-ins for BrowserGym, gymnasium and Playwright whose import takes a known time, so
that a worker's start-up can be told apart from its episodes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
IMPORT_SLEEP_S = 2.0
"""Wall seconds a stand-in BrowserGym import takes: start-up, which the level's clock must not count."""
IMPORT_BURN_S = 0.2
"""CPU seconds the same import burns: start-up CPU, which the child reports apart."""
STEP_S = 0.05

STAND_INS = {
    "playwright/__init__.py": "",
    "playwright/sync_api/__init__.py": "",
    "playwright/sync_api/_generated.py": "class BrowserType:\n    def launch(self, *args, **kwargs):\n        pass\n",
    "browsergym/__init__.py": "",
    "browsergym/utils/__init__.py": "",
    "browsergym/utils/obs.py": """
        def flatten_dom_to_str(dom):
            return dom


        def prune_html(html):
            return html
        """,
    "browsergym/core.py": """
        class _Driver:
            def stop(self):
                pass


        def _get_global_playwright():
            return _Driver()
        """,
    "browsergym/miniwob/__init__.py": f"""
        import os
        import time

        if os.environ.get("FAIL_ONE_WORKER"):  # the first worker to get here fails to import
            try:
                os.close(os.open(os.environ["FAIL_ONE_WORKER"], os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                raise ImportError("stand-in import failure")
        time.sleep({IMPORT_SLEEP_S})
        end = time.process_time() + {IMPORT_BURN_S}
        while time.process_time() < end:
            pass
        """,
    "gymnasium/__init__.py": f"""
        import time

        OBS = {{"goal": "Click the button.", "dom_object": '<button bid="7">OK</button>'}}


        class _Env:
            def reset(self, seed=None):
                return OBS, {{}}

            def step(self, action):
                assert action == 'click("7")', action
                time.sleep({STEP_S})
                return OBS, 1.0, True, False, {{}}

            def close(self):
                pass


        def make(name):
            return _Env()
        """,
}


@pytest.fixture(scope="module")
def throughput():
    """bench/env_throughput.py as a module."""
    spec = importlib.util.spec_from_file_location("env_throughput_bench", BENCH / "env_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_child(tmp_path: Path, concurrency: int, episodes: int, **env: str) -> subprocess.CompletedProcess:
    """The BrowserGym child run for one level on the stand-ins, with `env` added to its environment."""
    for name, text in STAND_INS.items():
        (tmp_path / "site" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "site" / name).write_text(textwrap.dedent(text))
    command = [sys.executable, str(BENCH / "env_throughput_browsergym.py"), "--miniwob-dir", str(tmp_path)]
    command += ["--chromium", "chromium", "--tasks", "click-test", "--concurrency", str(concurrency)]
    command += ["--episodes", str(episodes), "--out", str(tmp_path / "row.json")]
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), **env}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def browsergym_level(tmp_path: Path, concurrency: int, episodes: int) -> dict:
    """The BrowserGym child's row for one level, run on the stand-ins."""
    run_child(tmp_path, concurrency, episodes).check_returncode()
    return json.loads((tmp_path / "row.json").read_text())


def test_a_worker_that_fails_to_start_fails_the_level_instead_of_holding_the_others(tmp_path):
    child = run_child(tmp_path, 2, 2, FAIL_ONE_WORKER=str(tmp_path / "failed"))
    assert child.returncode != 0 and "stand-in import failure" in child.stderr


def test_browsergym_clock_starts_once_every_worker_has_started(tmp_path):
    row = browsergym_level(tmp_path, concurrency=2, episodes=2)
    assert (row["episodes"], row["steps"], row["successes"], row["failures"]) == (2, 2, 2, [])
    # Each worker sleeps IMPORT_SLEEP_S starting up, then runs one 50 ms episode: the clock counts the episodes.
    assert row["wall_s"] < IMPORT_SLEEP_S / 2
    assert row["wall_with_startup_s"] > IMPORT_SLEEP_S
    assert row["steps_per_s"] > 2 / (IMPORT_SLEEP_S / 2)
    assert row["startup_cpu_s"] >= 2 * IMPORT_BURN_S


def test_browsergym_workers_run_equal_shares(tmp_path):
    # 3 episodes over 2 workers would leave one worker running alone at the end: 4 are run, 2 each.
    row = browsergym_level(tmp_path, concurrency=2, episodes=3)
    assert (row["episodes"], row["steps"], row["successes"]) == (4, 4, 4)


def test_cpu_per_step_leaves_out_what_the_workers_spent_starting_up(throughput):
    row = {"steps": 10, "startup_cpu_s": 2.0}
    # 3 s of CPU in all, 2 of them before the clock started: 1 s over 10 steps.
    assert throughput.with_cpu(row, 3.0) == {**row, "cpu_s": 3.0, "cpu_ms_per_step": 100.0}
    assert throughput.with_cpu({"steps": 0, "startup_cpu_s": 1.0}, 1.0)["cpu_ms_per_step"] is None
