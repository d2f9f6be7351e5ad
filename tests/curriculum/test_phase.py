"""The loop's curriculum step: topping a short phase up from unused training tasks, and when an engine is needed."""

from __future__ import annotations

from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.phase import needs_generator, top_up
from webrl.data.trajectory import Task


def task(intent: str) -> Task:
    return Task(task_id=intent, intent=intent, sites=["shopping"], start_url="http://shop.test/")


def test_top_up_fills_with_tasks_no_phase_has_used_and_is_seeded():
    pool = [task(f"t{i}") for i in range(10)]
    proposed = [task("t0")]
    first = top_up(proposed, wanted=4, pool=pool, used={"t1", "t2"}, seed=3)
    assert len(first) == 4 and first[0] is proposed[0]
    assert not {t.intent for t in first[1:]} & {"t0", "t1", "t2"}
    assert [t.intent for t in top_up(proposed, wanted=4, pool=pool, used={"t1", "t2"}, seed=3)] == [
        t.intent for t in first
    ]


def test_top_up_keeps_a_full_phase_and_stops_when_the_pool_runs_out():
    full = [task("a"), task("b")]
    assert top_up(full, wanted=2, pool=[task("c")], used=set(), seed=0) is full
    assert [t.intent for t in top_up([], wanted=5, pool=[task("c"), task("a")], used={"a"}, seed=0)] == ["c"]


def test_only_llm_tasks_or_a_judge_need_a_generator():
    assert not needs_generator(CurriculumConfig(mode="template", judge=False))
    assert needs_generator(CurriculumConfig(mode="template", judge=True))
    assert needs_generator(CurriculumConfig(mode="llm", judge=False))
