"""The reference solver reads ids and values from observation text and answers in WebRL's syntax."""

from __future__ import annotations

import pytest

from webrl.env.actions import parse_action
from webrl.env.sites.moves import Answer, Choose, Click, Done, Fill
from webrl.env.sites.solver import SolverError, act, parse_elements, respond, text_lines
from webrl.env.sites.suite import load_suite
from webrl.env.sites.templates import plan_for

# Observations in the exact form webrl.env.observation produces for the sites' pages.
LISTING = """OneStopShop <a id="0"> Home </a> <a id="1"> My cart </a> <a id="2"> My orders </a>
<h1> Search results for 'mug' </h1>
<input id="3" type="text" name="q" placeholder="Search products" value="mug" /> <button id="4"> Search </button>
<p> 2 products found </p>
<li> <a id="5"> Bamboo Mug </a> | $146.25 </li>
<li> <a id="6"> Say &quot;Hi&quot; Mug </a> | $1,121.99 </li>
<p> Page 1 of 2 <a id="7"> Next page </a> </p>
<select id="8" name="sort"><option selected>Name</option><option>Price: low to high</option></select>"""
TASK = load_suite("train")[0]


def test_parse_elements_reads_ids_tags_attributes_and_text():
    elements = {e.id: e for e in parse_elements(LISTING)}
    assert elements["3"].tag == "input" and elements["3"].attrs["placeholder"] == "Search products"
    assert elements["3"].attrs["value"] == "mug" and elements["3"].text == ""
    assert elements["6"].text == 'Say "Hi" Mug'
    assert elements["8"].tag == "select" and elements["8"].text == "Name Price: low to high"
    assert len(elements) == 9


def test_text_lines_drop_tags():
    assert text_lines(LISTING)[4] == "Bamboo Mug | $146.25"
    assert text_lines(LISTING)[5] == 'Say "Hi" Mug | $1,121.99'


def test_each_move_gives_a_parsable_webrl_action():
    response, done = act(TASK, Click('Say "Hi" Mug'), LISTING)
    assert done and response == '# Element: Say "Hi" Mug\ndo(action="Click", element="6")'
    action = parse_action(act(TASK, Fill("Search products", 'red "x" mug', submit=True), LISTING)[0])
    assert (action.name, action.element, action.argument) == ("search", "3", 'red "x" mug')
    action = parse_action(act(TASK, Choose("sort", "Price: low to high"), LISTING)[0])
    assert (action.name, action.element, action.argument) == ("select", "8", "Price: low to high")
    action = parse_action(act(TASK, Answer(r"^Bamboo Mug \| (\$[\d,.]+)$"), LISTING)[0])
    assert (action.name, action.message) == ("exit", "$146.25")
    assert parse_action(act(TASK, Done(), LISTING)[0]).message == ""


def test_paged_moves_click_next_page_until_the_target_shows():
    response, done = act(TASK, Click("Copper Mug", paged=True), LISTING)
    assert not done and response == '# Element: Next page\ndo(action="Click", element="7")'
    response, done = act(TASK, Answer(r"^Copper Mug \| (\S+)$", paged=True), LISTING)
    assert not done and response.endswith('element="7")')
    assert act(TASK, Click("mug", partial=True), LISTING)[0].endswith('element="5")')


def test_missing_elements_raise_an_error_naming_task_and_move():
    last_page = LISTING.replace('<a id="7"> Next page </a>', "")
    with pytest.raises(SolverError, match=rf"task {TASK.task_id}: Click\(text='Copper Mug'.*target not found"):
        act(TASK, Click("Copper Mug", paged=True), last_page)
    with pytest.raises(SolverError, match="no text box with that placeholder"):
        act(TASK, Fill("Search places", "x"), LISTING)
    with pytest.raises(SolverError, match="no line matches"):
        act(TASK, Answer(r"^Nothing (\d+)$"), LISTING)


def test_respond_finds_its_place_in_the_plan_from_the_history():
    plan = [Click("My orders"), Answer(r"^Copper Mug \| (\S+)$", paged=True)]
    first = respond(TASK, plan, [], LISTING)
    assert first.endswith('element="2")')
    paging = respond(TASK, plan, [first], LISTING)
    assert paging.startswith("# Element: Next page")
    page_two = LISTING.replace("Bamboo Mug", "Copper Mug")
    assert respond(TASK, plan, [first, paging], page_two) == 'exit(message="$146.25")'
    with pytest.raises(SolverError, match="already complete"):
        respond(TASK, plan, [first, paging, "exit()"], page_two)


def test_plans_come_from_the_instantiation_dict_only():
    task = next(t for t in load_suite("train") if t.intent_template_id == 205)
    plan = plan_for(task)
    assert Fill("Price", task.instantiation_dict["price"]) in plan and plan[-1] == Done()
    stranger = type(task)(task_id="x", intent="?", sites=["shopping"], start_url="", intent_template_id=9999)
    with pytest.raises(KeyError, match="not an embedded-site template"):
        plan_for(stranger)
