"""The report's plots, drawn with matplotlib into inline SVG strings and PNG copies (no file, no network, no display).

SVG keeps the figures sharp at any zoom and, with text kept as text (`svg.fonttype: none`), small:
a few tens of KB each; a PNG copy of each goes to W&B as image media. Each function returns None when
the run holds nothing to draw, so that the report can say so in place of the figure.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webrl.report_baselines import Baseline
from webrl.report_data import PhaseFigures, Rate, RunFigures
from webrl.run_state import PHASE_STEPS, STAGES

PNG_DPI = 100
"""Resolution of the PNG copies (a 6 x 3 inch figure: about 600 x 300 pixels)."""
_STYLE = {"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


@dataclass(frozen=True)
class Plot:
    """One figure drawn twice: SVG for the HTML report, PNG for W&B's image media (which takes no SVG)."""

    svg: str
    png: bytes


def _draw(figure: Any) -> Plot:
    plt = _pyplot()
    buffer = io.StringIO()
    # No metadata block: it names matplotlib's web site, and the report holds no external address.
    figure.savefig(
        buffer,
        format="svg",
        bbox_inches="tight",
        metadata={"Creator": None, "Date": None, "Format": None, "Type": None},
    )
    raster = io.BytesIO()
    figure.savefig(raster, format="png", bbox_inches="tight", dpi=PNG_DPI)
    plt.close(figure)
    text = buffer.getvalue()
    return Plot(text[text.index("<svg") :], raster.getvalue())


def _errors(rates: list[Rate]) -> list[list[float]]:
    """Asymmetric error bars (below, above) in percent from the Wilson intervals."""
    return [
        [100 * (r.rate - r.interval[0]) for r in rates],
        [100 * (r.interval[1] - r.rate) for r in rates],
    ]


def success_plot(figures: RunFigures, baselines: Sequence[Baseline] = ()) -> Plot | None:
    """Held-out success per phase with 95 % intervals, training-rollout success, and the baselines' success.

    A baseline run evaluated per phase is a thin dotted series; one evaluated once (SFT, Filtered BC) a
    level line across the phases.
    """
    phases = [p for p in figures.phases if "all" in p.test]
    if not phases:
        return None
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        figure, axes = plt.subplots(figsize=(6, 3))
        xs = [p.phase for p in phases]
        rates = [p.test["all"] for p in phases]
        axes.errorbar(xs, [100 * r.rate for r in rates], yerr=_errors(rates), marker="o", capsize=4, label="held-out")
        trained = [p for p in figures.phases if "all" in p.train]
        if trained:
            axes.plot([p.phase for p in trained], [100 * p.train["all"].rate for p in trained], "s--", label="train")
        for baseline in baselines:
            if baseline.checkpoint is not None:
                axes.axhline(100 * baseline.checkpoint.rate, ls="-.", lw=1, color="0.4", label=baseline.label)
            else:
                points = sorted(baseline.per_phase.items())
                axes.plot(
                    [x for x, _ in points],
                    [100 * r.rate for _, r in points],
                    ":",
                    lw=1,
                    marker=".",
                    label=baseline.label,
                )
        axes.set(xlabel="phase", ylabel="success %", ylim=(0, 100), xticks=xs)
        axes.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return _draw(figure)


def site_plot(figures: RunFigures) -> Plot | None:
    """Held-out success per site, one bar per phase, with 95 % intervals."""
    phases = [p for p in figures.phases if p.test]
    if not phases or not figures.sites:
        return None
    return site_bars([(f"phase {p.phase}", p.test) for p in phases], figures.sites)


