"""Metric tracking for a run: Weights & Biases (offline when no key) plus a CSV file beside it.

Fabric's loggers carry the per-step metrics of the training stages; the phase loop adds per-phase
records (`log_phase`, also appended to `phases.csv`) and a table of sample trajectories per phase.
W&B is optional at run time: `mode=disabled` keeps only the CSV files, and an offline run needs no
key and no network (`wandb sync` uploads it later).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import netrc
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from webrl.config_checks import at_least, one_of, require
from webrl.data.atomic_io import write_text_atomic
from webrl.data.trajectory import Trajectory
from webrl.run_layout import RunLayout, phase_name
from webrl.run_report import RunReport

WANDB_MODES = ("online", "offline", "disabled")
WANDB_ENVIRONMENT = {
    "WANDB_MODE": "tracking.wandb_mode",
    "WANDB_PROJECT": "tracking.wandb_project",
    "WANDB_ENTITY": "tracking.wandb_entity",
    "WANDB_DIR": "tracking.wandb_dir",
}
"""W&B's own environment variables and the keys they set: over the config files, under the command line."""

log = logging.getLogger(__name__)


@dataclass
class TrackingConfig:
    """Where metrics go (W&B's environment variables WANDB_MODE, _PROJECT, _ENTITY, _DIR override the files)."""

    wandb_project: str = "webrl"
    """W&B project."""
    wandb_entity: str = ""
    """W&B entity (team or user); empty = the key's default entity."""
    wandb_mode: str = "offline"
    """online | offline | disabled (online without a W&B key runs offline; CSV is always written)."""
    wandb_dir: str = ""
    """Directory W&B writes its run files under; empty = the run directory."""
    sample_trajectories: int = 8
    """Sample trajectories logged as a table per phase."""

    def validate(self) -> None:
        require(bool(self.wandb_project), "tracking.wandb_project", self.wandb_project, "must name a W&B project")
        one_of("tracking.wandb_mode", self.wandb_mode, WANDB_MODES)
        at_least("tracking.sample_trajectories", self.sample_trajectories, 0)


