"""The shopping site's Magento REST API, as three of WebArena's `func:` helpers read it.

Some WebArena tasks change the shop (place an order, write a review), and their check needs a fact the agent's
page does not show: which order is the newest, who wrote a product's latest review and what it rated. WebArena
asks Magento's REST API for these with an admin token, and so does `MagentoAdminApi`:

- a token: POST `/rest/default/V1/integration/admin/token` with the admin's user name and password as a JSON
  object; Magento answers the token as a JSON string;
- the latest order: GET `/rest/V1/orders` sorted by `created_at` descending, one per page; the first item's
  `increment_id` (`"000000190"`) as a number makes the page to check, `/sales/order/view/order_id/190/`;
- a product's reviews: GET `/rest/V1/products/{sku}/reviews`, a JSON list oldest first; the latest review is the
  last one, its author the `nickname`, its rating the `percent` of the rating named "Rating" (`"80"` for four
  stars); no reviews gives "" for both, as in WebArena.

The API is the one at the shopping site's URL (`__SHOPPING__` in env.url_map). The admin account is the shop
admin's, from `WEBARENA_SHOPPING_ADMIN_USERNAME` and `WEBARENA_SHOPPING_ADMIN_PASSWORD` (the variables the
login recipe for shopping_admin reads); neither is ever logged or put in an error message. A call that cannot
be answered (no credentials, the site down, a refusal, an answer of another shape) raises `MagentoApiError`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from webrl.env.login import WEBARENA_LOGINS

TOKEN_PATH = "/rest/default/V1/integration/admin/token"
ORDERS_PATH = "/rest/V1/orders"
# The newest order first, and only that one.
LATEST_ORDER_QUERY = {
    "searchCriteria[sortOrders][0][field]": "created_at",
    "searchCriteria[sortOrders][0][direction]": "DESC",
    "searchCriteria[pageSize]": "1",
}
RATING_NAME = "Rating"


class MagentoApiError(RuntimeError):
    """The shop's REST API gave no usable answer; the message names the call and why, never a credential."""


class ShopUnreachableError(MagentoApiError):
    """The shop did not answer, or answered with a server error (HTTP 5xx): the site failed, not the task's config."""


@dataclass(frozen=True)
class AdminCredentials:
    """The shop admin's login for the REST API (the password is kept out of `repr`)."""

    username: str
    """The admin user name."""
    password: str = field(repr=False)
    """The admin password."""

    @classmethod
    def from_env(cls) -> AdminCredentials:
        """Read them from the shopping_admin login variables; MagentoApiError names the ones missing."""
        names = WEBARENA_LOGINS["shopping_admin"].credential_env("shopping_admin")
        values = [os.environ.get(name, "") for name in names]
        missing = [name for name, value in zip(names, values, strict=True) if not value]
        if missing:
            raise MagentoApiError(f"no shop admin credentials for the REST API: set {' and '.join(missing)}")
        return cls(*values)


def reviews_path(sku: str) -> str:
    """The reviews endpoint of one product; the SKU is one path segment, so `/` and spaces are escaped."""
    return f"/rest/V1/products/{quote(sku, safe='')}/reviews"


def order_url(base_url: str, search_result: Any) -> str:
    """The admin-side page of the newest order in an orders search result."""
    try:
        increment_id = search_result["items"][0]["increment_id"]
        number = int(increment_id)
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise MagentoApiError(f"{ORDERS_PATH} answered no order with a numeric increment_id ({err!r})") from err
    return f"{base_url.rstrip('/')}/sales/order/view/order_id/{number}/"


def _latest_review(reviews: Any, sku: str) -> dict[str, Any] | None:
    if not isinstance(reviews, list) or not all(isinstance(review, dict) for review in reviews):
        raise MagentoApiError(f"{reviews_path(sku)} answered {type(reviews).__name__}, not a list of reviews")
    return reviews[-1] if reviews else None


def review_author(reviews: Any, sku: str) -> str:
    """The nickname on the latest of a product's reviews ("" when it has none)."""
    latest = _latest_review(reviews, sku)
    return "" if latest is None else str(latest.get("nickname", ""))


def review_rating(reviews: Any, sku: str) -> str:
    """The percent of the latest review's "Rating" vote, as text ("" when there is no review or no such vote)."""
    latest = _latest_review(reviews, sku)
    if latest is None:
        return ""
    for rating in latest.get("ratings") or []:
        if isinstance(rating, dict) and rating.get("rating_name") == RATING_NAME:
            return str(rating.get("percent", ""))
    return ""


class MagentoAdminApi:
    """Admin-token calls to one shop's REST API; each helper call logs in afresh, as WebArena's do.

    Args:
        base_url: the shopping site's URL (env.url_map's `__SHOPPING__`).
        credentials: the shop admin's login; None reads it from the environment at the first call.
        timeout_s: how long one request may take before the call fails.
    """

    def __init__(self, base_url: str, credentials: AdminCredentials | None = None, timeout_s: float = 20.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.credentials = credentials
        self.timeout_s = timeout_s

    async def latest_order_url(self) -> str:
        """The page of the shop's newest order, `{base}/sales/order/view/order_id/{number}/`."""
        return order_url(self.base_url, await self._get(ORDERS_PATH, LATEST_ORDER_QUERY))

    async def latest_review_author(self, sku: str) -> str:
        return review_author(await self._get(reviews_path(sku)), sku)

    async def latest_review_rating(self, sku: str) -> str:
        return review_rating(await self._get(reviews_path(sku)), sku)

    async def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        credentials = self.credentials or AdminCredentials.from_env()
        async with httpx.AsyncClient(base_url=self.base_url, timeout=self.timeout_s) as client:
            login = {"username": credentials.username, "password": credentials.password}
            token = await self._send(client, "POST", TOKEN_PATH, json=login)
            if not isinstance(token, str) or not token:
                raise MagentoApiError(f"POST {TOKEN_PATH} answered {type(token).__name__}, not a token string")
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            return await self._send(client, "GET", path, params=params, headers=headers)

    async def _send(self, client: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> Any:
        """One request's JSON answer; MagentoApiError when the site is unreachable or answers other than 200."""
        where = f"{method} {self.base_url}{path}"
        try:
            response = await client.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise ShopUnreachableError(f"{where}: the shop's REST API is not reachable ({type(err).__name__})") from err
        if response.status_code != 200:
            failed = ShopUnreachableError if response.status_code >= 500 else MagentoApiError
            raise failed(f"{where} answered HTTP {response.status_code}: {response.text[:200]!r}")
        try:
            return response.json()
        except ValueError as err:
            raise MagentoApiError(f"{where} answered something that is not JSON: {response.text[:200]!r}") from err
