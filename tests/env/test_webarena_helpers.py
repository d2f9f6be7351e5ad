"""WebArena's `func:` helpers: parsing the expression, the post URL rule, a GitLab members table in Chromium,
and the shopping helpers inside program_html against the recorded Magento answers (`magento_replay`)."""

from __future__ import annotations

import pytest
from env_helpers import page_task
from magento_replay import RECORDED, TOKEN_PATH, MagentoReplay

from webrl.env.backend import WebArenaBackend
from webrl.env.tasks import load_tasks
from webrl.env.webarena_helpers import (
    PAGE,
    HelperCall,
    HelperCallError,
    UnknownHelperError,
    gitlab_member_role,
    parse_call,
    reddit_post_url,
)

pytestmark = pytest.mark.timeout(120)


def test_parse_call_reads_names_strings_and_the_page():
    assert parse_call("func:reddit_get_post_url('__last_url__')") == HelperCall(
        "reddit_get_post_url", ("__last_url__",)
    )
    assert parse_call("func: gitlab_get_project_memeber_role(__page__, 'byteblaze')") == HelperCall(
        "gitlab_get_project_memeber_role", (PAGE, "byteblaze")
    )
    assert parse_call('func:shopping_get_sku_latest_review_rating("MJ01")').args == ("MJ01",)
    assert parse_call("func:shopping_get_latest_order_url()").args == ()


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "func:shopping_get_order_product_option(__page__)",
            "calls WebArena helper shopping_get_order_product_option()",
        ),
        ("func:reddit_get_post_url(__import__('os'))", "calls reddit_get_post_url() with __import__('os'): arguments"),
        ("func:reddit_get_post_url(url='x')", "calls reddit_get_post_url() in \"reddit_get_post_url(url='x')\""),
        ("func:reddit_get_post_url(", "calls reddit_get_post_url() in an expression that does not parse"),
        ("func:gitlab_get_project_memeber_role('byteblaze')", "it takes (__page__, 'account_name')"),
        ("func:reddit_get_post_url(__page__)", "it takes ('url')"),
    ],
)
def test_parse_call_refuses_what_it_cannot_run_and_names_the_helper(expression, message):
    with pytest.raises(HelperCallError) as err:
        parse_call(expression)
    assert message in str(err.value)
    assert isinstance(err.value, UnknownHelperError) == expression.startswith("func:shopping_get_order")


def test_unknown_helper_lists_the_supported_ones():
    with pytest.raises(UnknownHelperError) as err:
        parse_call("func:map_get_route_duration(__page__)")
    assert err.value.name == "map_get_route_duration"
    assert str(err.value).endswith(
        "(it has reddit_get_post_url(), gitlab_get_project_memeber_role(), shopping_get_latest_order_url(), "
        "shopping_get_sku_latest_review_author(), shopping_get_sku_latest_review_rating())"
    )


def test_reddit_post_url_is_the_post_the_url_lies_under():
    post = "http://reddit.test:9999/f/books/42/"
    assert reddit_post_url("http://reddit.test:9999/f/books/42/just-finished-the-left-hand") == post
    assert reddit_post_url("http://reddit.test:9999/f/books/42/-/comment/7?sort=new#c7") == post
    assert reddit_post_url("http://reddit.test:9999/f/books/42") == post
    # Not under a post: returned unchanged; a forum with a trailing / gives WebArena's empty post segment.
    assert reddit_post_url("http://reddit.test:9999/f/books") == "http://reddit.test:9999/f/books"
    assert reddit_post_url("http://reddit.test:9999/user/jaspergreen/x") == "http://reddit.test:9999/user/jaspergreen/x"
    assert reddit_post_url("http://reddit.test:9999/f/books/") == "http://reddit.test:9999/f/books//"


