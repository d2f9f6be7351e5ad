"""WebArena's `func:` helpers for program_html: the page to open, or the value to check, computed at evaluation.

A program_html target's `url` or `locator` may read `func:name(args)`. In the url, the helper's value is the
page to open, and `__last_url__` in it stands for the URL the episode ended on; in the locator, the value is
the content to check, and `__page__` stands for the browser page (after the target's page was opened). WebArena
runs these with Python's `eval`; here the expression is parsed (a call of a known helper with string literals
and `__page__` as arguments, nothing else) so that a task config cannot run code.

The helpers, by what they need:

- `reddit_get_post_url(url)`: the post a Postmill URL is on, `scheme://host/f/{forum}/{post}/`, from any page
  under it (a comment, the post's slug); a URL that is not under `/f/{forum}/` comes back unchanged. A forum URL
  with a trailing slash gives `/f/{forum}//`, no post's page, exactly as WebArena's does, so the check fails alike.
- `gitlab_get_project_memeber_role(page, account_name)` (WebArena's spelling): the role shown for `@account_name`
  in a GitLab members table, "" when the account is not listed. WebArena pairs the n-th account cell with the
  n-th role span of the page; this reads the role cell of the account's own row, the same answer whenever each
  role cell shows one role.
- `shopping_get_latest_order_url()`, `shopping_get_sku_latest_review_author(sku)`,
  `shopping_get_sku_latest_review_rating(sku)`: asked of the shop's REST API (`webrl.env.magento_api`).
"""

from __future__ import annotations

import ast
import contextlib
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from playwright.async_api import Error as PlaywrightError

from webrl.env.magento_api import AdminCredentials, MagentoAdminApi, MagentoApiError
from webrl.env.python_syntax import parse_expression

PREFIX = "func:"
LAST_URL = "__last_url__"
PAGE = "__page__"
# Each helper's parameters, by name; `page` is the browser page (`__page__`), every other one a string.
SIGNATURES: dict[str, tuple[str, ...]] = {
    "reddit_get_post_url": ("url",),
    "gitlab_get_project_memeber_role": ("page", "account_name"),
    "shopping_get_latest_order_url": (),
    "shopping_get_sku_latest_review_author": ("sku",),
    "shopping_get_sku_latest_review_rating": ("sku",),
}
# GitLab renders its members table after the page has loaded; wait this long for it before reading.
MEMBERS_TABLE_WAIT_MS = 5000
_NAME = re.compile(r"\s*([A-Za-z_]\w*)")
_MEMBER_ROLE = """(account) => {
  for (const row of document.querySelectorAll('tr')) {
    const names = row.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel");
    if (![...names].some((name) => name.innerText.trim() === '@' + account)) continue;
    const role = row.querySelector('td.col-max-role span');
    return role ? role.innerText.trim() : '';
  }
  return '';
}"""


class HelperCallError(ValueError):
    """A `func:` expression that is not a call webrl can make; the message names the helper and what is wrong."""


class UnknownHelperError(HelperCallError):
    """A `func:` expression calling a helper webrl does not implement."""

    def __init__(self, name: str) -> None:
        supported = ", ".join(f"{helper}()" for helper in SIGNATURES)
        super().__init__(f"calls WebArena helper {name}(), which webrl does not implement (it has {supported})")
        self.name = name


@dataclass(frozen=True)
class HelperCall:
    """A parsed `func:` expression: the helper's name and its arguments (`PAGE` marks the browser page)."""

    name: str
    """The helper's name, one of SIGNATURES."""
    args: tuple[str, ...]
    """String arguments as written (`__last_url__` not yet replaced); the PAGE marker where `__page__` stands."""


