"""Per-step screenshots in real Chromium on the embedded sites: small JPEGs beside the JSONL, listed in it."""

from __future__ import annotations

import pytest

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Step, Task, Trajectory, read_trajectories
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
        # The box of the element each step acted on (the solver's elements are in view), None for the others.
        boxes = trajectory.metadata["screenshot_boxes"]
        acted = [bool((step.action or {}).get("element")) for step in trajectory.steps]
        assert len(boxes) == len(shots) and any(acted)
        assert [box is not None for box in boxes] == acted + [False] * (len(shots) - len(acted))
        assert all(0 <= box[0] < 1 and 0 <= box[1] < 1 and 0 < box[2] <= 1 and 0 < box[3] <= 1 for box in boxes if box)
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


BOXES_PAGE = """<body style="margin:0;height:3000px">
<a data-webrl-id="8" style="position:absolute;left:0;top:0">top</a>
<button data-webrl-id="7" style="position:absolute;left:320px;top:900px;width:128px;height:72px">Buy</button>
<input data-webrl-id="9" style="position:absolute;left:1216px;top:1404px;width:128px;height:72px"></body>"""


LABEL_STAMPED = """() => {
  window.__webrlLabelled = [];
  for (const el of document.querySelectorAll("[data-webrl-id]")) {
    window.__webrlLabelled[Number(el.dataset.webrlId)] = el;
  }
}"""
"""What the observation script leaves behind on a page it numbered: element N at index N."""


COPY_7 = """() => {
  const copy = document.querySelector('[data-webrl-id="7"]').cloneNode(true);
  Object.assign(copy.style, {left: "0px", top: "720px"});
  document.body.append(copy);
}"""
"""The page copies #7 (stamp and all) to the viewport's top left corner, after the observation numbered it."""


def _boxes_after(run, pool, tmp_path, *, shots: int, page_script: str = "() => {}") -> Trajectory:
    """A trajectory with `shots` captures of BOXES_PAGE scrolled so that #7's top is at 180 px and #8 out of view,
    numbered as an observation leaves it, after `page_script` ran."""
    recorder = ScreenshotRecorder(ScreenshotConfig(), tmp_path, evaluation=True)
    trajectory = Trajectory(Task("t", "buy", ["shopping"], ""))

    async def shoot() -> None:
        page = await (await pool.browser()).new_page(viewport={"width": 1280, "height": 720})
        await page.set_content(BOXES_PAGE)
        await page.evaluate(LABEL_STAMPED)
        await page.evaluate("window.scrollTo(0, 720)")
        await page.evaluate(page_script)
        for _ in range(shots):
            await recorder.capture(page, trajectory)
        await page.close()

    run(shoot())
    return trajectory


def test_a_copy_the_page_made_after_the_observation_does_not_move_the_box(run, pool, tmp_path):
    trajectory = _boxes_after(run, pool, tmp_path, shots=1, page_script=COPY_7)
    assert trajectory.metadata["screenshot_boxes"][0]["7"] == [0.25, 0.25, 0.1, 0.1]


def test_a_step_keeps_the_box_of_the_element_it_acted_on(run, pool, tmp_path):
    trajectory = _boxes_after(run, pool, tmp_path, shots=3)
    # #9 sticks out of the viewport's bottom right corner: its box does too (the picture clips it).
    assert trajectory.metadata["screenshot_boxes"][0] == {"7": [0.25, 0.25, 0.1, 0.1], "9": [0.95, 0.95, 0.1, 0.1]}
    for i, element in enumerate(["7", "8"]):
        action = {"name": "click", "element": element}
        trajectory.steps.append(Step(index=i, prompt="", observation="", response="", action=action))
    ScreenshotRecorder.finish(trajectory)  # step 1's element is out of view; the final page has no action
    assert trajectory.metadata["screenshot_boxes"] == [[0.25, 0.25, 0.1, 0.1], None, None]


def test_off_by_one_key():
    assert not ScreenshotRecorder(ScreenshotConfig(enabled=False), "x", evaluation=True).wants(load_suite("test")[0])
    with pytest.raises(ValueError, match="env.screenshots.quality"):
        ScreenshotConfig(quality=0).validate()
