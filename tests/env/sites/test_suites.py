"""The shipped task suites: reproducible, split as specified, valid WebArena configs; re-instantiation."""

from __future__ import annotations

import json
import random
import re
from collections import Counter

import pytest
from sample_records import URL_MAP

from webrl.env.sites.__main__ import main
from webrl.env.sites.pages.forum import forum_posts, score
from webrl.env.sites.pages.shopping import category_products
from webrl.env.sites.suite import SUITE_DIR, build_suites, load_suite, reinstantiate, suite_text
from webrl.env.sites.templates import all_templates
from webrl.env.sites.templates.base import base_view


@pytest.fixture(scope="module")
def suites():
    return {split: load_suite(split) for split in ("train", "test")}


def test_shipped_suites_are_exactly_what_the_generator_writes():
    for split, tasks in build_suites().items():
        assert (SUITE_DIR / f"{split}.json").read_text(encoding="utf-8") == suite_text(tasks), split


def test_split_sizes_sites_templates_and_eval_types(suites):
    train, test = suites["train"], suites["test"]
    assert len(train) >= 500 and len(test) >= 150
    assert len(all_templates()) >= 30
    for tasks in (train, test):
        assert set(Counter(t.site for t in tasks)) == {"shopping", "shopping_admin", "reddit", "gitlab", "map"}
        assert {e for t in tasks for e in t.eval["eval_types"]} == {"string_match", "url_match", "program_html"}
    refs = Counter(k for t in train if "string_match" in t.eval["eval_types"] for k in t.eval["reference_answers"])
    assert refs["exact_match"] > 0 and refs["must_include"] > 0


def test_test_split_holds_out_templates_and_instantiations(suites):
    train, test = suites["train"], suites["test"]
    train_templates = {t.intent_template_id for t in train}
    held_out = {tid for tid, template in all_templates().items() if template.held_out}
    assert held_out and not held_out & train_templates
    assert {t.intent_template_id for t in test} == train_templates | held_out
    assert any(t.intent_template_id in train_templates for t in test)
    assert not {t.intent for t in train} & {t.intent for t in test}
    assert len({t.task_id for t in train + test}) == len(train) + len(test)
    assert len({t.intent for t in train}) == len(train)


def test_every_task_is_a_complete_webarena_config(suites):
    for task in suites["train"] + suites["test"]:
        config = task.to_dict()
        assert config["require_login"] is False and config["start_url"].startswith("__")
        assert config["intent"] == config["intent_template"].format(**config["instantiation_dict"])
        assert set(config["eval"]) >= {"eval_types", "reference_answers", "reference_url", "url_note", "program_html"}


def test_loading_with_a_url_map_substitutes_and_validates(suites):
    loaded = load_suite("test", URL_MAP)
    assert len(loaded) == len(suites["test"])
    assert not re.search(r"__[A-Z_]+__", json.dumps([t.to_dict() for t in loaded]))
    url_tasks = [t for t in loaded if "url_match" in t.eval["eval_types"]]
    assert all(t.eval["reference_url"].startswith("http://127.0.0.1:9/") for t in url_tasks)
    assert all(t.start_url.startswith("http://127.0.0.1:9/") for t in loaded)


def test_reinstantiate_gives_new_valid_tasks_of_the_same_template():
    task = next(t for t in load_suite("train", URL_MAP) if t.intent_template_id == 205)
    test_values = {json.dumps(t.instantiation_dict, sort_keys=True) for t in load_suite("test")}
    new = reinstantiate(task, random.Random(0), 5)
    assert len(new) == 5 and len({t.task_id for t in new}) == 5
    for other in new:
        assert other.intent_template_id == 205 and other.task_id.startswith("re-205-")
        assert other.instantiation_dict != task.instantiation_dict
        assert json.dumps(other.instantiation_dict, sort_keys=True) not in test_values
        target = other.eval["program_html"][0]
        assert target["url"].startswith("http://127.0.0.1:9/admin/product/")  # same deployment as `task`
        assert target["required_contents"]["exact_match"] == other.instantiation_dict["price"]
    assert [t.task_id for t in reinstantiate(task, random.Random(0), 5)] == [t.task_id for t in new]


def test_reinstantiate_limits_and_placeholders():
    small = next(t for t in load_suite("train") if t.intent_template_id == 210)  # four order statuses
    others = reinstantiate(small, random.Random(1), 10)
    test_statuses = {t.instantiation_dict["status"] for t in load_suite("test") if t.intent_template_id == 210}
    assert 0 < len(others) < 4 and not {t.instantiation_dict["status"] for t in others} & test_statuses
    assert all(t.start_url == "__SHOPPING_ADMIN__/" for t in others)
    assert reinstantiate(small, random.Random(1), 0) == []
    with pytest.raises(ValueError, match="n must be >= 0"):
        reinstantiate(small, random.Random(1), -1)


def test_cli_counts_and_generate_check(capsys):
    assert main(["counts"]) == 0
    out = capsys.readouterr().out
    train = json.loads(out.split("train: ", 1)[1].splitlines()[0])
    assert train["tasks"] == len(load_suite("train")) and sum(train["sites"].values()) == train["tasks"]
    assert main(["generate", "--check"]) == 0


# Content defects found in review and left in place: removing them changes the shipped suites (or the
# curriculum's draws) and so every published figure. A new case of either kind fails here.
KNOWN_PRICE_ALREADY_SET = {"Bamboo Speaker"}  # 205 "Set the price of Bamboo Speaker to $4.99": it is $4.99
KNOWN_TIED_TOP_POST = {"music"}  # 303: two posts of f/music share the top score; the evaluator takes one


def test_no_new_state_task_is_solved_at_start_and_no_new_extreme_is_tied():
    """A state task whose target is the start state rewards doing nothing; a tied extreme has two right answers."""
    view = base_view()
    prices = {p["name"]: f"{p['price']:.2f}" for p in view.rows("products")}
    already_set = {v["product"] for v, _ in all_templates()[205].instances(view) if v["price"] == prices[v["product"]]}
    assert already_set == KNOWN_PRICE_ALREADY_SET
    top_two = {f["name"]: forum_posts(view, f["name"], "top")[:2] for f in view.rows("forums")}
    assert {name for name, (a, b) in top_two.items() if score(view, a) == score(view, b)} == KNOWN_TIED_TOP_POST
    for category in sorted({p["category"] for p in view.rows("products")}):
        for order in ("Price: low to high", "Price: high to low"):
            first, second = category_products(view, category, order)[:2]
            assert first["price"] != second["price"], (category, order)