def parse_call(expression: str) -> HelperCall:
    """Parse `func:name('a', __page__)` (the prefix optional) into a HelperCall; HelperCallError if it is not one."""
    text = expression.strip().removeprefix(PREFIX).strip()
    named = _NAME.match(text)
    label = f"{named.group(1)}()" if named else repr(text[:60])
    try:
        tree = parse_expression(text)
    except SyntaxError as err:
        raise HelperCallError(f"calls {label} in an expression that does not parse: {text!r}") from err
    if not isinstance(tree, ast.Call) or not isinstance(tree.func, ast.Name) or tree.keywords:
        raise HelperCallError(f"calls {label} in {text!r}, which is not a plain call name(arg, ...)")
    if tree.func.id not in SIGNATURES:
        raise UnknownHelperError(tree.func.id)
    args = []
    for arg in tree.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            args.append(arg.value)
        elif isinstance(arg, ast.Name) and arg.id == PAGE:
            args.append(PAGE)
        else:
            raise HelperCallError(f"calls {label} with {ast.unparse(arg)}: arguments are strings or {PAGE}")
    params = SIGNATURES[tree.func.id]
    if len(args) != len(params) or any(
        (param == "page") != (arg == PAGE) for param, arg in zip(params, args, strict=True)
    ):
        wanted = ", ".join(PAGE if param == "page" else f"'{param}'" for param in params)
        raise HelperCallError(f"calls {label} as {ast.unparse(tree)}; it takes ({wanted})")
    return HelperCall(tree.func.id, tuple(args))


def reddit_post_url(url: str) -> str:
    """The post page `scheme://host/f/{forum}/{post}/` that a Postmill URL lies under; other URLs as they are."""
    parts = urlsplit(url)
    segments = parts.path.split("/")
    if len(segments) < 4 or segments[1] != "f":
        return url
    return f"{parts.scheme}://{parts.netloc}/f/{segments[2]}/{segments[3]}/"


async def gitlab_member_role(page: Any, account_name: str) -> str:
    """The role GitLab's members table on `page` shows for `@account_name`; "" when the account is not in it."""
    with contextlib.suppress(PlaywrightError):  # no table (a 404, another page): the lookup below answers "".
        await page.wait_for_selector("td[data-label='Account']", timeout=MEMBERS_TABLE_WAIT_MS)
    try:
        return str(await page.evaluate(_MEMBER_ROLE, account_name))
    except PlaywrightError:  # a page that went away mid-read has no role to show, as in WebArena
        return ""


class WebArenaHelpers:
    """Runs the `func:` helpers of program_html targets for one deployment of the sites.

    Args:
        url_map: placeholder -> site URL (`__SHOPPING__` is where the shopping helpers' REST API is).
        credentials: the shop admin's login for that API; None reads it from the environment when needed.
        timeout_s: how long one API request may take.
    """

    def __init__(
        self,
        url_map: dict[str, str] | None = None,
        credentials: AdminCredentials | None = None,
        timeout_s: float = 20.0,
    ) -> None:
        self.url_map = dict(url_map or {})
        self.credentials = credentials
        self.timeout_s = timeout_s

    async def run(self, call: HelperCall, page: Any) -> str:
        """The helper's value for the episode's `page` (its URL replaces `__last_url__` in the arguments).

        Raises MagentoApiError when a shopping helper's API cannot answer.
        """
        args = [arg.replace(LAST_URL, page.url) for arg in call.args]
        if call.name == "reddit_get_post_url":
            return reddit_post_url(args[0])
        if call.name == "gitlab_get_project_memeber_role":
            return await gitlab_member_role(page, args[1])
        shop = self._shop()
        if call.name == "shopping_get_latest_order_url":
            return await shop.latest_order_url()
        if call.name == "shopping_get_sku_latest_review_author":
            return await shop.latest_review_author(args[0])
        return await shop.latest_review_rating(args[0])

    def _shop(self) -> MagentoAdminApi:
        base = self.url_map.get("__SHOPPING__")
        if not base:
            raise MagentoApiError(
                f"env.url_map has no __SHOPPING__ URL for the shop's REST API (has {sorted(self.url_map)})"
            )
        return MagentoAdminApi(base, self.credentials, self.timeout_s)
