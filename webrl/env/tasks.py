"""Load and validate task configs in WebArena's JSON format.

Task files are the contract between a site deployment and the agent: `__SHOPPING__`-style
placeholders in URLs, and in the references the evaluators compare with, are replaced from a `url_map` given
by the user's config (docs/method.md §9.2), as WebArena replaces them throughout its configs, and every
field an evaluator will need is checked up front, so that a typo in task 417 surfaces at load time
with its file, task id and field named, instead of as a crash or a silent zero reward hours later.

One bad config must not cost a whole suite: `read_suite` keeps every good task and reports each bad
one; `load_tasks` logs them with a summary line (`loaded 160 of 165; 5 skipped: ...`) and goes on,
or raises that summary when `strict` (env.strict_tasks) or when nothing loaded at all.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webrl.data.trajectory import Task

log = logging.getLogger(__name__)

EVAL_TYPES = ("string_match", "url_match", "program_html")
STRING_APPROACHES = ("exact_match", "must_include", "must_exclude", "one_of", "fuzzy_match")
# fuzzy_match in required_contents is WebArena-Lite's: an LLM judges the selected content.
HTML_APPROACHES = ("exact_match", "must_include", "must_exclude", "fuzzy_match")
URL_NOTES = ("EXACT", "GOLD in PRED")
_PLACEHOLDER = re.compile(r"__[A-Z][A-Z0-9_]*__")
_AND = " |AND| "


class TaskConfigError(ValueError):
    """A task config that cannot be used; the message names the file, the task id and the field."""

    def __init__(self, message: str, origin: str = "", task_id: str = "?", field: str = "") -> None:
        super().__init__(message)
        self.origin, self.task_id, self.field = origin, task_id, field

    @property
    def short(self) -> str:
        """`task 417 (eval.reference_url) in 417.json`: the summary line's name for this config."""
        where = Path(self.origin).name if self.origin and not self.origin.startswith("<") else self.origin
        field_part = f" ({self.field})" if self.field else ""
        return f"task {self.task_id}{field_part} in {where}"


class LocalFileUrlError(TaskConfigError):
    """A task URL that points at this machine's files (file://): a task must start and be checked on a site."""


@dataclass
class SuiteLoad:
    """What one source held: the tasks that loaded, and one error per config that did not."""

    tasks: list[Task] = field(default_factory=list)
    skipped: list[TaskConfigError] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.tasks) + len(self.skipped)

    def summary(self) -> str:
        line = f"loaded {len(self.tasks)} of {self.total}"
        if self.skipped:
            line += f"; {len(self.skipped)} skipped: " + ", ".join(err.short for err in self.skipped)
        return line


def normalise_url_map(url_map: dict[str, str] | None) -> dict[str, str]:
    """Accept `SHOPPING` or `__SHOPPING__` keys; return `__SHOPPING__` keys and URLs without a trailing /."""
    out: dict[str, str] = {}
    for key, url in (url_map or {}).items():
        name = key if key.startswith("__") and key.endswith("__") else f"__{key.upper()}__"
        out[name] = url.rstrip("/")
    return out


def substitute(text: str, url_map: dict[str, str]) -> str:
    """Replace every known placeholder in `text` by its URL."""
    for name, url in url_map.items():
        text = text.replace(name, url)
    return text


def _entries(source: Any) -> list[tuple[str, Any]]:
    """(origin, config) pairs, where origin says where the config came from for error messages.

    A file that cannot be read or is not valid JSON becomes one entry holding its TaskConfigError, so that it is
    skipped and named like any other bad config; a source that does not exist raises at once.
    """
    if isinstance(source, dict):
        return [("<dict>", source)]
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            # WebArena ships one `{task_id}.json` per task: order 2.json before 10.json.
            files = sorted(
                path.glob("*.json"), key=lambda p: (0, int(p.stem), "") if p.stem.isdigit() else (1, 0, p.stem)
            )
            if not files:
                raise TaskConfigError(f"{path}: directory has no *.json task files")
            return [entry for file in files for entry in _file_entries(file)]
        if not path.exists():
            raise TaskConfigError(f"{path}: no such task file or directory")
        return _file_entries(path)
    if isinstance(source, Iterable):
        return [(f"<list>[{i}]", config) for i, config in enumerate(source)]
    raise TaskConfigError(f"task source must be a path, a dict or a list of dicts, got {type(source).__name__}")


def _file_entries(path: Path) -> list[tuple[str, Any]]:
    """The configs of one file; one that cannot be read (not UTF-8, a dangling link) or parsed is one bad entry.

    Caught here, its error names the file and costs only that file's tasks, not the whole suite.
    """
    stem = path.stem if path.stem.isdigit() else "?"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        return [(str(path), TaskConfigError(f"{path}:{err.lineno}: not valid JSON ({err.msg})", str(path), stem))]
    except UnicodeDecodeError as err:
        return [(str(path), TaskConfigError(f"{path}: not UTF-8 ({err})", str(path), stem))]
    except OSError as err:
        return [(str(path), TaskConfigError(f"{path}: cannot be read ({err.strerror or err})", str(path), stem))]
    if isinstance(data, list):
        return [(f"{path}[{i}]", config) for i, config in enumerate(data)]
    return [(str(path), data)]


