"""Task templates of the embedded sites: the registry, and the plan lookup the solver uses.

Each site module (`shopping`, `admin`, `forum`, `gitlab`, `maps`) lists its `TEMPLATES`; see
`base.py` for what a template holds and how its evaluators are built.
"""

from __future__ import annotations

import functools

from webrl.data.trajectory import Task
from webrl.env.sites.moves import Move
from webrl.env.sites.templates import admin, forum, gitlab, maps, shopping
from webrl.env.sites.templates.base import Template

__all__ = ["Template", "all_templates", "plan_for", "template_of"]


@functools.lru_cache(maxsize=1)
def all_templates() -> dict[int, Template]:
    """Every template by id, in id order; a duplicate id is an error naming the module."""
    table: dict[int, Template] = {}
    for module in (shopping, admin, forum, gitlab, maps):
        for template in module.TEMPLATES:
            if template.template_id in table:
                raise ValueError(f"duplicate template id {template.template_id} in {module.__name__}")
            table[template.template_id] = template
    return dict(sorted(table.items()))


def template_of(task: Task) -> Template:
    """The template a task was instantiated from; a clear error for tasks of other origins."""
    template = all_templates().get(task.intent_template_id) if task.intent_template_id is not None else None
    if template is None:
        raise KeyError(
            f"task {task.task_id}: intent_template_id {task.intent_template_id!r} is not an embedded-site template"
        )
    return template


def plan_for(task: Task) -> list[Move]:
    """The reference plan of an embedded-site task, from its template and instantiation_dict."""
    return template_of(task).plan(task.instantiation_dict)
