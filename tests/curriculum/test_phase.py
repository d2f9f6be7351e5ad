"""The loop's curriculum step: topping a short phase up from unused training tasks, the per-template cap over a
whole phase (proposed and topped-up tasks, on the embedded sites' real templates), and when an engine is needed."""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import Counter

import pytest
from sample_records import URL_MAP

from webrl.config import ConfigError
from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.filters import dedupe_key
from webrl.curriculum.phase import needs_generator, propose_phase_tasks, top_up, with_stored_tasks
from webrl.curriculum.state import CurriculumState
from webrl.data.atomic_io import write_json_atomic
from webrl.data.prompts import build_actor_prompt
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


def test_only_llm_tasks_need_a_generator_and_only_they_are_judged():
    assert not needs_generator(CurriculumConfig(mode="template"))
    assert needs_generator(CurriculumConfig(mode="llm", judge=False))
    assert needs_generator(CurriculumConfig(mode="mixed", judge=True))
    # The judge never sees a template task: asking for it in template mode loaded a generator for nothing.
    with pytest.raises(ConfigError, match=r"^curriculum.judge=True: judges LLM-made tasks only"):
        CurriculumConfig(mode="template", judge=True).validate()
    CurriculumConfig(mode="mixed", judge=True).validate()


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


def test_top_up_compares_intents_normalised():
    """A pool task that differs from a used or proposed intent only in case, spacing or punctuation is taken already."""
    pool = [task("Buy the red  MUG!"), task("buy the blue lamp."), task("Buy the green cup")]
    tasks, _ = top_up([task("Buy the blue lamp")], wanted=3, pool=pool, used={"buy the red mug"}, seed=0)
    assert [t.intent for t in tasks] == ["Buy the blue lamp", "Buy the green cup"]


def test_top_up_takes_one_task_of_an_intent_the_pool_repeats():
    """A task set may hold one intent twice (another task id, another site): a phase must not hold it twice."""
    pool = [task("Buy the red mug"), task("buy the red  MUG."), task("Buy the green cup")]
    for seed in range(5):
        tasks, _ = top_up([], wanted=3, pool=pool, used=set(), seed=seed)
        assert sorted(t.intent for t in tasks) == ["Buy the green cup", "Buy the red mug"]


def _shop_task(task_id: str, intent: str) -> Task:
    return Task(
        task_id=task_id,
        intent=intent,
        sites=["shopping"],
        start_url="http://shop.test/",
        intent_template="Buy {x}",
        intent_template_id=1,
        instantiation_dict={"x": intent},
    )


def _phase_run(layout: RunLayout, phase: int, tasks: list[Task], outcomes: list[float]) -> None:
    """Phase `phase`'s tasks.json and labelled rollouts, as the loop's stages leave them."""
    write_json_atomic(layout.tasks_path(phase), [t.to_dict() for t in tasks])
    trajectories = [Trajectory(task=t, outcome=o, status="exit") for t, o in zip(tasks, outcomes, strict=True)]
    write_trajectories(layout.labelled_path(phase), trajectories)


def test_a_topped_up_task_is_never_proposed_again(tmp_path):
    """Phase 1 grows nothing and is topped up with training task P, which then succeeds (so it is no seed). Phase 2's
    template draw offers P's intent again, in other case and punctuation: the dedupe must refuse it, though the
    top-up chose P after phase 1's curriculum state was saved."""
    failed, lamp, cup = (
        _shop_task(*pair) for pair in (("a", "Buy the red mug"), ("p", "Buy the blue lamp"), ("c", "Buy the green cup"))
    )

    def reinstantiate(seed: Task, rng: random.Random, n: int) -> list[Task]:
        return [_shop_task("re-1-9", "buy the BLUE lamp.")] if seed.task_id == "c" else []

    layout = RunLayout(tmp_path)
    _phase_run(layout, 0, [failed], [0.0])
    config = CurriculumConfig(mode="template", tasks_per_phase=1, seed=0)
    options = dict(
        generator=lambda: None, pool=[failed, lamp], reinstantiate=reinstantiate, start_observation=None, critic=None
    )
    first, metrics = propose_phase_tasks(config, 1, layout, seed=0, resolve=list, **options)
    assert [t.task_id for t in first] == ["p"] and metrics["curriculum/topped_up"] == 1.0
    _phase_run(layout, 1, [lamp, cup], [1.0, 0.0])
    second, metrics = propose_phase_tasks(config, 2, layout, seed=0, resolve=list, **options)
    assert metrics["curriculum/seeds"] == 1.0 and metrics["curriculum/generated"] == 1.0
    assert metrics["curriculum/rejected_duplicate"] == 1.0 and second == []
    assert dedupe_key(lamp.intent) in CurriculumState.load(layout.phase_dir(2)).seen


