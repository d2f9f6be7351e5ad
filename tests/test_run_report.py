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
from webrl.data.replay import ReplayBuffer, filter_by_perplexity
from webrl.data.step_values import write_step_values
from webrl.data.steps import trajectory_to_samples
from webrl.data.trajectory import write_trajectories
from webrl.report_data import RunFigures
from webrl.report_plots import histogram_counts, phase_starts
from webrl.run_layout import RunLayout
from webrl.run_report import REPORT_NAME, ReportConfig, RunReport, write_run_report
from webrl.run_state import RunState
from webrl.tracking import TrackingConfig, build_loggers, log_phase_views, write_phase_row

pytest.importorskip("matplotlib")
pytestmark = pytest.mark.timeout(300)

# phase -> site -> (successes, episodes) of the held-out evaluation
EVAL = {0: {"shopping": (2, 6), "reddit": (0, 4)}, 1: {"shopping": (4, 6), "reddit": (1, 4)}}
# Phase 1's curriculum: the critic's values of the kept tasks, and of candidates by rejection reason.
KEPT_VALUES = [0.3, 0.4, 0.62]
REJECTED = [("critic_low", 0.01), ("critic_high", 0.9), ("unused", 0.5), ("duplicate", None)]
# The box of the element the first step of phase 1's first held-out episode acted on, in fractions of its picture.
BOX = [0.25, 0.5, 0.5, 0.25]
# Phase 1's replay filter: the action probability of each replayed step (window (0.5, 0.95]).
REPLAY_SCORES = [0.3, 0.6, 0.97, 0.95]


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
            first.metadata["screenshot_boxes"] = [BOX]
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
    _write_phase_1_signals(layout, labelled)
    (root / "metrics" / "version_0").mkdir(parents=True)
    with (root / "metrics" / "version_0" / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "critic/loss", "actor/loss"])
        writer.writerows([[100_000 + i, 1.0 / (i + 1), ""] for i in range(5)])
        writer.writerows([[150_000 + i, "", 0.5 - 0.1 * i] for i in range(5)])
    return layout


def _write_phase_1_signals(layout: RunLayout, labelled) -> None:
    """Phase 1's critic values per trained step, its curriculum's critic values, and its replay filter's scores."""
    samples = trajectory_to_samples(labelled[0])  # train-1-0, two steps
    write_step_values(layout.advantages_path(1), samples, [0.25, 0.5], [0.5, 0.75], [0.25, -0.125])
    kept = [
        {"task_id": f"c{i}", "intent": f"task {i}", "curriculum": {"critic_value": v}}
        for i, v in enumerate(KEPT_VALUES)
    ]
    rejected = [{"intent": "x", "reason": reason, **({"value": v} if v is not None else {})} for reason, v in REJECTED]
    state = {"schema": 1, "phase": 1, "seen": [], "record": {"phase": 1, "kept": kept, "rejected": rejected}}
    write_json_atomic(layout.phase_dir(1) / "curriculum_state.json", state)
    experience = [build_trajectory(f"old-{i}", num_steps=2, outcome=1.0) for i in range(2)]
    steps = [(s.prompt, s.action) for t in experience for s in trajectory_to_samples(t)]
    table = dict(zip(steps, REPLAY_SCORES, strict=True))  # each step's score, in whatever order they are scored
    assert len(table) == len(REPLAY_SCORES)
    filter_by_perplexity(
        experience,
        lambda prompts, actions: [table[pair] for pair in zip(prompts, actions, strict=True)],
        current_steps=10,
        batch_size=4,
        scores_path=layout.replay_scores_path(1),
    )


