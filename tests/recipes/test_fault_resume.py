"""Crash consistency end to end: a fault at every stage boundary and inside every atomic write, then a resume.

An uninterrupted run of `python -m recipes.webrl` (phase 0 and one WebRL phase, the quick settings
with 3 tasks a phase) lists, through `WEBRL_FAULT_LOG`, every fault point it passes in order. A
second run directory then goes through a chain: the recipe is started with `WEBRL_FAULT` naming the
first point and ends there (`os._exit`, as hard as kill -9), is started again naming the next point,
and so on; every start after the first is a resume from the state the previous fault left. The chain
ends with a run without a fault, and the two run directories must hold the same replay buffer,
labels, replayed samples, critic weights and per-phase metrics (wall-time figures, trajectory ids,
step timings, screenshot paths and the sites server's port aside). Rollouts use one episode at a
time so that the same seed gives the same episodes.

`stages`: `stage:<phase>:<stage>:written` (outputs and metrics written, not marked done) and
`:marked` for each of the 9 stages of both phases: 36 faults. `writes`: every atomic write into the
run directory (run_state.json only once: its other writes are the stage marks), faulted between its
fsynced temp file and its rename; a later write of the same file (phases.csv, the buffer's manifest)
is reached by the resume from the point before it, so the fault lands on that one.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from webrl.data.atomic_io import FAULT_ENV, FAULT_EXIT_CODE, FAULT_LOG_ENV
from webrl.data.replay import ReplayBuffer
from webrl.data.steps import read_samples
from webrl.data.trajectory import Trajectory, read_trajectories
from webrl.run_layout import RunLayout

REPO = Path(__file__).resolve().parents[2]

DETERMINISTIC = ("rollout.concurrency=1",)
"""One episode per engine call: batches (and so sampled tokens) do not depend on browser timing."""

SMALL = ("env.train_tasks=3", "env.test_tasks=3", "curriculum.tasks_per_phase=3")
"""Half the quick run's tasks: a stage restarted by a resume redoes less, and every stage and write still runs."""

PROCESS_KEYS = {"sync/seconds", "rollout/engine_calls", "rollout/mean_batch_size", "rollout/generated_tokens"}
"""Metrics of the process that ran a stage rather than of its results: a resumed stage does less work."""


def _is_result_metric(key: str) -> bool:
    wall_time = key.startswith("time/") or key.endswith(("_s", "/seconds", "_per_s", "_per_min", "_frac"))
    return not wall_time and key not in PROCESS_KEYS


SITES_ORIGIN = re.compile(r"http://127\.0\.0\.1:\d+")
"""The embedded sites server's address: each launch (each resume) gets a free port of its own."""


def _trajectory(trajectory: Trajectory) -> dict[str, Any]:
    data = trajectory.to_dict()
    trajectory_id = data.pop("trajectory_id")
    data["metadata"].pop("duration_s", None)
    data["metadata"].pop("screenshot_s", None)
    metadata = data["metadata"]
    if "screenshots" in metadata:  # filed under the trajectory's id
        metadata["screenshots"] = [path.replace(trajectory_id, "<id>") for path in metadata["screenshots"]]
    for step in data["steps"]:
        step.pop("timings")
    return data


def _metrics(layout: RunLayout) -> list[dict[str, str]]:
    with layout.phases_csv.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [{k: v for k, v in row.items() if _is_result_metric(k) and v != ""} for row in rows]


def _results(run_dir: Path) -> dict[str, Any]:
    layout = RunLayout(run_dir)
    buffer = ReplayBuffer(layout.replay_dir)
    out: dict[str, Any] = {
        "buffer": buffer.stats(),
        "buffer_trajectories": [_trajectory(t) for t in buffer.trajectories()],
        "metrics": _metrics(layout),
    }
    for phase in (0, 1):
        out[f"tasks_{phase}"] = [task.to_dict() for task in layout.tasks(phase)]
        out[f"labelled_{phase}"] = [_trajectory(t) for t in layout.labelled(phase)]
        out[f"eval_{phase}"] = [_trajectory(t) for t in layout.evaluations(phase)]
        samples = [s.to_dict() for s in read_samples(layout.replay_samples_path(phase))]
        out[f"replay_samples_{phase}"] = [{k: v for k, v in s.items() if k != "trajectory_id"} for s in samples]
    out["rollouts_1"] = [_trajectory(t) for t in read_trajectories(layout.rollouts_path(1, 0))]
    return json.loads(SITES_ORIGIN.sub("http://sites", json.dumps(out)))


