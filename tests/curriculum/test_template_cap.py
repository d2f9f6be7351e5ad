"""The per-template cap of a phase's kept tasks (`curriculum.max_per_template`) on hand-made template tasks.

The phase is built as the measured SmolLM2 phase 1 was: one template that failed on several seeds
would fill it with its variants. `new_products` plays `reinstantiate`, naming each new product
after the seed's, so that every expected task is known.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections import Counter

import pytest

from webrl.config_checks import ConfigError
from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.curriculum import Curriculum
from webrl.data.trajectory import Task, Trajectory

EDIT = "Open the edit page of the product {product}."
DISABLE = "Disable the product {product}."
ADD = "Add two units of {product} to my cart."
STAR = "Star the project {product}."
FORK = "Fork the project {product}."
TEMPLATE_IDS = {EDIT: 1, DISABLE: 2, ADD: 3, STAR: 4, FORK: 5}


def failed_instance(template: str, product: str, site: str = "shopping") -> Trajectory:
    intent = template.format(product=product)
    template_id = TEMPLATE_IDS[template]
    task = Task(
        task_id=intent,
        intent=intent,
        sites=[site],
        start_url=f"http://{site}.test/",
        intent_template=template,
        intent_template_id=template_id,
        instantiation_dict={"product": product},
    )
    return Trajectory(task=task, outcome=0.0, status="exit")


def template_failures() -> list[Trajectory]:
    """Four failed seeds of one template (as in the measured SmolLM2 phase 1) and one each of two others."""
    return [failed_instance(EDIT, product) for product in ("mug", "kettle", "lamp", "desk")] + [
        failed_instance(DISABLE, "chair"),
        failed_instance(ADD, "bowl"),
    ]


def new_products(task: Task, rng: random.Random, n: int) -> list[Task]:
    """n new instances of the task's template, products named after the seed's (no two alike)."""
    tasks = []
    for i in range(n):
        product = f"{task.instantiation_dict['product']} no. {i}"
        intent = task.intent_template.format(product=product)
        tasks.append(
            dataclasses.replace(task, task_id=f"re-{product}", intent=intent, instantiation_dict={"product": product})
        )
    return tasks


def propose_from_templates(tasks_per_phase: int, max_per_template: int):
    config = CurriculumConfig(
        mode="template", tasks_per_phase=tasks_per_phase, max_per_template=max_per_template, seed=5
    )
    return Curriculum(config, reinstantiate=new_products).propose(1, template_failures())


def test_template_cap_keeps_at_most_the_cap_of_a_dominant_template_and_counts_the_rest():
    # 18 candidates: 12 edit-page ones (4 seeds x 3 variants), 3 disable, 3 add. K=10 is more than the 9 the cap of 3
    # allows, so every candidate is drawn: 3 of each template kept, the other 9 edit-page ones set aside.
    result = propose_from_templates(tasks_per_phase=10, max_per_template=3)
    assert Counter(t.intent_template for t in result.tasks) == {EDIT: 3, DISABLE: 3, ADD: 3}
    capped = [r for r in result.record.rejected if r["reason"] == "template_cap"]
    assert len(capped) == 9 and all(r["intent"].startswith("Open the edit page") for r in capped)
    assert result.metrics["curriculum/rejected_template_cap"] == 9.0
    assert result.metrics["curriculum/kept"] == 9.0 and result.metrics["curriculum/unused"] == 0.0


def test_template_cap_fills_the_phase_from_other_templates():
    # Without a cap, 5 of this phase's 6 tasks are edit pages (the golden list below); with a cap of 2 the
    # phase still has 6 tasks, 2 edit pages and 4 of the other two templates.
    result = propose_from_templates(tasks_per_phase=6, max_per_template=2)
    per_template = Counter(t.intent_template for t in result.tasks)
    assert len(result.tasks) == 6 and per_template[EDIT] == 2 and per_template[DISABLE] + per_template[ADD] == 4
    capped = result.metrics["curriculum/rejected_template_cap"]
    assert capped >= 1 and capped + result.metrics["curriculum/unused"] + 6 == 18
    assert capped == sum(r["reason"] == "template_cap" for r in result.record.rejected)
    again = propose_from_templates(tasks_per_phase=6, max_per_template=2)
    assert [t.to_dict() for t in again.tasks] == [t.to_dict() for t in result.tasks]


def test_no_template_cap_chooses_what_the_curriculum_chose_before_the_cap_existed():
    # Output of this phase before `max_per_template` was added (seed 5, K=6).
    before = [
        "Open the edit page of the product desk no. 1.",
        "Open the edit page of the product mug no. 1.",
        "Disable the product chair no. 0.",
        "Open the edit page of the product lamp no. 1.",
        "Open the edit page of the product lamp no. 2.",
        "Open the edit page of the product kettle no. 1.",
    ]
    uncapped = propose_from_templates(tasks_per_phase=6, max_per_template=0)
    assert [t.intent for t in uncapped.tasks] == before
    assert uncapped.metrics["curriculum/rejected_template_cap"] == 0.0
    assert uncapped.metrics["curriculum/unused"] == 12.0
    # A cap that never binds changes nothing either.
    loose = propose_from_templates(tasks_per_phase=6, max_per_template=5)
    assert [t.to_dict() for t in loose.tasks] == [t.to_dict() for t in uncapped.tasks]
    assert loose.metrics == uncapped.metrics


def test_a_capped_candidate_gives_its_site_the_turn_back():
    # shopping: 12 edit-page and 3 disable candidates; gitlab: 9 star and 6 fork ones. With K=8 and a cap of 3 the
    # sites stay balanced (4 each) however many edit pages shopping draws and sets aside on its turns.
    trajectories = [failed_instance(EDIT, p) for p in ("mug", "kettle", "lamp", "desk")]
    trajectories += [failed_instance(DISABLE, "chair")]
    trajectories += [failed_instance(STAR, p, "gitlab") for p in ("alpha", "beta", "gamma")]
    trajectories += [failed_instance(FORK, p, "gitlab") for p in ("delta", "omega")]
    config = CurriculumConfig(mode="template", tasks_per_phase=8, max_per_template=3, seed=1)
    result = Curriculum(config, reinstantiate=new_products).propose(1, trajectories)
    assert Counter(t.site for t in result.tasks) == {"shopping": 4, "gitlab": 4}
    assert max(Counter(t.intent_template for t in result.tasks).values()) <= 3
    assert result.metrics["curriculum/rejected_template_cap"] >= 1


@pytest.mark.parametrize("value", [-1, 2.5])
def test_a_bad_template_cap_is_a_config_error_naming_the_key(value):
    with pytest.raises(ConfigError, match=re.escape("curriculum.max_per_template")) as error:
        CurriculumConfig(max_per_template=value)
    assert error.value.key == "curriculum.max_per_template"
