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

from webrl.data.trajectory import is_success, read_trajectories
from webrl.run_layout import RunLayout


def _phase_files_ok(run_dir: Path, phase: int, tasks: int) -> None:
    layout = RunLayout(run_dir)
    rollouts = read_trajectories(layout.rollouts_path(phase, 0))
    ids = [t.task.task_id for t in rollouts]
    assert len(ids) == len(set(ids)) == tasks, f"phase {phase}: rollouts lost or duplicated: {sorted(ids)}"
    labelled = layout.labelled(phase)
    assert all(t.orm_score is not None and t.outcome in (0.0, 1.0) for t in labelled)
    evaluation = read_trajectories(layout.eval_path(phase, 0))
    assert len(evaluation) == 6 and all(t.eval_reward is not None for t in evaluation)
    assert layout.recorded_eval_tasks(phase) == {t.task.task_id for t in evaluation}


def test_one_phase_end_to_end(tmp_path, model_cache, recipe_command, run_recipe):
    run_dir = tmp_path / "run"
    layout = RunLayout(run_dir)
    result = run_recipe(recipe_command("recipes.webrl", run_dir, model_cache))
    assert result.returncode == 0, result.stderr[-4000:]
    state = json.loads(layout.state_path.read_text())
    assert state["phase"] == 2 and state["done"] == []
    assert [record["phase"] for record in state["history"]] == [0, 1]
    _phase_files_ok(run_dir, 0, tasks=6)
    _phase_files_ok(run_dir, 1, tasks=len(layout.tasks(1)))
    assert layout.critic_path(1).exists()
    assert (layout.actor_dir(1) / "config.json").exists()
    phase_one = state["history"][1]
    keys = ("critic/loss", "actor/loss", "test/success_rate", "train/success_rate", "replay/kept")
    for key in (*keys, "eval/errors", "rollout/errors"):
        assert key in phase_one, f"missing metric {key} in {sorted(phase_one)}"
    assert phase_one["sync/in_memory"] == 0.0  # on CPU the engine reloads the saved actor (engines.weight_sync=auto)
    with layout.phases_csv.open() as handle:
        assert [row["phase"] for row in csv.DictReader(handle)] == ["0", "1"]
    assert list((run_dir / "metrics").glob("version_*/metrics.csv"))
    assert any((run_dir / "wandb").glob("offline-run-*"))
    assert "test %" in result.stdout and "rollout err" in result.stdout
    # The run ends by pairing phase 1 with phase 0 on the same 6 held-out tasks.
    solved = [{t.task.task_id: is_success(t.eval_reward) for t in layout.evaluations(phase)} for phase in (0, 1)]
    gain = json.loads((run_dir / "gain.json").read_text())
    assert gain["tasks"] == 6 and gain["phases"] == [0, 1]
    assert gain["gained"] == sum(solved[1][task] and not solved[0][task] for task in solved[0])
    assert gain["lost"] == sum(solved[0][task] and not solved[1][task] for task in solved[0])
    assert "exact McNemar p =" in result.stdout

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
    layout = RunLayout(run_dir)
    command = recipe_command("recipes.webrl", run_dir, model_cache)
    points = {
        "mid_rollouts": lambda: _lines(layout.rollouts_path(1, 0)) >= 1,
        "after_critic": lambda: layout.critic_path(1).exists(),
        "mid_evaluation": lambda: _lines(layout.eval_path(1, 0)) >= 2,
    }
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "WANDB_MODE": "offline"}
    process = subprocess.Popen(command, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_then_kill(process, points[kill_point])
    result = run_recipe(command)
    assert result.returncode == 0, result.stderr[-4000:]
    state = json.loads(layout.state_path.read_text())
    assert [record["phase"] for record in state["history"]] == [0, 1]
    _phase_files_ok(run_dir, 0, tasks=6)
    _phase_files_ok(run_dir, 1, tasks=len(layout.tasks(1)))


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
    layout = RunLayout(run_dir)
    command = recipe_command("recipes.webrl", run_dir, model_cache, f"fabric.strategy={strategy}", "fabric.devices=2")
    result = run_recipe(command, timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]
    state = json.loads(layout.state_path.read_text())
    assert [record["phase"] for record in state["history"]] == [0, 1]
    for phase in (0, 1):
        shards = [read_trajectories(layout.rollouts_path(phase, rank)) for rank in (0, 1)]
        ids = [t.task.task_id for shard in shards for t in shard]
        assert sorted(ids) == sorted(task.task_id for task in layout.tasks(phase)), (
            "each task rolled out once, across ranks"
        )
        assert all(shards), "both ranks rolled out"
    assert (layout.actor_dir(1) / "config.json").exists()
    assert "critic/loss" in state["history"][1] and "actor/loss" in state["history"][1]


@pytest.mark.slow
def test_one_engine_per_node_serves_the_node_from_local_rank_zero(tmp_path, model_cache, recipe_command, run_recipe):
    """engines.placement=node on one node of two processes: rank 0's engine rolls out and evaluates every task,
    rank 1 builds none and only trains; the ORM's actor episodes, the labels and both stages still complete."""
    run_dir = tmp_path / "run"
    layout = RunLayout(run_dir)
    overrides = ("fabric.strategy=ddp", "fabric.devices=2", "engines.placement=node")
    result = run_recipe(recipe_command("recipes.webrl", run_dir, model_cache, *overrides), timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]
    state = json.loads(layout.state_path.read_text())
    assert [record["phase"] for record in state["history"]] == [0, 1]
    for phase in (0, 1):
        ids = [t.task.task_id for t in read_trajectories(layout.rollouts_path(phase, 0))]
        assert sorted(ids) == sorted(task.task_id for task in layout.tasks(phase)), "every task on the node's engine"
        assert not layout.rollouts_path(phase, 1).exists() and not layout.eval_path(phase, 1).exists()
        assert len(read_trajectories(layout.eval_path(phase, 0))) == 6
    assert "critic/loss" in state["history"][1] and "actor/loss" in state["history"][1]
