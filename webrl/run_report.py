"""RunReport: one self-contained HTML file that shows what a run's agent learned (`recipes.report`).

It is written from the run directory alone (`RunFigures`), after every phase by the loop and on demand
by `python -m recipes.report RUN_DIR`, so it needs no live process and works on old or unfinished runs:
a section whose data the run does not hold says so instead of failing. Plots are inline SVG, the
trajectory browser is inline JSON and JS, and screenshots are embedded up to a byte budget: the file
opens offline, with no CDN.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass, field
from pathlib import Path

from webrl.config_checks import at_least
from webrl.data.atomic_io import write_text_atomic
from webrl.report_baselines import Baseline, find_baselines
from webrl.report_browser import CSS, TrajectoryBrowser, browser_html
from webrl.report_data import PhaseFigures, Rate, RunFigures
from webrl.report_plots import (
    Plot,
    curriculum_plot,
    curriculum_value_plot,
    loss_plot,
    replay_plot,
    replay_score_plot,
    site_plot,
    success_plot,
    time_plot,
)

REPORT_NAME = "report.html"

log = logging.getLogger(__name__)


@dataclass
class ReportConfig:
    """What the run report embeds."""

    embed_screenshot_mb: float = 20.0
    """Screenshots embedded in report.html up to this many MB; later ones are linked by their run-directory path."""
    train_per_phase: int = 24
    """Training rollouts per phase shown in the trajectory browser (every held-out episode is shown)."""
    baselines: list[str] = field(default_factory=list)
    """Run directories whose held-out success is drawn on the success plot (WebRL runs per phase, SFT/BC once)."""
    sibling_baselines: bool = True
    """Also draw the run directory's siblings evaluated on the same held-out tasks (a `recipes.compare` root)."""

    def validate(self) -> None:
        at_least("report.embed_screenshot_mb", self.embed_screenshot_mb, 0)
        at_least("report.train_per_phase", self.train_per_phase, 0)


def _missing(what: str) -> str:
    return f'<p class="missing">No {html.escape(what)} in this run directory yet.</p>'


def _figure(plot: Plot | None, what: str) -> str:
    return plot.svg if plot is not None else _missing(what)


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _rate(rates: dict[str, Rate], site: str) -> str:
    return rates[site].text() if site in rates else "-"


def _number(phase: PhaseFigures, key: str) -> str:
    value = phase.metric(key)
    return "-" if value is None else f"{value:g}"


