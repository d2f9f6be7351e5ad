"""A proxy that answers everything itself: the backstop that keeps an episode on its task's sites.

Playwright's request routing sees only the first URL of a request: the next hop of an HTTP
redirect, and the requests of a service worker, go to the network without it. So each episode's
browser context sends every request for a host outside its allowlist here instead: Chromium's
proxy bypass list names the allowed `host:port`s (they go direct, at full speed), and
`<-loopback>` ends Chromium's habit of never proxying loopback, since other local ports are outside
too. The proxy never connects anywhere. It answers plain http with 204 No Content, which for a
navigation means no navigation at all (the page stays where it was) and for a fetch an empty
answer, and refuses a CONNECT tunnel (https, wss) with 403. Each request it sees is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}
_NO_CONTENT = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_FORBIDDEN = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_REQUEST_TIMEOUT_S = 10.0


def host_port(origin: str) -> str:
    """`host:port` of an origin, the port explicit (Chromium's bypass rules match it for any scheme)."""
    parts = urlsplit(origin)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return f"{host}:{parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)}"


class OutsideProxy:
    """Started per episode; `context_proxy(allowed)` is the browser context's `proxy` option."""

    def __init__(self, on_blocked: Callable[[str], None] | None = None) -> None:
        self.on_blocked = on_blocked
        """Called with each refused request's URL (`//host:port` for a tunnel)."""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> OutsideProxy:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("OutsideProxy is not started: use `async with OutsideProxy() as proxy`")
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def context_proxy(self, allowed_origins: Iterable[str]) -> dict[str, Any]:
        """Playwright's `proxy` option for a context that may reach `allowed_origins` directly and nothing else."""
        bypass = ["<-loopback>", *sorted({host_port(origin) for origin in allowed_origins})]
        return {"server": self.url, "bypass": ",".join(bypass)}

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, target = await asyncio.wait_for(_read_request(reader), _REQUEST_TIMEOUT_S)
            if not target:
                return  # a connection opened ahead of time (preconnect) and left unused
            if self.on_blocked is not None:
                self.on_blocked(f"//{target}" if method == "CONNECT" else target)
            writer.write(_FORBIDDEN if method == "CONNECT" else _NO_CONTENT)
            await writer.drain()
        except (OSError, ValueError, asyncio.TimeoutError):
            return  # the browser gave up on the request; it was not let through either way
        finally:
            with contextlib.suppress(OSError):
                writer.close()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
    """Method and target of the request on `reader` (empty if there is none), its headers read past."""
    request_line = await reader.readline()
    while (await reader.readline()).strip():
        pass  # the headers: nothing in them changes the answer
    method, _, rest = request_line.decode("latin-1").partition(" ")
    return method, rest.strip().rsplit(" ", 1)[0]
