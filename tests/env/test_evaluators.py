"""WebArena evaluators on known right and wrong answers; program_html on a real page."""

from __future__ import annotations

import asyncio

import pytest
from env_helpers import page_task

from webrl.env.backend import WebArenaBackend
from webrl.env.evaluators import MissingHelperError, clean_answer, evaluate_task, string_match, url_match
from webrl.env.judge import JudgeError
from webrl.env.tasks import load_tasks
from webrl.metrics import success_by_site

pytestmark = pytest.mark.timeout(120)


def score(references, answer, judge=None):
    return asyncio.run(string_match(references, answer, "intent", judge))


def test_clean_answer_strips_one_pair_of_quotes_and_lowercases():
    assert clean_answer('  "Hello World" ') == "hello world"
    assert clean_answer("'x'") == "x"
    assert clean_answer("\"it's\"'") == "\"it's\"'"
    assert clean_answer("'\"x\"'") == '"x"'  # only the outer pair: the inner quotes stay


def test_exact_match():
    assert score({"exact_match": "Pittsburgh"}, '"pittsburgh"') == (1.0, False)
    assert score({"exact_match": "Pittsburgh"}, "Pittsburgh, PA") == (0.0, False)


def test_must_include_with_or_alternatives_and_single_character_tokens():
    refs = {"must_include": ["$12", "lamp |OR| lamps"]}
    assert score(refs, "You spent $12 on 2 Lamps") == (1.0, False)
    assert score(refs, "You spent $12 on a desk") == (0.0, False)
    # A one-character reference must match a whole word token: "3" is not in "13".
    assert score({"must_include": ["3"]}, "I bought 13 items") == (0.0, False)
    assert score({"must_include": ["3"]}, "I bought 3 items / 2 boxes") == (1.0, False)
    # Only a task's sole must_include item is matched as a token (WebArena: tokenize=len(value) == 1); among
    # several items a one-character reference is a plain substring, so "3" is found in "13".
    assert score({"must_include": ["3", "apples"]}, "13 apples") == (1.0, False)


@pytest.mark.parametrize(
    ("reference", "answer", "expected"),
    [
        # NLTK's word_tokenize (WebArena's) keeps a number whole: none of these holds the reference on its own.
        ("1", "1,024 results", 0.0),
        ("3", "It has 3.5 stars", 0.0),
        ("1", "Within 1-3 days", 0.0),
        ("3", "At 3:30 pm", 0.0),
        ("5", "Rated 4.5/5", 1.0),  # WebArena-Lite's rule: the parts of a token with a "/" count
        # Punctuation around a number comes off it.
        ("3", "There are 3.", 1.0),
        ("3", "(3)", 1.0),
        ("3", "the 3's", 1.0),
        ("3", "Items: 3, boxes: 2", 1.0),
        ("s", "it's done", 0.0),
    ],
)
def test_a_one_character_reference_stands_alone_only_as_nltk_cuts_words(reference, answer, expected):
    assert score({"must_include": [reference]}, answer) == (expected, False)


def test_must_exclude_and_one_of():
    assert score({"must_include": ["paid"], "must_exclude": ["refunded"]}, "Order paid") == (1.0, False)
    assert score({"must_include": ["paid"], "must_exclude": ["refunded"]}, "Paid then refunded") == (0.0, False)
    # Several excluded items: any one present fails the answer.
    assert score({"must_exclude": ["refunded", "cancelled"]}, "Order refunded") == (0.0, False)
    assert score({"must_exclude": ["refunded", "cancelled"]}, "Order paid") == (1.0, False)
    assert score({"one_of": ["red", "crimson"]}, "It is crimson") == (1.0, False)
    assert score({"one_of": ["red", "crimson"]}, "It is blue") == (0.0, False)


def test_empty_or_missing_answer_fails():
    assert score({"must_exclude": ["anything"]}, "") == (0.0, False)
    assert score({"exact_match": ""}, None) == (0.0, False)


