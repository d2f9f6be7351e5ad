"""Split names of the embedded suite beyond the shipped files: `validation` and `train_fit`, carved from train.

Settings must be chosen without looking at the test split, so a fixed set of 60 train tasks is
set aside as `validation` and `train_fit` is the rest of train. The carve is stratified over the
train templates (each template gives its proportional share, rounded by largest remainder) and
seeded by a constant here, not by the run seed, so every run and every checkpoint is measured on
the same validation tasks. Task ids stay the train ids, so outcomes pair across evaluations.

This lives outside `webrl.env.sites` on purpose: the demonstration cache is keyed by a hash of
that package's files, and the shipped `train` and `test` splits are unchanged by these names.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict

from webrl.data.trajectory import Task
from webrl.env.sites.suite import load_suite, reinstantiate
from webrl.env.sites.templates import template_of

VALIDATION, TRAIN_FIT = "validation", "train_fit"
CARVED_SPLITS = (VALIDATION, TRAIN_FIT)
VALIDATION_SIZE = 60
VALIDATION_SEED = "webrl/validation-split/v1"


def carve_validation(tasks: list[Task], size: int = VALIDATION_SIZE, seed: str = VALIDATION_SEED) -> set[str]:
    """Ids of `size` tasks of `tasks`, stratified over their templates: each gets the floor or ceiling of its share.

    A template's share is size * (its tasks) / (all tasks); the floors are taken first and the
    remaining places go to the largest fractional parts, ties broken by a seeded shuffle. Within a
    template the tasks are a seeded sample, so the carve depends only on `tasks` and `seed`.
    """
    if not 0 <= size <= len(tasks):
        raise ValueError(f"validation size must lie in [0, {len(tasks)}], got {size}")
    rng = random.Random(seed)
    members: dict[int | None, list[Task]] = defaultdict(list)
    for task in tasks:
        members[task.intent_template_id].append(task)
    templates = sorted(members, key=lambda template: (template is None, template or 0))
    rng.shuffle(templates)
    shares = {template: size * len(members[template]) / len(tasks) for template in templates}
    quota = {template: int(shares[template]) for template in templates}
    by_remainder = sorted(templates, key=lambda template: shares[template] - quota[template], reverse=True)
    for template in by_remainder[: size - sum(quota.values())]:
        quota[template] += 1
    return {task.task_id for template in templates for task in rng.sample(members[template], quota[template])}


def load_split(split: str, url_map: dict[str, str] | None = None) -> list[Task]:
    """The tasks of an embedded split: the shipped `train` or `test`, or `validation`/`train_fit` carved from train."""
    if split not in CARVED_SPLITS:
        return load_suite(split, url_map)
    train = load_suite("train", url_map)
    held = carve_validation(train)
    return [task for task in train if (task.task_id in held) == (split == VALIDATION)]


def reinstantiate_for(train_split: str, task: Task, rng: random.Random, n: int, url_map: dict[str, str]) -> list[Task]:
    """`reinstantiate`, and when training on `train_fit`, never with a validation task's values.

    The curriculum draws new values of a template from the site data; without this it could hand a
    validation task (same template, same values) to training and make validation optimistic. With
    any other split it is exactly `reinstantiate`, so existing runs draw the same tasks.

    Only a task of an embedded template gets new values: one whose template text is not the embedded
    template's of its `intent_template_id` (a WebArena task that shares an id) raises ValueError rather
    than turning into a task of the embedded site, and an unknown id raises KeyError (`template_of`).
    """
    embedded = template_of(task)
    if task.intent_template != embedded.intent:
        raise ValueError(
            f"task {task.task_id}: its intent_template {task.intent_template!r} is not embedded template "
            f"{embedded.template_id}'s ({embedded.intent!r}); only tasks of the embedded sites get new values"
        )
    if train_split != TRAIN_FIT:
        return reinstantiate(task, rng, n, url_map)
    held = {
        values_key(other) for other in load_split(VALIDATION) if other.intent_template_id == task.intent_template_id
    }
    fresh = [new for new in reinstantiate(task, rng, n + len(held), url_map) if values_key(new) not in held]
    return fresh[:n]


def values_key(task: Task) -> str:
    """A task's instantiation values as one comparable string (two tasks of a template with equal values match)."""
    return json.dumps(task.instantiation_dict, sort_keys=True)