def _chain_points(log: Path, reference_dir: Path, run_dir: Path, kind: str) -> list[str]:
    """The reference run's fault points of `kind`, in run order, aimed at `run_dir`."""
    points = log.read_text(encoding="utf-8").splitlines()
    if kind == "stages":
        return [p for p in points if p.startswith("stage:")]
    chosen: list[str] = []
    prefix = f"write:{reference_dir.as_posix()}/"
    for point in points:
        if point.startswith(prefix):
            aimed = f"write:{run_dir.as_posix()}/{point[len(prefix) :]}"
            # run_state.json is written at every stage's mark, which the `stages` chain covers: once here.
            if not (aimed.endswith("/run_state.json") and aimed in chosen):
                chosen.append(aimed)
    return chosen


_REFERENCE: dict[Path, tuple[Path, Path]] = {}


def _reference(model_cache: Path, recipe_command) -> tuple[Path, Path]:
    """The uninterrupted run (built once per session) and its fault-point log."""
    if model_cache not in _REFERENCE:
        run_dir, log = model_cache.parent / "reference_run", model_cache.parent / "reference_points.txt"
        command = recipe_command("recipes.webrl", run_dir, model_cache, *DETERMINISTIC, *SMALL)
        result = subprocess.run(
            command, cwd=REPO, env=_env(**{FAULT_LOG_ENV: str(log)}), capture_output=True, text=True, timeout=3600
        )
        assert result.returncode == 0, result.stderr[-4000:]
        _REFERENCE[model_cache] = (run_dir, log)
    return _REFERENCE[model_cache]


def _env(**extra: str) -> dict[str, str]:
    """The recipes' environment (offline W&B), with no fault unless `extra` names one."""
    env = {k: v for k, v in os.environ.items() if k not in (FAULT_ENV, FAULT_LOG_ENV)}
    return {**env, "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false", **extra}


@pytest.mark.slow
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("kind", ["stages", "writes"])
def test_a_fault_at_every_point_then_resume_ends_as_the_uninterrupted_run(tmp_path, model_cache, recipe_command, kind):
    reference_dir, log = _reference(model_cache, recipe_command)
    run_dir = tmp_path / "run"
    command = recipe_command("recipes.webrl", run_dir, model_cache, *DETERMINISTIC, *SMALL)
    points = _chain_points(log, reference_dir, run_dir, kind)
    assert len(points) >= (36 if kind == "stages" else 20), points

    started = time.perf_counter()
    for point in points:
        result = subprocess.run(
            command, cwd=REPO, env=_env(**{FAULT_ENV: point}), capture_output=True, text=True, timeout=3600
        )
        assert result.returncode == FAULT_EXIT_CODE, (
            f"{point}: not reached (exit {result.returncode})\n" + (result.stderr[-4000:])
        )
    final = subprocess.run(command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=3600)
    assert final.returncode == 0, final.stderr[-4000:]
    print(f"\n{kind}: {len(points)} faults and resumes in {time.perf_counter() - started:.0f} s: {points}")

    ours, theirs = _results(run_dir), _results(reference_dir)
    for key in theirs:
        assert ours[key] == theirs[key], f"{key} differs from the uninterrupted run's"
    ours = torch.load(RunLayout(run_dir).critic_path(1), weights_only=True)
    theirs = torch.load(RunLayout(reference_dir).critic_path(1), weights_only=True)
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours), "critic weights differ from the uninterrupted run's"