def test_fuzzy_match_needs_a_judge_and_uses_it():
    refs = {"fuzzy_match": ["the store opens at 9am"]}
    assert score(refs, "9 in the morning") == (0.0, True)
    calls = []

    async def judge(intent, answer, reference):
        calls.append((intent, answer, reference))
        return "morning" in answer

    assert score(refs, "9 in the morning", judge) == (1.0, False)
    assert score(refs, "at noon", judge) == (0.0, False)
    assert calls[0] == ("intent", "9 in the morning", "the store opens at 9am")
    assert score({"fuzzy_match": "N/A"}, "N/A") == (1.0, False)
    # Any other answer to an unachievable task is the judge's call (WebArena asks it with string_note).
    assert score({"fuzzy_match": "N/A"}, "it is 5") == (0.0, True)


def test_url_match_exact_gold_in_pred_alternatives_and_normalisation():
    ref = "http://127.0.0.1:7770/orders |OR| http://127.0.0.1:7770/history"
    assert url_match(ref, "http://localhost:7770/history/", "EXACT") == 1.0
    assert url_match(ref, "http://127.0.0.1:7770/history?page=2", "EXACT") == 0.0
    assert url_match(ref, "http://127.0.0.1:7770/history?page=2", "GOLD in PRED") == 1.0
    assert url_match(ref, "http://127.0.0.1:7770/history?page=2") == 1.0  # no url_note: GOLD in PRED
    assert url_match(ref, "http://127.0.0.1:7770/cart", "GOLD in PRED") == 0.0


def test_url_match_a_reference_parameter_with_several_values_is_met_by_any_of_them():
    """WebArena's GOLD in PRED: for each reference query key, one of its values must be among the page's."""
    ref = "http://127.0.0.1:7770/search?q=mug&q=cup"
    assert url_match(ref, "http://127.0.0.1:7770/search?q=cup") == 1.0
    assert url_match(ref, "http://127.0.0.1:7770/search?q=mug&page=2") == 1.0
    assert url_match(ref, "http://127.0.0.1:7770/search?q=kettle") == 0.0


def test_url_match_an_empty_reference_or_alternative_matches_no_url():
    page = "http://127.0.0.1:7770/cart"
    assert url_match("", page) == 0.0
    assert url_match("http://127.0.0.1:7770/orders |OR| ", page) == 0.0
    assert url_match(" |OR| http://127.0.0.1:7770/orders", page) == 0.0


def _evaluate(run, pool, backend, pages, eval_block, answer, navigate_to="page2.html"):
    (task,) = load_tasks([page_task(navigate_to, eval_block=eval_block).to_dict()], {"__PAGES__": pages.url})

    async def scenario():
        async with pool.episode(task, backend) as ep:
            await ep.reset()
            return await evaluate_task(ep.task, ep.page, answer)

    return run(scenario())


def test_program_html_locator_whole_page_and_navigation(run, pool, backend, pages):
    def block(required, url="last", locator="document.querySelector('#status').textContent"):
        return {"eval_types": ["program_html"], "program_html": [{"url": url, "locator": locator, **required}]}

    right = block({"required_contents": {"exact_match": "Shipped"}})
    assert _evaluate(run, pool, backend, pages, right, None).score == 1.0
    wrong = block({"required_contents": {"must_include": ["cancelled"]}})
    assert _evaluate(run, pool, backend, pages, wrong, None).score == 0.0
    whole_page = block({"required_contents": {"must_include": ["Order #42"], "must_exclude": ["refund"]}}, locator="")
    assert _evaluate(run, pool, backend, pages, whole_page, None).score == 1.0
    # Navigates to the target url first: the episode sits on actions.html, the check reads page2.html.
    elsewhere = block({"required_contents": {"must_include": ["shipped"]}}, url="__PAGES__/page2.html")
    assert _evaluate(run, pool, backend, pages, elsewhere, None, navigate_to="actions.html").score == 1.0
    broken_locator = block({"required_contents": {"must_include": ["shipped"]}}, locator="document.nope.textContent")
    assert _evaluate(run, pool, backend, pages, broken_locator, None).score == 0.0


