"""The examples run against the built wheel, from a folder outside the checkout.

The wheel is built from this checkout and installed with `--no-deps` into a temporary folder that goes first
on `PYTHONPATH` (its dependencies come from the test's own environment). Each example is copied into another
temporary folder and run there, so nothing reaches the checkout by a relative path; the run checks that
`webrl` and `recipes` were imported from the wheel and that a packaged config is found by name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]
RUN_TIMEOUT = 1800
"""Seconds a command may take: minutes on an idle machine, far longer on a loaded one (the recipes import Lightning)."""
BUILD_IGNORES = (".git", ".venv", "build", "dist", "*.egg-info", "runs", "outputs", "wandb", ".cache", "__pycache__")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the wheel is installed into (`pip install --target`)."""
    # A copy of the sources, so that the build's own folders (build/, *.egg-info) never touch the checkout.
    source = tmp_path_factory.mktemp("source") / "webrl"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*BUILD_IGNORES))
    dist = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        check=True,
        timeout=RUN_TIMEOUT,
    )
    (wheel,) = dist.glob("webrl-*.whl")
    site = tmp_path_factory.mktemp("site")
    subprocess.run(
        [*pip, "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        timeout=RUN_TIMEOUT,
    )
    return site


def run_outside(installed: Path, folder: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(installed), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    done = subprocess.run(
        [sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_wheel_is_what_runs_and_ships_the_configs(installed, tmp_path):
    where = run_outside(
        installed, tmp_path, "-c", "import webrl, recipes; print(webrl.__file__); print(recipes.__file__)"
    )
    assert all(Path(line).is_relative_to(installed) for line in where.split())
    assert sorted(p.name for p in (installed / "recipes" / "configs").glob("*.yaml")) == sorted(
        p.name for p in (ROOT / "recipes" / "configs").glob("*.yaml")
    )
    assert {p.name for p in (installed / "webrl" / "env" / "sites" / "suites").glob("*.json")} == {
        "test.json",
        "train.json",
    }
    printed = run_outside(installed, tmp_path, "-m", "recipes.webrl", "--config", "webrl_smollm2", "--print-config")
    assert f"output_dir: {tmp_path.resolve() / 'runs' / 'webrl_smollm2'}\n" in printed  # under the folder it ran in
    assert "max_length: 1536" in printed


@pytest.mark.parametrize(
    ("example", "args", "expected"),
    [
        ("text_task_training.py", ("--out", "out"), "actor parameters:"),
        ("orm_custom_judge.py", ("--out", "out"), "add 2 and 3 -> answer 6: P(YES) ="),
        # The reference solver on two test tasks of the embedded sites, which the env starts and stops itself.
        ("gym_policy.py", ("--episodes", "2"), "mean reward 1.00 over 2 episodes"),
    ],
)
def test_an_example_runs_on_the_wheel_from_outside_the_checkout(installed, tmp_path, example, args, expected):
    shutil.copy(ROOT / "examples" / example, tmp_path / example)
    out = run_outside(installed, tmp_path, example, *args)
    assert expected in out
