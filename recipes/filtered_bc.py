"""Filtered BC baseline: clone the SFT data plus a WebRL run's best-scored phase-1 rollouts, then evaluate.

As in the paper (App. B.2), Filtered BC is offline on WebRL's phase-1 interaction data: rollouts
whose ORM score reaches the 70th percentile are kept, the SFT demonstrations are added, and the
SFT actor is trained further on them. Run the WebRL recipe first (it writes the rollouts):

    python -m recipes.webrl
    python -m recipes.filtered_bc --config baseline_filtered_bc

It prints SFT, Filtered BC and every finished WebRL phase side by side on the held-out tasks, and
writes `<output_dir>/filtered_bc.json`. With several processes (`fabric.devices`), every rank trains and rank 0
alone evaluates and writes. A relaunch reuses the trained actor (`<output_dir>/actor`) while the settings and the
rollouts it was trained on hold; one that changes them on purpose (`resume.allow_changes=[filtered_bc.percentile]`)
trains again, and so does one whose source run was run again (new rollouts in the same directory), saying so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipes.evaluate import evaluate_checkpoint
from recipes.filtered_bc_config import FilteredBCConfig, FilteredBCRunConfig
from recipes.webrl import launch_and_keep, recipe_config
from webrl.baselines import (
    INPUTS_KEY,
    ROLLOUTS_KEY,
    phase_rollouts,
    rollouts_change,
    rollouts_sha256,
    settings_change,
    successful,
    top_scored,
    trained_settings,
)
from webrl.cache_builds import DONE_MARKER, build_once, is_built
from webrl.data.atomic_io import write_json_atomic
from webrl.data.trajectory import Trajectory, is_success
from webrl.report import format_comparison
from webrl.run_layout import RunLayout
from webrl.run_state import RunState
from webrl.web_environment import WebEnvironment

if TYPE_CHECKING:
    from lightning.fabric import Fabric


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Train (or reuse) the Filtered BC actor, evaluate it and write the summary; {} on ranks other than 0.

    torch and Lightning (`webrl.distributed`, `webrl.starting_models`) are imported here and in `train_actor`, once
    the config is read, so that `--help` and `--print-config` answer without seconds of imports they never use.
    """
    config = recipe_config(argv, FilteredBCRunConfig, usage=__doc__, runs_phases=False)
    from webrl.distributed import close_process_group
    from webrl.starting_models import ensure_sft

    settings = config.filtered_bc
    rollouts, kept, threshold = filtered_rollouts(settings)
    out_dir = Path(config.output_dir)
    fabric = launch_and_keep(out_dir, config)
    target = out_dir / "actor"
    with WebEnvironment(config) as env:
        sft, demos = ensure_sft(config, fabric, env)
        fabric.print(
            f"[filtered_bc] {len(kept)} of {len(rollouts)} phase-{settings.source_phase} rollouts have a "
            f"score ({settings.score}) >= {threshold:.3f}; training on them + {len(demos)} demonstrations"
        )
        train_actor(config, fabric, sft, kept + demos, target)
        # The evaluation is one process's (`evaluate_checkpoint`); the other ranks leave rather than wait for it in a
        # collective, which the process group's timeout (30 minutes) would end before a long evaluation does.
        close_process_group(fabric)
        if not fabric.is_global_zero:
            return {}
        results = evaluate_checkpoint(config, env, target, name="filtered_bc")
    summary = {
        "kept_rollouts": float(len(kept)),
        "rollouts": float(len(rollouts)),
        "threshold": threshold,
        "kept_success_rate": sum(is_success(t.eval_reward or 0.0) for t in kept) / max(1, len(kept)),
        **actor_marker(target).get("metrics", {}),
        **{f"test/{k}": v for k, v in results.items()},
    }
    write_json_atomic(out_dir / "filtered_bc.json", summary)
    history = RunState.load(RunLayout(settings.source_run).state_path).history
    print(format_comparison(history, {"Filtered BC": results}))
    return summary


def filtered_rollouts(settings: FilteredBCConfig) -> tuple[list[Trajectory], list[Trajectory], float]:
    """The source phase's rollouts, those kept and the cut that kept them; a missing or unusable source is one line."""
    try:
        rollouts = phase_rollouts(Path(settings.source_run), settings.source_phase)
        if settings.score == "orm":
            kept, threshold = top_scored(rollouts, settings.percentile)
        else:
            kept, threshold = successful(rollouts)
    except (ValueError, FileNotFoundError) as err:
        raise SystemExit(f"config error: {err}") from None
    return rollouts, kept, threshold


def train_actor(
    config: FilteredBCRunConfig, fabric: Fabric, sft: Path, trajectories: list[Trajectory], target: Path
) -> None:
    """Train the actor at `target` on `trajectories`, unless one trained on the same settings and rollouts stands there.

    The settings (`filtered_bc.*`, the seed, the SFT actor) are recorded in the actor's done marker, so that a
    relaunch that changes one on purpose (`resume.allow_changes=[filtered_bc.percentile]`) trains again instead
    of evaluating an actor of the old cut under the new cut's figures (`settings_change`, which also says how a
    marker without them is judged, and which the comparison asks too). The digest of the source rollouts is
    recorded beside them, since `filtered_bc.source_run` names a directory whose WebRL run can be removed and
    run again: new rollouts train again (`rollouts_change`, which also says how an actor recorded before the
    digest was is judged). Either is named in a line before the actor is trained again. Every rank trains or
    reuses by rank 0's answer (`build_once`).
    """
    source, phase = Path(config.filtered_bc.source_run), config.filtered_bc.source_phase
    settings = trained_settings(config.filtered_bc, config.seed, sft)
    inputs = {**settings, ROLLOUTS_KEY: rollouts_sha256(source, phase)}

    def change(path: Path) -> str:
        return settings_change(path, settings, Path(config.output_dir)) or rollouts_change(path, source, phase)

    def trained(path: Path) -> bool:
        return is_built(path) and not change(path)

    def train() -> None:
        from webrl.starting_models import train_sft

        stage = config.filtered_bc.train
        train_sft(config, fabric, sft, trajectories, target, settings=stage, name="filtered_bc", inputs=inputs)
        if fabric.is_global_zero:
            write_json_atomic(target / DONE_MARKER, {**actor_marker(target), INPUTS_KEY: inputs})

    if is_built(target) and (why := change(target)):
        fabric.print(f"[filtered_bc] {target}: {why}; training it again")
    build_once(target, train, fabric, done=trained)


def actor_marker(target: Path) -> dict[str, Any]:
    """The trained actor's done marker: its training metrics (those of the launch that trained it) and settings."""
    return json.loads((target / DONE_MARKER).read_text(encoding="utf-8"))


if __name__ == "__main__":
    main(sys.argv[1:])