@pytest.fixture(scope="module")
def jpeg(run, pool) -> bytes:
    async def shoot() -> bytes:
        page = await (await pool.browser()).new_page(viewport={"width": 320, "height": 200})
        await page.set_content("<h1 style='color:#06c'>Order #12: $30.00</h1>")
        # On a starved CPU the first frame can lag the content, and a capture before it fails ("Unable to capture
        # screenshot", seen once in CI beside a training job); after one animation frame the page has been drawn.
        await page.evaluate("() => new Promise(requestAnimationFrame)")
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
    # success, sites, curriculum, critic values, replay, replay scores, losses, time
    assert page.count("<svg") == 8
    assert not re.search(r'(src|href)="(https?:)?//|<link|@import', page)  # nothing fetched from a CDN
    records = json.loads(re.search(r'id="trajectories">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    assert len(records) == 2 * 10 + 2 * 4
    assert [r["kind"] for r in records] == (["eval"] * 10 + ["train"] * 4) * 2
    assert records[14]["task"] == "reddit-0" and records[14]["steps"][0]["shot"].startswith("data:image/jpeg;base64,")
    assert records[24]["task"] == "train-1-0" and [s["critic"] for s in records[24]["steps"]] == [
        {"value": 0.25, "next_value": 0.5, "advantage": 0.25, "scored_in": 1},
        {"value": 0.5, "next_value": 0.75, "advantage": -0.125, "scored_in": 1},
    ]
    assert all(s["critic"] is None for r in records if r["task"] != "train-1-0" for s in r["steps"])
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


OUTLINE_JS = """shot => {
  const img = shot.querySelector("img").getBoundingClientRect();
  const box = shot.querySelector(".box").getBoundingClientRect();
  return [box.left - img.left, box.top - img.top, box.width, box.height].map(Math.round);
}"""
"""The outline's offset and size over the step's picture, in CSS pixels."""


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
        seen["box"] = await page.eval_on_selector("#detail .shot", OUTLINE_JS)
        seen["compare"] = await page.locator("#compare > div").count()
        seen["svgs"] = await page.locator("svg").count()
        await page.select_option("#f-kind", "train")
        await page.click("#list li:first-child")
        seen["critic"] = await page.locator("#detail .critic").all_inner_texts()
        await page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        await page.close()
        return {**seen, "errors": errors}

    seen = run(browse())
    assert seen == {
        "all": "28 of 28 trajectories",
        "phase 1 eval": "10 of 28 trajectories",
        "width": 320,
        "box": [80, 100, 160, 50],  # BOX on the 320 x 200 picture
        "compare": 2,
        "svgs": 8,
        "critic": [
            "V(s) 0.250 · V(s') 0.500 · advantage +0.250 (actor stage of phase 1)",
            "V(s) 0.500 · V(s') 0.750 · advantage -0.125 (actor stage of phase 1)",
        ],
        "errors": [],
    }
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_the_histograms_count_what_the_curriculum_and_replay_filters_saw(tmp_path, jpeg):
    _write_run(tmp_path, jpeg)
    phase = RunFigures.read(tmp_path).phase(1)
    assert phase.critic_values == {"kept": KEPT_VALUES, "rejected": [0.01, 0.9]}  # unused and duplicate: neither
    steps = phase.replay_scores["steps"]
    assert [(s["score"], s["kept"]) for s in steps] == [(0.3, False), (0.6, True), (0.97, False), (0.95, True)]
    assert phase.replay_scores["window"] == {
        "low": 0.5,
        "high": 0.95,
        "low_inclusive": False,
        "high_inclusive": True,
        "cap": 20,
    }
    # 20 bins of width 0.05: 0.3 and 0.4 in bins 6 and 8, 0.62 in 12; 0.01 in 0, 0.9 in 18; 0.95 and 0.97 in 19.
    assert histogram_counts(KEPT_VALUES) == [1 if i in (6, 8, 12) else 0 for i in range(20)]
    assert histogram_counts([0.01, 0.9]) == [1 if i in (0, 18) else 0 for i in range(20)]
    assert histogram_counts([0.3, 0.97, 1.0, 0.0]) == [1] + [0] * 5 + [1] + [0] * 12 + [2]
    page = RunReport(tmp_path).html()
    for legend in ("kept (3)", "rejected (2)", "window [0.05, 0.75]", "kept (2)", "not kept (2)", "window [0.5, 0.95]"):
        assert f">{legend}<" in page, legend
    assert "No replay filter scores" not in page and "No critic-scored curriculum tasks" not in page


def test_the_loss_curves_leave_out_the_phase_records_logged_beside_the_batches(tmp_path):
    # What the loop writes: critic batches from 100_000, actor batches from 150_000, then phase 1's record at
    # 199_999 with its `phase` set and the stages' summary losses (drawn, it squeezed the batches to one stroke).
    (tmp_path / "metrics" / "version_0").mkdir(parents=True)
    with (tmp_path / "metrics" / "version_0" / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "phase", "critic/loss", "actor/loss"])
        writer.writerows([[99_999, 0, "", ""], [100_000, "", 3.0, ""], [100_001, "", 2.0, ""]])
        writer.writerows([[150_000, "", "", 0.5], [150_001, "", "", 0.25], [199_999, 1, 2.5, 0.375]])
    assert RunFigures.read(tmp_path).losses == {
        "critic/loss": [(100_000, 3.0), (100_001, 2.0)],
        "actor/loss": [(150_000, 0.5), (150_001, 0.25)],
    }


def test_the_loss_axis_marks_each_phase_at_its_first_batch_without_the_step_gaps():
    # Phase 1's critic from 100_000, its actor from 150_000, phase 2's critic from 200_000.
    assert phase_starts([100_000, 100_001, 150_000, 200_000, 200_001]) == [(0, 1), (3, 2)]
    assert phase_starts([]) == []


def _baseline_run(root, name, evaluation, *, launched=True, recipe=False):
    """A sibling run: a WebRL run evaluated per phase, or a recipe's one evaluation (`eval_<name>-<id>`)."""
    layout = RunLayout(root / name)
    for phase, hits in enumerate(evaluation):
        trajectories = [_trajectory(t, "shopping", 1, i < hits, phase) for i, t in enumerate(_tasks())]
        if recipe:
            write_trajectories(root / name / f"eval_{name}-abc.jsonl", trajectories)
            write_json_atomic(root / name / f"eval_{name}-abc.json", {"identity": {}})
        else:
            write_trajectories(layout.eval_path(phase, 0), trajectories)
    if not recipe:
        RunState(phase=len(evaluation)).save(layout.state_path)
    if launched:
        write_json_atomic(root / name / "launches.json", [])
    return root / name


def _tasks():
    return sorted(f"{site}-{i}" for site, (_, n) in EVAL[0].items() for i in range(n))


def test_baselines_share_the_success_plot(tmp_path, jpeg):
    compare = tmp_path / "compare"
    _write_run(compare / "webrl", jpeg)
    _baseline_run(compare, "sft", [3], recipe=True)
    _baseline_run(compare, "no_kl", [2, 4])
    _baseline_run(compare, "by_hand", [9], launched=False)  # not launched by the comparison: no baseline
    elsewhere = tmp_path / "elsewhere"
    _baseline_run(elsewhere, "webrl_smollm2", [7])
    page = RunReport(compare / "webrl", ReportConfig(baselines=[str(elsewhere / "webrl_smollm2")])).html()
    svg = page[page.index("<svg") : page.index("</svg>")]  # the success plot's legend names each baseline
    assert ">sft (one checkpoint)<" in svg and ">no_kl<" in svg and ">webrl_smollm2<" in svg
    assert "by_hand" not in page
    assert "<td>sft (one checkpoint)</td><td>30.0 % (3/10) [10.8, 60.3]</td><td>10</td>" in page
    assert "<td>no_kl</td><td>phase 0: 20.0 % (2/10) [5.7, 51.0]; phase 1: 40.0 % (4/10) [16.8, 68.7]</td>" in page
    assert "<td>webrl_smollm2</td><td>phase 0: 70.0 % (7/10) [39.7, 89.2]</td><td>10</td>" in page
    alone = RunReport(compare / "webrl", ReportConfig(sibling_baselines=False)).html()
    assert "<h3>Baselines</h3>" not in alone and "no_kl" not in alone
    with pytest.raises(ValueError, match="report.baselines: .* holds no finished held-out evaluation"):
        RunReport(compare / "webrl", ReportConfig(baselines=[str(tmp_path)])).html()


PLOTS = ["curriculum", "curriculum_values", "losses", "replay", "replay_scores", "sites", "success", "time"]
"""The report's plots, each drawn from the sample run."""


def test_the_phase_views_send_the_report_and_its_plots_to_an_offline_wandb_run(tmp_path, jpeg, monkeypatch):
    pytest.importorskip("wandb")
    from PIL import Image

    monkeypatch.setenv("WANDB_MODE", "offline")
    layout = _write_run(tmp_path, jpeg)
    loggers = build_loggers(tmp_path, TrackingConfig(wandb_mode="offline"), {}, "report-test")
    try:
        log_phase_views(loggers, 1, layout, write_run_report(tmp_path), sample_trajectories=0)
    finally:
        loggers[-1].experiment.finish()
    [files] = list((tmp_path / "wandb").glob("offline-run-*/files"))
    # W&B names a media file <key>_<step>_<digest>.<ext> under media/<kind>/<key's folder>/
    images = {path.name.rsplit("_", 2)[0]: path for path in (files / "media" / "images" / "report").glob("*.png")}
    assert sorted(images) == PLOTS
    for path in images.values():
        with Image.open(path) as image:
            assert image.format == "PNG" and image.width > 300 and image.height > 150
    [page] = list((files / "media" / "html").glob("report_*.html"))
    assert "WebRL run report" in page.read_text(encoding="utf-8")


UNTRUSTED = "<p>a comment <!--<script> opened and never closed, then </script> and </p>"
"""Page text as an observation may hold it: the comment-then-script form keeps the HTML parser from closing the
script element that holds the browser's JSON, at its own end tag included, unless every `<` there is escaped."""


def _odd_run(root, oddity: str) -> str:
    """A one-phase run with page text and a model output carrying markup ("markup"), or whose critic scored a step
    NaN ("nan", a diverged critic); returns the observation of the first held-out episode's first step."""
    layout = RunLayout(root)
    first = _trajectory("a", "shopping", 1, True, 1)
    if oddity == "markup":
        first.steps[0].observation = UNTRUSTED
        first.steps[1].response = '</script><script>document.title = "owned"</script>'
    write_trajectories(layout.eval_path(1, 0), [first, _trajectory("b", "shopping", 1, False, 1)])
    write_trajectories(layout.labelled_path(1), [first])
    v = float("nan") if oddity == "nan" else 0.25
    write_step_values(layout.advantages_path(1), trajectory_to_samples(first), [v, 0.5], [0.5, 0.75], [v, 0.25])
    return first.steps[0].observation


def _nan_filter_values(root) -> None:
    """A phase whose curriculum critic and replay filter scored some candidates NaN or infinite (a diverged model)."""
    layout = RunLayout(root)
    nan = float("nan")
    kept = [{"curriculum": {"critic_value": value}} for value in (0.3, nan)]
    write_json_atomic(layout.phase_dir(1) / "curriculum_state.json", {"record": {"kept": kept, "rejected": []}})
    steps = [{"score": score, "kept": kept} for score, kept in ((0.6, True), (nan, False), (float("inf"), False))]
    write_json_atomic(layout.replay_scores_path(1), {"window": {"low": 0.5, "high": 0.95}, "steps": steps})
    record = {"phase": 1, "curriculum/generated": 2.0, "curriculum/kept": 2.0, "replay/kept": 1.0}
    write_phase_row(layout.phases_csv, record)


def test_nan_values_are_counted_apart_in_the_histograms(tmp_path):
    _nan_filter_values(tmp_path)
    assert histogram_counts([0.3, float("nan"), float("inf"), -float("inf")]) == [0] * 6 + [1] + [0] * 13
    page = RunReport(tmp_path).html()  # a NaN used to stop the whole report: cannot convert float NaN to integer
    for legend in ("kept (1, 1 not finite)", "kept (1)", "not kept (0, 2 not finite)"):
        assert f">{legend}<" in page, legend


@pytest.mark.parametrize("oddity", ["markup", "nan"])
def test_untrusted_strings_and_nan_values_leave_the_browser_whole(run, pool, tmp_path, oddity):
    observation = _odd_run(tmp_path, oddity)
    path = RunReport(tmp_path).write()

    async def browse() -> dict:
        page = await (await pool.browser()).new_page()
        page.set_default_timeout(10_000)
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        await page.goto(path.as_uri())
        seen = {"count": await page.text_content("#count"), "title": await page.title(), "errors": errors}
        if seen["count"]:  # the browser ran: look at the trained episode's steps
            await page.select_option("#f-kind", "train")
            await page.click("#list li:first-child")
            seen["critic"] = await page.locator("#detail .critic").all_inner_texts()
            seen["observation"] = await page.locator("#detail .step pre").first.text_content()
        await page.close()
        return seen

    value = "nan" if oddity == "nan" else "0.250"
    assert run(browse()) == {
        "count": "3 of 3 trajectories",
        "title": f"WebRL run report: {tmp_path.name}",
        "critic": [
            f"V(s) {value} · V(s') 0.500 · advantage {'' if oddity == 'nan' else '+'}{value} (actor stage of phase 1)",
            "V(s) 0.500 · V(s') 0.750 · advantage +0.250 (actor stage of phase 1)",
        ],
        "observation": observation,
        "errors": [],
    }
