"""The HTTP server of the embedded websites: one process, one origin, every site under its own path.

`SitesServer` serves the shopping storefront (/shopping), its admin (/admin), the forum (/forum),
the code host (/gitlab) and the map (/map) from one `ThreadingHTTPServer` on 127.0.0.1. The
`webrl_episode` cookie selects the episode's overlay of the seeded data (`store.py`); a request
without it uses the shared overlay "". Each request holds its episode's lock, so one episode's
requests never interleave while different episodes run in parallel threads.

Run by hand with `python -m webrl.env.sites serve` (prints the base URL); `EmbeddedSites` starts
the same command as a subprocess.
"""

from __future__ import annotations

import re
import threading
import traceback
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from webrl.env.sites.data import DEFAULT_SEED, build_tables
from webrl.env.sites.html import esc, link
from webrl.env.sites.pages import admin, forum, gitlab, maps, shopping
from webrl.env.sites.routing import HttpError, Redirect, Request, Routes
from webrl.env.sites.store import EpisodeStore

EPISODE_COOKIE = "webrl_episode"
SITE_ROUTES: list[Routes] = [shopping.routes, admin.routes, forum.routes, gitlab.routes, maps.routes]
# url_map placeholder (WebArena's names) -> mount path of the site that plays its part.
PLACEHOLDERS = {
    "__SHOPPING__": "/shopping",
    "__SHOPPING_ADMIN__": "/admin",
    "__REDDIT__": "/forum",
    "__GITLAB__": "/gitlab",
    "__MAP__": "/map",
}
_EPISODE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_BODY = 64 * 1024


class SitesServer:
    """All embedded sites on one threaded HTTP server; `start()` serves in a background thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, seed: int = DEFAULT_SEED, max_episodes: int = 1024):
        self.store = EpisodeStore(build_tables(seed), max_episodes=max_episodes)
        self._httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url_map(self) -> dict[str, str]:
        return {placeholder: self.base_url + path for placeholder, path in PLACEHOLDERS.items()}

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.2)

    def request_shutdown(self) -> None:
        """Make `serve_forever` return; call it from another thread (it waits for the loop to stop)."""
        self._httpd.shutdown()

    def start(self) -> SitesServer:
        self._thread = threading.Thread(target=self.serve_forever, name="webrl-sites", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> SitesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def handle(self, method: str, target: str, cookie_header: str | None, body: bytes) -> tuple[int, dict, bytes]:
        """Route one request; returns (status, headers, body). Pure of sockets, so tests can call it."""
        parts = urlsplit(target)
        path = parts.path
        try:
            if path in ("", "/"):
                return 200, _html_headers(), _index().encode()
            for routes in SITE_ROUTES:
                if path == routes.root or path.startswith(routes.root + "/"):
                    return self._dispatch(routes, method, path[len(routes.root) :], parts.query, cookie_header, body)
            raise HttpError(404, f"Not found: {path} (sites live under {', '.join(PLACEHOLDERS.values())})")
        except HttpError as err:
            return _error_page(err.status, err.message)
        except Exception as err:  # a bug in a page handler: answer 500 and keep serving the others
            traceback.print_exc()
            return _error_page(500, f"Internal error: {type(err).__name__}: {err}")

    def _dispatch(self, routes: Routes, method: str, subpath: str, query: str, cookies: str | None, body: bytes):
        found = routes.match(method, subpath or "/")
        if found is None:
            raise HttpError(404, f"Not found: {routes.root}{subpath}")
        handler, groups = found
        form = _flat(parse_qs(body.decode("utf-8", "replace"))) if method == "POST" else {}
        view = self.store.view(_episode_id(cookies))
        req = Request(method, routes.root, routes.site, _flat(parse_qs(query)), form, view, routes.nav)
        with view.lock:
            result = handler(req, *groups)
        if isinstance(result, Redirect):
            return 303, {"Location": result.location, "Content-Length": "0"}, b""
        return 200, _html_headers(), result.encode()


def _error_page(status: int, message: str) -> tuple[int, dict, bytes]:
    page = f"<!doctype html><title>{status}</title><h1>Error {status}</h1><p>{esc(message)}</p>"
    return status, _html_headers(), page.encode()


def _flat(parsed: dict[str, list[str]]) -> dict[str, str]:
    return {key: values[-1] for key, values in parsed.items()}


def _episode_id(cookie_header: str | None) -> str:
    if not cookie_header:
        return ""
    try:
        jar = SimpleCookie(cookie_header)
    except CookieError:
        return ""
    morsel = jar.get(EPISODE_COOKIE)
    if morsel is None or not _EPISODE_ID.fullmatch(morsel.value):
        return ""
    return morsel.value


def _html_headers() -> dict[str, str]:
    return {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}


def _index() -> str:
    rows = "".join(f"<li>{link(r.root + '/', r.site)}</li>" for r in SITE_ROUTES)
    return f'<!doctype html><html lang="en"><title>webrl sites</title><h1>Embedded sites</h1><ul>{rows}</ul></html>'


def _make_handler(server: SitesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a browser reuses its connections
        # Headers and body go out as two writes; with Nagle's algorithm on, the second waits for the
        # client's delayed ACK (~40 ms per request on loopback).
        disable_nagle_algorithm = True

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._respond("GET", b"")

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self.send_error(413, f"form body over {_MAX_BODY} bytes")
                return
            self._respond("POST", self.rfile.read(length))

        def _respond(self, method: str, body: bytes) -> None:
            status, headers, payload = server.handle(method, self.path, self.headers.get("Cookie"), body)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if payload:
                self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (signature of the base class)
            """Silent: a rollout makes thousands of requests; errors reach the agent as pages."""

    return Handler
