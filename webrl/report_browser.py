"""TrajectoryBrowser: the report's trajectories as inline JSON, and the vanilla JS and CSS that browse them.

The browser filters by phase, kind (held-out evaluation or training rollout), site, template, evaluator
verdict and ORM verdict (a checkpoint's report: by checkpoint instead of phase and kind), and shows one
trajectory step by step: its screenshot with the element the step acted on outlined, the observation
(collapsed), the response and parsed action, the critic's V(s), V(s') and the advantage the actor was
trained with (for steps an actor stage trained on), and the final verdict with the evaluator's details. A
second view puts one held-out task under the first and the last phase (or checkpoint) side by side.
Everything is inline so that the report opens offline; screenshots are embedded as data URIs up to a
byte budget and linked by their path beyond it.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from webrl.data.trajectory import Trajectory, is_success
from webrl.report_data import RunFigures
from webrl.run_layout import phase_name

OBSERVATION_CHARS = 4000
"""Characters of each step's observation kept in the report (the pages are about 1,500 characters)."""


def _verdict(value: float | None) -> bool | None:
    return None if value is None else is_success(value)


class ScreenshotEmbedder:
    """A screenshot as the browser shows it: a data URI while `embed_bytes` last, then a link to its file.

    The link is the path under `root`, or relative to `link_from` (the report's folder) when the report
    lies elsewhere.
    """

    def __init__(self, root: Path, embed_bytes: int, link_from: Path | None = None) -> None:
        self.root = root
        self.embed_left = embed_bytes
        self.link_from = link_from
        self.count = 0

    def __call__(self, relative: str) -> str | None:
        """`relative` (a path under `root`) embedded or linked; None when the file is missing."""
        file = self.root / relative
        if not file.is_file():
            return None
        self.count += 1
        size = file.stat().st_size
        if size > self.embed_left:
            return relative if self.link_from is None else Path(os.path.relpath(file, self.link_from)).as_posix()
        self.embed_left -= size
        return "data:image/jpeg;base64," + base64.b64encode(file.read_bytes()).decode("ascii")


Critic = Callable[[str, int], "dict[str, Any] | None"]
"""(trajectory id, step index) -> V(s), V(s'), the advantage and the phase that scored them, or None."""


def trajectory_record(
    trajectory: Trajectory, shot: Callable[[str], str | None], labels: dict[str, Any], critic: Critic | None = None
) -> dict[str, Any]:
    """One trajectory as the browser's JSON: `labels` (its group, heading, tag) and its steps with screenshots.

    `shot` turns a screenshot path of `metadata.screenshots` into what the page shows; `box` is the
    acted element's box in the step's screenshot (fractions of the picture), drawn over it.
    """
    shots = list(trajectory.metadata.get("screenshots") or [])
    boxes = list(trajectory.metadata.get("screenshot_boxes") or [])
    task = trajectory.task
    steps = []
    for i, step in enumerate(trajectory.steps):
        path = shots[i] if i < len(shots) else None
        steps.append(
            {
                "url": step.url,
                "obs": step.observation[:OBSERVATION_CHARS],
                "response": step.response,
                "action": step.action,
                "error": step.error,
                "shot": shot(path) if path else None,
                "box": boxes[i] if i < len(boxes) and path else None,
                "critic": critic(trajectory.trajectory_id, i) if critic else None,
            }
        )
    final = shots[len(trajectory.steps)] if len(shots) > len(trajectory.steps) else None
    return {
        **labels,
        "task": task.task_id,
        "site": task.site,
        "template": "" if task.intent_template_id is None else str(task.intent_template_id),
        "intent": task.intent,
        "success": _verdict(trajectory.eval_reward),
        "orm": _verdict(trajectory.orm_reward),
        "status": trajectory.status,
        "error": trajectory.error,
        "answer": trajectory.answer,
        "reason": trajectory.metadata.get("eval") or trajectory.metadata.get("eval_error"),
        "steps": steps,
        "final_shot": shot(final) if final else None,
    }