def site_bars(groups: Sequence[tuple[str, dict[str, Rate]]], sites: Sequence[str]) -> Plot:
    """Success per site, one bar per (label, rates by site) group, with 95 % intervals."""
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        figure, axes = plt.subplots(figsize=(max(6, 1.3 * len(sites)), 3))
        width = 0.8 / len(groups)
        for i, (label, by_site) in enumerate(groups):
            rates = [by_site.get(site, Rate(site, 0, 0)) for site in sites]
            xs = [j + i * width for j in range(len(sites))]
            axes.bar(xs, [100 * r.rate for r in rates], width, yerr=_errors(rates), capsize=2, label=label)
        axes.set_xticks([j + 0.4 - width / 2 for j in range(len(sites))], sites)
        axes.set(ylabel="success %", ylim=(0, 100))
        axes.legend(frameon=False, ncols=min(4, len(groups)))
        return _draw(figure)


def _stacked(rows: list[tuple[str, list[float]]], xs: list[int], ylabel: str, horizontal: bool = False) -> Plot:
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        figure, axes = plt.subplots(figsize=(6, 3))
        bottom = [0.0] * len(xs)
        for label, values in rows:
            if horizontal:
                axes.barh(xs, values, left=bottom, label=label)
            else:
                axes.bar(xs, values, bottom=bottom, label=label)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        if horizontal:
            axes.set(xlabel=ylabel, ylabel="phase", yticks=xs)
            axes.invert_yaxis()
        else:
            axes.set(xlabel="phase", ylabel=ylabel, xticks=xs)
        axes.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return _draw(figure)


def curriculum_plot(phases: list[PhaseFigures]) -> Plot | None:
    """Per phase: tasks kept, and the generated candidates each filter rejected, stacked."""
    shown = [p for p in phases if p.metric("curriculum/generated") is not None]
    if not shown:
        return None
    filters = sorted({k for p in shown for k in p.record if k.startswith("curriculum/rejected_") and p.metric(k)})
    rows = [("kept", [p.metric("curriculum/kept") or 0.0 for p in shown])]
    rows += [(key.rsplit("_", 1)[-1] + " filter", [p.metric(key) or 0.0 for p in shown]) for key in filters]
    return _stacked(rows, [p.phase for p in shown], "generated tasks")


def replay_plot(phases: list[PhaseFigures]) -> Plot | None:
    """Replay buffer trajectories after each phase and the replayed steps the perplexity filter kept."""
    shown = [p for p in phases if p.replay or p.metric("replay/kept") is not None]
    if not shown:
        return None
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        figure, axes = plt.subplots(figsize=(6, 3))
        xs = [p.phase for p in shown]
        buffer = [p.replay.get("trajectories", p.metric("replay/buffer_trajectories") or 0) for p in shown]
        axes.plot(xs, buffer, "o-", label="buffer trajectories (this phase's)")
        axes.plot(xs, [p.metric("replay/kept") or 0.0 for p in shown], "s--", label="replayed steps kept")
        axes.set(xlabel="phase", ylabel="count", xticks=xs)
        axes.legend(frameon=False)
        return _draw(figure)


def loss_plot(losses: dict[str, list[tuple[int, float]]]) -> Plot | None:
    """Critic and actor loss per logged batch, the phases side by side, each tick at a phase's first batch."""
    if not losses:
        return None
    plt = _pyplot()
    with plt.rc_context(_STYLE):
        figure, panels = plt.subplots(1, len(losses), figsize=(6 * len(losses) / 1.4, 3), squeeze=False)
        for axes, (key, points) in zip(panels[0], sorted(losses.items()), strict=True):
            axes.plot(range(len(points)), [v for _, v in points], lw=1)
            starts = phase_starts([s for s, _ in points])
            axes.set_xticks([index for index, _ in starts], [f"phase {phase}" for _, phase in starts])
            axes.set(title=key, xlabel="batches, in the order they trained")
        return _draw(figure)


def phase_starts(steps: Sequence[int]) -> list[tuple[int, int]]:
    """(index, phase) of the first of sorted global `steps` in each phase; the loop numbers a phase's batches
    from `phase * PHASE_STEPS`, which as an axis would leave gaps of 100,000 between phases."""
    starts: list[tuple[int, int]] = []
    for index, step in enumerate(steps):
        phase = step // PHASE_STEPS
        if not starts or starts[-1][1] != phase:
            starts.append((index, phase))
    return starts


