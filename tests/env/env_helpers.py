"""Helpers shared by the env tests (a module of its own: `conftest` is an ambiguous import name)."""

from __future__ import annotations

import re
from pathlib import Path

from webrl.data.trajectory import Task

PAGES = Path(__file__).parent / "pages"


def page_task(page: str, task_id: str = "t1", eval_block: dict | None = None, intent: str = "test") -> Task:
    """A task starting at a test page, with the `__PAGES__` placeholder left for the backend's url_map."""
    return Task(task_id=task_id, intent=intent, sites=["pages"], start_url=f"__PAGES__/{page}", eval=eval_block)


def element_id(html: str, needle: str) -> str:
    """Id of the first labelled element whose tag text contains `needle` (text or attribute)."""
    for match in re.finditer(r'<(\w+) id="(\d+)"([^>]*)>(?:([^<]*))?', html):
        if needle in match.group(0):
            return match.group(2)
    raise AssertionError(f"no labelled element with {needle!r} in:\n{html}")
