"""The run report from a small run directory written the way the loop writes one, opened in real Chromium.

The figures are chosen so the rates and their 95 % Wilson intervals are known by hand (2/10 is
[5.7, 51.0] %, 5/10 is [23.7, 76.3] %), and the page is checked in a real browser: its plots are there,
its script runs without errors, the filters narrow the list and a step's screenshot decodes.
"""

from __future__ import annotations

import csv
import json
import re

import pytest

from recipes.report import main as report_main
from tests.sample_records import build_trajectory
from webrl.data.atomic_io import write_json_atomic
from webrl.data.replay import ReplayBuffer
from webrl.data.trajectory import write_trajectories
from webrl.run_layout import RunLayout
from webrl.run_report import REPORT_NAME, RunReport
from webrl.tracking import write_phase_row

pytest.importorskip("matplotlib")
pytestmark = pytest.mark.timeout(300)

# phase -> site -> (successes, episodes) of the held-out evaluation
EVAL = {0: {"shopping": (2, 6), "reddit": (0, 4)}, 1: {"shopping": (4, 6), "reddit": (1, 4)}}


def _trajectory(task_id, site, template, success, phase, **labels):
    trajectory = build_trajectory(task_id, num_steps=2, outcome=None, phase=phase, **labels)
    trajectory.task.sites = [site]
    trajectory.task.intent_template_id = template
    trajectory.eval_reward = 1.0 if success else 0.0
    return trajectory


def _write_run(root, jpeg: bytes) -> RunLayout:
    layout = RunLayout(root)
    for phase, sites in EVAL.items():
        evaluations = []
        for site, (hits, n) in sites.items():
            for i in range(n):
                evaluations.append(_trajectory(f"{site}-{i}", site, 10 + i % 2, i < hits, phase))
        if phase == 1:  # the first held-out task in the report's order (task id) gets a screenshot
            first = min(evaluations, key=lambda t: t.task.task_id)
            shot = f"screenshots/{first.trajectory_id}/00.jpg"
            (layout.phase_dir(1) / shot).parent.mkdir(parents=True)
            (layout.phase_dir(1) / shot).write_bytes(jpeg)
            first.metadata["screenshots"] = [shot]
        write_trajectories(layout.eval_path(phase, 0), evaluations)
        # Training rollouts: (ORM, evaluator) = (1, 1), (1, 0), (0, 0), (0, 0): 1 TP, 1 FP, 2 TN.
        labelled = [
            _trajectory(f"train-{phase}-{i}", "shopping", 20, ev, phase, orm_reward=orm, orm_score=orm)
            for i, (orm, ev) in enumerate([(1.0, True), (1.0, False), (0.0, False), (0.0, False)])
        ]
        write_trajectories(layout.labelled_path(phase), labelled)
        ReplayBuffer(layout.replay_dir).add_phase(phase, labelled)
        record = {"phase": phase, "time/rollouts_s": 30.0, "time/evaluate_s": 45.0, "replay/kept": 3.0 * phase}
        if phase == 1:
            record.update({"curriculum/generated": 10.0, "curriculum/kept": 4.0, "curriculum/rejected_critic": 6.0})
            record.update({"time/critic_s": 120.0, "time/actor_s": 60.0})
        write_json_atomic(layout.metrics_path(phase, "evaluate"), record)
        write_phase_row(layout.phases_csv, record)
    (root / "metrics" / "version_0").mkdir(parents=True)
    with (root / "metrics" / "version_0" / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "critic/loss", "actor/loss"])
        writer.writerows([[100_000 + i, 1.0 / (i + 1), ""] for i in range(5)])
        writer.writerows([[150_000 + i, "", 0.5 - 0.1 * i] for i in range(5)])
    return layout


@pytest.fixture(scope="module")
def jpeg(run, pool) -> bytes:
    async def shoot() -> bytes:
        page = await (await pool.browser()).new_page(viewport={"width": 320, "height": 200})
        await page.set_content("<h1 style='color:#06c'>Order #12: $30.00</h1>")
        data = await page.screenshot(type="jpeg", quality=50)
        await page.close()
        return data

    return run(shoot())


