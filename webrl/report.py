"""Plain-text tables of a run's results, for the terminal and the README."""

from __future__ import annotations

from typing import Any

from webrl.run_state import STAGES


def _pct(value: Any) -> str:
    return f"{100 * value:.1f}" if isinstance(value, (int, float)) else "-"


def _count(value: Any) -> str:
    return str(int(value)) if isinstance(value, (int, float)) else "-"


def format_phase_table(history: list[dict[str, Any]]) -> str:
    """One row per phase: test success (overall, per site), train success, ORM agreement, tasks, errors, time.

    The errors are episodes that ended in an error: `eval/errors` in the evaluation, `rollout/errors` in the rollouts.
    """
    if not history:
        return "(no finished phase)"
    sites = sorted(
        {key.split("/", 2)[2] for record in history for key in record if key.startswith("test/success_rate/")}
    )
    header = ["phase", "test %", *[f"{site} %" for site in sites], "train %", "ORM agree %", "tasks", "kept"]
    header += ["eval err", "rollout err", "min"]
    rows = [header]
    for record in history:
        rows.append(
            [
                str(record.get("phase")),
                _pct(record.get("test/success_rate")),
                *[_pct(record.get(f"test/success_rate/{site}")) for site in sites],
                _pct(record.get("train/success_rate")),
                _pct(record.get("orm/agreement")),
                str(int(record.get("curriculum/tasks", 0))),
                str(int(record.get("curriculum/kept", record.get("curriculum/tasks", 0)))),
                _count(record.get("eval/errors")),
                _count(record.get("rollout/errors")),
                f"{record.get('time/phase_s', 0.0) / 60:.1f}",
            ]
        )
    return _align(rows)


def format_stage_table(history: list[dict[str, Any]], before: dict[str, float] | None = None) -> str:
    """Minutes per stage of each phase (`time/<stage>_s`, every attempt of a resumed stage counted), and the total.

    `before` adds rows with a total alone, in seconds by name, for what ran before the phases (the SFT actor's
    training): so that the end of a run shows where its wall time went without opening the report.
    """
    stages = [stage for stage in STAGES if any(f"time/{stage}_s" in record for record in history)]
    rows = [["", *stages, "all (min)"]]
    totals = []
    for name, seconds in (before or {}).items():
        rows.append([name, *["" for _ in stages], f"{seconds / 60:.1f}"])
        totals.append(seconds)
    for record in history:
        seconds = record.get("time/phase_s", sum(record.get(f"time/{stage}_s", 0.0) for stage in stages))
        minutes = [_minutes(record.get(f"time/{stage}_s")) for stage in stages]
        rows.append([f"phase {record.get('phase')}", *minutes, f"{seconds / 60:.1f}"])
        totals.append(seconds)
    rows.append(["total", *["" for _ in stages], f"{sum(totals) / 60:.1f}"])
    return _align(rows)


def _minutes(seconds: Any) -> str:
    return f"{seconds / 60:.1f}" if isinstance(seconds, (int, float)) else "-"


def format_comparison(history: list[dict[str, Any]], baselines: dict[str, dict[str, float]]) -> str:
    """Held-out success of SFT (phase 0), each baseline and each WebRL phase: the learning table.

    `history` is a WebRL run's phase records (`test/...` keys); `baselines` maps a name to one
    evaluation's metrics (`success_rate`, `success_rate/<site>`).
    """
    rows: list[tuple[str, dict[str, float]]] = []
    strip = len("test/")
    phases = {int(r["phase"]): {k[strip:]: v for k, v in r.items() if k.startswith("test/")} for r in history}
    if 0 in phases:
        rows.append(("SFT", phases.pop(0)))
    rows.extend(baselines.items())
    rows.extend((f"WebRL phase {phase}", metrics) for phase, metrics in sorted(phases.items()))
    sites = sorted({key.split("/", 1)[1] for _, metrics in rows for key in metrics if key.startswith("success_rate/")})
    table = [["method", "test %", *[f"{site} %" for site in sites], "episodes"]]
    for name, metrics in rows:
        table.append(
            [
                name,
                _pct(metrics.get("success_rate")),
                *[_pct(metrics.get(f"success_rate/{site}")) for site in sites],
                str(int(metrics.get("episodes", 0))),
            ]
        )
    return _align(table)


def _align(rows: list[list[str]]) -> str:
    """Right-aligned columns (the first left-aligned) with a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for first, *rest in rows:
        cells = [cell.rjust(width) for cell, width in zip(rest, widths[1:], strict=True)]
        lines.append("  ".join([first.ljust(widths[0]), *cells]))
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def format_site_table(metrics: dict[str, float], title: str) -> str:
    """Success per site of one evaluation (keys `success_rate` and `success_rate/<site>`), and its errored
    episodes where `errors` is given (`infra_errors` of them left out of the rates)."""
    lines = [title, f"{'site':<16}{'success %':>10}"]
    for key, value in sorted(metrics.items()):
        if key.startswith("success_rate/"):
            lines.append(f"{key.split('/', 1)[1]:<16}{_pct(value):>10}")
    lines.append(f"{'all':<16}{_pct(metrics.get('success_rate')):>10}  ({int(metrics.get('episodes', 0))} episodes)")
    if "errors" in metrics:
        infra = int(metrics.get("infra_errors", 0))
        lines.append(f"errored episodes: {int(metrics['errors'])} ({infra} browser/site failures, not in the rates)")
    return "\n".join(lines)