class TrajectoryBrowser:
    """Turns a run's trajectories into the browser's JSON, embedding screenshots up to `embed_bytes`."""

    FILTERS = (("phase", "phase"), ("kind", "kind"), ("site", "site"), ("template", "template"))
    """The run's filters before the verdicts: the phase and whether an episode was evaluation or training."""
    COMPARE = ("phase", "Same held-out task: first phase and last phase")
    """The side-by-side view: held-out episodes grouped by phase, the first group against the last."""

    def __init__(self, figures: RunFigures, embed_bytes: int, train_per_phase: int) -> None:
        self.figures = figures
        self.embedder = ScreenshotEmbedder(figures.root, embed_bytes)
        self.train_per_phase = train_per_phase
        # A step is scored by the actor stage of its own phase, and again by each later one that replays it;
        # the browser shows the first of those, the one that trained on it as a fresh rollout when there is one.
        self.step_values: dict[tuple[str, int], dict[str, Any]] = {}
        for phase in figures.phases:
            for key, record in phase.step_values.items():
                self.step_values.setdefault(key, {**record, "scored_in": phase.phase})

    @property
    def screenshots(self) -> int:
        return self.embedder.count

    def records(self) -> list[dict[str, Any]]:
        out = []
        for phase in self.figures.phases:
            for trajectory in phase.evaluations:
                out.append(self._record(trajectory, phase.phase, "eval"))
            for trajectory in phase.rollouts[: self.train_per_phase]:
                out.append(self._record(trajectory, phase.phase, "train"))
        return out

    def _critic(self, trajectory_id: str, index: int) -> dict[str, Any] | None:
        """V(s), V(s'), the advantage and the phase whose actor stage computed them; None for an untrained step."""
        record = self.step_values.get((trajectory_id, index))
        if record is None:
            return None
        keys = ("value", "next_value", "advantage", "scored_in")
        return {key: record[key] for key in keys}

    def _record(self, trajectory: Trajectory, phase: int, kind: str) -> dict[str, Any]:
        labels = {"phase": phase, "kind": kind, "heading": f"phase {phase} · {kind}", "tag": f"p{phase} {kind}"}
        directory = phase_name(phase)
        return trajectory_record(trajectory, lambda path: self.embedder(f"{directory}/{path}"), labels, self._critic)


def browser_html(
    records: list[dict[str, Any]], filters: Sequence[tuple[str, str]], compare: tuple[str, str] | None
) -> str:
    """The browser's markup, its data as JSON script elements, and its script.

    `filters` are (record key, label) pairs, the evaluator and ORM verdicts added after them; `compare`
    is (record key, title): held-out episodes are grouped by that key, and one task is shown under the
    first group and the last side by side (None: no such view).
    """
    filters = [*filters, ("success", "evaluator"), ("orm", "ORM")]
    data = script_json(records)
    config = json.dumps({"filters": [key for key, _ in filters], "compare": compare[0] if compare else None})
    selects = "".join(
        f'<label>{html.escape(label)} <select id="f-{key}" data-key="{key}"><option value="">all</option></select>'
        "</label>"
        for key, label in filters
    )
    return (
        f'<div id="filters">{selects} <span id="count"></span></div>'
        '<div id="browser"><ol id="list"></ol><div id="detail"><p>Pick a trajectory.</p></div></div>'
        + (
            f'<h2 id="compare-title">{html.escape(compare[1])}</h2>'
            '<label>task <select id="compare-task"></select></label><div id="compare"></div>'
            if compare
            else ""
        )
        + f'<script type="application/json" id="trajectories">{data}</script>'
        f'<script type="application/json" id="browser-config">{config}</script><script>{SCRIPT}</script>'
    )


def script_json(value: Any) -> str:
    """`value` as JSON that a `<script type="application/json">` element holds whole, whatever strings it carries.

    Every `<` is written `\\u003c`: page text or a model's output with `</script>`, or with `<!--<script>` (which
    puts the HTML parser in a state where not even the element's own end tag closes it), would otherwise end the
    element early or swallow the rest of the page. A NaN or infinite number (a diverged critic's V(s)) is written
    as a string: JSON has no such numbers, and one would make the page's JSON.parse, so the whole browser, fail.
    """
    return json.dumps(_finite(value), ensure_ascii=False, allow_nan=False).replace("<", "\\u003c")


def _finite(value: Any) -> Any:
    """`value` with each NaN or infinite float replaced by its name (`nan`, `inf`, `-inf`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}.missing{color:#999;font-style:italic}
#filters label{margin-right:1em}#browser{display:flex;gap:1em;margin-top:.5em}
#list{width:32%;max-height:70vh;overflow:auto;margin:0;padding-left:2em}#list li{cursor:pointer;padding:2px}
#list li.sel{background:#def}#detail{flex:1;max-height:70vh;overflow:auto}.ok{color:#080}.bad{color:#b00}
.step{border-top:1px solid #ddd;padding:.4em 0}.step img,.final img{max-width:100%;border:1px solid #ccc}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.3em;margin:.2em 0;font-size:12px}
.critic{font:12px monospace;color:#446}
.shot{position:relative;display:inline-block;max-width:100%;overflow:hidden;border:1px solid #ccc}
.shot img{display:block;border:0}.box{position:absolute;outline:2px solid #e0218a;background:rgba(224,33,138,.12)}
#compare{display:flex;gap:1em}#compare>div{flex:1;min-width:0}svg{max-width:100%;height:auto}
"""

