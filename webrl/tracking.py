"""Metric tracking for a run: Weights & Biases (offline when no key) plus a CSV file beside it.

Fabric's loggers carry the per-step metrics of the training stages; the phase loop adds per-phase
records (`log_phase`, also appended to `phases.csv`) and a table of sample trajectories per phase.
W&B is optional at run time: `mode=disabled` keeps only the CSV files, and an offline run needs no
key and no network (`wandb sync` uploads it later).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from lightning.fabric.loggers import CSVLogger

from webrl.data.trajectory import Trajectory

WANDB_MODES = ("online", "offline", "disabled")


def build_loggers(run_dir: Path, project: str, mode: str, config: dict[str, Any], run_name: str) -> list[Any]:
    """CSV always; W&B unless `mode` is "disabled". Resumed runs reuse the W&B run id saved in run_dir."""
    if mode not in WANDB_MODES:
        raise ValueError(f"tracking.wandb_mode must be one of {WANDB_MODES}, got {mode!r}")
    # A new version directory per launch: a resumed run adds metrics/version_N+1 instead of overwriting.
    loggers: list[Any] = [CSVLogger(root_dir=str(run_dir), name="metrics")]
    if mode == "disabled":
        return loggers
    from lightning.pytorch.loggers import WandbLogger

    os.environ["WANDB_MODE"] = mode
    id_file = run_dir / "wandb_run_id.txt"
    run_id = id_file.read_text().strip() if id_file.exists() else None
    logger = WandbLogger(
        project=project, name=run_name, save_dir=str(run_dir), id=run_id, resume="allow", config=config
    )
    if run_id is None:
        id_file.parent.mkdir(parents=True, exist_ok=True)
        id_file.write_text(logger.experiment.id)
    loggers.append(logger)
    return loggers


def append_csv(path: Path, record: dict[str, Any]) -> None:
    """Append one row; the header is the union of keys seen so far (the file is rewritten if it grows)."""
    rows: list[dict[str, Any]] = []
    if path.exists():
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    rows.append({key: _scalar(value) for key, value in record.items()})
    header: list[str] = []
    for row in rows:
        header.extend(key for key in row if key not in header)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def _scalar(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def log_trajectory_table(loggers: list[Any], phase: int, trajectories: list[Trajectory], limit: int) -> None:
    """A W&B table of a few trajectories (intent, steps, answer, rewards) for eyeballing a phase."""
    wandb_loggers = [logger for logger in loggers if type(logger).__name__ == "WandbLogger"]
    if not wandb_loggers or limit <= 0:
        return
    import wandb

    table = wandb.Table(columns=["task_id", "site", "intent", "actions", "answer", "status", "eval", "orm", "outcome"])
    for trajectory in trajectories[:limit]:
        actions = "\n".join(step.response for step in trajectory.steps)
        table.add_data(
            trajectory.task.task_id,
            trajectory.task.site,
            trajectory.task.intent,
            actions,
            trajectory.answer,
            trajectory.status,
            trajectory.eval_reward,
            trajectory.orm_score,
            trajectory.outcome,
        )
    for logger in wandb_loggers:
        logger.experiment.log({f"samples/phase_{phase:03d}": table})


def setup_logging() -> None:
    """Timestamped INFO logs on stderr for the recipes (the library itself only creates loggers)."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
