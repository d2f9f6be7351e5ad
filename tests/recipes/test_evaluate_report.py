"""The report of `recipes.evaluate`: one checkpoint's, and two side by side with the paired counts (`--compare`).

The hand-built pair has counts known by hand (9 tasks, 8 paired: both 2, only A 4, only B 0, neither 2,
exact McNemar p = 2 / 2^4 = 0.125); the real one runs two tiny checkpoints through the real browser
and the HF engine, then opens their comparison in Chromium.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import recipes.evaluate as evaluate
from tests.sample_records import build_trajectory
from webrl.checkpoint_report import CheckpointReport, Evaluation
from webrl.data.trajectory import read_trajectories, write_trajectories
from webrl.run_layout import RunLayout

pytest.importorskip("matplotlib")
pytestmark = pytest.mark.timeout(900)

# task -> (site, verdict under A, verdict under B); None: the browser failed the episode (left out of rates)
OUTCOMES = {
    **{f"s{i}": ("shopping", i < 5, i == 0) for i in range(6)},
    "r0": ("reddit", True, True),
    "r1": ("reddit", False, False),
    "r2": ("reddit", False, None),
}


def _episodes(side: int) -> list:
    out = []
    for task_id, (site, *verdicts) in OUTCOMES.items():
        trajectory = build_trajectory(task_id, num_steps=2, outcome=None)
        trajectory.task.sites = [site]
        trajectory.task.intent_template_id = 1 if site == "shopping" else 2
        verdict = verdicts[side]
        if verdict is None:
            trajectory.status, trajectory.metadata["infra_error"] = "error", True
        trajectory.eval_reward = None if verdict is None else float(verdict)
        out.append(trajectory)
    return out


def _row(*cells) -> str:
    return "<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"


def test_two_evaluations_side_by_side_with_the_paired_counts(tmp_path):
    write_trajectories(tmp_path / "a" / "eval_actor-0123456789.jsonl", _episodes(0))
    (tmp_path / "a" / "eval_actor-0123456789.json").write_text("{}")
    episodes = _episodes(1)
    episodes[0].metadata["screenshots"] = ["screenshots/s0/00.jpg"]
    (tmp_path / "run/phase_002/screenshots/s0").mkdir(parents=True)
    (tmp_path / "run/phase_002/screenshots/s0/00.jpg").write_bytes(b"\xff\xd8\xff picture")
    write_trajectories(RunLayout(tmp_path / "run").eval_path(2, 0), episodes)
    path = evaluate.main(
        ["--compare", str(tmp_path / "a" / "eval_actor-0123456789.json"), str(tmp_path / "run/phase_002")]
    )
    assert path == tmp_path / "a" / "compare-actor-vs-run_phase_002.html"
    page = path.read_text(encoding="utf-8")
    assert "<h1>Evaluation: actor vs run/phase_002</h1>" in page
    # A: 6 of 9; B: 2 of 8 (r2 failed in the browser); Wilson intervals by hand
    assert _row("all", "66.7 % (6/9) [35.4, 87.9]", "25.0 % (2/8) [7.1, 59.1]") in page
    assert _row("1 (shopping)", "83.3 % (5/6) [43.6, 97.0]", "16.7 % (1/6) [3.0, 56.4]") in page
    assert _row("all", 9, 8, 2, 4, 0, 2, 6, 2, "0.125") in page
    assert _row("shopping", 6, 6, 1, 4, 0, 1, 5, 1, "0.125") in page
    assert _row("reddit", 3, 2, 1, 0, 0, 1, 1, 1, "1") in page
    records = json.loads(re.search(r'id="trajectories">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    assert [r["checkpoint"] for r in records] == ["actor"] * 9 + ["run/phase_002"] * 9
    assert [r["task"] for r in records[:9]] == ["r0", "r1", "r2", "s0", "s1", "s2", "s3", "s4", "s5"]
    assert 'id="compare-task"' in page and records[12]["steps"][0]["shot"].startswith("data:image/jpeg;base64,")
    # past the byte budget a picture is linked, relative to the report's folder
    linked = evaluate.main(
        ["--compare", str(tmp_path / "a/eval_actor-0123456789.jsonl"), str(tmp_path / "run/phase_002")]
        + ["--embed-screenshot-mb", "0", "--output", str(tmp_path / "out/two.html")]
    )
    assert '"shot": "../run/phase_002/screenshots/s0/00.jpg"' in linked.read_text(encoding="utf-8")


def test_other_task_sets_are_refused_naming_the_tasks(tmp_path):
    write_trajectories(tmp_path / "a.jsonl", _episodes(0))
    write_trajectories(tmp_path / "b.jsonl", _episodes(1)[:-1])
    with pytest.raises(SystemExit, match=r"--compare: A \(.*a.jsonl\) vs B .*only in A: r2; only in B: none"):
        evaluate.main(["--compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")])
    with pytest.raises(SystemExit, match="no trajectories at .*missing.jsonl"):
        evaluate.main(["--compare", str(tmp_path / "a.jsonl"), str(tmp_path / "missing.json")])


def test_one_evaluation_has_no_side_by_side_view(tmp_path):
    write_trajectories(tmp_path / "a.jsonl", _episodes(0))
    page = CheckpointReport([Evaluation.read(tmp_path / "a.jsonl")]).html()
    assert _row("all", "66.7 % (6/9) [35.4, 87.9]") in page and 'id="compare-task"' not in page
    assert "Paired comparison" not in page


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> list[Path]:
    """Two tiny Llamas that differ only in their initial weights."""
    from webrl.modules.model_factory import build_tiny_model

    root = tmp_path_factory.mktemp("checkpoints")
    corpus = [step.prompt + step.response for t in _episodes(0) for step in t.steps]
    first = build_tiny_model(root / "first", corpus, vocab_size=400, hidden_size=64, num_layers=1, num_heads=1)
    second = build_tiny_model(
        root / "second", corpus, vocab_size=400, hidden_size=64, num_layers=1, num_heads=1, seed=1
    )
    return [first, second]


def test_a_real_evaluation_writes_its_report_and_two_compare(tmp_path, checkpoints, run, pool):
    settings = ["env.test_tasks=3", "env.max_steps=2", "rollout.max_tokens=8", "rollout.concurrency=3"]
    for checkpoint in checkpoints:
        evaluate.main([f"model.actor={checkpoint}", f"output_dir={tmp_path}", *settings])
    reports = sorted(tmp_path.glob("eval_*-*.html"))
    assert [p.name.split("-")[0] for p in reports] == ["eval_first", "eval_second"]
    jsonl = sorted(tmp_path.glob("eval_first-*.jsonl"))[0]
    trajectories = read_trajectories(jsonl)
    shots = [s for t in trajectories for s in t.metadata["screenshots"]]
    # one picture per observation: the start page and the page after each of the 2 steps
    assert len(trajectories) == 3 and len(shots) == 9 and all((tmp_path / s).is_file() for s in shots)
    single = reports[0].read_text(encoding="utf-8")
    assert single.count("data:image/jpeg;base64,") == 9
    path = evaluate.main(
        ["--compare", str(jsonl.with_suffix(".json")), str(sorted(tmp_path.glob("eval_second-*.json"))[0])]
    )
    assert path.name == "compare-first-vs-second.html"

    async def browse() -> dict:
        page = await (await pool.browser()).new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        await page.goto(path.as_uri())
        seen = {"all": await page.text_content("#count"), "svgs": await page.locator("svg").count()}
        await page.select_option("#f-checkpoint", "second")
        seen["second"] = await page.text_content("#count")
        await page.click("#list li:first-child")
        seen["width"] = await page.eval_on_selector("#detail img", "img => img.decode().then(() => img.naturalWidth)")
        seen["compare"] = await page.locator("#compare > div").count()
        seen["compare images"] = await page.locator("#compare img").count()
        await page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)
        await page.close()
        return {**seen, "errors": errors}

    seen = run(browse())
    assert seen == {
        "all": "6 of 6 trajectories",
        "svgs": 1,
        "second": "3 of 6 trajectories",
        "width": 640,
        "compare": 2,
        "compare images": 6,
        "errors": [],
    }