def test_gitlab_member_role_reads_the_account_row_of_the_members_table(run, pool, backend, pages):
    (task,) = load_tasks([page_task("byteblaze/dotfiles/-/project_members/").to_dict()], {"__PAGES__": pages.url})

    async def roles():
        async with pool.episode(task, backend) as ep:
            await ep.reset()
            # The table appears 300 ms after load (rendered by script); the helper waits for it.
            names = ["byteblaze", "yjlou", "yjlou-bot", "convexegg", "yjl", "nobody"]
            return [await gitlab_member_role(ep.page, name) for name in names]

    # An editable role is a dropdown listing every role: the button's text is the member's.
    assert run(roles()) == ["Owner", "Developer", "Guest", "Maintainer", "", ""]


def _shop_task(shop_url: str, program_html: list[dict]) -> object:
    config = page_task("", eval_block={"eval_types": ["program_html"], "program_html": program_html}).to_dict()
    config.update(sites=["shopping"], start_url="__SHOPPING__/")
    (task,) = load_tasks([config], {"__SHOPPING__": shop_url})
    return task


async def _exit_and_evaluate(pool, task, backend):
    async with pool.episode(task, backend) as ep:
        await ep.reset()
        await ep.step('exit(message="done")')
        return await ep.evaluate(), ep.trajectory


ORDER_THEN_REVIEW = [
    {
        "url": "func:shopping_get_latest_order_url()",
        "locator": "document.querySelector('.order-status').textContent",
        "required_contents": {"exact_match": "Pending"},
    },
    {
        "url": "last",
        "locator": "func:shopping_get_sku_latest_review_author('MJ01-XS-Black')",
        "required_contents": {"exact_match": "Emma Lopez"},
    },
    {
        "url": "last",
        "locator": "func:shopping_get_sku_latest_review_rating('MJ01-XS-Black')",
        "required_contents": {"must_include": ["60"]},
    },
]


def test_shopping_helpers_in_program_html_against_recorded_magento_answers(run, pool, monkeypatch):
    monkeypatch.setenv("WEBARENA_SHOPPING_ADMIN_USERNAME", RECORDED["admin"]["username"])
    monkeypatch.setenv("WEBARENA_SHOPPING_ADMIN_PASSWORD", RECORDED["admin"]["password"])
    with MagentoReplay() as shop:
        backend = WebArenaBackend({"__SHOPPING__": shop.url})
        reward, trajectory = run(_exit_and_evaluate(pool, _shop_task(shop.url, ORDER_THEN_REVIEW), backend))
        assert (reward, trajectory.eval_reward, trajectory.error) == (1.0, 1.0, None)
        # The browser opened the newest order's page the API named.
        assert "/sales/order/view/order_id/190/" in [r["path"] for r in shop.requests if r["method"] == "GET"]
        wrong_author = [dict(ORDER_THEN_REVIEW[1], required_contents={"exact_match": "Sarah Miller"})]
        reward, _ = run(_exit_and_evaluate(pool, _shop_task(shop.url, wrong_author), backend))
        assert reward == 0.0


def test_a_shop_whose_api_does_not_answer_fails_its_episode_with_the_named_error(run, pool, pages, monkeypatch):
    monkeypatch.setenv("WEBARENA_SHOPPING_ADMIN_USERNAME", "admin")
    monkeypatch.setenv("WEBARENA_SHOPPING_ADMIN_PASSWORD", "admin1234")
    # The test pages' static server is no Magento: it refuses the token POST with 501.
    task = _shop_task(pages.url, ORDER_THEN_REVIEW[:1])
    reward, trajectory = run(_exit_and_evaluate(pool, task, WebArenaBackend({"__SHOPPING__": pages.url})))
    assert reward is None and trajectory.status == "error" and trajectory.infra_error  # the site's failure: retried
    assert trajectory.error.startswith(
        "evaluation failed: EvaluatorSiteError: task t1: eval.program_html[0].url calls "
        f"shopping_get_latest_order_url(), which failed: POST {pages.url}{TOKEN_PATH} answered HTTP 501"
    )
    assert "admin1234" not in trajectory.error
