"""The labels read every copy a phase's rollouts ran, though a relaunch changed `rollout.samples_per_task` after them.

`resume.allow_changes` lets a run go on with a new value from the next stage not done (`webrl.run_config`); the
copies the rollouts ran (`sampled_copies`: `ID`, `ID~1`) are on disk by then, and dropping some at labelling
would train on part of what ran. The real loop on the embedded sites, with a real tiny model behind `HFEngine`
(one step an episode), relaunched as the recipe relaunches it: `keep_run_config` checks and records the change,
then a new PhaseLoop runs with the new config. The loop is stopped where a killed process would stop it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.single_process import SingleProcess
from webrl.config import load_config
from webrl.data.trajectory import read_trajectories
from webrl.inference.hf import HFEngine
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.modules.model_factory import build_tiny_model
from webrl.run_config import keep_run_config
from webrl.run_state import RunState
from webrl.web_environment import WebEnvironment

pytestmark = pytest.mark.timeout(300)

SETTINGS = [
    "phases=0",
    "env.train_tasks=2",
    "env.max_steps=1",
    "rollout.max_tokens=4",
    "reward.source=evaluator",
    "reward.orm_labels=false",
]
"""Phase 0 only, on 2 tasks, one step an episode, labels from the evaluators: no model but the actor's loads."""


class Killed(Exception):
    """Stands for the process ending before the stage it is raised at."""


@pytest.fixture(scope="module")
def env() -> WebEnvironment:
    with WebEnvironment(load_config(WebRLConfig, [])) as environment:
        yield environment


@pytest.fixture(scope="module")
def actor(tmp_path_factory: pytest.TempPathFactory) -> HFEngine:
    corpus = ["Task Instruction: What is the price of the mug? <button id='1'> Buy </button>"] * 4
    model_dir = build_tiny_model(
        tmp_path_factory.mktemp("sft"), corpus, vocab_size=300, hidden_size=64, num_layers=1, num_heads=1
    )
    return HFEngine(model_dir)


def _launch(run_dir: Path, env: WebEnvironment, actor: HFEngine, stop_at: str, *overrides: str) -> PhaseLoop:
    """Launch the run as `recipes.webrl` does (its config kept first), and run it until `stop_at` would start."""
    config = load_config(WebRLConfig, [f"output_dir={run_dir}", *SETTINGS, *overrides])
    keep_run_config(run_dir, config, config.resume.allow_changes)
    loop = PhaseLoop(config, SingleProcess(), env, actor, sft_dir=actor.model_path, orm_dir=None, demonstrations=[])

    def killed(phase: int) -> dict[str, float]:
        raise Killed(f"phase {phase} {stop_at}")

    loop.stages = tuple((name, killed if name == stop_at else stage) for name, stage in loop.stages)
    with pytest.raises(Killed):
        loop.run()
    return loop


def test_labels_after_a_relaunch_with_fewer_samples_per_task_hold_every_copy_the_rollouts_ran(tmp_path, env, actor):
    run_dir = tmp_path / "run"
    first = _launch(run_dir, env, actor, "labels", "rollout.samples_per_task=2")
    ran = sorted(t.task.task_id for t in read_trajectories(first.layout.rollouts_path(0, 0)))
    tasks = sorted(task.task_id for task in first.layout.tasks(0))
    assert len(tasks) == 2 and ran == sorted([*tasks, *(f"{task}~1" for task in tasks)])

    relaunched = _launch(
        run_dir,
        env,
        actor,
        "replay",
        "rollout.samples_per_task=1",
        "resume.allow_changes=[rollout.samples_per_task]",
    )
    changes = json.loads(relaunched.layout.config_changes_path.read_text())
    assert changes == [{"from_phase": 0, "from_stage": "labels", "changes": {"rollout.samples_per_task": [2, 1]}}]
    assert RunState.load(relaunched.layout.state_path).done == ["curriculum", "rollouts", "labels"]
    assert len(read_trajectories(relaunched.layout.rollouts_path(0, 0))) == 4, "the rollouts were not run again"
    labelled = relaunched.layout.labelled(0)
    assert sorted(t.task.task_id for t in labelled) == ran, "every copy that ran is labelled, the ~1 copies too"
    metrics = json.loads(relaunched.layout.metrics_path(0, "labels").read_text())
    assert (metrics["train/episodes"], metrics["rollout/unlabelled"]) == (4, 0)
