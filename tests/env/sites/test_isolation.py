"""Per-episode isolation in the real browser: concurrent episodes change the same objects.

Two episodes, stepped in lockstep so that both have changes in flight at once, set the same
product's price to different values and put different quantities of it in their carts; each one's
evaluator passes on its own value, and a third, fresh episode still sees the seeded state.
"""

from __future__ import annotations

import pytest

from webrl.env.sites import ReferenceSolver
from webrl.env.sites.server import EPISODE_COOKIE
from webrl.env.sites.templates import all_templates
from webrl.env.sites.templates.base import base_view, page_check, text_of, value_of
from webrl.env.tasks import load_tasks

pytestmark = pytest.mark.timeout(300)
PRODUCT = base_view().get("products", 3)


def _task(url_map, template_id: int, task_id: str, values: dict, block: dict):
    return load_tasks([all_templates()[template_id].task(task_id, values, block).to_dict()], url_map)[0]


def _price_task(url_map, task_id: str, price: str):
    check = page_check(f"__SHOPPING_ADMIN__/product/{PRODUCT['id']}", value_of("price"), exact=price)
    return _task(url_map, 205, task_id, {"product": PRODUCT["name"], "price": price}, check)


def _cart_task(url_map, task_id: str, qty: int):
    check = page_check("__SHOPPING__/cart", text_of("#cart"), include=[f"{PRODUCT['name']} | Qty: {qty} |"])
    return _task(url_map, 110, task_id, {"qty": qty, "product": PRODUCT["name"]}, check)


async def _lockstep(pool, backend, first, second) -> tuple[float | None, float | None, set[str]]:
    """Run two tasks' reference solutions one step each in turn; return both scores and the cookies."""
    async with pool.episode(first, backend) as a, pool.episode(second, backend) as b:
        episodes = [(a, ReferenceSolver(first), await a.reset()), (b, ReferenceSolver(second), await b.reset())]
        while not (a.done and b.done):
            for i, (episode, solver, observation) in enumerate(episodes):
                if not episode.done:
                    result = await episode.step(solver.act(observation.html))
                    episodes[i] = (episode, solver, result.observation)
        cookies = {c["value"] for ep in (a, b) for c in await ep.context.cookies() if c["name"] == EPISODE_COOKIE}
        return await a.evaluate(), await b.evaluate(), cookies


async def _score_untouched(pool, backend, task) -> float | None:
    async with pool.episode(task, backend) as episode:
        await episode.reset()
        await episode.step('exit(message="")')
        return await episode.evaluate()


def test_two_episodes_edit_the_same_price_and_cart_a_third_sees_the_base(run, pool, sites, backend):
    url_map = sites.url_map
    base_price = f"{PRODUCT['price']:.2f}"
    assert base_price not in ("11.99", "22.99")
    a_score, b_score, cookies = run(
        _lockstep(pool, backend, _price_task(url_map, "iso-a", "11.99"), _price_task(url_map, "iso-b", "22.99"))
    )
    assert (a_score, b_score) == (1.0, 1.0) and len(cookies) == 2
    a_score, b_score, _ = run(
        _lockstep(pool, backend, _cart_task(url_map, "cart-a", 2), _cart_task(url_map, "cart-b", 3))
    )
    assert (a_score, b_score) == (1.0, 1.0)
    # A fresh episode: the base price is still there, neither change is, and its cart is empty.
    assert run(_score_untouched(pool, backend, _price_task(url_map, "iso-c", base_price))) == 1.0
    assert run(_score_untouched(pool, backend, _price_task(url_map, "iso-d", "11.99"))) == 0.0
    assert run(_score_untouched(pool, backend, _cart_task(url_map, "cart-c", 2))) == 0.0
