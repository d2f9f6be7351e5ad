"""Filtered BC baseline: clone the SFT data plus a WebRL run's best-scored phase-1 rollouts, then evaluate.

As in the paper (App. B.2), Filtered BC is offline on WebRL's phase-1 interaction data: rollouts
whose ORM score reaches the 70th percentile are kept, the SFT demonstrations are added, and the
SFT actor is trained further on them. Run the WebRL recipe first (it writes the rollouts):

    python -m recipes.webrl
    python -m recipes.filtered_bc --config baseline_filtered_bc

It prints SFT, Filtered BC and every finished WebRL phase side by side on the held-out tasks, and
writes `<output_dir>/filtered_bc.json`.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from recipes.evaluate import evaluate_checkpoint
from recipes.filtered_bc_config import FilteredBCRunConfig
from recipes.webrl import keep_config, launch_fabric, recipe_config
from webrl.baselines import phase_rollouts, successful, top_scored
from webrl.cache_builds import is_built
from webrl.data.atomic_io import write_json_atomic
from webrl.data.trajectory import is_success
from webrl.report import format_comparison
from webrl.run_layout import RunLayout
from webrl.run_state import RunState
from webrl.starting_models import ensure_sft, train_sft
from webrl.web_environment import WebEnvironment


def main(argv: list[str] | None = None) -> dict[str, float]:
    config = recipe_config(argv, FilteredBCRunConfig, usage=__doc__)
    settings = config.filtered_bc
    try:
        rollouts = phase_rollouts(Path(settings.source_run), settings.source_phase)
        if settings.score == "orm":
            kept, threshold = top_scored(rollouts, settings.percentile)
        else:
            kept, threshold = successful(rollouts)
    except (ValueError, FileNotFoundError) as err:
        raise SystemExit(f"config error: {err}") from None
    out_dir = Path(config.output_dir)
    keep_config(out_dir, config)
    fabric = launch_fabric(config)
    with WebEnvironment(config) as env:
        sft, demos = ensure_sft(config, fabric, env)
        target = out_dir / "actor"
        print(
            f"[filtered_bc] {len(kept)} of {len(rollouts)} phase-{settings.source_phase} rollouts have a "
            f"{settings.score} >= {threshold:.3f}; training on them + {len(demos)} demonstrations"
        )
        metrics: dict[str, float] = {}
        if not is_built(target):
            inputs = {"filtered_bc": dataclasses.asdict(settings), "seed": config.seed, "sft": str(sft)}
            metrics = train_sft(
                config, fabric, sft, kept + demos, target, settings=settings.train, name="filtered_bc", inputs=inputs
            )
        results = evaluate_checkpoint(config, env, target, name="filtered_bc")
    summary = {
        "kept_rollouts": float(len(kept)),
        "rollouts": float(len(rollouts)),
        "threshold": threshold,
        "kept_success_rate": sum(is_success(t.eval_reward or 0.0) for t in kept) / max(1, len(kept)),
        **metrics,
        **{f"test/{k}": v for k, v in results.items()},
    }
    write_json_atomic(out_dir / "filtered_bc.json", summary)
    history = RunState.load(RunLayout(settings.source_run).state_path).history
    print(format_comparison(history, {"Filtered BC": results}))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