def time_plot(phases: list[PhaseFigures]) -> Plot | None:
    """Wall time of each stage, per phase, in minutes."""
    shown = [p for p in phases if p.stage_seconds()]
    if not shown:
        return None
    stages = [s for s in STAGES if any(s in p.stage_seconds() for p in shown)]
    rows = [(stage, [p.stage_seconds().get(stage, 0.0) / 60 for p in shown]) for stage in stages]
    return _stacked(rows, [p.phase for p in shown], "minutes", horizontal=True)


HISTOGRAM_BINS = 20
"""Equal bins on [0, 1] of the report's histograms (critic values, replay action probabilities)."""


def histogram_counts(values: Sequence[float], bins: int = HISTOGRAM_BINS) -> list[int]:
    """How many `values` fall in each of `bins` equal bins of [0, 1]; a bin holds its left edge, the last both.

    A NaN or infinite value (a diverged critic or actor scored it) falls in no bin, so that it cannot stop the
    whole report; the histogram's legend counts it apart (`_series_label`).
    """
    counts = [0] * bins
    for value in values:
        if math.isfinite(value):
            counts[min(max(int(value * bins), 0), bins - 1)] += 1
    return counts


def _series_label(name: str, values: Sequence[float]) -> str:
    """`kept (3)`, or `kept (3, 1 not finite)` when some values are NaN or infinite and so left out of the bins."""
    odd = sum(not math.isfinite(value) for value in values)
    return f"{name} ({len(values) - odd}" + (f", {odd} not finite)" if odd else ")")


def _histograms(panels: list[tuple[str, dict[str, list[float]], tuple[float, float]]], xlabel: str) -> Plot:
    """One small panel per phase: a histogram per named series on [0, 1], the filter's window shaded."""
    plt = _pyplot()
    edges = [i / HISTOGRAM_BINS for i in range(HISTOGRAM_BINS + 1)]
    with plt.rc_context(_STYLE):
        figure, grid = plt.subplots(1, len(panels), figsize=(max(6, 2.6 * len(panels)), 2.6), squeeze=False)
        for axes, (title, series, (low, high)) in zip(grid[0], panels, strict=True):
            axes.axvspan(low, high, color="#cde8cd", zorder=0, label=f"window [{low:g}, {high:g}]")
            for name, values in series.items():
                if values:
                    axes.stairs(
                        histogram_counts(values), edges, fill=True, alpha=0.6, label=_series_label(name, values)
                    )
            axes.set(title=title, xlabel=xlabel, xlim=(0, 1))
            axes.legend(frameon=False, fontsize=7)
        grid[0][0].set_ylabel("count")
        return _draw(figure)


def curriculum_value_plot(phases: list[PhaseFigures], window: tuple[float, float]) -> Plot | None:
    """Per phase: the critic's P(success) of the curriculum's kept tasks and of those outside `window`."""
    shown = [p for p in phases if p.critic_values]
    if not shown:
        return None
    panels = [(f"phase {p.phase}", p.critic_values, window) for p in shown]
    return _histograms(panels, "critic P(success)")


def replay_score_plot(phases: list[PhaseFigures]) -> Plot | None:
    """Per phase: the geometric-mean action probability of every replayed step scored, kept or not."""
    shown = [p for p in phases if p.replay_scores.get("steps")]
    if not shown:
        return None
    panels = []
    for p in shown:
        steps, window = p.replay_scores["steps"], p.replay_scores["window"]
        series = {
            "kept": [s["score"] for s in steps if s["kept"]],
            "not kept": [s["score"] for s in steps if not s["kept"]],
        }
        panels.append((f"phase {p.phase}", series, (window["low"], window["high"])))
    return _histograms(panels, "action probability (1 / perplexity)")
