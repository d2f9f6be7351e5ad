"""The loop's curriculum step: topping a short phase up from unused training tasks, the per-template cap over a
whole phase (proposed and topped-up tasks, on the embedded sites' real templates), and when an engine is needed."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest
from sample_records import URL_MAP

from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.phase import needs_generator, propose_phase_tasks, top_up, with_stored_tasks
from webrl.data.atomic_io import write_json_atomic
from webrl.data.trajectory import Task, Trajectory, sampled_copies, sampled_origin, write_trajectories
from webrl.env.sites import load_suite, reinstantiate
from webrl.run_layout import RunLayout


def task(intent: str, template: str = "") -> Task:
    return Task(
        task_id=intent, intent=intent, sites=["shopping"], start_url="http://shop.test/", intent_template=template
    )


def test_top_up_fills_with_tasks_no_phase_has_used_and_is_seeded():
    pool = [task(f"t{i}") for i in range(10)]
    proposed = [task("t0")]
    first, skipped = top_up(proposed, wanted=4, pool=pool, used={"t1", "t2"}, seed=3)
    assert len(first) == 4 and first[0] is proposed[0] and skipped == 0
    assert not {t.intent for t in first[1:]} & {"t0", "t1", "t2"}
    again, _ = top_up(proposed, wanted=4, pool=pool, used={"t1", "t2"}, seed=3)
    assert [t.intent for t in again] == [t.intent for t in first]
    # Without a cap, or with one that never binds, the draw is the one top_up made before the cap existed.
    fresh = [t for t in pool if t.intent not in {"t0", "t1", "t2"}]
    assert first[1:] == random.Random(3).sample(fresh, 3)
    assert top_up(proposed, wanted=4, pool=pool, used={"t1", "t2"}, seed=3, max_per_template=1)[0] == first


def test_top_up_keeps_a_full_phase_and_stops_when_the_pool_runs_out():
    full = [task("a"), task("b")]
    assert top_up(full, wanted=2, pool=[task("c")], used=set(), seed=0) == (full, 0)
    assert top_up(full, wanted=2, pool=[task("c")], used=set(), seed=0)[0] is full
    assert [t.intent for t in top_up([], wanted=5, pool=[task("c"), task("a")], used={"a"}, seed=0)[0]] == ["c"]


def test_top_up_skips_tasks_of_a_template_the_phase_already_holds_the_cap_of():
    # The phase holds 2 of X; the pool has 10 more X, 2 Y, 2 Z. With a cap of 3 only one X fits, so asking for 8
    # draws the whole pool: 1 X, 2 Y and 2 Z are added, the other 9 X skipped.
    proposed = [task("x proposed 0", "X"), task("x proposed 1", "X")]
    pool = [task(f"x {i}", "X") for i in range(10)] + [task(f"{k} {i}", k.upper()) for k in "yz" for i in range(2)]
    tasks, skipped = top_up(proposed, wanted=8, pool=pool, used=set(), seed=0, max_per_template=3)
    assert Counter(t.intent_template for t in tasks) == {"X": 3, "Y": 2, "Z": 2}
    assert skipped == 9 and tasks[:2] == proposed
    uncapped, none_skipped = top_up(proposed, wanted=8, pool=pool, used=set(), seed=0)
    assert len(uncapped) == 8 and none_skipped == 0


EDIT_PAGE = "Open the edit page of the product {product}."


def run_with_phase_zero(tmp_path, train: list[Task]) -> RunLayout:
    """A run whose phase 0 gave four edit-page tasks and one each of two other admin templates, all failed."""
    admin = [t for t in train if t.site == "shopping_admin"]
    edit_pages = [t for t in admin if t.intent_template == EDIT_PAGE][:4]
    others = list({t.intent_template: t for t in admin if t.intent_template != EDIT_PAGE}.values())[:2]
    phase_zero = edit_pages + others
    layout = RunLayout(tmp_path)
    write_json_atomic(layout.tasks_path(0), [t.to_dict() for t in phase_zero])
    write_trajectories(layout.labelled_path(0), [Trajectory(task=t, outcome=0.0, status="exit") for t in phase_zero])
    return layout


@pytest.mark.parametrize("cap", [3, 0])
def test_a_capped_phase_keeps_its_size_and_no_template_passes_the_cap(tmp_path, cap):
    train = load_suite("train", URL_MAP)
    layout = run_with_phase_zero(tmp_path, train)
    config = CurriculumConfig(mode="template", tasks_per_phase=16, max_per_template=cap, seed=2)
    tasks, metrics = propose_phase_tasks(
        config,
        1,
        layout,
        generator=lambda: pytest.fail("template mode without a judge needs no generator"),
        pool=train,
        reinstantiate=reinstantiate,
        start_observation=None,
        critic=None,
        seed=7,
        resolve=list,
    )
    assert len(tasks) == 16 and len({t.intent for t in tasks}) == 16
    per_template = Counter(t.intent_template for t in tasks)
    assert (layout.phase_dir(1) / "curriculum_state.json").is_file()
    # 4 seeds x 3 new values give 12 edit-page candidates, one a repeat (two seeds drew the same product): 11.
    assert metrics["curriculum/rejected_duplicate"] == 1.0
    if cap:
        # 3 of the 11 kept, 8 set aside; the 6 of the other two templates kept; 7 training tasks top the phase up.
        assert per_template[EDIT_PAGE] == 3 and max(per_template.values()) <= 3
        assert metrics["curriculum/rejected_template_cap"] == 8.0
        assert metrics["curriculum/kept"] == 3 + 6 and metrics["curriculum/topped_up"] == 7.0
    else:
        # Uncapped, the template that failed four times fills 11 of the 16 places.
        assert per_template[EDIT_PAGE] == 11 and metrics["curriculum/rejected_template_cap"] == 0.0
        assert metrics["curriculum/top_up_template_cap"] == 0.0 and metrics["curriculum/topped_up"] == 0.0


def test_only_llm_tasks_or_a_judge_need_a_generator():
    assert not needs_generator(CurriculumConfig(mode="template", judge=False))
    assert needs_generator(CurriculumConfig(mode="template", judge=True))
    assert needs_generator(CurriculumConfig(mode="llm", judge=False))


def test_sampled_origin_strips_only_a_copy_suffix():
    assert sampled_origin("12~3") == "12" and sampled_origin("12") == "12"
    assert sampled_origin("a~b") == "a~b" and sampled_origin("re-101-4~1") == "re-101-4"


def test_tasks_grown_from_trajectories_start_at_this_launchs_sites(tmp_path):
    # The trajectories were written by a launch whose sites were on port 8; this launch's are on port 9.
    train = load_suite("train", URL_MAP)
    products = [t for t in train if t.intent_template_id == 107][:2]
    layout = RunLayout(tmp_path)
    write_json_atomic(layout.tasks_path(0), [t.to_dict() for t in products])
    old = [dataclasses.replace(t, start_url=t.start_url.replace(":9/", ":8/")) for t in sampled_copies(products, 2)]
    page = "<h1> {} </h1><p> SKU: X-1 </p><p> In stock: 3 </p>"
    trajectories = [
        Trajectory(
            task=t, outcome=0.0, final_url=f"{t.start_url}p/{t.task_id}", final_observation=page.format(t.intent[25:-1])
        )
        for t in old
    ]
    write_trajectories(layout.labelled_path(0), trajectories)
    current = with_stored_tasks(trajectories, products)
    assert [t.task.task_id for t in current] == [t.task_id for t in old]  # copies keep their own ids
    assert [t.task.start_url for t in current] == [p.start_url for p in products for _ in range(2)]
    assert [t.final_url for t in current] == [t.final_url.replace(":8/", ":9/") for t in trajectories]
    with pytest.raises(ValueError, match=r"tasks.json does not hold: \['(\d+)', '\1~1'\] \(2\)"):
        with_stored_tasks(trajectories, products[1:])
    opened: list[str] = []

    def start_observation(task: Task) -> str:
        """TEST DOUBLE of the browser: the page at `task.start_url`, as the trajectories saw it."""
        opened.append(task.start_url)
        return next(t.final_observation for t in current if t.final_url == task.start_url)

    config = CurriculumConfig(mode="template", tasks_per_phase=20, page_facts=4, seed=1)
    tasks, metrics = propose_phase_tasks(
        config,
        1,
        layout,
        generator=lambda: pytest.fail("no generator needed"),
        pool=train,
        reinstantiate=reinstantiate,
        start_observation=start_observation,
        critic=None,
        seed=0,
        resolve=lambda stored: stored,
    )
    pages = [t for t in tasks if t.extra.get("curriculum", {}).get("origin") == "page"]
    assert len(pages) == 4 and metrics["curriculum/kept_page"] == 4.0
    assert all(t.start_url == products[0].start_url for t in pages), {t.start_url for t in pages}
    assert not [t.task_id for t in tasks if ":8/" in t.start_url]
    assert opened and all(":9/" in url for url in opened)
