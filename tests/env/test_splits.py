"""The validation and train_fit splits carved from the embedded train split."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest
from sample_records import URL_MAP

from webrl.data.trajectory import Task
from webrl.env.sites.suite import load_suite, reinstantiate
from webrl.env.splits import (
    TRAIN_FIT,
    VALIDATION,
    VALIDATION_SIZE,
    carve_validation,
    load_split,
    reinstantiate_for,
)


@pytest.fixture(scope="module")
def splits() -> dict[str, list[Task]]:
    return {split: load_split(split) for split in ("train", "test", VALIDATION, TRAIN_FIT)}


def _ids(tasks: list[Task]) -> set[str]:
    return {task.task_id for task in tasks}


def test_validation_and_train_fit_partition_train(splits):
    validation, train_fit, train = _ids(splits[VALIDATION]), _ids(splits[TRAIN_FIT]), _ids(splits["train"])
    assert len(validation) == VALIDATION_SIZE == 60
    assert validation.isdisjoint(train_fit)
    assert validation | train_fit == train
    assert [t.task_id for t in splits[TRAIN_FIT]] == [t.task_id for t in splits["train"] if t.task_id in train_fit]


def test_validation_is_stratified_over_the_train_templates(splits):
    train = Counter(t.intent_template_id for t in splits["train"])
    validation = Counter(t.intent_template_id for t in splits[VALIDATION])
    assert len(validation) >= 40 and set(validation) <= set(train)  # 42 of the 43 train templates
    for template, count in train.items():
        share = VALIDATION_SIZE * count / len(splits["train"])  # e.g. 60 * 15/588 = 1.53 -> 1 or 2
        assert int(share) <= validation[template] <= int(share) + 1, template
    assert set(Counter(t.intent_template_id for t in splits[TRAIN_FIT])) == set(train)  # train_fit keeps all


def test_the_carve_is_fixed_whatever_the_order_or_url_map(splits):
    shuffled = list(splits["train"])
    random.Random(1).shuffle(shuffled)
    assert carve_validation(sorted(shuffled, key=lambda t: int(t.task_id))) == _ids(splits[VALIDATION])
    assert _ids(load_split(VALIDATION, URL_MAP)) == _ids(splits[VALIDATION])
    assert carve_validation(splits["train"], seed="another seed") != _ids(splits[VALIDATION])


def test_shipped_splits_are_unchanged(splits):
    assert [t.to_dict() for t in splits["train"]] == [t.to_dict() for t in load_suite("train")]
    assert [t.to_dict() for t in splits["test"]] == [t.to_dict() for t in load_suite("test")]
    with pytest.raises(ValueError, match="split must be one of"):
        load_split("valid")


def test_carve_sizes_are_checked():
    tasks = [Task(str(i), "x", ["shopping"], "", intent_template_id=i % 3) for i in range(9)]
    assert len(carve_validation(tasks, size=4)) == 4
    with pytest.raises(ValueError, match="validation size"):
        carve_validation(tasks, size=10)


def test_curriculum_on_train_fit_never_draws_validation_values(splits):
    def keys(tasks: list[Task]) -> set[tuple[int | None, str]]:
        return {(t.intent_template_id, str(t.instantiation_dict)) for t in tasks}

    held = keys(splits[VALIDATION])
    leaked_without_filter = 0
    for seed in splits[TRAIN_FIT][::40]:
        new = reinstantiate_for(TRAIN_FIT, seed, random.Random(0), 50, URL_MAP)
        assert new and not keys(new) & held
        leaked_without_filter += len(keys(reinstantiate(seed, random.Random(0), 50, URL_MAP)) & held)
    assert leaked_without_filter > 0  # the plain draw does reach validation values, so the filter matters


def test_other_train_splits_reinstantiate_as_before(splits):
    seed = splits["train"][0]
    assert [t.to_dict() for t in reinstantiate_for("train", seed, random.Random(3), 5, URL_MAP)] == [
        t.to_dict() for t in reinstantiate(seed, random.Random(3), 5, URL_MAP)
    ]


def test_a_task_of_another_suite_gets_no_embedded_values(splits):
    """A WebArena task whose template id is an embedded one (107) must not come back as tasks of the embedded shop."""
    webarena = Task(
        task_id="wa-1",
        intent="How many commits did kilian make on 3/5/2023?",
        sites=["gitlab"],
        start_url="http://gitlab.example:8023/",
        intent_template="How many commits did {{user}} make on {{date}}?",
        intent_template_id=107,
        instantiation_dict={"user": "kilian", "date": "3/5/2023"},
    )
    with pytest.raises(ValueError, match=r"wa-1: its intent_template .* is not embedded template 107's"):
        reinstantiate_for("train", webarena, random.Random(0), 2, URL_MAP)
    with pytest.raises(KeyError, match="not an embedded-site template"):
        reinstantiate_for("train", dataclasses.replace(webarena, intent_template_id=3), random.Random(0), 2, URL_MAP)


def test_every_embedded_template_and_its_new_tasks_pass_the_template_check(splits):
    """The check refuses nothing the embedded sites made: one task per template of each split, and the tasks the
    curriculum grows from them (which later phases use as seeds in turn)."""
    firsts = {task.intent_template_id: task for split in ("train", "test") for task in splits[split]}
    for seed in firsts.values():
        grown = reinstantiate_for("train", seed, random.Random(0), 1, URL_MAP)
        for task in grown:
            reinstantiate_for("train", task, random.Random(0), 1, URL_MAP)


def test_new_values_never_ask_what_a_test_question_of_another_template_asks():
    """Test-only template 104 asks "the status of my order #N"; training template 208 asks "the status of order #N"
    with the same answer. None of 208's new values may be one of 104's test orders."""
    tests = [task for task in load_suite("test") if task.intent_template_id == 104]
    held_out_orders = {str(value) for task in tests for value in task.instantiation_dict.values()}
    assert len(held_out_orders) == len(tests) > 0
    seed = next(task for task in load_suite("train") if task.intent_template_id == 208)
    drawn = reinstantiate(seed, random.Random(0), 10_000)
    assert len(drawn) > 50
    offered = {str(value) for task in drawn for value in task.instantiation_dict.values()}
    assert not offered & held_out_orders