def test_the_report_holds_the_rates_intervals_and_tables(tmp_path, jpeg):
    _write_run(tmp_path, jpeg)
    path = report_main([str(tmp_path)])
    assert path == tmp_path / REPORT_NAME
    page = path.read_text(encoding="utf-8")
    assert "20.0 % (2/10) [5.7, 51.0]" in page and "50.0 % (5/10) [23.7, 76.3]" in page
    assert "66.7 % (4/6) [30.0, 90.3]" in page and "25.0 % (1/4) [4.6, 69.9]" in page  # phase 1 per site
    assert "25.0 % (1/4) [4.6, 69.9]</td><td>25.0 % (1/4)" not in page  # train 1/4 sits in its own column
    assert "<td>1</td><td>1</td><td>1</td><td>0</td><td>2</td><td>75.0 %</td>" in page  # ORM confusion of phase 1
    assert page.count("<svg") == 6  # success, sites, curriculum, replay, losses, time
    assert not re.search(r'(src|href)="(https?:)?//|<link|@import', page)  # nothing fetched from a CDN
    records = json.loads(re.search(r'id="trajectories">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    assert len(records) == 2 * 10 + 2 * 4
    assert [r["kind"] for r in records] == (["eval"] * 10 + ["train"] * 4) * 2
    assert records[14]["task"] == "reddit-0" and records[14]["steps"][0]["shot"].startswith("data:image/jpeg;base64,")
    for key in ("phase", "kind", "site", "template", "success", "orm"):
        assert f'id="f-{key}"' in page


def test_screenshots_past_the_budget_are_linked_by_path(tmp_path, jpeg):
    _write_run(tmp_path, jpeg)
    page = RunReport(tmp_path, config=None).html()
    assert "data:image/jpeg" in page
    from webrl.run_report import ReportConfig

    linked = RunReport(tmp_path, ReportConfig(embed_screenshot_mb=0)).html()
    assert "data:image/jpeg" not in linked and '"shot": "phase_001/screenshots/' in linked


def test_an_empty_or_partial_run_directory_gives_a_report_that_says_what_is_missing(tmp_path):
    page = RunReport(tmp_path).html()
    assert "No evaluation or rollout results in this run directory yet." in page
    assert "No trajectories in this run directory yet." in page
    layout = RunLayout(tmp_path)
    write_trajectories(layout.eval_path(0, 0), [_trajectory("a", "map", 1, True, 0)])
    page = RunReport(tmp_path).html()
    assert "100.0 % (1/1) [20.7, 100.0]" in page and "No replay buffer in this run directory yet." in page


def test_the_page_runs_in_chromium_and_its_filters_work(run, pool, tmp_path, jpeg):
    _write_run(tmp_path, jpeg)
    path = RunReport(tmp_path).write()

    async def browse() -> dict:
        page = await (await pool.browser()).new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        await page.goto(path.as_uri())
        seen = {"all": await page.text_content("#count")}
        await page.select_option("#f-phase", "1")
        await page.select_option("#f-kind", "eval")
        seen["phase 1 eval"] = await page.text_content("#count")
        await page.click("#list li:first-child")
        seen["width"] = await page.eval_on_selector("#detail img", "img => img.decode().then(() => img.naturalWidth)")
        seen["compare"] = await page.locator("#compare > div").count()
        seen["svgs"] = await page.locator("svg").count()
        await page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        await page.close()
        return {**seen, "errors": errors}

    seen = run(browse())
    assert seen == {
        "all": "28 of 28 trajectories",
        "phase 1 eval": "10 of 28 trajectories",
        "width": 320,
        "compare": 2,
        "svgs": 6,
        "errors": [],
    }
    assert (tmp_path / "report.png").stat().st_size > 10_000
