"""A local HTTP server for tests: a stand-in for a hosted OpenAI-compatible server (the engine, the judge), which
this machine cannot reach, or a small site of pages a browser test needs.

A handler subclass decides each reply, and `serve` runs it on a free port in a thread for the duration of a fixture.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StubHandler(BaseHTTPRequestHandler):
    """A request handler that sends whole replies with their length and keeps the test output quiet."""

    def reply(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


@contextmanager
def serve(handler: type[StubHandler], path: str = "/v1") -> Iterator[str]:
    """The base URL (`http://127.0.0.1:<port><path>`, an API's `/v1` by default) of `handler` served in a thread,
    shut down on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}"
    finally:
        server.shutdown()
        server.server_close()