# Magento's admin product form and GitLab's sidebars are drawn by scripts from data they fetch after the HTML.
LATE_FORM = """<html><body><form id="form"></form><script>
fetch('late-price').then((reply) => reply.text()).then((price) => {
  document.getElementById('form').innerHTML = '<input name="product[price]" value="' + price + '">';
});
</script></body></html>"""


def test_program_html_reads_a_target_page_after_its_scripts_have_drawn_it(run, pool, backend, pages):
    block = {
        "eval_types": ["program_html"],
        "program_html": [
            {
                "url": "__PAGES__/late-form.html",
                "locator": "document.querySelector('[name=\"product[price]\"]').value",
                "required_contents": {"exact_match": "42.00"},
            }
        ],
    }
    (task,) = load_tasks([page_task("page2.html", eval_block=block).to_dict()], {"__PAGES__": pages.url})

    async def price_after_a_second(route):
        await asyncio.sleep(1.0)
        await route.fulfill(body="42.00", content_type="text/plain")

    async def scenario():
        async with pool.episode(task, backend) as ep:
            await ep.reset()
            form = {"body": LATE_FORM, "content_type": "text/html"}
            await ep.page.route("**/late-form.html", lambda route: route.fulfill(**form))
            await ep.page.route("**/late-price", price_after_a_second)
            return await evaluate_task(ep.task, ep.page, None)

    # WebArena reads the page 3 s after its load event; read at DOMContentLoaded the field is not there yet.
    assert run(scenario()).score == 1.0


def test_types_combine_by_product(run, pool, backend, pages):
    block = {
        "eval_types": ["string_match", "url_match"],
        "reference_answers": {"must_include": ["shipped"]},
        "reference_url": "__PAGES__/page2.html",
    }
    result = _evaluate(run, pool, backend, pages, block, "It was shipped")
    assert (result.score, result.per_type) == (1.0, {"url_match": 1.0, "string_match": 1.0})
    result = _evaluate(run, pool, backend, pages, block, "It was shipped", navigate_to="actions.html")
    assert (result.score, result.per_type) == (0.0, {"url_match": 0.0, "string_match": 1.0})
    result = _evaluate(run, pool, backend, pages, block, "It was lost")
    assert (result.score, result.per_type) == (0.0, {"url_match": 1.0, "string_match": 0.0})


async def _exit_shipped_then_evaluate(pool, task, backend):
    """Run `task` to an answer of "shipped", then evaluate it; the reward and the trajectory."""
    async with pool.episode(task, backend) as ep:
        await ep.reset()
        await ep.step('exit(message="shipped")')
        return await ep.evaluate(), ep.trajectory


def test_episode_evaluate_records_reward_and_detail(run, pool, backend, pages):
    block = {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["shipped"]}}
    (task,) = load_tasks([page_task("page2.html", eval_block=block).to_dict()], {"__PAGES__": pages.url})

    reward, trajectory = run(_exit_shipped_then_evaluate(pool, task, backend))
    # No judge configured: the evaluator does not guess, the ORM will decide.
    assert reward is None and trajectory.eval_reward is None
    assert trajectory.metadata["eval"] == {"per_type": {"string_match": 0.0}, "needs_judge": True}


POST_TITLE = {
    "url": "func:reddit_get_post_url('__last_url__')",
    "locator": "document.querySelector('.submission__inner').outerText",
    "required_contents": {"must_include": ["The Left Hand of Darkness"]},
}


