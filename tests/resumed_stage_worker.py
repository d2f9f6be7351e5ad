"""A real phase 0 of the loop, for tests/test_resumed_stage_figures.py to kill in a stage and run again.

Run as `python -m tests.resumed_stage_worker RUN_DIR` from the repository root (so that it imports that checkout's
webrl); `WEBRL_FAULT` may name a point to end at. The loop is PhaseLoop with every one of its stages, on a CPU
Fabric, the embedded sites server and real Chromium; the engine is the sites' reference solver taking `STEP_S` per
call, so that each episode takes a known least time and a test can kill the run between two episodes. Labels come
from the evaluator, so no model is loaded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

STEP_S = 0.5
"""The engine's seconds per call: one call per step (one prompt a call with `rollout.concurrency=1`)."""

TASKS = 4
"""Episodes in each of the rollouts and the evaluation."""

OVERRIDES = (
    "phases=0",
    f"env.train_tasks={TASKS}",
    f"env.test_tasks={TASKS}",
    "env.max_steps=10",
    "rollout.concurrency=1",
    "rollout.samples_per_task=1",
    "reward.source=evaluator",
    "reward.orm_labels=false",
    "tracking.wandb_mode=disabled",
)


def main(run_dir: Path) -> None:
    from lightning.fabric import Fabric

    from webrl.config import load_config
    from webrl.env.limits import EpisodeLimits
    from webrl.inference.scripted import ScriptedEngine
    from webrl.loop import PhaseLoop
    from webrl.loop_config import WebRLConfig
    from webrl.web_environment import WebEnvironment

    class SlowSolver(ScriptedEngine):
        """The reference solver as a reloadable engine that takes `STEP_S` a call (a model that decodes)."""

        model_path = run_dir / "sft"

        def generate(self, prompts, params):
            time.sleep(STEP_S)
            return super().generate(prompts, params)

        def reload(self, model_path) -> None:
            self.model_path = Path(model_path)

        def push_weights(self, named_tensors, model_path=None) -> None:
            raise AssertionError("phase 0 trains nothing to push")

    class PatientEnvironment(WebEnvironment):
        """Generous per-action limits: the 2 cores are shared, and a slow step must not read as a failed episode."""

        def limits(self) -> EpisodeLimits:
            return EpisodeLimits(max_steps=self.config.env.max_steps, action_timeout_s=30.0, reset_timeout_s=120.0)

    config = load_config(WebRLConfig, [f"output_dir={run_dir}", *OVERRIDES])
    fabric = Fabric(accelerator="cpu", devices=1)
    with PatientEnvironment(config) as env:
        engine = SlowSolver.for_embedded_sites()
        PhaseLoop(config, fabric, env, engine, sft_dir=run_dir / "sft", orm_dir=None, demonstrations=[]).run()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
