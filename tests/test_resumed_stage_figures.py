"""A rollouts or evaluation stage killed midway and run again reports the time and rates of all its episodes.

A real phase 0 (tests/resumed_stage_worker.py: the loop's stages, real Chromium, the sites' reference solver taking
`STEP_S` a call) is killed with SIGKILL once the stage has written some of its episodes, as
tests/recipes/test_webrl_recipe.py kills a recipe, or ended by `WEBRL_FAULT` once the stage's metrics are written
and before it is marked done; the same command then runs it to the end. Every step of every episode on disk cost
an engine call of at least `STEP_S`, one at a time, whichever launch ran it: the stage's time and rollout time are
at least that sum, the rates are those of every episode over that time, and the engine's figures count every call.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.resumed_stage_worker import STEP_S, TASKS
from webrl.data.atomic_io import FAULT_ENV, FAULT_EXIT_CODE, FAULT_LOG_ENV
from webrl.data.trajectory import read_trajectories
from webrl.run_layout import RunLayout

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[1]


def _launch(run_dir: Path, **env: str) -> subprocess.Popen:
    clean = {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, FAULT_LOG_ENV)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.resumed_stage_worker", str(run_dir)],  # this checkout's webrl, from cwd
        cwd=REPO,
        env={**clean, "TOKENIZERS_PARALLELISM": "false", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(process: subprocess.Popen, expected: int = 0) -> None:
    output, _ = process.communicate(timeout=300)
    assert process.returncode == expected, output[-4000:]


def _lines(path: Path) -> int:
    return path.read_text(encoding="utf-8").count("\n") if path.exists() else 0


def _kill_after(process: subprocess.Popen, episodes: Path, written: int) -> None:
    """SIGKILL `process` once `episodes` holds `written` whole lines; the stage must not have ended by then."""
    deadline = time.monotonic() + 300
    while _lines(episodes) < written:
        assert process.poll() is None, f"the run ended (code {process.returncode}) before the kill point"
        assert time.monotonic() < deadline, "kill point not reached in time"
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert _lines(episodes) < TASKS, "killed after the stage's last episode: nothing is left to resume"


def _steps(episodes: Path) -> int:
    trajectories = read_trajectories(episodes)
    assert len(trajectories) == TASKS, "every episode once, the killed launch's and the relaunch's"
    return sum(len(t.steps) for t in trajectories)


def _saved(layout: RunLayout, stage: str) -> dict[str, float]:
    return json.loads(layout.metrics_path(0, stage).read_text(encoding="utf-8"))


@pytest.mark.parametrize("stage", ["rollouts", "evaluate"])
def test_a_stage_killed_between_episodes_reports_the_time_of_both_launches(tmp_path, stage):
    layout = RunLayout(tmp_path / "run")
    episodes = layout.rollouts_path(0, 0) if stage == "rollouts" else layout.eval_path(0, 0)
    _kill_after(_launch(layout.root), episodes, written=TASKS - 1)
    _finish(_launch(layout.root))
    saved, least = _saved(layout, stage), STEP_S * _steps(episodes)
    assert saved[f"time/{stage}_s"] >= least, f"{stage}: {saved[f'time/{stage}_s']:.2f} s for {least:.2f} s of calls"
    assert saved[f"time/{stage}_attempts"] == 2
    assert not list(layout.metrics_dir(0).glob("*.attempts.jsonl")), "each stage's record goes once it is done"
    if stage == "rollouts":
        _rates_over_every_episode(saved, least)
        _engine_figures_of_every_episode(saved, least)


def test_rollouts_redone_after_their_metrics_were_written_keep_the_figures_of_the_launch_that_ran_them(tmp_path):
    layout = RunLayout(tmp_path / "run")
    _finish(_launch(layout.root, **{FAULT_ENV: "stage:0:rollouts:written"}), expected=FAULT_EXIT_CODE)
    first = _saved(layout, "rollouts")
    _finish(_launch(layout.root))
    saved, least = _saved(layout, "rollouts"), STEP_S * _steps(layout.rollouts_path(0, 0))
    assert saved["time/rollouts_s"] >= first["time/rollouts_s"] >= least
    assert saved["time/rollouts_attempts"] == 2
    _rates_over_every_episode(saved, least)
    assert saved["rollout/engine_calls"] == first["rollout/engine_calls"] == saved["rollout/steps"]


def _rates_over_every_episode(saved: dict[str, float], least: float) -> None:
    assert saved["rollout/episodes"] == TASKS
    assert "rollout/wall_s" in saved, f"no rollout time in {sorted(saved)}"
    assert saved["rollout/wall_s"] >= least, f"{saved['rollout/wall_s']:.2f} s of rollouts for {least:.2f} s of calls"
    assert saved["rollout/episodes_per_min"] * saved["rollout/wall_s"] / 60 == pytest.approx(TASKS)
    assert saved["rollout/steps_per_s"] * saved["rollout/wall_s"] == pytest.approx(saved["rollout/steps"])


def _engine_figures_of_every_episode(saved: dict[str, float], least: float) -> None:
    """One engine call of at least `STEP_S` a step, one prompt each: the killed launch's calls counted too."""
    assert saved["rollout/engine_calls"] == saved["rollout/steps"], "every step's call, whichever launch made it"
    assert saved["rollout/mean_batch_size"] == 1.0
    assert saved["rollout/engine_busy_s"] >= least, f"{saved['rollout/engine_busy_s']:.2f} s busy for {least:.2f} s"