def wandb_key_configured() -> bool:
    """Whether W&B has an API key: $WANDB_API_KEY, or a netrc entry ($NETRC or ~/.netrc) for its host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def effective_wandb_mode(mode: str) -> str:
    """`mode`, except online without a key: that runs offline (`wandb sync` uploads it later) instead of prompting."""
    if mode == "online" and not wandb_key_configured():
        log.warning("tracking.wandb_mode=online but no W&B key is configured (WANDB_API_KEY, netrc): logging offline")
        return "offline"
    return mode


def build_loggers(
    run_dir: Path, tracking: TrackingConfig, config: dict[str, Any], run_name: str, *, primary: bool = True
) -> list[Any]:
    """CSV always; W&B unless its mode is "disabled". Resumed runs reuse the W&B run id saved in run_dir.

    Only the `primary` process (the future rank 0) starts the W&B run and saves its id: the others
    never log, and under torchrun or srun they start beside it on the same directory.
    """
    tracking.validate()
    layout = RunLayout(run_dir)
    loggers: list[Any] = [crash_safe_csv_logger(run_dir, layout.launch_logs_dir.name)]
    mode = effective_wandb_mode(tracking.wandb_mode)
    if mode == "disabled":
        return loggers
    from lightning.pytorch.loggers import WandbLogger

    os.environ["WANDB_MODE"] = mode
    id_file = layout.wandb_run_id_path
    run_id = id_file.read_text().strip() if id_file.exists() else None
    save_dir = tracking.wandb_dir or str(run_dir)
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    logger = WandbLogger(
        project=tracking.wandb_project,
        entity=tracking.wandb_entity or None,
        name=run_name,
        save_dir=save_dir,
        id=run_id,
        resume="allow",
        config=config,
    )
    if run_id is None and primary:
        write_text_atomic(id_file, logger.experiment.id)
    loggers.append(logger)
    return loggers


def crash_safe_csv_logger(run_dir: Path, name: str) -> Any:
    """Fabric's CSV logger under `run_dir/name/version_N` (a new version per launch: a resumed run adds one), made
    to keep what it was given through a crash.

    Each row is saved as it is logged: Fabric's default keeps up to 100 in memory, and a crash or an exception loses
    them, while a resumed stage goes on from its last checkpoint and never logs those batches again. A row with a new
    column makes Fabric rewrite the whole file under the wider header, which it does by truncating the file and
    writing it again; a crash in between left it empty, so here the rewrite is atomic.
    """
    # Lightning loads here, not at import: the run config that holds TrackingConfig is read without it.
    from lightning.fabric.loggers import CSVLogger
    from lightning.fabric.loggers.csv_logs import _ExperimentWriter
    from lightning.fabric.loggers.logger import rank_zero_experiment

    class AtomicRewriteWriter(_ExperimentWriter):
        def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
            with open(self.metrics_file_path, newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
            write_text_atomic(self.metrics_file_path, csv_text(fieldnames, rows))

    class CrashSafeCSVLogger(CSVLogger):
        @property
        @rank_zero_experiment
        def experiment(self) -> Any:
            if self._experiment is None:
                os.makedirs(self.root_dir, exist_ok=True)
                self._experiment = AtomicRewriteWriter(log_dir=self.log_dir)
            return self._experiment

    return CrashSafeCSVLogger(root_dir=str(run_dir), name=name, flush_logs_every_n_steps=1)


def csv_text(header: list[str], rows: list[dict[str, Any]]) -> str:
    """The whole CSV as one string, so that its writers can put it in place atomically (`write_text_atomic`)."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=header)
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def write_phase_row(path: Path, record: dict[str, Any]) -> None:
    """Put `record` in the CSV as the row of its phase: a new row, or the replacement of that phase's row.

    Keyed by `record["phase"]`, so a checkpoint redone after a crash rewrites its row rather than adding
    a second one. The header is the union of the keys seen so far; the whole file is rewritten atomically.
    """
    rows: list[dict[str, Any]] = []
    if path.exists():
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    row = {key: _scalar(value) for key, value in record.items()}
    rows = [old for old in rows if str(old.get("phase")) != str(row["phase"])] + [row]
    rows.sort(key=lambda r: int(r["phase"]))
    header: list[str] = []
    for each in rows:
        header.extend(key for key in each if key not in header)
    write_text_atomic(path, csv_text(header, rows))


def _scalar(value: Any) -> Any:
    """A float to 6 decimals for a readable CSV, but below 1 to 6 significant digits: 6 decimals would cut a
    small metric (a 2.84e-06 s stage, a 7.018e-05 mean critic value) to one digit, or to 0 below 5e-07."""
    if not isinstance(value, float) or not math.isfinite(value):
        return value
    return round(value, 6) if abs(value) >= 1 else float(f"{value:.6g}")


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
        logger.experiment.log({f"samples/{phase_name(phase)}": table})


def log_phase_views(
    loggers: list[Any], phase: int, layout: RunLayout, report: RunReport | None, sample_trajectories: int
) -> None:
    """What a person looks at after a phase, sent to W&B: the run report (`webrl.run_report.write_run_report`)
    with its plots, and a table of sample trajectories."""
    log_trajectory_table(loggers, phase, layout.labelled(phase), sample_trajectories)
    log_html_report(loggers, phase, report)


def log_html_report(loggers: list[Any], phase: int, report: RunReport | None) -> None:
    """The run report written at the end of `phase` (`webrl.run_report`) as W&B HTML media under `report`,
    and each of its plots as image media under `report/<plot>` (W&B shows those per step, phase by phase)."""
    wandb_loggers = [logger for logger in loggers if type(logger).__name__ == "WandbLogger"]
    if report is None or not wandb_loggers:
        return
    import wandb
    from PIL import Image

    media: dict[str, Any] = {"report": wandb.Html(report.path.read_text(encoding="utf-8")), "report/phase": phase}
    for name, plot in report.plots.items():
        media[f"report/{name}"] = wandb.Image(Image.open(io.BytesIO(plot.png)), caption=f"{name}, phase {phase}")
    for logger in wandb_loggers:
        logger.experiment.log(media)


def setup_logging() -> None:
    """Timestamped INFO logs on stderr for the recipes (the library itself only creates loggers)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
