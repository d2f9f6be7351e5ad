"""vLLM's own OpenAI API server on a local model directory, as a subprocess for the tests that need one.

It listens on 127.0.0.1 at a free port; the start-up wait is bounded and the server's log is shown when it
exits or does not answer in time. Leaving the context stops it (terminate, then kill).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

STARTUP_LIMIT_S = 420
"""Seconds vLLM may take to answer /models: model load and CPU kernel warm-up, far longer on a loaded machine."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def vllm_server(model_dir: Path, work: Path, *extra_args: str, max_model_len: int = 1024) -> Iterator[str]:
    """The server's base URL (ending in /v1) while it runs; `extra_args` go to its command line."""
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"]
    command += ["--max-model-len", str(max_model_len), "--enforce-eager", *extra_args]
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": "1"}
    log_path = work / "server.log"
    log = log_path.open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"vLLM server exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not up in {STARTUP_LIMIT_S}s:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()
