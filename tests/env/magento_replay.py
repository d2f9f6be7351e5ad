"""A local HTTP server that answers Magento REST calls from recorded JSON (`recorded/magento_api.json`).

No Magento runs here, so the shopping helpers are tested against answers written in the shape Magento returns
them. The server checks what a real shop would (the admin login, the bearer token, the orders query) and
keeps every request it saw, so tests can assert how the requests were built. Any other GET is a shop page:
the newest order's page, or a plain home page.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

RECORDED = json.loads((Path(__file__).parent / "recorded" / "magento_api.json").read_text(encoding="utf-8"))
TOKEN_PATH = "/rest/default/V1/integration/admin/token"
ORDER_PAGE = "/sales/order/view/order_id/190/"


class _Handler(BaseHTTPRequestHandler):
    server: _ReplayServer

    def log_message(self, format: str, *args: object) -> None:
        return

    def _answer(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = (json.dumps(body) if content_type == "application/json" else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self, body: Any = None) -> tuple[str, dict[str, str]]:
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        auth = self.headers.get("Authorization", "")
        self.server.requests.append(
            {"method": self.command, "path": parts.path, "query": query, "auth": auth, "body": body}
        )
        return parts.path, query

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
        path, _ = self._record(body)
        if path != TOKEN_PATH:
            self._answer(404, {"message": "Request does not match any route."})
        elif body != RECORDED["admin"]:
            self._answer(401, {"message": "The account sign-in was incorrect or your account is disabled temporarily."})
        else:
            self._answer(200, RECORDED["token"])

    def do_GET(self) -> None:
        path, query = self._record()
        if not path.startswith("/rest/"):
            page = (
                RECORDED["order_page"] if path == ORDER_PAGE else "<html><body><h1>One Stop Market</h1></body></html>"
            )
            self._answer(200, page, "text/html")
        elif self.headers.get("Authorization") != f"Bearer {RECORDED['token']}":
            self._answer(401, {"message": "The consumer isn't authorized to access %resources."})
        elif path == "/rest/V1/orders":
            self._answer(200, RECORDED["orders"])
        elif path.startswith("/rest/V1/products/") and path.endswith("/reviews"):
            sku = unquote(path.removeprefix("/rest/V1/products/").removesuffix("/reviews"))
            if sku in RECORDED["reviews"]:
                self._answer(200, RECORDED["reviews"][sku])
            else:
                self._answer(404, {"message": "The product that was requested doesn't exist. Verify the product."})
        else:
            self._answer(404, {"message": "Request does not match any route."})


class _ReplayServer(ThreadingHTTPServer):
    daemon_threads = True
    requests: list[dict[str, Any]]


class MagentoReplay:
    """Serve the recorded answers at `url` until closed; `requests` lists what was asked, in order."""

    def __init__(self) -> None:
        self._server = _ReplayServer(("127.0.0.1", 0), _Handler)
        self._server.requests = []
        self._thread = threading.Thread(target=self._server.serve_forever, name="magento-replay", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._server.requests

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MagentoReplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