class RunReport:
    """Writes `report.html` for the run directory `root`."""

    def __init__(self, root: str | Path, config: ReportConfig | None = None) -> None:
        self.root = Path(root)
        self.config = config or ReportConfig()
        self.config.validate()
        self.plots: dict[str, Plot] = {}
        """The figures the last `html()` drew, by name, for W&B's image media (`webrl.tracking`)."""

    @property
    def path(self) -> Path:
        return self.root / REPORT_NAME

    def write(self) -> Path:
        """Read the run directory and write the report atomically (a reader never sees half a file)."""
        write_text_atomic(self.path, self.html())
        return self.path

    def html(self) -> str:
        figures = RunFigures.read(self.root)
        named = [Path(run_dir) for run_dir in self.config.baselines]
        baselines = find_baselines(
            self.root, figures.held_out_tasks, named=named, siblings=self.config.sibling_baselines
        )
        browser = TrajectoryBrowser(figures, int(self.config.embed_screenshot_mb * 2**20), self.config.train_per_phase)
        records = browser.records()
        drawn = {
            "success": success_plot(figures, baselines),
            "sites": site_plot(figures),
            "curriculum": curriculum_plot(figures.phases),
            "curriculum_values": curriculum_value_plot(figures.phases, figures.value_window),
            "replay": replay_plot(figures.phases),
            "replay_scores": replay_score_plot(figures.phases),
            "losses": loss_plot(figures.losses),
            "time": time_plot(figures.phases),
        }
        self.plots = {name: plot for name, plot in drawn.items() if plot is not None}
        title = f"WebRL run report: {self.root.name}"
        sections = [
            f"<h1>{html.escape(title)}</h1><p>{len(figures.phases)} phases, {len(records)} trajectories, "
            f"{browser.screenshots} screenshots. Rates: successes/episodes with the 95 % Wilson interval.</p>",
            "<h2>Held-out success</h2>" + self._success(figures, baselines, drawn["success"]),
            "<h2>Per site</h2>" + self._sites(figures, drawn["sites"]),
            "<h2>Curriculum</h2>" + self._curriculum(figures, drawn["curriculum"], drawn["curriculum_values"]),
            "<h2>Replay buffer</h2>" + self._replay(figures, drawn["replay"], drawn["replay_scores"]),
            "<h2>ORM against the evaluators</h2>" + self._orm(figures),
            "<h2>Critic and actor losses</h2>" + _figure(drawn["losses"], "critic or actor metrics CSV"),
            "<h2>Time per stage</h2>" + _figure(drawn["time"], "stage timings"),
            "<h2>Trajectories</h2>"
            + (browser_html(records, browser.FILTERS, browser.COMPARE) if records else _missing("trajectories")),
        ]
        return (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(sections)}</body></html>"
        )

    @staticmethod
    def _success(figures: RunFigures, baselines: list[Baseline], plot: Plot | None) -> str:
        phases = figures.phases
        if not any(p.test or p.train for p in phases):
            return _missing("evaluation or rollout results")
        rows = [[str(p.phase), _rate(p.test, "all"), _rate(p.train, "all")] for p in phases]
        out = _figure(plot, "held-out evaluation") + _table(
            ["phase", "held-out success", "train success (evaluators)"], rows
        )
        if baselines:
            out += "<h3>Baselines</h3>" + _table(
                ["baseline", "held-out success", "tasks", "from"],
                [_baseline_row(baseline) for baseline in baselines],
            )
        return out

    @staticmethod
    def _sites(figures: RunFigures, plot: Plot | None) -> str:
        sites = figures.sites
        if not sites:
            return _missing("held-out evaluation")
        rows = [[str(p.phase), *[_rate(p.test, site) for site in sites]] for p in figures.phases if p.test]
        return _figure(plot, "held-out evaluation") + _table(["phase", *sites], rows)

    @staticmethod
    def _curriculum(figures: RunFigures, plot: Plot | None, value_plot: Plot | None) -> str:
        keys = ["curriculum/tasks", "curriculum/generated", "curriculum/kept", "curriculum/topped_up"]
        keys += sorted({k for p in figures.phases for k in p.record if k.startswith("curriculum/rejected_")})
        rows = [[str(p.phase), *[_number(p, key) for key in keys]] for p in figures.phases]
        if not any(cell != "-" for row in rows for cell in row[1:]):
            return _missing("curriculum metrics")
        generated = _figure(plot, "generated tasks (phase 0 uses the train split)")
        low, high = figures.value_window
        values = _figure(value_plot, "critic-scored curriculum tasks")
        caption = (
            f"<p>The critic's P(success) of each generated task: kept, and rejected for lying outside the "
            f"window [{low:g}, {high:g}] (shaded).</p>"
        )
        return generated + _table(["phase", *[key.split("/", 1)[1] for key in keys]], rows) + caption + values

    @staticmethod
    def _replay(figures: RunFigures, plot: Plot | None, score_plot: Plot | None) -> str:
        rows = [
            [
                str(p.phase),
                str(p.replay.get("trajectories", "-")),
                str(p.replay.get("steps", "-")),
                str(p.replay.get("successes", "-")),
                _number(p, "replay/kept"),
                _number(p, "replay/buffer_trajectories"),
            ]
            for p in figures.phases
        ]
        if not any(cell != "-" for row in rows for cell in row[1:]):
            return _missing("replay buffer")
        header = ["phase", "added trajectories", "added steps", "added successes", "replayed steps kept", "buffer size"]
        scores = _figure(score_plot, "replay filter scores")
        caption = (
            "<p>Each replayed step's geometric-mean action probability under the current actor (1 / perplexity); "
            "the filter keeps the shaded window, then caps the count.</p>"
        )
        return _figure(plot, "replay metrics") + _table(header, rows) + caption + scores

    @staticmethod
    def _orm(figures: RunFigures) -> str:
        rows = []
        for p in figures.phases:
            c = p.confusion
            compared = sum(c.values())
            if compared:
                agree = 100 * (c["tp"] + c["tn"]) / compared
                counts = [str(c[k]) for k in ("tp", "fp", "fn", "tn")]
                rows.append([str(p.phase), *counts, f"{agree:.1f} %"])
        if not rows:
            return _missing("rollouts labelled by both the ORM and the evaluators")
        header = ["phase", "ORM yes, eval yes", "ORM yes, eval no", "ORM no, eval yes", "ORM no, eval no", "agreement"]
        return _table(header, rows)


def _baseline_row(baseline: Baseline) -> list[str]:
    if baseline.checkpoint is not None:
        success = baseline.checkpoint.text()
    else:
        success = "; ".join(f"phase {phase}: {rate.text()}" for phase, rate in sorted(baseline.per_phase.items()))
    tasks = f"{len(baseline.tasks)}" + ("" if baseline.same_tasks else " (not this run's held-out tasks)")
    return [baseline.label, success, tasks, str(baseline.source)]


def write_run_report(root: str | Path, config: ReportConfig | None = None) -> RunReport | None:
    """Write the report for the loop at the end of a phase (the written report, with its plots); a failure is
    logged and never stops training."""
    try:
        report = RunReport(root, config)
        report.write()
        return report
    except Exception as err:  # noqa: BLE001 - the report is a view of the run, never a reason to stop it
        log.warning("could not write the run report in %s: %s: %s", root, type(err).__name__, err)
        return None
