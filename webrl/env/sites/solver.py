"""Scripted reference solver of the embedded-site tasks: the proof that every task is solvable.

Each template (`templates/`) writes its solution as a short plan of moves (search for this, click
that, type here, read this value, answer) from the task's `instantiation_dict` alone. The solver
carries a plan out the way an agent would: it reads element ids and values from the observation
text with regular expressions and answers with WebRL action strings. It never looks at the DOM or
the server's data, so what it does is something a model reading the same observation could do,
and its trajectories are SFT demonstrations in WebRL's response style:

    # Element: Add to cart
    do(action="Click", element="5")

Pagination is part of the plan: a `Click` or `Answer` with `paged=True` clicks "Next page" until
its target shows up. The solver is stateless given the responses so far (`respond`), so a rollout
test double can drive it from (task, history, observation) alone; `ReferenceSolver` wraps that for
one episode.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from webrl.data.trajectory import Task
from webrl.env.sites.moves import Answer, Choose, Click, Fill, Move
from webrl.env.sites.templates import plan_for

NEXT_PAGE = "Next page"
_ELEMENT = re.compile(r'<(?P<tag>\w+) id="(?P<id>\d+)"(?P<attrs>[^>]*?)\s*(?P<void>/?)>')
_ATTR = re.compile(r'(\w[\w-]*)="([^"]*)"')
_TAG = re.compile(r"<[^>]+>")


class SolverError(RuntimeError):
    """The plan cannot go on with this observation (a missing element or value); names task and move."""


@dataclass(frozen=True)
class Element:
    """An interactive element of the observation: its id, tag, kept attributes and text."""

    id: str
    tag: str
    attrs: dict[str, str]
    text: str


def parse_elements(observation: str) -> list[Element]:
    """Every element that carries an id in the simplified HTML, in document order."""
    out = []
    for match in _ELEMENT.finditer(observation):
        tag = match.group("tag")
        attrs = {k: html.unescape(v) for k, v in _ATTR.findall(match.group("attrs"))}
        text = ""
        if not match.group("void"):
            end = observation.find(f"</{tag}>", match.end())
            inner = observation[match.end() : end if end >= 0 else len(observation)]
            text = " ".join(html.unescape(_TAG.sub(" ", inner)).split())
        out.append(Element(match.group("id"), tag, attrs, text))
    return out


def text_lines(observation: str) -> list[str]:
    """The observation as plain text, one line per block (tags dropped, spaces collapsed)."""
    return [" ".join(html.unescape(_TAG.sub(" ", line)).split()) for line in observation.splitlines()]


def _quote(value: str) -> str:
    # JSON string syntax is also valid Python string syntax for the action parser's `ast`.
    return json.dumps(value, ensure_ascii=False)


def _click(element: Element, description: str) -> str:
    return f'# Element: {description}\ndo(action="Click", element="{element.id}")'


def _fail(task: Task, move: Move, problem: str, observation: str) -> SolverError:
    return SolverError(f"task {task.task_id}: {move}: {problem}; observation starts: {observation[:300]!r}")


def _find_clickable(elements: Sequence[Element], text: str, partial: bool) -> Element | None:
    wanted = " ".join(text.lower().split())
    for element in elements:
        if element.tag not in ("a", "button"):
            continue
        have = element.text.lower()
        if have == wanted or (partial and wanted in have):
            return element
    return None


def _next_page(task: Task, move: Move, elements: Sequence[Element], observation: str) -> str:
    nxt = _find_clickable(elements, NEXT_PAGE, partial=False)
    if nxt is None:
        raise _fail(task, move, "target not found on any page", observation)
    return _click(nxt, NEXT_PAGE)


def act(task: Task, move: Move, observation: str) -> tuple[str, bool]:
    """The response for `move` on this observation, and whether it completes the move."""
    elements = parse_elements(observation)
    if isinstance(move, Click):
        target = _find_clickable(elements, move.text, move.partial)
        if target is None:
            if move.paged:
                return _next_page(task, move, elements, observation), False
            raise _fail(task, move, "no such link or button", observation)
        return _click(target, target.text), True
    if isinstance(move, Fill):
        box = next((e for e in elements if e.attrs.get("placeholder", "").lower() == move.field.lower()), None)
        if box is None:
            raise _fail(task, move, "no text box with that placeholder", observation)
        action = "Search" if move.submit else "Type"
        return (
            f'# Element: {move.field}\ndo(action="{action}", argument={_quote(move.value)}, element="{box.id}")',
            True,
        )
    if isinstance(move, Choose):
        box = next((e for e in elements if e.tag == "select" and e.attrs.get("name") == move.name), None)
        if box is None:
            raise _fail(task, move, "no drop-down with that name", observation)
        action = f'do(action="Select Dropdown Option", argument={_quote(move.option)}, element="{box.id}")'
        return f"# Element: {move.name} drop-down\n{action}", True
    if isinstance(move, Answer):
        for line in text_lines(observation):
            found = re.search(move.pattern, line)
            if found:
                return f"exit(message={_quote(found.group(1))})", True
        if move.paged:
            return _next_page(task, move, elements, observation), False
        raise _fail(task, move, "no line matches the answer pattern", observation)
    return f"exit(message={_quote(move.message)})", True


def _is_paging(response: str) -> bool:
    return response.startswith(f"# Element: {NEXT_PAGE}\n")


def respond(task: Task, plan: Sequence[Move], history: Sequence[str], observation: str) -> str:
    """The next response of the plan, given the responses already given in this episode.

    A paging click keeps the plan on the same move; every other response completes one move, so
    the position in the plan follows from `history` alone.
    """
    position = sum(1 for response in history if not _is_paging(response))
    if position >= len(plan):
        raise SolverError(f"task {task.task_id}: the plan of {len(plan)} moves is already complete")
    return act(task, plan[position], observation)[0]


class ReferenceSolver:
    """The reference solver for one episode of an embedded-site task.

    solver = ReferenceSolver(task)
    response = solver.act(observation.html)   # call once per step, until it returns exit(...)
    """

    def __init__(self, task: Task) -> None:
        self.task = task
        self.plan = plan_for(task)
        self.history: list[str] = []

    def act(self, observation: str) -> str:
        response = respond(self.task, self.plan, self.history, observation)
        self.history.append(response)
        return response