def test_program_html_opens_the_post_reddit_get_post_url_names(run, pool, backend, pages):
    block = {"eval_types": ["program_html"], "program_html": [POST_TITLE]}
    # The comment page lacks the post: 1.0 only because the check opened /f/books/42/ (its index.html).
    assert _evaluate(run, pool, backend, pages, block, None, navigate_to="f/books/42/comment-7.html").score == 1.0
    assert _evaluate(run, pool, backend, pages, block, None, navigate_to="f/books/42/index.html").score == 1.0
    assert _evaluate(run, pool, backend, pages, block, None, navigate_to="f/books/43/index.html").score == 0.0
    # Not a forum URL: the check stays on page2.html, which has no submission.
    assert _evaluate(run, pool, backend, pages, block, None, navigate_to="page2.html").score == 0.0


def test_unsupported_helpers_are_named(run, pool, backend, pages):
    block = {
        "eval_types": ["program_html"],
        "program_html": [POST_TITLE, {**POST_TITLE, "locator": "func:reddit_get_post_title(__page__)"}],
    }
    expected = (
        r"^task t1: eval\.program_html\[1\]\.locator calls WebArena helper reddit_get_post_title\(\), which webrl "
        r"does not implement \(it has reddit_get_post_url\(\), gitlab_get_project_memeber_role\(\), "
    )
    with pytest.raises(MissingHelperError, match=expected):
        _evaluate(run, pool, backend, pages, block, None)


def _undecided_judge(intent, answer, reference):
    raise ValueError("the judge answered 'maybe', neither yes nor no")


def _judge_down(intent, answer, reference):
    raise JudgeError("judge at http://127.0.0.1:9/v1 (model m) failed after 3 tries: connection refused")


def test_a_judge_that_fails_is_an_infra_error_not_the_agent_s_failure(run, pool, pages):
    """A judge outage must not score every fuzzy task 0: the episode is retried, then left out of the rates."""
    block = {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["shipped"]}}
    (task,) = load_tasks([page_task("page2.html", eval_block=block).to_dict()], {"__PAGES__": pages.url})
    backend = WebArenaBackend({"__PAGES__": pages.url}, judge=_judge_down)

    reward, trajectory = run(_exit_shipped_then_evaluate(pool, task, backend))
    assert reward is None and trajectory.eval_reward is None and trajectory.infra_error
    assert trajectory.error.startswith("evaluation failed: JudgeError: judge at http://127.0.0.1:9/v1")
    assert success_by_site([trajectory])["episodes"] == 0.0


_HELPER = {
    "url": "func:reddit_get_post_title('__last_url__')",
    "locator": "",
    "required_contents": {"must_include": ["x"]},
}


@pytest.mark.parametrize(
    ("eval_block", "judge", "reason"),
    [
        (
            {"eval_types": ["program_html"], "program_html": [_HELPER]},
            None,
            "MissingHelperError: task t1: eval.program_html[0].url calls WebArena helper reddit_get_post_title()",
        ),
        (
            {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["shipped"]}},
            _undecided_judge,
            "ValueError: the judge answered 'maybe', neither yes nor no",
        ),
    ],
    ids=["missing-helper", "undecided-judge"],
)
def test_an_evaluator_that_fails_ends_its_episode_as_error(run, pool, pages, eval_block, judge, reason):
    """One mechanism for any evaluator failure: status "error", a message naming the exception, `ended_as` kept;
    scored 0, a failure that counts in the success rate (the task's, not the browser's: no infra error)."""
    (task,) = load_tasks([page_task("page2.html", eval_block=eval_block).to_dict()], {"__PAGES__": pages.url})
    backend = WebArenaBackend({"__PAGES__": pages.url}, judge=judge)

    reward, trajectory = run(_exit_shipped_then_evaluate(pool, task, backend))
    assert reward == 0.0 and trajectory.eval_reward == 0.0 and not trajectory.infra_error
    assert success_by_site([trajectory]) == {"success_rate": 0.0, "episodes": 1.0, "success_rate/pages": 0.0}
    assert trajectory.status == "error" and trajectory.metadata["ended_as"] == "exit"
    assert trajectory.error.startswith(f"evaluation failed: {reason}")
    assert trajectory.metadata["eval_error"] == trajectory.error.removeprefix("evaluation failed: ")
