"""examples/gym_policy.py's OpenAI-compatible agent: SmolLM2-135M-Instruct served by vLLM drives MiniWoB++ pages.

The example runs as a script from a temporary folder, as a user would run it; the served model's answers are
whatever it makes of the WebRL prompt, so the test checks that the episode went through the server and the env,
not that the model solves the task.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from openai_server import vllm_server

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gym_policy.py"
pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(1800)]


def test_the_served_model_plays_miniwob_episodes_through_gymnasium(tmp_path, smollm2_dir):
    with vllm_server(smollm2_dir, tmp_path, max_model_len=4096) as base_url:
        args = ["--suite", "miniwob", "--policy", "openai", "--base-url", base_url, "--chat"]
        args += ["--episodes", "2", "--max-steps", "2", "--max-tokens", "48"]
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), *args],
            cwd=tmp_path,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        log = (tmp_path / "server.log").read_text()
    episodes = re.findall(r"reward ([01]\.0)  steps +(\d+)  (\w+)", done.stdout)
    assert len(episodes) == 2, done.stdout
    assert all(1 <= int(steps) <= 2 for _, steps, _ in episodes)
    assert log.count("POST /v1/chat/completions") == sum(int(steps) for _, steps, _ in episodes)
    assert re.search(r"mean reward [01]\.\d\d over 2 episodes", done.stdout)
