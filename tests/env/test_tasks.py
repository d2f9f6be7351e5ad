"""Loading WebArena-format task configs: sources, placeholder substitution, and errors that name the culprit."""

from __future__ import annotations

import copy
import json
import logging
import re

import pytest

from webrl.env.tasks import TaskConfigError, load_tasks, read_suite

URL_MAP = {"__SHOPPING__": "http://127.0.0.1:7770/", "MAP": "http://127.0.0.1:3000"}


def config(task_id=0, **overrides):
    base = {
        "task_id": task_id,
        "sites": ["shopping"],
        "require_login": True,
        "storage_state": "./.auth/shopping_state.json",
        "start_url": "__SHOPPING__",
        "intent": "How much did I spend on lamps?",
        "intent_template": "How much did I spend on {{item}}?",
        "instantiation_dict": {"item": "lamps"},
        "intent_template_id": 7,
        "old_task_id": 117,
        "eval": {
            "eval_types": ["string_match", "url_match", "program_html"],
            "reference_answers": {"must_include": ["$12"]},
            "reference_url": "__SHOPPING__/orders |OR| __SHOPPING__/history",
            "url_note": "GOLD in PRED",
            "program_html": [
                {"url": "__SHOPPING__/cart", "locator": "", "required_contents": {"must_include": ["lamp"]}},
                {"url": "last", "locator": "document.title", "required_contents": {"exact_match": "Cart"}},
            ],
        },
    }
    base.update(overrides)
    return base


def test_placeholders_are_replaced_and_unknown_fields_kept(tmp_path):
    raw = config()
    tasks = load_tasks([raw], URL_MAP)
    (task,) = tasks
    assert task.task_id == "0"
    assert task.start_url == "http://127.0.0.1:7770"
    assert task.eval["reference_url"] == "http://127.0.0.1:7770/orders |OR| http://127.0.0.1:7770/history"
    assert task.eval["program_html"][0]["url"] == "http://127.0.0.1:7770/cart"
    assert task.eval["program_html"][1]["url"] == "last"
    assert task.extra == {"old_task_id": 117}
    assert task.intent_template_id == 7 and task.require_login
    assert raw["start_url"] == "__SHOPPING__"  # the caller's dict is untouched


def test_sources_file_object_file_list_directory_and_dict(tmp_path):
    (tmp_path / "one.json").write_text(json.dumps(config(5)))
    (tmp_path / "many.json").write_text(json.dumps([config(1), config(2)]))
    assert [t.task_id for t in load_tasks(tmp_path / "one.json", URL_MAP)] == ["5"]
    assert [t.task_id for t in load_tasks(str(tmp_path / "many.json"), URL_MAP)] == ["1", "2"]
    assert [t.task_id for t in load_tasks(config(9), URL_MAP)] == ["9"]
    split = tmp_path / "split"
    split.mkdir()
    for i in (10, 2, 1):
        (split / f"{i}.json").write_text(json.dumps(config(i)))
    assert [t.task_id for t in load_tasks(split, URL_MAP)] == ["1", "2", "10"]


def test_a_suite_from_disk_gets_a_summary_line_and_configs_built_in_memory_do_not(tmp_path, caplog):
    (tmp_path / "many.json").write_text(json.dumps([config(1), config(2)]))
    with caplog.at_level(logging.INFO, logger="webrl.env.tasks"):
        load_tasks(tmp_path / "many.json", URL_MAP)
        load_tasks([config(3)], URL_MAP)
    assert [record.getMessage() for record in caplog.records] == ["task configs: loaded 2 of 2"]


def test_a_task_without_eval_block_loads_without_evaluator():
    raw = config(3)
    del raw["eval"]
    (task,) = load_tasks([raw], URL_MAP)
    assert task.eval is None and not task.has_evaluator