def _grown_once(tmp_path) -> tuple[RunLayout, dict]:
    """A run whose phase 0 failed one task; its template gives one new task, and one training task is unused."""
    failed, grown, unused = (
        _shop_task(*pair) for pair in (("a", "Buy the red mug"), ("re-1-2", "Buy the blue lamp"), ("u", "Buy tea"))
    )
    layout = RunLayout(tmp_path)
    _phase_run(layout, 0, [failed], [0.0])
    options = dict(
        generator=lambda: None,
        pool=[failed, unused],
        reinstantiate=lambda seed, rng, n: [grown],
        start_observation=lambda t: "<p> the shop </p>",
        seed=0,
        resolve=list,
    )
    return layout, options


@pytest.mark.parametrize("given", [True, False])
def test_the_critic_scores_the_prompt_the_loop_passes(tmp_path, given):
    """propose_phase_tasks hands `critic_prompt` through phase_tasks to the curriculum, whose critic scores its
    output; without one the critic gets the completion-form first-step prompt, as before."""
    layout, options = _grown_once(tmp_path)
    scored: list[str] = []

    def critic(prompts: list[str]) -> list[float]:
        scored.extend(prompts)
        return [0.5] * len(prompts)

    prompt = (lambda t, html: f"chat form of {t.intent} on {html}") if given else None
    config = CurriculumConfig(mode="template", tasks_per_phase=1, seed=0)
    tasks, _ = propose_phase_tasks(config, 1, layout, critic=lambda: critic, critic_prompt=prompt, **options)
    expected = "chat form of Buy the blue lamp on <p> the shop </p>"
    assert scored == [expected if given else build_actor_prompt("Buy the blue lamp", [], "<p> the shop </p>")]
    assert tasks[0].extra["curriculum"]["critic_value"] == 0.5


def test_a_phase_short_of_its_size_is_logged_with_the_counts(tmp_path, caplog):
    layout, options = _grown_once(tmp_path)
    wanted = CurriculumConfig(mode="template", tasks_per_phase=5, seed=0)
    with caplog.at_level(logging.WARNING, logger="webrl.curriculum.phase"):
        tasks, _ = propose_phase_tasks(wanted, 1, layout, critic=None, **options)
    assert len(tasks) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "curriculum phase 1 has 2 of the 5 tasks wanted (curriculum.tasks_per_phase): 1 failed seeds, "
        "1 proposed tasks kept, 1 topped up from unused training tasks"
    ]
    assert caplog.records[0].levelno == logging.WARNING
    caplog.clear()
    layout, options = _grown_once(tmp_path / "full")
    with caplog.at_level(logging.WARNING, logger="webrl.curriculum.phase"):
        tasks, _ = propose_phase_tasks(
            dataclasses.replace(wanted, tasks_per_phase=2), 1, layout, critic=None, **options
        )
    assert len(tasks) == 2 and not caplog.records, "a full phase logs nothing"


def test_an_empty_phase_is_logged(tmp_path, caplog):
    """Phase 0 had no failure and its tasks are the whole training pool: phase 1 has nothing to train on."""
    layout = RunLayout(tmp_path)
    only = _shop_task("a", "Buy the red mug")
    _phase_run(layout, 0, [only], [1.0])
    config = CurriculumConfig(mode="template", tasks_per_phase=48, seed=0)
    with caplog.at_level(logging.WARNING, logger="webrl.curriculum.phase"):
        tasks, _ = propose_phase_tasks(
            config,
            1,
            layout,
            generator=lambda: None,
            pool=[only],
            reinstantiate=lambda seed, rng, n: [],
            start_observation=None,
            critic=None,
            seed=0,
            resolve=list,
        )
    assert tasks == []
    assert [r.getMessage() for r in caplog.records] == [
        "curriculum phase 1 has 0 of the 48 tasks wanted (curriculum.tasks_per_phase): 0 failed seeds, "
        "0 proposed tasks kept, 0 topped up from unused training tasks"
    ]
