"""Request, response and routing primitives shared by the site modules.

A site module declares `routes = Routes("/shopping", "OneStopShop")` and decorates plain
functions `handler(req, *url_groups) -> str | Redirect`. The server finds the route, builds a
`Request` bound to the caller's episode view, and turns the result into an HTTP response. Every
state change is a POST answered by a redirect (post/redirect/get), so reloading a page or going
back never repeats an action.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlencode

from webrl.env.sites.store import EpisodeView

Handler = Callable[..., "str | Redirect"]


class HttpError(Exception):
    """An error page with a status code (404 for an unknown path or record, 400 for a bad form)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def not_found(what: str) -> HttpError:
    return HttpError(404, f"Not found: {what}")


@dataclass(frozen=True)
class Redirect:
    """A 303 See Other to `location` (a path on this server)."""

    location: str


@dataclass
class Request:
    """One request as a handler sees it: path parameters come as handler arguments."""

    method: str
    root: str
    site: str
    query: dict[str, str]
    form: dict[str, str]
    view: EpisodeView
    nav: list[tuple[str, str]] = field(default_factory=list)

    def url(self, path: str = "/", **params: object) -> str:
        """A link to `path` under this site's root, with the non-empty `params` as the query string."""
        kept = {k: v for k, v in params.items() if v not in (None, "")}
        return self.root + path + ("?" + urlencode(kept) if kept else "")

    def arg(self, name: str, default: str = "") -> str:
        """A query (GET) or form (POST) field, stripped."""
        source = self.form if self.method == "POST" else self.query
        return source.get(name, default).strip()

    def page_number(self) -> int:
        raw = self.query.get("page", "1")
        if not raw.isdigit() or int(raw) < 1:
            raise HttpError(400, f"page must be a positive integer, got {raw!r}")
        return int(raw)

    def int_field(self, name: str, low: int, high: int) -> int:
        """An integer form/query field within [low, high], else a 400 that names the field."""
        raw = self.arg(name)
        try:
            value = int(raw)
        except ValueError:
            raise HttpError(400, f"{name} must be a whole number, got {raw!r}") from None
        if not low <= value <= high:
            raise HttpError(400, f"{name} must be between {low} and {high}, got {value}")
        return value


class Routes:
    """The route table of one site, mounted under `root` (e.g. "/shopping")."""

    def __init__(self, root: str, site: str, nav: list[tuple[str, str]]) -> None:
        self.root = root
        self.site = site
        self.nav = [(root + path, text) for path, text in nav]
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []

    def get(self, pattern: str) -> Callable[[Handler], Handler]:
        return self._add("GET", pattern)

    def post(self, pattern: str) -> Callable[[Handler], Handler]:
        return self._add("POST", pattern)

    def _add(self, method: str, pattern: str) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self._routes.append((method, re.compile(pattern), handler))
            return handler

        return register

    def match(self, method: str, subpath: str) -> tuple[Handler, tuple[str, ...]] | None:
        """The handler and URL groups for `subpath` (the path below `root`), or None.

        A path that exists for another method is a 405, not a 404, so a form posted to a GET page
        is reported as such.
        """
        other_method = False
        for route_method, pattern, handler in self._routes:
            found = pattern.fullmatch(subpath)
            if found is None:
                continue
            if route_method == method:
                return handler, found.groups()
            other_method = True
        if other_method:
            raise HttpError(405, f"{method} is not allowed on {self.root}{subpath}")
        return None