class _Checker:
    """Raises TaskConfigError with the origin, task id and field in the message and as attributes."""

    def __init__(self, origin: str, task_id: Any) -> None:
        self.origin, self.task_id = origin, str(task_id)
        self.prefix = f"{origin}: task {task_id}"

    def fail(self, field: str, problem: str, error: type[TaskConfigError] = TaskConfigError) -> None:
        raise error(f"{self.prefix}: field '{field}': {problem}", self.origin, self.task_id, field)

    def string(self, value: Any, field: str, allow_empty: bool = False) -> None:
        if not isinstance(value, str) or (not allow_empty and not value.strip()):
            self.fail(field, f"must be a {'' if allow_empty else 'non-empty '}string, got {value!r}")

    def string_list(self, value: Any, field: str) -> None:
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            self.fail(field, f"must be a non-empty list of strings, got {value!r}")

    def references(self, refs: Any, field: str, allowed: tuple[str, ...]) -> None:
        if not isinstance(refs, dict) or not refs:
            self.fail(field, f"must be an object with one of {list(allowed)}, got {refs!r}")
        unknown = sorted(set(refs) - set(allowed))
        if unknown:
            self.fail(f"{field}.{unknown[0]}", f"unsupported reference type; supported: {list(allowed)}")
        for approach, value in refs.items():
            if approach == "exact_match":
                self.string(value, f"{field}.exact_match", allow_empty=True)
            elif approach == "fuzzy_match" and isinstance(value, str):
                # "N/A" (string_match) or " |OR| "-separated references (program_html).
                self.string(value, f"{field}.fuzzy_match")
            else:
                self.string_list(value, f"{field}.{approach}")

    def not_local(self, url: str, field: str) -> None:
        for part in url.split(_AND):
            if part.strip().lower().startswith("file:"):
                problem = f"{part.strip()[:80]!r} is a file:// URL; tasks must run on a site, not on local files"
                self.fail(field, problem, LocalFileUrlError)


def _check_eval(check: _Checker, block: Any) -> None:
    if not isinstance(block, dict):
        check.fail("eval", f"must be an object, got {block!r}")
    types = block.get("eval_types")
    if not isinstance(types, list) or not types:
        check.fail("eval.eval_types", f"must be a non-empty list drawn from {list(EVAL_TYPES)}, got {types!r}")
    for eval_type in types:
        if eval_type not in EVAL_TYPES:
            check.fail("eval.eval_types", f"unknown type {eval_type!r}; supported: {list(EVAL_TYPES)}")
    if "string_match" in types:
        check.references(block.get("reference_answers"), "eval.reference_answers", STRING_APPROACHES)
        fuzzy = block["reference_answers"].get("fuzzy_match")
        if isinstance(fuzzy, str) and fuzzy != "N/A":
            check.fail("eval.reference_answers.fuzzy_match", f'must be "N/A" or a list of strings, got {fuzzy!r}')
    if "url_match" in types:
        check.string(block.get("reference_url"), "eval.reference_url")
        note = block.get("url_note")
        if note is not None and note not in URL_NOTES:
            check.fail("eval.url_note", f"must be one of {list(URL_NOTES)} or absent (GOLD in PRED), got {note!r}")
    if "program_html" in types:
        targets = block.get("program_html")
        if not isinstance(targets, list) or not targets:
            check.fail("eval.program_html", f"must be a non-empty list of targets, got {targets!r}")
        for i, target in enumerate(targets):
            field = f"eval.program_html[{i}]"
            if not isinstance(target, dict):
                check.fail(field, f"must be an object with url, locator, required_contents, got {target!r}")
            check.string(target.get("url"), f"{field}.url")
            check.string(target.get("locator", ""), f"{field}.locator", allow_empty=True)
            check.references(target.get("required_contents"), f"{field}.required_contents", HTML_APPROACHES)
            if "prep_actions" in target:
                check.string_list(target["prep_actions"], f"{field}.prep_actions")


def _resolve_urls(check: _Checker, config: dict[str, Any], url_map: dict[str, str]) -> None:
    """Substitute placeholders in every URL field, in place; a placeholder left over or a file:// URL is an error."""
    fields: list[tuple[str, dict[str, Any], str]] = [("start_url", config, "start_url")]
    block = config.get("eval")
    if isinstance(block, dict):
        if isinstance(block.get("reference_url"), str):
            fields.append(("eval.reference_url", block, "reference_url"))
        for i, target in enumerate(block.get("program_html") or []):
            if isinstance(target, dict) and isinstance(target.get("url"), str):
                fields.append((f"eval.program_html[{i}].url", target, "url"))
    for label, holder, key in fields:
        holder[key] = substitute(holder[key], url_map)
        check.not_local(holder[key], label)
        left = _PLACEHOLDER.findall(holder[key])
        if left:
            known = sorted(url_map) or "none given"
            check.fail(label, f"placeholder {left[0]} has no URL in url_map (known: {known})")


