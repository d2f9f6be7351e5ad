"""CheckpointReport: the HTML report of one checkpoint's evaluation, or of two on the same tasks side by side.

`recipes.evaluate` writes one beside each evaluation's JSON, and `recipes.evaluate --compare A B` one for
two evaluations. Like the run report it is one self-contained file (inline SVG, JSON and JS, embedded
screenshots): success per site and per template with 95 % Wilson intervals, and the trajectory
browser. Two evaluations must hold the same tasks; then the report adds the paired counts (both
succeeded, only A, only B, neither) and the exact McNemar p, overall and per site, and shows each task
under A and B side by side. Each rate's interval treats its episodes alone; the paired test is the one
that compares the two checkpoints, since it uses only the tasks on which their verdicts differ.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from webrl.data.atomic_io import write_text_atomic
from webrl.data.trajectory import Trajectory, read_trajectories
from webrl.evaluation.breakdown import Rate
from webrl.evaluation.outcomes import success_map, task_outcomes
from webrl.evaluation.stats import format_p, mcnemar, require_same_tasks, task_order
from webrl.report_browser import CSS, ScreenshotEmbedder, browser_html, trajectory_record
from webrl.report_data import rates_by_site
from webrl.report_plots import site_bars
from webrl.run_layout import RunLayout

_EVAL_STEM = re.compile(r"eval_(?P<name>.+)-[0-9a-f]{10}")
"""`eval_<name>-<id>`: the stem of the files `recipes.evaluate` writes (`id`: identity_tag's 10 hex digits)."""
PAIRED_HEADER = [
    "tasks",
    "tasks paired",
    "both succeeded",
    "only A",
    "only B",
    "neither",
    "A success",
    "B success",
    "p",
]
"""The paired table's columns after the group: tasks paired leaves out episodes the browser or site failed."""


@dataclass
class Evaluation:
    """One evaluation's episodes, its label in the report, and the folder its screenshot paths are relative to."""

    label: str
    source: Path
    """The trajectories JSONL, or the run's phase folder, read."""
    directory: Path
    trajectories: list[Trajectory]

    @classmethod
    def read(cls, path: str | Path) -> Evaluation:
        """From `eval_<name>-<id>.json` (with its `.jsonl` beside it), a trajectories `.jsonl`, or a run's phase folder.

        The label is the checkpoint's name for a `recipes.evaluate` result and `<run>/<phase folder>` for
        a WebRL run's per-phase evaluation, so two phases of one run can be compared.
        """
        path = Path(path)
        if path.is_dir() and path.name.startswith("phase_") and path.name[6:].isdigit():
            trajectories = RunLayout(path.parent).evaluations(int(path.name[6:]))
            if not trajectories:
                raise ValueError(f"{path}: no held-out evaluation in this phase folder")
            return cls(f"{path.parent.name}/{path.name}", path, path, trajectories)
        jsonl = path if path.suffix == ".jsonl" else path.with_suffix(".jsonl")
        if not jsonl.is_file():
            raise ValueError(
                f"{path}: no trajectories at {jsonl} (give an eval_<name>-<id>.json written with its .jsonl, "
                "a trajectories .jsonl, or a run's phase_NNN folder)"
            )
        match = _EVAL_STEM.fullmatch(jsonl.stem)
        label = match.group("name") if match else f"{jsonl.parent.name}/{jsonl.stem}"
        return cls(label, jsonl, jsonl.parent, read_trajectories(jsonl))

    @property
    def task_ids(self) -> list[str]:
        return [trajectory.task.task_id for trajectory in self.trajectories]


class CheckpointReport:
    """Writes the report of one evaluation, or of two (A, B) on the same tasks; other task sets are a ValueError."""

    def __init__(self, evaluations: list[Evaluation], embed_screenshot_mb: float = 20.0) -> None:
        if len(evaluations) not in (1, 2):
            raise ValueError(f"a checkpoint report shows one or two evaluations, got {len(evaluations)}")
        if len(evaluations) == 2:
            first, second = evaluations
            if first.label == second.label:
                first.label, second.label = f"A: {first.label}", f"B: {second.label}"
            try:
                require_same_tasks(first.task_ids, second.task_ids)
            except ValueError as err:
                raise ValueError(f"A ({first.source}) vs B ({second.source}): {err}") from None
        self.evaluations = evaluations
        self.embed_bytes = int(embed_screenshot_mb * 2**20)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        write_text_atomic(path, self.html(path.parent))
        return path

    def html(self, folder: Path | None = None) -> str:
        """The page; screenshots past the byte budget are linked relative to `folder`, where it will lie."""
        evaluations = self.evaluations
        labels = [e.label for e in evaluations]
        title = "Evaluation: " + " vs ".join(labels)
        records, screenshots = self._records(folder)
        sources = "".join(
            f"<li>{'AB'[i] + ': ' if len(evaluations) == 2 else ''}<b>{html.escape(e.label)}</b>, "
            f"{len(e.trajectories)} episodes, from {html.escape(str(e.source))}</li>"
            for i, e in enumerate(evaluations)
        )
        rates = [rates_by_site(e.trajectories, "eval_reward") for e in evaluations]
        sites = sorted({site for by_site in rates for site in by_site if site != "all"})
        sections = [
            f"<h1>{html.escape(title)}</h1><ul>{sources}</ul><p>{screenshots} screenshots. Rates: "
            "successes/episodes with the 95 % Wilson interval (episodes the browser or the site failed are left "
            "out).</p>",
            "<h2>Success per site</h2>"
            + (site_bars(list(zip(labels, rates, strict=True)), sites).svg if sites else "")
            + _table(
                ["site", *labels], [[s, *[r[s].text() if s in r else "-" for r in rates]] for s in ["all", *sites]]
            ),
            "<h2>Success per template</h2>" + self._templates(),
        ]
        if len(evaluations) == 2:
            sections.append("<h2>Paired comparison on the same tasks</h2>" + self._paired())
        compare = ("checkpoint", "Same task under A and B") if len(evaluations) == 2 else None
        filters = [("checkpoint", "checkpoint"), ("site", "site"), ("template", "template")]
        sections.append("<h2>Trajectories</h2>" + browser_html(records, filters, compare))
        return (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(sections)}</body></html>"
        )

    def _records(self, folder: Path | None) -> tuple[list[dict], int]:
        records, count = [], 0
        budget = self.embed_bytes
        for evaluation in self.evaluations:
            embedder = ScreenshotEmbedder(evaluation.directory, budget, folder)
            labels = {"checkpoint": evaluation.label, "kind": "eval", "heading": evaluation.label}
            ordered = sorted(evaluation.trajectories, key=lambda t: task_order(t.task.task_id))
            records += [trajectory_record(t, embedder, {**labels, "tag": evaluation.label}) for t in ordered]
            budget, count = embedder.embed_left, count + embedder.count
        return records, count

    def _templates(self) -> str:
        keyed: list[dict[tuple[str, str], Rate]] = []
        for evaluation in self.evaluations:
            groups = _group(evaluation.trajectories, lambda t: (t.task.site, str(t.task.intent_template_id)))
            keyed.append({key: Rate(key[1], len(hits), sum(hits)) for key, hits in groups.items()})
        keys = sorted({key for rates in keyed for key in rates}, key=lambda key: (key[0], task_order(key[1])))
        rows = [
            [f"{template} ({site})", *[r[(site, template)].text() if (site, template) in r else "-" for r in keyed]]
            for site, template in keys
        ]
        return _table(["template (site)", *[e.label for e in self.evaluations]], rows)

    def _paired(self) -> str:
        first, second = ({o.task_id: o for o in task_outcomes(e.trajectories)} for e in self.evaluations)
        shared = [task for task in first if task in second]
        tasks = len(self.evaluations[0].trajectories)
        sites = sorted({first[task].site for task in shared})
        rows = []
        for site in [None, *sites]:
            chosen = [task for task in shared if site is None or first[task].site == site]
            a = success_map([first[task] for task in chosen])
            b = success_map([second[task] for task in chosen])
            result = mcnemar(a, b)
            neither = result.tasks - result.both - result.only_a - result.only_b
            n_site = tasks if site is None else sum(t.task.site == site for t in self.evaluations[0].trajectories)
            rows.append(
                [
                    site or "all",
                    str(n_site),
                    str(result.tasks),
                    str(result.both),
                    str(result.only_a),
                    str(result.only_b),
                    str(neither),
                    str(result.both + result.only_a),
                    str(result.both + result.only_b),
                    format_p(result.p_value, 4),
                ]
            )
        a_label, b_label = (html.escape(e.label) for e in self.evaluations)
        caption = (
            f"<p>A = {a_label}, B = {b_label}. Each task's verdict under A against B: only the tasks where they "
            "differ (only A, only B) carry evidence; p is the exact two-sided McNemar test on them.</p>"
        )
        return caption + _table(["site", *PAIRED_HEADER], rows)


def _group(trajectories: list[Trajectory], key: Callable[[Trajectory], tuple[str, str]]) -> dict:
    """key -> the successes (1/0) of the trajectories with an evaluator verdict, infra failures left out."""
    out: dict[tuple[str, str], list[int]] = {}
    for trajectory in trajectories:
        for outcome in task_outcomes([trajectory]):  # none for an unlabelled or infra-failed episode
            out.setdefault(key(trajectory), []).append(int(outcome.success))
    return out


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"
