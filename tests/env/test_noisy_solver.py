"""The noisy reference solver's choices on hand-written observations: plan, detours, recovery, wrong answers.

Its episodes in the browser, labelled by the evaluators, are tested in tests/test_orm_data.py.
"""

from __future__ import annotations

import random
import re

import pytest

from webrl.env.actions import parse_action
from webrl.env.noisy_solver import GIVE_UP, GO_BACK, GO_FORWARD, SCROLL_DOWN, NoisySolver, perturb_answer
from webrl.env.sites.solver import respond
from webrl.env.sites.suite import load_suite
from webrl.env.sites.templates import plan_for

# Task 15: "How many reviews does Amber Charger have?"; plan: search, click the product, read "Reviews (N)".
TASK = next(t for t in load_suite("train") if t.task_id == "15")
HOME = """OneStopShop <a id="0"> Home </a> <a id="1"> My cart </a> <a id="2"> My orders </a>
<input id="3" type="text" name="q" placeholder="Search products" value="" /> <button id="4"> Search </button>"""
RESULTS = HOME.replace('value=""', 'value="Amber Charger"') + '\n<li> <a id="5"> Amber Charger </a> | $40.00 </li>'
PRODUCT = HOME + "\n<h1> Amber Charger </h1>\n<p> $40.00 </p>\n<h2> Reviews (5) </h2>"
SEARCH = '# Element: Search products\ndo(action="Search", argument="Amber Charger", element="3")'
CLICK = '# Element: Amber Charger\ndo(action="Click", element="5")'


def _seed(noise: float, detours: list[bool]) -> int:
    """The first seed whose first steps are detours exactly where `detours` says (the draws are seeded per step)."""
    return next(
        seed
        for seed in range(10_000)
        if [NoisySolver(noise, seed=seed).is_detour(TASK, step) for step in range(len(detours))] == detours
    )


def test_at_noise_zero_it_answers_as_the_reference_solver():
    solver = NoisySolver(0.0, seed=7)
    plan = plan_for(TASK)
    history: list[str] = []
    for page in (HOME, RESULTS, PRODUCT):
        response = solver(TASK, history, page)
        assert response == respond(TASK, plan, history, page)
        history.append(response)
    assert history == [SEARCH, CLICK, 'exit(message="5")']


def test_at_noise_one_every_step_is_an_action_of_the_page():
    solver = NoisySolver(1.0, seed=3)
    page_clicks = {f'do(action="Click", element="{i}")' for i in "0124"}  # the links and the button
    responses = {solver(TASK, ["x"] * step, HOME) for step in range(60)}
    for response in responses:
        action = parse_action(response)
        assert action.name in ("click", "go_backward", "scroll_down")
        assert action.name != "click" or response.split("\n")[-1] in page_clicks
    assert GO_BACK in responses and SCROLL_DOWN in responses and len(responses) == 6
    assert all(solver(TASK, ["x"] * step, HOME) == solver(TASK, ["x"] * step, HOME) for step in range(20))


def test_after_a_detour_the_plan_goes_on_from_the_same_move():
    seed = _seed(0.5, [False, True, False])
    solver = NoisySolver(0.5, seed=seed)
    assert parse_action(solver(TASK, [SEARCH], RESULTS)).name in ("click", "go_backward", "scroll_down")
    # Say the detour was a scroll on the same page: the plan's click on the product comes next.
    assert solver(TASK, [SEARCH, SCROLL_DOWN], RESULTS) == CLICK


def test_when_the_plan_cannot_go_on_it_goes_back_then_gives_up():
    seed = _seed(0.5, [False, True, False, False, False, False])
    solver = NoisySolver(0.5, seed=seed, max_backtracks=2)
    home_click = '# Element: Home\ndo(action="Click", element="0")'
    # The detour left the results for the home page, where the product link is missing.
    assert solver(TASK, [SEARCH, home_click], HOME) == GO_BACK
    assert solver(TASK, [SEARCH, home_click, GO_BACK], HOME) == GO_BACK
    assert solver(TASK, [SEARCH, home_click, GO_BACK, GO_BACK], HOME) == GIVE_UP
    # Back on the results page after one go-back, the plan picks up its click.
    assert solver(TASK, [SEARCH, home_click, GO_BACK], RESULTS) == CLICK


def test_a_detour_back_is_undone_by_going_forward():
    seed = _seed(0.5, [False, False, True, False, False])
    solver = NoisySolver(0.5, seed=seed)
    # The detour went back from the product page to the results, which lack "Reviews (N)".
    assert solver(TASK, [SEARCH, CLICK, GO_BACK], RESULTS) == GO_FORWARD
    assert solver(TASK, [SEARCH, CLICK, GO_BACK, GO_FORWARD], PRODUCT) == 'exit(message="5")'


def test_answer_noise_replaces_the_answer_and_nothing_else():
    solver = NoisySolver(0.0, answer_noise=1.0, seed=1)
    assert solver(TASK, [], HOME) == SEARCH and solver(TASK, [SEARCH], RESULTS) == CLICK
    wrong = parse_action(solver(TASK, [SEARCH, CLICK], PRODUCT)).message
    assert wrong != "5" and wrong.isdigit()


@pytest.mark.parametrize(
    ("answer", "alternatives", "shape"),
    [
        ("$1,105.25", [], r"^\$\d+,\d+\.\d+$"),
        ("7", [], r"^\d+$"),
        ("Bamboo Speaker", ["bamboo speaker", "Copper Lamp"], r"^Copper Lamp$"),
        ("Bamboo Speaker", [], r"^Bamboo$"),
    ],
)
def test_perturbed_answers_differ_and_keep_their_shape(answer, alternatives, shape):
    for seed in range(20):
        wrong = perturb_answer(answer, random.Random(seed), alternatives)
        assert wrong.lower() != answer.lower()
        assert re.match(shape, wrong), wrong


def test_noise_out_of_range_names_the_field():
    with pytest.raises(ValueError, match="NoisySolver.noise"):
        NoisySolver(1.5)
    with pytest.raises(ValueError, match="NoisySolver.answer_noise"):
        NoisySolver(0.1, answer_noise=-0.1)
