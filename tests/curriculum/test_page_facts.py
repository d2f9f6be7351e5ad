"""Page-fact tasks: read from pages, tied to the episode's entity, kept away from held-out facts, and scored right.

The fast tests use observations in the embedded sites' format; the browser test reads the facts off pages
that the reference solver really reached in Chromium and checks each task's evaluator against them.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from sample_records import URL_MAP

from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.curriculum import Curriculum
from webrl.curriculum.page_facts import (
    HeldOutFacts,
    PageFact,
    answer_of,
    fact_holds,
    facts_on_page,
    page_fact_tasks,
    question,
)
from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Step, Task, Trajectory
from webrl.env.evaluators import string_match
from webrl.env.sites import load_suite, reinstantiate

PRODUCT_PAGE = """OneStopShop <a id="0"> Home </a> <a id="1"> My cart </a>
<h1> Slate Dumbbell </h1>
<p> Price: $6.00 </p>
<p> SKU: SPO-0070 </p>
<p> Category: <a id="3"> Sports </a> </p>
<p> Rating: 4.0 out of 5 (2 reviews) </p>
<p> Quantity: <input id="7" type="text" name="stock" value="149" /> </p>
<p> State: Open <a id="8"> Closed </a> <a id="9"> All </a> </p>
<button id="5"> Add to cart </button>"""
ORDER_PAGE = "<h1> Order #1171 </h1>\n<p> Customer: Noah Davis </p><p> Date: 2024-11-02 | Status: Complete </p>"
ROUTE_PAGE = "<h1> Directions </h1>\n<p> Distance: 4.7 km | Time: 18 min </p>"
START = "http://127.0.0.1:9/shopping/"


def episode(instantiation: dict[str, str], *pages: str, site: str = "shopping") -> Trajectory:
    task = Task("7", "a task", [site], START, instantiation_dict=instantiation)
    steps = [Step(index=i, prompt="", observation=page, response="") for i, page in enumerate(pages[:-1])]
    return Trajectory(task=task, steps=steps, final_observation=pages[-1], outcome=0.0)


def test_facts_are_labelled_plain_values_under_one_heading():
    assert facts_on_page(PRODUCT_PAGE) == [
        PageFact("Slate Dumbbell", "Price", "$6.00"),
        PageFact("Slate Dumbbell", "SKU", "SPO-0070"),
        PageFact("Slate Dumbbell", "Category", "Sports"),
    ]
    assert [(f.label, f.value) for f in facts_on_page(ORDER_PAGE)] == [
        ("Customer", "Noah Davis"),
        ("Date", "2024-11-02"),
        ("Status", "Complete"),
    ]
    assert facts_on_page("<h1> A </h1><h1> B </h1><p> Price: 1 </p>") == []
    assert facts_on_page("<h1> Edit product: Mug </h1><p> SKU: K-1 </p>") == [PageFact("Mug", "SKU", "K-1")]


def test_questions_and_answers():
    assert question("SKU", "Blue Teapot") == "What is the SKU of Blue Teapot?"
    assert question("Opening hours", "Riverside Cafe") == "What is the opening hours of Riverside Cafe?"
    assert question("Score", "Why is nobody talking about films?") == (
        'What is the score of "Why is nobody talking about films?"?'
    )
    assert answer_of("$6.00") == "6.00" and answer_of("€ 12") == "12" and answer_of("$ave") == "$ave"


def test_tasks_come_only_from_pages_of_the_episodes_entity():
    tasks = page_fact_tasks(
        [
            episode({"product": "Slate Dumbbell"}, "<h1> Welcome </h1>", PRODUCT_PAGE),
            episode({"product": "Red Mug"}, PRODUCT_PAGE),  # another product's page: not this task's entity
            episode({"order": "1171"}, ORDER_PAGE, site="shopping_admin"),
            episode({"origin": "Lakeview Cafe"}, ROUTE_PAGE, site="map"),  # "Directions" names no entity
            episode({"product": "Slate Dumbbell"}, PRODUCT_PAGE),  # the same facts again
            episode({"project": "a/b"}, "<h1> a/b </h1><p> Stars: 78 </p>", "<h1> a/b </h1><p> Stars: 79 </p>"),
        ],
        HeldOutFacts(),
    )
    assert [t.intent for t in tasks] == [
        "What is the price of Slate Dumbbell?",
        "What is the SKU of Slate Dumbbell?",
        "What is the category of Slate Dumbbell?",
        "What is the customer of Order #1171?",
        "What is the date of Order #1171?",
        "What is the status of Order #1171?",
    ]
    sku = tasks[1]
    assert sku.eval["reference_answers"] == {"must_include": ["SPO-0070"]}
    assert sku.intent_template == "What is the SKU of {subject}?" and sku.instantiation_dict == {
        "subject": "Slate Dumbbell"
    }
    assert sku.start_url == START and sku.sites == ["shopping"] and tasks[5].sites == ["shopping_admin"]
    assert tasks[0].eval["reference_answers"] == {"must_include": ["6.00"]}


def test_a_fact_a_held_out_task_asks_is_never_proposed():
    held_out = [
        Task(
            "t1",
            "What is the status of my order #1171?",
            ["shopping_admin"],
            START,
            eval={"eval_types": ["string_match"], "reference_answers": {"must_include": ["Complete"]}},
            instantiation_dict={"order": 1171},
        ),
        Task("t2", "Open it", ["shopping"], START, eval={"eval_types": ["url_match"]}, instantiation_dict={"p": "x"}),
        # Most of the shipped held-out tasks give their answer as exact_match, as this one does.
        Task(
            "t3",
            "Who placed order #1171?",
            ["shopping_admin"],
            START,
            eval={"eval_types": ["string_match"], "reference_answers": {"exact_match": "Noah Davis"}},
            instantiation_dict={"order": "1171"},
        ),
    ]
    facts = HeldOutFacts(held_out)
    assert facts.covers("Order #1171", "complete") and not facts.covers("Order #1172", "Complete")
    assert not facts.covers("Order #1171", "Pending")
    assert facts.covers("Order #1171", "noah davis")
    tasks = page_fact_tasks([episode({"order": "1171"}, ORDER_PAGE, site="shopping_admin")], facts)
    assert [t.intent for t in tasks] == ["What is the date of Order #1171?"]


def test_held_out_answers_count_in_every_string_match_form():
    def held(references: dict) -> HeldOutFacts:
        task = Task("t", "a question", ["shopping"], START, instantiation_dict={"product": "Slate Dumbbell"})
        return HeldOutFacts([dataclasses.replace(task, eval={"reference_answers": references})])

    assert held({"fuzzy_match": ["SPO-0070"]}).covers("Slate Dumbbell", "SPO-0070")
    either = held({"must_include": ["SPO0070 |OR| SPO-0070"]})
    assert either.covers("Slate Dumbbell", "SPO-0070") and not either.covers("Slate Dumbbell", "SPO-0071")
    # All items of a must_include list make one answer: the page's "Jane Doe" is it, "Jane Smith" is not.
    both = held({"must_include": ["Jane", "Doe"]})
    assert both.covers("Slate Dumbbell", "Jane Doe") and not both.covers("Slate Dumbbell", "Jane Smith")
    assert not held({"fuzzy_match": "N/A"}).covers("Slate Dumbbell", "SPO-0070")


def test_the_evaluator_accepts_the_value_as_the_page_shows_it_and_refuses_another_field():
    tasks = page_fact_tasks([episode({"product": "Slate Dumbbell"}, PRODUCT_PAGE)], HeldOutFacts())
    for task in tasks:
        shown = next(f.value for f in facts_on_page(PRODUCT_PAGE) if question(f.label, f.subject) == task.intent)
        references = task.eval["reference_answers"]
        assert asyncio.run(string_match(references, shown)) == (1.0, False), task.intent
        others = [f.value for f in facts_on_page(PRODUCT_PAGE) if f.value != shown]
        assert all(asyncio.run(string_match(references, other))[0] == 0.0 for other in others), task.intent
    # A whole number must be the answer: as a substring, 88 would accept 1880.
    stock = page_fact_tasks(
        [episode({"product": "Slate Dumbbell"}, "<h1> Slate Dumbbell </h1><p> Stock: 88 </p>")], HeldOutFacts()
    )
    references = stock[0].eval["reference_answers"]
    assert references == {"exact_match": "88"}
    assert (
        asyncio.run(string_match(references, "88"))[0] == 1.0
        and asyncio.run(string_match(references, "1880"))[0] == 0.0
    )


def test_the_curriculum_offers_at_most_page_facts_tasks_beside_its_mode():
    train = load_suite("train", URL_MAP)
    product = next(t for t in train if t.intent_template_id == 107)
    name = product.instantiation_dict["product"]
    page = PRODUCT_PAGE.replace("Slate Dumbbell", name)
    url = f"{product.start_url}product/1"
    trajectories = [Trajectory(task=product, final_url=url, final_observation=page, outcome=0.0)]
    # TEST DOUBLE of the browser's fresh look at a page: the price has changed since the episode read it.
    fresh = {url: page.replace("$6.00", "$7.00")}

    def propose(page_facts: int) -> tuple[list[Task], dict[str, float]]:
        config = CurriculumConfig(mode="template", tasks_per_phase=20, page_facts=page_facts, seed=3)
        curriculum = Curriculum(config, reinstantiate=reinstantiate, start_observation=lambda t: fresh[t.start_url])
        curriculum.register_tasks(train)
        result = curriculum.propose(1, trajectories)
        return result.tasks, result.metrics

    tasks, metrics = propose(3)
    pages = [t for t in tasks if t.extra["curriculum"]["origin"] == "page"]
    assert sorted(t.intent for t in pages) == sorted(question(label, name) for label in ("SKU", "Category"))
    assert metrics["curriculum/rejected_page_check"] == 1.0 and metrics["curriculum/kept_page"] == 2.0
    assert all(t.has_evaluator and t.extra["curriculum"]["source"] == name for t in pages)
    assert all(t.extra["page_fact"]["url"] == url for t in pages)
    assert len([t for t in propose(1)[0] if t.extra["curriculum"]["origin"] == "page"]) == 1
    assert [t.to_dict() for t in propose(2)[0]] == [t.to_dict() for t in propose(2)[0]]
    assert not any(t.extra["curriculum"]["origin"] == "page" for t in propose(0)[0])
    # Later phases whose episodes revisit the page: the facts asked before take no slot, so each phase asks a new
    # one until none is left.
    config = CurriculumConfig(mode="template", tasks_per_phase=20, page_facts=1, seed=3)
    curriculum = Curriculum(config, reinstantiate=reinstantiate, start_observation=lambda t: page)
    curriculum.register_tasks(train)
    asked = [
        [t.intent for t in curriculum.propose(phase, trajectories).tasks if t.extra["curriculum"]["origin"] == "page"]
        for phase in (1, 2, 3, 4)
    ]
    assert [len(intents) for intents in asked] == [1, 1, 1, 0] and len({i for intents in asked for i in intents}) == 3
    with pytest.raises(ValueError, match="page_facts needs start_observation"):
        Curriculum(CurriculumConfig(mode="template", page_facts=1), reinstantiate=reinstantiate)


@pytest.mark.timeout(600)
def test_facts_read_off_real_pages_are_scored_by_their_evaluators_and_checked_afresh():
    from webrl.env.browser import BrowserConfig, BrowserPool
    from webrl.env.limits import EpisodeLimits
    from webrl.env.sites import EmbeddedSites, scorecard
    from webrl.inference.rollout import collect_rollouts
    from webrl.inference.scripted import ScriptedEngine

    async def run() -> None:
        with EmbeddedSites() as sites:
            train = load_suite("train", sites.url_map)
            # Solver episodes that end on an entity's page: product, admin customer, forum user, project, place;
            # and one that opens a new issue, whose page did not exist when the episode started.
            chosen = [next(t for t in train if t.intent_template_id == i) for i in (107, 213, 309, 404, 505, 405)]
            backend = sites.backend()
            async with BrowserPool(BrowserConfig(max_concurrency=6)) as pool:
                solver = ScriptedEngine.for_embedded_sites()
                result = await collect_rollouts(
                    solver,
                    chosen,
                    backend,
                    pool,
                    concurrency=6,
                    prompt_builder=solver.wrap(actor_prompt_for_step),
                    limits=EpisodeLimits(action_timeout_s=30.0),
                    progress=False,
                )
                assert scorecard.failures(result.trajectories) == []
                tasks = page_fact_tasks(result.trajectories, HeldOutFacts(load_suite("test", URL_MAP)))
                holds = {}
                for task in tasks:
                    check = dataclasses.replace(task, start_url=task.extra["page_fact"]["url"])
                    async with pool.episode(check, backend) as episode:
                        holds[task.intent] = fact_holds(task, (await episode.reset()).html)
        assert {t.site for t in tasks} == {"shopping", "shopping_admin", "reddit", "gitlab", "map"}
        new_issue = chosen[-1].instantiation_dict["title"]
        assert {intent for intent, ok in holds.items() if not ok} == {t.intent for t in tasks if new_issue in t.intent}
        assert any(new_issue in t.intent for t in tasks), "the new issue's page gave facts to reject"
        shown: dict[str, str] = {}
        for trajectory in result.trajectories:
            for page in [*(step.observation for step in trajectory.steps), trajectory.final_observation]:
                for f in facts_on_page(page):
                    shown.setdefault(question(f.label, f.subject), f.value)
        for task in tasks:
            assert (await string_match(task.eval["reference_answers"], shown[task.intent]))[0] == 1.0, task.intent
            assert (await string_match(task.eval["reference_answers"], "I do not know"))[0] == 0.0, task.intent

    asyncio.run(run())


def test_the_page_facts_offered_do_not_depend_on_the_order_of_the_trajectories():
    # Two failed episodes, each on its own product's page: the fact drawn must be the same whichever is read first,
    # as the seeds are (a resumed run may read the previous phase's episodes in another order).
    products = [PRODUCT_PAGE.replace("Slate Dumbbell", name) for name in ("Red Mug", "Blue Lamp")]
    trajectories = [
        Trajectory(
            task=Task(f"t{i}", f"Buy the product {name}", ["shopping"], START, instantiation_dict={"product": name}),
            final_url=f"{START}product/{i}",
            final_observation=page,
            outcome=0.0,
        )
        for i, (name, page) in enumerate(zip(("Red Mug", "Blue Lamp"), products, strict=True))
    ]
    pages = dict(zip((t.final_url for t in trajectories), products, strict=True))

    def offered(order: list[Trajectory]) -> list[str]:
        config = CurriculumConfig(mode="template", page_facts=1, seed=0)
        curriculum = Curriculum(config, reinstantiate=reinstantiate, start_observation=lambda t: pages.get(t.start_url))
        return [t.intent for t in curriculum.propose(1, order).tasks if t.extra["curriculum"]["origin"] == "page"]

    chosen = offered(trajectories)
    assert len(chosen) == 1
    assert offered(trajectories[::-1]) == chosen
