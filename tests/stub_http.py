"""A local HTTP server for the tests of clients of OpenAI-compatible servers (the engine, the judge).

It stands in for a hosted server, which this machine cannot reach: a handler subclass decides each reply,
and `serve` runs it on a free port in a thread for the duration of a fixture.
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
def serve(handler: type[StubHandler]) -> Iterator[str]:
    """The base URL (`http://127.0.0.1:<port>/v1`) of `handler` served in a thread, shut down on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
