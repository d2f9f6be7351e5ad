"""A threaded static file server on 127.0.0.1, for task pages that ship as files (MiniWoB++, tests).

Serving over http rather than file:// keeps one code path for all sites: the host allowlist,
origins and evaluators work the same, and pages behave as they would on a web server. The port is
ephemeral so parallel runs and test workers never collide.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _QuietHandler(SimpleHTTPRequestHandler):
    """Serves files without logging each request to stderr (thousands per benchmark run)."""

    # HTTP/1.1 keeps connections alive, so a page's scripts and styles reuse one socket.
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A browser context closed mid-download resets its connections; that is not an error here.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class StaticServer:
    """Serve `root` at `http://127.0.0.1:<port>/` from a daemon thread until `close()`."""

    def __init__(self, root: str | os.PathLike, host: str = "127.0.0.1", port: int = 0) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"static server root {self.root} is not a directory")
        handler = functools.partial(_QuietHandler, directory=str(self.root))
        self._server = _Server((host, port), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="webrl-static", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Base URL without a trailing slash, e.g. `http://127.0.0.1:40123`."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> StaticServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
