"""The task suites of the embedded sites: deterministic generation, the fixed split, re-instantiation.

`build_suites()` instantiates every template from the seeded data and splits the instantiations:
for a template seen in training, a shuffled few go to test and the next ones to train (held-out
instantiations); a `held_out` template goes to test only (held-out templates). The result is
shipped as `suites/train.json` and `suites/test.json` in WebArena's task-config format with URL
placeholders; `load_suite(split, url_map)` reads them through `webrl.env.tasks.load_tasks`, which
substitutes the placeholders and validates every task. A test checks that regenerating gives the
shipped files byte for byte.

`reinstantiate(task, rng, n)` gives the curriculum new tasks of a task's template with other
values, each with its own correct evaluator; it never returns a test-split instantiation.
"""

from __future__ import annotations

import functools
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from webrl.data.trajectory import Task
from webrl.env.sites.data import DEFAULT_SEED
from webrl.env.sites.server import PLACEHOLDERS
from webrl.env.sites.templates import all_templates, plan_for, template_of
from webrl.env.sites.templates.base import base_view
from webrl.env.tasks import load_tasks

SUITE_DIR = Path(__file__).parent / "suites"
SPLITS = ("train", "test")
TRAIN_PER_TEMPLATE = 15
TEST_PER_TEMPLATE = 3
HELD_OUT_PER_TEMPLATE = 10
TEST_ID_START = 1000  # train ids are 0..999, test ids 1000.., so ids are unique across splits


def _key(values: dict[str, Any]) -> str:
    return json.dumps(values, sort_keys=True)


def build_suites(seed: int = DEFAULT_SEED) -> dict[str, list[Task]]:
    """Both splits, generated from the templates and the data of `seed` (placeholders kept)."""
    view = base_view(seed)
    chosen: dict[str, list[tuple[Any, dict, dict]]] = {"train": [], "test": []}
    for template in all_templates().values():
        candidates = list(template.instances(view))
        if not candidates:
            raise ValueError(f"template {template.template_id} ({template.intent!r}) has no valid instantiation")
        order = list(range(len(candidates)))
        random.Random(f"{seed}/split/{template.template_id}").shuffle(order)
        if template.held_out:
            test, train = order[:HELD_OUT_PER_TEMPLATE], []
        else:
            n_test = min(TEST_PER_TEMPLATE, max(1, len(order) // 4))
            test, train = order[:n_test], order[n_test : n_test + TRAIN_PER_TEMPLATE]
        chosen["test"] += [(template, *candidates[i]) for i in test]
        chosen["train"] += [(template, *candidates[i]) for i in train]
    suites = {}
    for split, start in (("train", 0), ("test", TEST_ID_START)):
        suites[split] = [
            template.task(start + i, values, block) for i, (template, values, block) in enumerate(chosen[split])
        ]
    return suites


def write_suites(directory: Path = SUITE_DIR, seed: int = DEFAULT_SEED) -> dict[str, Path]:
    """Write `<split>.json` files (one task per line inside a JSON list, so diffs stay readable)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, tasks in build_suites(seed).items():
        path = directory / f"{split}.json"
        path.write_text(suite_text(tasks), encoding="utf-8")
        paths[split] = path
    return paths


def suite_text(tasks: list[Task]) -> str:
    return "[\n" + ",\n".join(json.dumps(t.to_dict(), ensure_ascii=False) for t in tasks) + "\n]\n"


def suite_path(split: str) -> Path:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return SUITE_DIR / f"{split}.json"


def load_suite(split: str, url_map: dict[str, str] | None = None) -> list[Task]:
    """The shipped tasks of `split`, validated, with placeholders replaced from `url_map` when given."""
    path = suite_path(split)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; run `python -m webrl.env.sites generate` to write it")
    if url_map is None:
        return [Task.from_dict(config) for config in json.loads(path.read_text(encoding="utf-8"))]
    return load_tasks(path, url_map, strict=True)


@functools.lru_cache(maxsize=1)
def _test_keys() -> frozenset[tuple[int, str]]:
    return frozenset((t.intent_template_id, _key(t.instantiation_dict)) for t in load_suite("test"))


def _fact(values: dict[str, Any], answers: Any) -> tuple[tuple[str, ...], str]:
    """What a question asks of the site, whatever its wording: its values and its reference answers."""
    return tuple(sorted(str(value) for value in values.values())), json.dumps(answers, sort_keys=True)


@functools.lru_cache(maxsize=1)
def _test_facts() -> frozenset[tuple[tuple[str, ...], str]]:
    """The facts the test split's questions ask. Another template may ask one in other words ("the status of order
    #1087" in training, "the status of my order #1087" held out, the same answer): giving it to training would
    teach a held-out answer."""
    tests = load_suite("test")
    return frozenset(
        _fact(t.instantiation_dict, t.eval["reference_answers"])
        for t in tests
        if (t.eval or {}).get("reference_answers")
    )


def _url_map_of(task: Task) -> dict[str, str] | None:
    """The url_map a loaded task was resolved with (None when it still has placeholders)."""
    if task.start_url.startswith("__"):
        return None
    parts = urlsplit(task.start_url)
    return {name: f"{parts.scheme}://{parts.netloc}{path}" for name, path in PLACEHOLDERS.items()}


def reinstantiate(task: Task, rng: random.Random, n: int, url_map: dict[str, str] | None = None) -> list[Task]:
    """Up to `n` new tasks of `task`'s template with other values from the site data.

    Each carries the evaluator computed for its own values, and a new id
    (`re-<template>-<candidate>`). Values of `task` itself and of any test-split task of the template are
    never returned, nor values whose answer a test task of another template asks (`_test_facts`), so curriculum
    tasks cannot leak the test set. URLs use the same deployment as
    `task` (or `url_map` when given); a task that still has placeholders gets placeholders.
    Fewer than `n` come back when the template has fewer other values.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    template = template_of(task)
    own = _key(task.instantiation_dict)
    pool = [
        (index, values, block)
        for index, (values, block) in enumerate(template.instances(base_view()))
        if _key(values) != own
        and (template.template_id, _key(values)) not in _test_keys()
        and _fact(values, block["reference_answers"]) not in _test_facts()
    ]
    picked = rng.sample(pool, min(n, len(pool)))
    new = [template.task(f"re-{template.template_id}-{index}", values, block) for index, values, block in picked]
    mapping = url_map or _url_map_of(task)
    if mapping is None:
        return new
    return load_tasks([t.to_dict() for t in new], mapping, strict=True)


def suite_counts(tasks: list[Task]) -> dict[str, Any]:
    """Per-site, per-template and per-eval-type counts, and the reference plan lengths (moves)."""
    return {
        "tasks": len(tasks),
        "sites": dict(sorted(Counter(t.site for t in tasks).items())),
        "templates": len({t.intent_template_id for t in tasks}),
        "eval_types": dict(sorted(Counter("+".join(t.eval["eval_types"]) for t in tasks).items())),
        "plan_moves": dict(sorted(Counter(len(plan_for(t)) for t in tasks).items())),
    }
