"""End to end: `python -m recipes.webrl` with overrides runs phase 0 and one WebRL phase on CPU.

Real parts throughout: the embedded sites server, Chromium through Playwright, the tiny Llama with
real forward/backward passes, Lightning Fabric, W&B in offline mode. The assertions read what a
user would: the files of the run directory, the per-phase metrics and the printed table.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from webrl.data.trajectory import read_trajectories


def _phase_files_ok(run_dir: Path, phase: int, tasks: int) -> None:
    phase_dir = run_dir / f"phase_{phase:03d}"
    rollouts = read_trajectories(phase_dir / "rollouts.rank0.jsonl")
    ids = [t.task.task_id for t in rollouts]
    assert len(ids) == len(set(ids)) == tasks, f"phase {phase}: rollouts lost or duplicated: {sorted(ids)}"
    labelled = read_trajectories(phase_dir / "labelled.jsonl")
    assert all(t.orm_score is not None and t.outcome in (0.0, 1.0) for t in labelled)
    evaluation = read_trajectories(phase_dir / "eval.rank0.jsonl")
    assert len(evaluation) == 6 and all(t.eval_reward is not None for t in evaluation)


def test_one_phase_end_to_end(tmp_path, model_cache, recipe_command, run_recipe):
    run_dir = tmp_path / "run"
    result = run_recipe(recipe_command("recipes.webrl", run_dir, model_cache))
    assert result.returncode == 0, result.stderr[-4000:]
    state = json.loads((run_dir / "run_state.json").read_text())
    assert state["phase"] == 2 and state["done"] == []
    assert [record["phase"] for record in state["history"]] == [0, 1]
    _phase_files_ok(run_dir, 0, tasks=6)
    _phase_files_ok(run_dir, 1, tasks=len(json.loads((run_dir / "phase_001" / "tasks.json").read_text())))
    assert (run_dir / "phase_001" / "critic.pt").exists()
    assert (run_dir / "phase_001" / "actor" / "config.json").exists()
    phase_one = state["history"][1]
    keys = ("critic/loss", "actor/loss", "test/success_rate", "train/success_rate", "replay/kept")
    for key in (*keys, "eval/errors", "rollout/errors"):
        assert key in phase_one, f"missing metric {key} in {sorted(phase_one)}"
    with (run_dir / "phases.csv").open() as handle:
        assert [row["phase"] for row in csv.DictReader(handle)] == ["0", "1"]
    assert list((run_dir / "metrics").glob("version_*/metrics.csv"))
    assert any((run_dir / "wandb").glob("offline-run-*"))
    assert "test %" in result.stdout and "rollout err" in result.stdout

    # The same command again finds everything done: nothing reruns, the table is printed again.
    again = run_recipe(recipe_command("recipes.webrl", run_dir, model_cache))
    assert again.returncode == 0, again.stderr[-4000:]
    assert "[phase" not in again.stdout


def _wait_then_kill(process: subprocess.Popen, ready, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            raise AssertionError(f"run ended (code {process.returncode}) before the kill point")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("kill point not reached in time")
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


def _lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "kill_point",
    ["mid_rollouts", "after_critic", "mid_evaluation"],
)
def test_resume_after_kill(tmp_path, model_cache, kill_point, recipe_command, run_recipe):
    """kill -9 at a point, rerun the same command: it finishes with no trajectory lost or duplicated."""
    run_dir = tmp_path / "run"
    command = recipe_command("recipes.webrl", run_dir, model_cache)
    points = {
        "mid_rollouts": lambda: _lines(run_dir / "phase_001" / "rollouts.rank0.jsonl") >= 1,
        "after_critic": lambda: (run_dir / "phase_001" / "critic.pt").exists(),
        "mid_evaluation": lambda: _lines(run_dir / "phase_001" / "eval.rank0.jsonl") >= 2,
    }
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "WANDB_MODE": "offline"}
    process = subprocess.Popen(command, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_then_kill(process, points[kill_point])
    result = run_recipe(command)
    assert result.returncode == 0, result.stderr[-4000:]
    state = json.loads((run_dir / "run_state.json").read_text())
    assert [record["phase"] for record in state["history"]] == [0, 1]
    _phase_files_ok(run_dir, 0, tasks=6)
    _phase_files_ok(run_dir, 1, tasks=len(json.loads((run_dir / "phase_001" / "tasks.json").read_text())))


def test_config_errors_name_the_key(tmp_path, model_cache, recipe_command, run_recipe):
    for override, named in (("actor.train.lr=-1", "actor.train"), ("rollout.engin=hf", "rollout.engin")):
        result = run_recipe(recipe_command("recipes.webrl", tmp_path / "bad", model_cache, override), timeout=120)
        assert result.returncode != 0
        assert named in result.stderr, result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "model_parallel"])
def test_two_process_phase(tmp_path, model_cache, recipe_command, run_recipe, strategy):
    """Two processes (gloo on CPU): rollouts sharded by rank, training under DDP or FSDP2, one result."""
    run_dir = tmp_path / "run"
    command = recipe_command("recipes.webrl", run_dir, model_cache, f"fabric.strategy={strategy}", "fabric.devices=2")
    result = run_recipe(command, timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]
    state = json.loads((run_dir / "run_state.json").read_text())
    assert [record["phase"] for record in state["history"]] == [0, 1]
    for phase in (0, 1):
        phase_dir = run_dir / f"phase_{phase:03d}"
        shards = [read_trajectories(phase_dir / f"rollouts.rank{rank}.jsonl") for rank in (0, 1)]
        ids = [t.task.task_id for shard in shards for t in shard]
        tasks = json.loads((phase_dir / "tasks.json").read_text())
        assert sorted(ids) == sorted(task["task_id"] for task in tasks), "each task rolled out once, across ranks"
        assert all(shards), "both ranks rolled out"
    assert (run_dir / "phase_001" / "actor" / "config.json").exists()
    assert "critic/loss" in state["history"][1] and "actor/loss" in state["history"][1]
