"""Load and validate task configs in WebArena's JSON format.

Task files are the contract between a site deployment and the agent: `__SHOPPING__`-style
placeholders in URLs are replaced from a `url_map` given by the user's config (docs/method.md §9.2), and every
field an evaluator will need is checked up front, so that a typo in task 417 surfaces at load time
with its file, task id and field named, instead of as a crash or a silent zero reward hours later.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from webrl.data.trajectory import Task

EVAL_TYPES = ("string_match", "url_match", "program_html")
STRING_APPROACHES = ("exact_match", "must_include", "must_exclude", "one_of", "fuzzy_match")
HTML_APPROACHES = ("exact_match", "must_include", "must_exclude")
URL_NOTES = ("EXACT", "GOLD in PRED")
_PLACEHOLDER = re.compile(r"__[A-Z][A-Z0-9_]*__")


class TaskConfigError(ValueError):
    """A task config that cannot be used; the message names the file, the task id and the field."""


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
    """(origin, config) pairs, where origin says where the config came from for error messages."""
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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise TaskConfigError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from err
    if isinstance(data, list):
        return [(f"{path}[{i}]", config) for i, config in enumerate(data)]
    return [(str(path), data)]


class _Checker:
    """Raises TaskConfigError with the origin and task id already in the message."""

    def __init__(self, origin: str, task_id: Any) -> None:
        self.prefix = f"{origin}: task {task_id}"

    def fail(self, field: str, problem: str) -> None:
        raise TaskConfigError(f"{self.prefix}: field '{field}': {problem}")

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
            elif approach == "fuzzy_match" and value == "N/A":
                continue
            else:
                self.string_list(value, f"{field}.{approach}")


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
    if "url_match" in types:
        check.string(block.get("reference_url"), "eval.reference_url")
        note = block.get("url_note") or "EXACT"
        if note not in URL_NOTES:
            check.fail("eval.url_note", f"must be one of {list(URL_NOTES)}, got {note!r}")
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


def _resolve_urls(check: _Checker, config: dict[str, Any], url_map: dict[str, str]) -> None:
    """Substitute placeholders in every URL field, in place; a placeholder left over is an error."""
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
        left = _PLACEHOLDER.findall(holder[key])
        if left:
            known = sorted(url_map) or "none given"
            check.fail(label, f"placeholder {left[0]} has no URL in url_map (known: {known})")


def load_tasks(source: Any, url_map: dict[str, str] | None = None) -> list[Task]:
    """Load WebArena-format task configs from a file, a directory of *.json, a dict or a list of dicts.

    Placeholders such as `__SHOPPING__` in start_url, eval.reference_url and program_html urls are
    replaced from `url_map`. Raises TaskConfigError naming the file, task id and field on bad input.
    """
    mapping = normalise_url_map(url_map)
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for origin, raw in _entries(source):
        if not isinstance(raw, dict):
            raise TaskConfigError(f"{origin}: a task config must be a JSON object, got {type(raw).__name__}")
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
        task = Task.from_dict(config)
        if task.task_id in seen:
            raise TaskConfigError(f"{origin}: task {task.task_id}: duplicate task_id (first in {seen[task.task_id]})")
        seen[task.task_id] = origin
        tasks.append(task)
    return tasks
