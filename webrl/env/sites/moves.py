"""The moves a template's reference plan is made of (carried out by `solver.py`).

A plan is what a person would write down to solve a task: search for this, click that, type here,
read this value off the page, answer. Moves name elements by what the agent sees (link text,
placeholder, drop-down name), never by id, because ids change with the page.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Click:
    """Click the link or button whose text is `text` (`partial`: whose text contains it).

    `paged`: when it is not on this page, click "Next page" until it is.
    """

    text: str
    paged: bool = False
    partial: bool = False


@dataclass(frozen=True)
class Fill:
    """Type `value` into the text box or text area whose placeholder is `field`; `submit` presses Enter."""

    field: str
    value: str
    submit: bool = False


@dataclass(frozen=True)
class Choose:
    """Pick option `option` of the drop-down named `name`."""

    name: str
    option: str


@dataclass(frozen=True)
class Answer:
    """Exit with the first group of `pattern` matched against a text line (`paged`: look on later pages too)."""

    pattern: str
    paged: bool = False


@dataclass(frozen=True)
class Done:
    """Exit with a fixed message (empty for navigation and state-change tasks)."""

    message: str = ""


Move = Click | Fill | Choose | Answer | Done
