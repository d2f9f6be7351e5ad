"""ScreenshotRecorder: a small JPEG of the viewport at every observation, stored beside the trajectories.

The run report shows what the agent saw, step by step; the simplified HTML alone does not show a
person the page. Chromium encodes the picture itself, downscaled (`Page.captureScreenshot` with a
scaled clip of the visual viewport, over the DevTools protocol), so no image library runs in Python.
The rollout driver takes it while the model writes the step's response (bench/screenshots.py measures
what is left on the rollout's wall time). A picture over `max_bytes` is encoded again at lower quality,
down to 10, then smaller. A capture that fails leaves a None in its slot and never fails the episode.

The same page script that finds the viewport records the box of every element the observation numbered
(`window.__webrlLabelled`, which a copy the page makes of one does not join) inside it; once the step has acted,
`finish` keeps only the box of the element it acted on, which the report outlines on the picture.

Files: `<jsonl dir>/screenshots/<trajectory_id>/NN.jpg`; `trajectory.metadata["screenshots"]` lists
their paths relative to the JSONL's directory, entry i being the page step i observed, and one more
entry, when the episode observed the page after its last step, for that final page.
`metadata["screenshot_boxes"]` is aligned with it: entry i is the acted element's box in picture i as
fractions of the picture [left, top, width, height], or None (no element action, or not in view).
"""

from __future__ import annotations

import asyncio
import base64
import time
import weakref
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.async_api import Error as PlaywrightError

from webrl.config_checks import at_least, require
from webrl.data.trajectory import Task, Trajectory

SCREENSHOT_DIR = "screenshots"
_MIN_QUALITY = 10
_MIN_SCALE = 0.1
_VIEWPORT_JS = """() => {
  const vv = window.visualViewport;
  const width = vv ? vv.width : window.innerWidth, height = vv ? vv.height : window.innerHeight;
  const left = vv ? vv.offsetLeft : 0, top = vv ? vv.offsetTop : 0;
  const f = (v) => Math.round(v * 10000) / 10000;
  const boxes = {};
  // The elements the observation numbered (element N at index N), not whatever carries the stamp now: a copy the
  // page made since carries its original's id (webrl.env.observation_script).
  const labelled = window.__webrlLabelled || [];
  labelled.forEach((el, id) => {
    if (!el.isConnected) return;
    const r = el.getBoundingClientRect();
    if (r.width <= 0 || r.height <= 0 || r.right <= left || r.bottom <= top) return;
    if (r.left >= left + width || r.top >= top + height) return;
    boxes[String(id)] = [f((r.left - left) / width), f((r.top - top) / height),
                         f(r.width / width), f(r.height / height)];
  });
  return {x: vv ? vv.pageLeft : window.scrollX, y: vv ? vv.pageTop : window.scrollY, width, height, boxes};
}"""
"""The visual viewport in page coordinates (the picture's clip) and each numbered element's box in it."""


@dataclass
class ScreenshotConfig:
    """Per-step viewport screenshots (JPEG) of evaluation episodes and a sample of training rollouts."""

    enabled: bool = True
    """Record screenshots at all (false: none, and no cost)."""
    quality: int = 40
    """JPEG quality, 1-100."""
    scale: float = 0.5
    """Size relative to the viewport (0.5 of 1280x720 = 640x360)."""
    max_bytes: int = 30_000
    """Largest file: a bigger picture is encoded again at lower quality (down to 10), then at a smaller size."""
    train_fraction: float = 0.1
    """Share of training rollouts recorded (chosen per task id, seeded); evaluation episodes are all recorded."""

    def validate(self, prefix: str = "env.screenshots") -> None:
        require(1 <= self.quality <= 100, f"{prefix}.quality", self.quality, "must be in 1..100")
        require(0 < self.scale <= 1, f"{prefix}.scale", self.scale, "must be in (0, 1]")
        at_least(f"{prefix}.max_bytes", self.max_bytes, 1000)
        require(0 <= self.train_fraction <= 1, f"{prefix}.train_fraction", self.train_fraction, "must be in [0, 1]")


class ScreenshotRecorder:
    """Captures the screenshots of the episodes of one rollout or evaluation call into `directory`."""

    def __init__(self, config: ScreenshotConfig, directory: Path, *, evaluation: bool, seed: int = 0) -> None:
        config.validate()
        self.config = config
        self.directory = Path(directory)
        self.evaluation = evaluation
        self.seed = seed
        self._sessions: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def wants(self, task: Task) -> bool:
        """Every evaluation episode; a training rollout when its task falls in the seeded `train_fraction`."""
        if not self.config.enabled:
            return False
        if self.evaluation:
            return True
        draw = zlib.crc32(f"{self.seed}:{task.task_id}".encode()) / 2**32
        return draw < self.config.train_fraction

    async def capture(self, page: Any, trajectory: Trajectory) -> None:
        """Save the viewport of `page` as the next screenshot of `trajectory` (None in its slot on failure)."""
        shots = trajectory.metadata.setdefault("screenshots", [])
        boxes = trajectory.metadata.setdefault("screenshot_boxes", [])
        started = time.perf_counter()
        relative = f"{SCREENSHOT_DIR}/{trajectory.trajectory_id}/{len(shots):02d}.jpg"
        try:
            data, in_view = await self._jpeg(page)
            await asyncio.to_thread(self._write, self.directory / relative, data)
            shots.append(relative)
            boxes.append(in_view)
        except (PlaywrightError, OSError, KeyError, TypeError) as err:
            shots.append(None)
            boxes.append(None)
            trajectory.metadata["screenshot_error"] = f"{type(err).__name__}: {str(err)[:200]}"
        seconds = trajectory.metadata.get("screenshot_s", 0.0) + time.perf_counter() - started
        trajectory.metadata["screenshot_s"] = round(seconds, 4)

    @staticmethod
    def finish(trajectory: Trajectory) -> None:
        """Keep, of each picture's boxes, the one of the element its step acted on (None for the others)."""
        boxes = trajectory.metadata.get("screenshot_boxes")
        if not boxes:
            return
        steps = trajectory.steps
        for i, in_view in enumerate(boxes):
            if isinstance(in_view, dict):
                action = steps[i].action if i < len(steps) else None
                boxes[i] = in_view.get(str((action or {}).get("element")))

    async def _jpeg(self, page: Any) -> tuple[bytes, dict[str, list[float]]]:
        """The viewport's JPEG and the boxes of the numbered elements in view."""
        session = self._sessions.get(page)
        if session is None:
            session = await page.context.new_cdp_session(page)
            self._sessions[page] = session
        viewport = await page.evaluate(_VIEWPORT_JS)
        clip = {key: viewport[key] for key in ("x", "y", "width", "height")} | {"scale": self.config.scale}
        quality = self.config.quality
        while True:
            shot = await session.send("Page.captureScreenshot", {"format": "jpeg", "quality": quality, "clip": clip})
            data = base64.b64decode(shot["data"])
            if len(data) <= self.config.max_bytes or clip["scale"] < _MIN_SCALE:
                return data, viewport["boxes"]
            if quality > _MIN_QUALITY:
                quality = max(_MIN_QUALITY, quality // 2)
            else:
                clip["scale"] *= 0.75

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
