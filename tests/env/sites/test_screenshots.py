"""Per-step screenshots in real Chromium on the embedded sites: small JPEGs beside the JSONL, listed in it."""

from __future__ import annotations

import pytest

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import read_trajectories
from webrl.env.screenshots import ScreenshotConfig, ScreenshotRecorder
from webrl.env.sites import load_suite
from webrl.inference.rollout import collect_rollouts
from webrl.inference.scripted import ScriptedEngine

from .helpers import LIMITS, one_per_template

pytestmark = pytest.mark.timeout(300)

JPEG_START, JPEG_END = b"\xff\xd8\xff", b"\xff\xd9"


def _solve(run, pool, backend, tasks, out, recorder):
    engine = ScriptedEngine.for_embedded_sites()
    pool.screenshots = recorder
    try:
        result = run(
            collect_rollouts(
                engine,
                tasks,
                backend,
                pool,
                concurrency=2,
                prompt_builder=engine.wrap(actor_prompt_for_step),
                writer=out,
                limits=LIMITS,
                progress=False,
            )
        )
    finally:
        pool.screenshots = None
    return result.trajectories


def test_each_step_gets_a_small_jpeg_referenced_from_the_jsonl(run, pool, sites, backend, tmp_path):
    tasks = one_per_template(load_suite("test", sites.url_map))[:2]
    out = tmp_path / "phase_000" / "eval.rank0.jsonl"
    recorder = ScreenshotRecorder(ScreenshotConfig(), out.parent, evaluation=True)
    _solve(run, pool, backend, tasks, out, recorder)
    for trajectory in read_trajectories(out):
        shots = trajectory.metadata["screenshots"]
        # One per observed page: each step's, and the final page's unless the agent ended with exit.
        assert len(shots) == len(trajectory.steps) + (trajectory.status != "exit")
        assert "screenshot_error" not in trajectory.metadata
        for relative in shots:
            assert relative.startswith(f"screenshots/{trajectory.trajectory_id}/")
            data = (out.parent / relative).read_bytes()
            assert data.startswith(JPEG_START) and data.endswith(JPEG_END)
            assert 1000 < len(data) <= 30_000
            # SOF0 frame header: height and width of the scaled viewport (1280x720 at 0.5).
            sof = data.index(b"\xff\xc0")
            assert (int.from_bytes(data[sof + 5 : sof + 7], "big"), int.from_bytes(data[sof + 7 : sof + 9], "big")) == (
                360,
                640,
            )


def test_a_byte_cap_lowers_the_quality_and_training_rollouts_are_sampled(run, pool, sites, backend, tmp_path):
    tasks = one_per_template(load_suite("train", sites.url_map))[:4]
    capped = ScreenshotConfig(quality=95, scale=1.0, max_bytes=12_000, train_fraction=0.6)
    recorder = ScreenshotRecorder(capped, tmp_path, evaluation=False, seed=3)
    wanted = [task for task in tasks if recorder.wants(task)]
    assert 0 < len(wanted) < len(tasks)
    trajectories = _solve(run, pool, backend, tasks, tmp_path / "rollouts.rank0.jsonl", recorder)
    recorded = {t.task.task_id for t in trajectories if t.metadata.get("screenshots")}
    assert recorded == {task.task_id for task in wanted}
    sizes = [(tmp_path / p).stat().st_size for t in trajectories for p in t.metadata.get("screenshots", [])]
    assert sizes and max(sizes) <= 12_000


def test_off_by_one_key():
    assert not ScreenshotRecorder(ScreenshotConfig(enabled=False), "x", evaluation=True).wants(load_suite("test")[0])
    with pytest.raises(ValueError, match="env.screenshots.quality"):
        ScreenshotConfig(quality=0).validate()