@pytest.mark.parametrize(
    ("mutate", "field", "problem"),
    [
        (lambda c: c.pop("intent"), "intent", "must be a non-empty string"),
        (lambda c: c.update(intent="  "), "intent", "must be a non-empty string"),
        (lambda c: c.update(sites="shopping"), "sites", "must be a list of site names"),
        (lambda c: c.pop("start_url"), "start_url", "must be a non-empty string"),
        (lambda c: c["eval"].update(eval_types=["string_match", "vibes"]), "eval.eval_types", "unknown type 'vibes'"),
        (lambda c: c["eval"].update(eval_types=[]), "eval.eval_types", "must be a non-empty list"),
        (lambda c: c["eval"].pop("reference_answers"), "eval.reference_answers", "must be an object"),
        (
            lambda c: c["eval"].update(reference_answers={"required_values": ["> 3"]}),
            "eval.reference_answers.required_values",
            "unsupported reference type",
        ),
        (
            lambda c: c["eval"].update(reference_answers={"must_include": "$12"}),
            "eval.reference_answers.must_include",
            "must be a non-empty list of strings",
        ),
        (lambda c: c["eval"].update(reference_url=""), "eval.reference_url", "must be a non-empty string"),
        (lambda c: c["eval"].update(url_note="CLOSE"), "eval.url_note", "must be one of"),
        (lambda c: c["eval"].update(program_html=[]), "eval.program_html", "must be a non-empty list"),
        (
            lambda c: c["eval"]["program_html"][1].pop("required_contents"),
            "eval.program_html[1].required_contents",
            "must be an object",
        ),
        (lambda c: c["eval"]["program_html"][0].pop("url"), "eval.program_html[0].url", "must be a non-empty string"),
        (lambda c: c.update(start_url="__GITLAB__/a"), "start_url", "placeholder __GITLAB__ has no URL in url_map"),
    ],
)
def test_errors_name_file_task_and_field(tmp_path, mutate, field, problem):
    raw = copy.deepcopy(config(417))
    mutate(raw)
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([config(1), raw]))
    report = read_suite(path, URL_MAP)
    assert [task.task_id for task in report.tasks] == ["1"]
    (error,) = report.skipped
    assert (error.origin, error.task_id, error.field) == (f"{path}[1]", "417", field)
    assert str(error).startswith(f"{path}[1]: task 417: field '{field}': ")
    assert problem in str(error)
    with pytest.raises(TaskConfigError) as info:
        load_tasks(path, URL_MAP, strict=True)
    assert str(info.value).splitlines() == [f"loaded 1 of 2; 1 skipped: {error.short}", f"  {error}"]


def test_file_level_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[\n  {"task_id": 1,\n  "intent": }\n]')
    with pytest.raises(TaskConfigError, match=re.escape(f"{bad}:3: not valid JSON")):
        load_tasks(bad)
    with pytest.raises(TaskConfigError, match="no such task file"):
        load_tasks(tmp_path / "missing.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TaskConfigError, match="has no \\*.json task files"):
        load_tasks(empty)
    with pytest.raises(TaskConfigError, match=re.escape("<list>[1]: a task config must be a JSON object")):
        load_tasks([config(1), "not a task"], URL_MAP, strict=True)
    duplicate = "<list>[1]: task 1: field 'task_id': duplicate task_id (first in <list>[0])"
    with pytest.raises(TaskConfigError, match=re.escape(duplicate)):
        load_tasks([config(1), config(1)], URL_MAP, strict=True)
    assert [task.task_id for task in load_tasks([config(1), config(1), "not a task"], URL_MAP)] == ["1"]
    raw = config()
    del raw["task_id"]
    with pytest.raises(TaskConfigError, match=re.escape("<list>[0]: task ?: field 'task_id': is missing")):
        load_tasks([raw], URL_MAP)


def test_an_unreadable_file_costs_only_its_own_tasks_and_is_named(tmp_path):
    """A file not in UTF-8 (Latin-1 bytes) or a dangling link is one skipped entry naming the file, not a crash."""
    (tmp_path / "1.json").write_text(json.dumps(config(1)))
    latin = tmp_path / "2.json"
    latin.write_bytes(json.dumps(config(2, intent="Combien coûte la lampe ?"), ensure_ascii=False).encode("latin-1"))
    dangling = tmp_path / "3.json"
    dangling.symlink_to(tmp_path / "gone.json")
    report = read_suite(tmp_path, URL_MAP)
    assert [task.task_id for task in report.tasks] == ["1"]
    assert [(err.origin, err.task_id) for err in report.skipped] == [(str(latin), "2"), (str(dangling), "3")]
    assert str(report.skipped[0]).startswith(f"{latin}: not UTF-8")
    assert str(report.skipped[1]).startswith(f"{dangling}: cannot be read")
    assert report.summary() == "loaded 1 of 3; 2 skipped: task 2 in 2.json, task 3 in 3.json"
    assert [task.task_id for task in load_tasks(tmp_path, URL_MAP)] == ["1"]
    with pytest.raises(TaskConfigError, match=r"^loaded 1 of 3; 2 skipped: task 2 in 2\.json, task 3 in 3\.json"):
        load_tasks(tmp_path, URL_MAP, strict=True)
