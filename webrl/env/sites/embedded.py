"""`EmbeddedSites`: the embedded websites as a subprocess, started and stopped as a context manager.

    with EmbeddedSites() as sites:
        backend = sites.backend()                 # EmbeddedSitesBackend on sites.url_map
        tasks = load_suite("train", sites.url_map)

The server runs in its own process (`python -m webrl.env.sites serve --port 0`), so its request
handling never competes with the caller's event loop or GIL, and a crash of either side does not
take the other with it. The child prints its base URL as its first line; the port is chosen by the
OS, so several sets of sites (one per test worker) can run at once.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading

from webrl.env.evaluators import Judge
from webrl.env.sites.backend import EmbeddedSitesBackend
from webrl.env.sites.data import DEFAULT_SEED
from webrl.env.sites.server import PLACEHOLDERS


class EmbeddedSites:
    """Start the sites server as a child process; `url_map` and `backend()` point at it."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = DEFAULT_SEED,
        max_episodes: int = 1024,
        startup_timeout_s: float = 30.0,
    ) -> None:
        self.command = [
            sys.executable,
            "-m",
            "webrl.env.sites",
            "serve",
            "--host",
            host,
            "--port",
            str(port),
            "--seed",
            str(seed),
            "--max-episodes",
            str(max_episodes),
            "--exit-with-parent",
        ]
        self.startup_timeout_s = startup_timeout_s
        self.base_url = ""
        self._process: subprocess.Popen[str] | None = None

    @property
    def url_map(self) -> dict[str, str]:
        if not self.base_url:
            raise RuntimeError("EmbeddedSites is not started: use `with EmbeddedSites() as sites`")
        return {placeholder: self.base_url + path for placeholder, path in PLACEHOLDERS.items()}

    def backend(self, judge: Judge | None = None) -> EmbeddedSitesBackend:
        return EmbeddedSitesBackend(self.url_map, judge)

    def start(self) -> EmbeddedSites:
        if self._process is not None:
            raise RuntimeError("EmbeddedSites already started")
        # stderr is inherited: a server traceback shows up where the caller can read it, and an
        # undrained pipe could never fill up and block the server.
        # stdin stays open as a lifeline: when this process dies the child reads EOF and exits.
        self._process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        first_line: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: first_line.put(self._process.stdout.readline()), daemon=True).start()
        try:
            line = first_line.get(timeout=self.startup_timeout_s).strip()
        except queue.Empty:
            self.stop()
            raise RuntimeError(
                f"sites server did not start within {self.startup_timeout_s:g}s: {self.command}"
            ) from None
        if not line.startswith("http://"):
            self.stop()
            raise RuntimeError(f"sites server failed to start ({self.command}); first line {line!r}, see stderr above")
        self.base_url = line
        return self

    def stop(self) -> None:
        """Terminate the child (kill it if it does not exit within 5 s); safe to call twice."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> EmbeddedSites:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
