"""The shopping helpers' Magento REST calls, against recorded JSON shaped as Magento returns it (no shop runs here).

`magento_replay.MagentoReplay` answers from `recorded/magento_api.json` and keeps the requests, so each test
checks both how a request was built and what the answer was read as; the expected values are the recorded ones.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from magento_replay import RECORDED, TOKEN_PATH, MagentoReplay

from webrl.env.magento_api import LATEST_ORDER_QUERY, AdminCredentials, MagentoAdminApi, MagentoApiError

pytestmark = pytest.mark.timeout(60)

ADMIN = AdminCredentials(RECORDED["admin"]["username"], RECORDED["admin"]["password"])
BEARER = f"Bearer {RECORDED['token']}"


@pytest.fixture(scope="module")
def shop():
    with MagentoReplay() as server:
        yield server


def call(shop, method: str, *args, credentials=ADMIN):
    shop.requests.clear()
    return asyncio.run(getattr(MagentoAdminApi(shop.url + "/", credentials), method)(*args))


def test_latest_order_url_from_the_recorded_orders_search(shop):
    # increment_id "000000190" as a number, as WebArena builds it (entity_id 308 is not used).
    assert call(shop, "latest_order_url") == f"{shop.url}/sales/order/view/order_id/190/"
    token, orders = shop.requests
    assert token == {"method": "POST", "path": TOKEN_PATH, "query": {}, "auth": "", "body": RECORDED["admin"]}
    assert (orders["method"], orders["path"], orders["auth"]) == ("GET", "/rest/V1/orders", BEARER)
    assert orders["query"] == {
        "searchCriteria[sortOrders][0][field]": "created_at",
        "searchCriteria[sortOrders][0][direction]": "DESC",
        "searchCriteria[pageSize]": "1",
    }
    assert orders["query"] == LATEST_ORDER_QUERY


def test_latest_review_author_and_rating_from_the_recorded_reviews(shop):
    # The list is oldest first: Sarah Miller (100 %) wrote first, Emma Lopez (Value 40 %, Rating 60 %) last.
    assert call(shop, "latest_review_author", "MJ01-XS-Black") == "Emma Lopez"
    assert [r["path"] for r in shop.requests] == [TOKEN_PATH, "/rest/V1/products/MJ01-XS-Black/reviews"]
    assert shop.requests[1]["auth"] == BEARER
    assert call(shop, "latest_review_rating", "MJ01-XS-Black") == "60"
    # A review without a "Rating" vote has no rating to check.
    assert call(shop, "latest_review_author", "24-MB01") == "Adam Garcia"
    assert call(shop, "latest_review_rating", "24-MB01") == ""


def test_a_sku_with_a_slash_and_a_space_is_one_path_segment_and_no_reviews_read_as_empty(shop):
    assert call(shop, "latest_review_author", "WS03 XS/Blue") == ""
    assert shop.requests[1]["path"] == "/rest/V1/products/WS03%20XS%2FBlue/reviews"
    assert call(shop, "latest_review_rating", "WS03 XS/Blue") == ""


def test_refusals_name_the_call_and_never_the_password(shop):
    wrong = AdminCredentials("admin", "not-the-password")
    with pytest.raises(MagentoApiError, match=f"POST {shop.url}{TOKEN_PATH} answered HTTP 401") as err:
        call(shop, "latest_order_url", credentials=wrong)
    assert "not-the-password" not in str(err.value) and "not-the-password" not in repr(wrong)
    with pytest.raises(MagentoApiError, match="/rest/V1/products/NOPE/reviews answered HTTP 404"):
        call(shop, "latest_review_author", "NOPE")


def test_an_unreachable_shop_and_missing_credentials_are_named(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(MagentoApiError, match=f"POST {closed}{TOKEN_PATH}: the shop's REST API is not reachable"):
        asyncio.run(MagentoAdminApi(closed, ADMIN, timeout_s=5).latest_order_url())
    monkeypatch.delenv("WEBARENA_SHOPPING_ADMIN_USERNAME", raising=False)
    monkeypatch.setenv("WEBARENA_SHOPPING_ADMIN_PASSWORD", "s3cret")
    with pytest.raises(MagentoApiError, match="^no shop admin credentials .*: set WEBARENA_SHOPPING_ADMIN_USERNAME$"):
        asyncio.run(MagentoAdminApi(closed).latest_order_url())
    monkeypatch.setenv("WEBARENA_SHOPPING_ADMIN_USERNAME", "admin")
    assert AdminCredentials.from_env() == AdminCredentials("admin", "s3cret")