SCRIPT = r"""
(function () {
  const all = JSON.parse(document.getElementById("trajectories").textContent);
  const config = JSON.parse(document.getElementById("browser-config").textContent);
  const keys = config.filters;
  const val = (t, k) => String(t[k] === null ? "none" : t[k]);
  const codes = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"};
  const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => codes[c]);
  const verdict = (v) =>
    v === null ? "<span>no label</span>" : v ? '<span class="ok">success</span>' : '<span class="bad">failure</span>';
  const img = (src, alt) => (src ? `<img loading="lazy" src="${src}" alt="${esc(alt)}">` : "");
  const pct = (v) => `${(100 * v).toFixed(2)}%`;
  const boxed = (src, box, alt) => !src ? "" : !box ? img(src, alt) :
    `<div class="shot">${img(src, alt)}<div class="box" style="left:${pct(box[0])};top:${pct(box[1])};` +
    `width:${pct(box[2])};height:${pct(box[3])}"></div></div>`;
  const numeric = (a, b) => a.localeCompare(b, undefined, {numeric: true});
  const fixed = (v) => (typeof v === "number" ? v.toFixed(3) : esc(v));
  for (const k of keys) {
    const sel = document.getElementById("f-" + k);
    [...new Set(all.map((t) => val(t, k)))].sort(numeric).forEach((v) => sel.add(new Option(v, v)));
    sel.addEventListener("change", render);
  }
  function step(s, i) {
    return `<div class="step"><b>step ${i}</b> <small>${esc(s.url)}</small>${boxed(s.shot, s.box, "step " + i)}` +
      `<details><summary>observation</summary><pre>${esc(s.obs)}</pre></details><pre>${esc(s.response)}</pre>` +
      (s.action ? `<small>action: ${esc(JSON.stringify(s.action))}</small>` : "") +
      (s.critic ? `<div class="critic">V(s) ${fixed(s.critic.value)} · V(s') ${fixed(s.critic.next_value)}` +
        ` · advantage ${s.critic.advantage >= 0 ? "+" : ""}${fixed(s.critic.advantage)}` +
        ` <small>(actor stage of phase ${s.critic.scored_in})</small></div>` : "") +
      (s.error ? `<div class="bad">${esc(s.error)}</div>` : "") + "</div>";
  }
  function show(t) {
    const reason = t.reason ? `<details><summary>evaluator details</summary>` +
      `<pre>${esc(JSON.stringify(t.reason, null, 1))}</pre></details>` : "";
    return `<h3>${esc(t.heading)} · task ${esc(t.task)} (${esc(t.site)})</h3><p>${esc(t.intent)}</p>` +
      t.steps.map(step).join("") +
      `<div class="final"><b>final</b> ${img(t.final_shot, "final page")}` +
      `<p>status ${esc(t.status)}, answer ${esc(t.answer)}; evaluator: ${verdict(t.success)}; ` +
      `ORM: ${verdict(t.orm)}</p>` + (t.error ? `<div class="bad">${esc(t.error)}</div>` : "") + reason + "</div>";
  }
  function render() {
    const want = Object.fromEntries(keys.map((k) => [k, document.getElementById("f-" + k).value]));
    const shown = all.filter((t) => keys.every((k) => !want[k] || val(t, k) === want[k]));
    document.getElementById("count").textContent = `${shown.length} of ${all.length} trajectories`;
    const list = document.getElementById("list");
    list.innerHTML = "";
    for (const t of shown) {
      const li = document.createElement("li");
      li.innerHTML = `${verdict(t.success)} ${esc(t.tag)} ${esc(t.site)} #${esc(t.task)}: ` +
        esc(t.intent.slice(0, 70));
      li.onclick = () => {
        [...list.children].forEach((c) => c.classList.remove("sel"));
        li.classList.add("sel");
        document.getElementById("detail").innerHTML = show(t);
      };
      list.appendChild(li);
    }
  }
  render();
  if (!config.compare) return;
  const evals = all.filter((t) => t.kind === "eval");
  const group = config.compare;
  const groups = [...new Set(evals.map((t) => t[group]))];
  const first = groups[0];
  const last = groups[groups.length - 1];
  const at = (g, id) => evals.find((t) => t[group] === g && t.task === id);
  const changed = (id) => at(last, id).success !== at(first, id).success;
  const both = groups.length > 1 ? evals.filter((t) => t[group] === first && at(last, t.task)).map((t) => t.task) : [];
  both.sort((a, b) => changed(b) - changed(a));
  const pick = document.getElementById("compare-task");
  both.forEach((id) => pick.add(new Option(id + (changed(id) ? " (changed)" : ""), id)));
  function compare() {
    const id = pick.value;
    document.getElementById("compare").innerHTML = id
      ? `<div>${show(at(first, id))}</div><div>${show(at(last, id))}</div>`
      : `<p class="missing">No held-out task evaluated under two ${esc(group)}s yet.</p>`;
  }
  pick.addEventListener("change", compare);
  compare();
})();
"""
