"""Loading the WebArena-format fixture suite: good configs load, each bad one is skipped and named.

`webarena_fixtures/` holds one `{task_id}.json` per task in WebArena's own layout: 26 good configs
covering every eval type (and WebArena-Lite's program_html fuzzy_match), and 8 bad ones: a
must_include given as a string, VisualWebArena's `required_values`, a file:// start_url, an unknown
eval type, a file that is not JSON, an unknown url_note, a fuzzy_match that is a number, a missing intent.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from webrl.env.tasks import LocalFileUrlError, TaskConfigError, load_tasks, read_suite
from webrl.loop_config import WebRLConfig
from webrl.web_environment import WebEnvironment

FIXTURES = Path(__file__).parent / "webarena_fixtures"
SITES = ("SHOPPING", "SHOPPING_ADMIN", "GITLAB", "REDDIT", "MAP")
URL_MAP = {f"__{site}__": f"http://{site.lower()}.test:8080" for site in SITES}
GOOD = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] + list(range(20, 31))
BAD = {
    "90": "eval.reference_answers.must_include",
    "91": "eval.reference_answers.required_values",
    "92": "start_url",
    "93": "eval.eval_types",
    "94": "",
    "95": "eval.url_note",
    "96": "eval.program_html[0].required_contents.fuzzy_match",
    "97": "intent",
}
SUMMARY = "loaded 26 of 34; 8 skipped: " + ", ".join(
    f"task {task_id}{f' ({field})' if field else ''} in {task_id}.json" for task_id, field in BAD.items()
)


def test_good_configs_load_and_every_bad_one_is_named_by_file_task_and_field():
    report = read_suite(FIXTURES, URL_MAP)
    assert [task.task_id for task in report.tasks] == [str(i) for i in GOOD]
    assert {err.task_id: err.field for err in report.skipped} == BAD
    assert report.summary() == SUMMARY
    for err in report.skipped:
        assert str(err).startswith(f"{FIXTURES / f'{err.task_id}.json'}")


def test_a_string_where_a_list_belongs_costs_one_task_not_the_suite():
    (err,) = [e for e in read_suite(FIXTURES, URL_MAP).skipped if e.task_id == "90"]
    assert str(err) == (
        f"{FIXTURES / '90.json'}: task 90: field 'eval.reference_answers.must_include': "
        "must be a non-empty list of strings, got '$12'"
    )


def test_load_tasks_logs_the_summary_and_skips_by_default(caplog):
    with caplog.at_level(logging.WARNING, logger="webrl.env.tasks"):
        tasks = load_tasks(FIXTURES, URL_MAP)
    assert len(tasks) == 26
    logged = caplog.records[-1].getMessage()
    assert logged.endswith(SUMMARY)
    assert "field 'eval.url_note': must be one of ['EXACT', 'GOLD in PRED'] or absent (GOLD in PRED)" in logged
    assert "94.json:5: not valid JSON" in logged


def test_strict_turns_the_summary_into_an_error():
    with pytest.raises(TaskConfigError) as info:
        load_tasks(FIXTURES, URL_MAP, strict=True)
    lines = str(info.value).splitlines()
    assert lines[0] == SUMMARY
    assert len(lines) == 1 + len(BAD)


def test_a_suite_where_nothing_loads_is_an_error_even_when_not_strict(tmp_path):
    shutil.copy(FIXTURES / "90.json", tmp_path / "90.json")
    shutil.copy(FIXTURES / "94.json", tmp_path / "94.json")
    with pytest.raises(TaskConfigError, match=r"^loaded 0 of 2; 2 skipped: task 90 .* task 94 in 94.json"):
        load_tasks(tmp_path, URL_MAP)


def test_a_file_start_url_is_rejected_with_a_named_error():
    (err,) = [e for e in read_suite(FIXTURES, URL_MAP).skipped if e.task_id == "92"]
    assert isinstance(err, LocalFileUrlError)
    assert str(err).endswith(
        "field 'start_url': 'file:///etc/passwd' is a file:// URL; tasks must run on a site, not on local files"
    )
    # Also through a url_map entry, in a multi-tab start_url, and for a page program_html navigates to.
    config = json.loads((FIXTURES / "20.json").read_text())
    with pytest.raises(LocalFileUrlError, match="field 'start_url'"):
        load_tasks([config], {**URL_MAP, "__SHOPPING__": "FILE:///srv/shop"}, strict=True)
    config["start_url"] = "__SHOPPING__ |AND| file:///home"
    with pytest.raises(LocalFileUrlError, match="field 'start_url': 'file:///home'"):
        load_tasks([config], URL_MAP, strict=True)
    config = json.loads((FIXTURES / "20.json").read_text())
    config["eval"]["program_html"][0]["url"] = "file:///etc/shadow"
    with pytest.raises(LocalFileUrlError, match=r"field 'eval.program_html\[0\].url'"):
        load_tasks([config], URL_MAP, strict=True)


def test_program_html_fuzzy_match_and_func_helpers_load():
    tasks = {task.task_id: task for task in load_tasks(FIXTURES, URL_MAP)}
    assert tasks["23"].eval["program_html"][0]["required_contents"] == {"fuzzy_match": ["order 42 has shipped"]}
    assert tasks["24"].eval["program_html"][0]["required_contents"]["fuzzy_match"].endswith("|OR| it is on its way")
    # Helpers are resolved only at evaluation time (they query the live sites).
    assert tasks["25"].eval["program_html"][0]["url"] == "func:reddit_get_post_url('__last_url__')"
    assert tasks["6"].eval["reference_answers"] == {"fuzzy_match": "N/A"}
    assert tasks["10"].start_url == "http://gitlab.test:8080"


def test_placeholders_in_references_are_resolved_and_one_left_over_is_named():
    # WebArena substitutes its whole config: task 552 wants the agent's file to list __REDDIT__ post URLs.
    config = json.loads((FIXTURES / "20.json").read_text())
    config["eval"]["program_html"][0]["required_contents"] = {"must_include": ["__REDDIT__/f/space/134164"]}
    config["eval"]["eval_types"] = ["string_match", "program_html"]
    config["eval"]["reference_answers"] = {"exact_match": "__GITLAB__/byteblaze", "fuzzy_match": ["at __MAP__"]}
    (task,) = load_tasks([config], URL_MAP, strict=True)
    reddit, gitlab, osm = URL_MAP["__REDDIT__"], URL_MAP["__GITLAB__"], URL_MAP["__MAP__"]
    assert task.eval["program_html"][0]["required_contents"] == {"must_include": [f"{reddit}/f/space/134164"]}
    assert task.eval["reference_answers"] == {"exact_match": f"{gitlab}/byteblaze", "fuzzy_match": [f"at {osm}"]}
    no_reddit = {key: url for key, url in URL_MAP.items() if key != "__REDDIT__"}
    report = read_suite([config], no_reddit)
    assert [err.field for err in report.skipped] == ["eval.program_html[0].required_contents.must_include[0]"]
    assert "placeholder __REDDIT__ has no URL in url_map" in str(report.skipped[0])


def test_a_string_fuzzy_match_other_than_na_is_bad_in_reference_answers():
    config = json.loads((FIXTURES / "5.json").read_text())
    config["eval"]["reference_answers"]["fuzzy_match"] = "9am"
    report = read_suite([config], URL_MAP)
    assert [err.field for err in report.skipped] == ["eval.reference_answers.fuzzy_match"]


def _environment(suite: Path, strict: bool) -> WebEnvironment:
    config = WebRLConfig()
    config.env.suite, config.env.url_map, config.env.strict_tasks = str(suite), dict(URL_MAP), strict
    return WebEnvironment(config)


def test_env_strict_tasks_decides_between_skipping_and_stopping(tmp_path):
    shutil.copytree(FIXTURES, tmp_path / "test")
    assert len(_environment(tmp_path, strict=False).suite("test", 0, 0)) == 26
    with pytest.raises(TaskConfigError, match="^loaded 26 of 34; 8 skipped"):
        _environment(tmp_path, strict=True).suite("test", 0, 0)