def _resolved(check: _Checker, text: str, field: str, url_map: dict[str, str]) -> str:
    """`text` with its placeholders replaced; one that url_map lacks is an error naming `field`."""
    text = substitute(text, url_map)
    left = _PLACEHOLDER.findall(text)
    if left:
        check.fail(field, f"placeholder {left[0]} has no URL in url_map (known: {sorted(url_map) or 'none given'})")
    return text


def _resolve_references(check: _Checker, block: Any, url_map: dict[str, str]) -> None:
    """Substitute placeholders in the strings the evaluators compare with (validated already), in place.

    WebArena substitutes its whole config, so a reference may name a page of a site: task 552 wants the
    file the agent wrote to hold `__REDDIT__/f/space/134164/...`. Left as a placeholder it could never match,
    so one left over is an error naming the field, as in a URL field.
    """
    if not isinstance(block, dict):
        return
    types = block.get("eval_types") or []
    holders = [("eval.reference_answers", block.get("reference_answers"))] if "string_match" in types else []
    for i, target in enumerate((block.get("program_html") or []) if "program_html" in types else []):
        if isinstance(target, dict):
            holders.append((f"eval.program_html[{i}].required_contents", target.get("required_contents")))
    for label, refs in holders:
        if not isinstance(refs, dict):
            continue
        for approach, value in refs.items():
            field = f"{label}.{approach}"
            if isinstance(value, list):
                refs[approach] = [_resolved(check, text, f"{field}[{j}]", url_map) for j, text in enumerate(value)]
            else:
                refs[approach] = _resolved(check, value, field, url_map)


def _task(origin: str, raw: Any, mapping: dict[str, str]) -> Task:
    """One validated Task with placeholders resolved, or TaskConfigError naming what is wrong."""
    if isinstance(raw, TaskConfigError):
        raise raw
    if not isinstance(raw, dict):
        raise TaskConfigError(f"{origin}: a task config must be a JSON object, got {type(raw).__name__}", origin)
    config = json.loads(json.dumps(raw))  # a deep copy: substitution must not touch the caller's dicts
    check = _Checker(origin, config.get("task_id", "?"))
    if "task_id" not in config:
        check.fail("task_id", "is missing")
    check.string(config.get("intent"), "intent")
    sites = config.get("sites")
    if not isinstance(sites, list) or not all(isinstance(s, str) for s in sites):
        check.fail("sites", f"must be a list of site names, got {sites!r}")
    check.string(config.get("start_url"), "start_url")
    if config.get("eval") is not None:
        _check_eval(check, config["eval"])
    _resolve_urls(check, config, mapping)
    _resolve_references(check, config.get("eval"), mapping)
    return Task.from_dict(config)


def read_suite(source: Any, url_map: dict[str, str] | None = None) -> SuiteLoad:
    """Every task of `source` that validates, and a TaskConfigError for each config that does not.

    Only a source that cannot be read at all (a missing path, an empty directory) raises.
    """
    mapping = normalise_url_map(url_map)
    report = SuiteLoad()
    seen: dict[str, str] = {}
    for origin, raw in _entries(source):
        try:
            task = _task(origin, raw, mapping)
            if task.task_id in seen:
                _Checker(origin, task.task_id).fail("task_id", f"duplicate task_id (first in {seen[task.task_id]})")
        except TaskConfigError as err:
            report.skipped.append(err)
            continue
        seen[task.task_id] = origin
        report.tasks.append(task)
    return report


def load_tasks(source: Any, url_map: dict[str, str] | None = None, strict: bool = False) -> list[Task]:
    """Load WebArena-format task configs from a file, a directory of *.json, a dict or a list of dicts.

    Placeholders such as `__SHOPPING__` in start_url, eval.reference_url and program_html urls are
    replaced from `url_map`. Bad configs are logged (file, task id, field) and skipped with a summary
    line; with `strict`, or when no config loads, TaskConfigError carries the summary and every error.
    """
    report = read_suite(source, url_map)
    if not report.skipped:
        # A suite read from disk is worth a line; configs built in memory (the curriculum's new instances of a
        # template, several per phase) would repeat it for every template.
        from_disk = isinstance(source, (str, Path))
        log.log(logging.INFO if from_disk else logging.DEBUG, "task configs: %s", report.summary())
        return report.tasks
    details = "\n".join(f"  {err}" for err in report.skipped)
    if strict or not report.tasks:
        first = report.skipped[0]
        # One kind of problem keeps its own class (LocalFileUrlError), so callers can tell it apart.
        kind = type(first) if all(type(err) is type(first) for err in report.skipped) else TaskConfigError
        raise kind(f"{report.summary()}\n{details}", first.origin, first.task_id, first.field)
    log.warning("task configs skipped:\n%s\n%s", details, report.summary())
    return report.tasks
