"""Remake docs/report.png, README's picture of the run report, from a run directory.

    python scripts/report_picture.py RUN_DIR                 # writes RUN_DIR/report.html and docs/report.png
    python scripts/report_picture.py RUN_DIR --task 12 --out /tmp/report.png

The picture is taken in headless Chromium (the one `webrl.env` drives) so that it shows what a reader of
the report sees: the held-out success curve with its table, the loss curves, and the trajectory browser
opened on one held-out episode of the last phase, whose first screenshot has the acted-on element
outlined. The three parts are cut from one full-page screenshot and stacked, then reduced to a palette
PNG (scaled down if need be) so that the picture stays under `--max-kb` in the repository.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webrl.env.chromium import DEFAULT_LAUNCH_ARGS, find_chromium, sandbox_unavailable_reason  # noqa: E402
from webrl.run_report import RunReport  # noqa: E402

WIDTH = 1100
"""Viewport width in CSS pixels: the report's 1200 px column less its margins fits without wrapping tables."""
HEIGHT = 1000
"""Viewport height: the browser's list and step view are 70 % of it, enough for one step's 640 px screenshot."""

SECTIONS_JS = """() => {
  const rect = (el) => { const r = el.getBoundingClientRect(); return [r.top + scrollY, r.bottom + scrollY]; };
  const h2 = [...document.querySelectorAll("h2")];
  const after = (title) => h2[h2.findIndex((h) => h.textContent === title) + 1];
  return {
    top: [0, rect(after("Held-out success"))[0]],
    losses: [rect(h2.find((h) => h.textContent === "Critic and actor losses"))[0],
             rect(after("Critic and actor losses"))[0]],
    browser: [rect(h2.find((h) => h.textContent === "Trajectories"))[0],
              rect(document.getElementById("browser"))[1] + 8],
  };
}"""
"""Document y ranges of the three parts: title and success curve up to the next section, losses, and the browser."""


def pick(records: list[dict], task: str | None) -> tuple[int, str, int]:
    """(phase, task id, position in the phase's held-out list) of the episode to open.

    The named task, else the last phase's first held-out episode whose first step has a screenshot with a
    box, preferring a success with several steps (its outline is on the element that led somewhere).
    """
    last = max(r["phase"] for r in records)
    shown = [r for r in records if r["kind"] == "eval" and r["phase"] == last]
    boxed = [r for r in shown if r["steps"] and r["steps"][0]["shot"] and r["steps"][0]["box"]]
    if task is not None:
        chosen = next((r for r in shown if r["task"] == task), None)
        if chosen is None:
            raise SystemExit(f"--task: no held-out episode of task {task!r} in phase {last}")
    elif not boxed:
        raise SystemExit("the run's last phase has no held-out step with a screenshot and an element box")
    else:
        chosen = max(boxed, key=lambda r: (bool(r["success"]), min(len(r["steps"]), 3)))
    return last, chosen["task"], shown.index(chosen)


def shoot(report: Path, records: list[dict], task: str | None) -> Image.Image:
    """The report opened in headless Chromium, an episode picked, and the three parts stacked."""
    phase, task_id, position = pick(records, task)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=find_chromium(),
            args=list(DEFAULT_LAUNCH_ARGS),
            chromium_sandbox=sandbox_unavailable_reason() is None,
        )
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(report.as_uri())
        page.select_option("#f-phase", str(phase))
        page.select_option("#f-kind", "eval")
        page.click(f"#list li:nth-child({position + 1})")
        page.eval_on_selector("#list li.sel", "li => li.scrollIntoView({block: 'center'})")
        page.eval_on_selector("#detail img", "img => img.decode()")
        sections = page.evaluate(SECTIONS_JS)
        full = Image.open(io.BytesIO(page.screenshot(full_page=True))).convert("RGB")
        browser.close()
    print(f"opened phase {phase} held-out task {task_id}")
    parts = [full.crop((0, int(top), WIDTH, int(bottom))) for top, bottom in sections.values()]
    stacked = Image.new("RGB", (WIDTH, sum(p.height for p in parts)), "white")
    y = 0
    for part in parts:
        stacked.paste(part, (0, y))
        y += part.height
    return stacked


def small_png(picture: Image.Image, max_bytes: int) -> bytes:
    """`picture` as a 256-colour PNG, scaled down by tenths until it fits in `max_bytes`."""
    scale = 1.0
    while True:
        size = (round(picture.width * scale), round(picture.height * scale))
        scaled = picture if scale == 1.0 else picture.resize(size, Image.Resampling.LANCZOS)
        out = io.BytesIO()
        scaled.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, format="PNG", optimize=True)
        if out.tell() <= max_bytes or scale < 0.35:
            return out.getvalue()
        scale -= 0.1


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory whose report is pictured")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png", help="where the PNG goes")
    parser.add_argument("--task", help="the held-out task id to open (default: one with an outlined element)")
    parser.add_argument("--max-kb", type=int, default=300, help="the PNG's size limit in KB")
    args = parser.parse_args(argv)
    report = RunReport(args.run_dir).write()
    page = report.read_text(encoding="utf-8")
    data = re.search(r'id="trajectories">(.*?)</script>', page, re.S).group(1)
    png = small_png(shoot(report, json.loads(data), args.task), args.max_kb * 1000)
    args.out.write_bytes(png)
    print(f"{report}: {report.stat().st_size} bytes; {args.out}: {len(png)} bytes")
    return args.out


if __name__ == "__main__":
    main()
