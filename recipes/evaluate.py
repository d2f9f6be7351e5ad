"""Evaluate a checkpoint on a task suite at temperature 0: success per site, as a table and JSON.

    python -m recipes.evaluate model.actor=runs/webrl_tiny/phase_003/actor
    python -m recipes.evaluate model.actor=PATH env.test_split=train env.test_tasks=0   # all train tasks

Results go to `<output_dir>/eval_<name>.json` and the trajectories beside them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from recipes.webrl import engine_options, recipe_config
from webrl.inference.engine import build_engine
from webrl.loop_config import WebRLConfig
from webrl.metrics import success_by_site
from webrl.report import format_site_table
from webrl.run_state import write_json_atomic
from webrl.web_environment import WebEnvironment


def evaluate_checkpoint(config: WebRLConfig, env: WebEnvironment, checkpoint: Path, name: str) -> dict[str, float]:
    """Greedy episodes of `checkpoint` on `env.test_split`; prints and saves success per site."""
    tasks = env.suite(config.env.test_split, config.env.test_tasks, config.seed)
    out_dir = Path(config.output_dir)
    engine = build_engine(config.rollout.engine, checkpoint, **engine_options(config))
    try:
        trajectories, rollout_metrics = env.run_episodes(
            engine, tasks, out_dir / f"eval_{name}.jsonl", phase=-1, evaluation=True, seed=config.seed
        )
    finally:
        engine.close()
    metrics = success_by_site(trajectories, key="eval_reward")
    write_json_atomic(out_dir / f"eval_{name}.json", {"checkpoint": str(checkpoint), **metrics, **rollout_metrics})
    print(format_site_table(metrics, f"{name}: {checkpoint} on {config.env.test_split} ({len(tasks)} tasks)"))
    return metrics


def main(argv: list[str] | None = None) -> dict[str, float]:
    config = recipe_config(argv)
    checkpoint = Path(config.model.actor)
    if not config.model.actor or not (checkpoint / "config.json").exists():
        raise SystemExit(f"model.actor={config.model.actor!r}: give the model directory to evaluate (with config.json)")
    with WebEnvironment(config) as env:
        return evaluate_checkpoint(config, env, checkpoint, name=checkpoint.name)


if __name__ == "__main__":
    main(sys.argv[1:])
