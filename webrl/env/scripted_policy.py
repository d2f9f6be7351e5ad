"""A scripted MiniWoB++ policy: reads the observation text and answers in WebRL's action language.

It drives the environment exactly as a model would (intent + simplified HTML in, one action string
out), which makes it the reference agent for the demo, for throughput benchmarks without model
time, and a check that observations carry what an agent needs (every supported task is solvable
from the text alone).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from webrl.data.trajectory import Task

# `<tag id="N" attrs>text</tag>` or `<tag id="N" attrs />`; MiniWoB pages are shallow, so the
# first closing tag of the same name ends the element.
_ELEMENT = re.compile(r'<(\w+) id="(\d+)"([^>]*?)(?:/>|>(.*?)</\1>)', re.DOTALL)
_QUOTED = re.compile(r'"([^"]*)"')


@dataclass
class PageElement:
    """One labelled element of an observation."""

    tag: str
    id: str
    attrs: str
    text: str

    def attr(self, name: str) -> str | None:
        match = re.search(rf'\b{name}="([^"]*)"', self.attrs)
        return match.group(1) if match else None


def page_elements(html: str) -> list[PageElement]:
    """The labelled elements of an observation, in id order."""
    out = []
    for tag, element_id, attrs, inner in _ELEMENT.findall(html):
        text = re.sub(r"<[^>]+>", " ", inner or "")
        out.append(PageElement(tag, element_id, attrs, " ".join(text.split())))
    return out


def _click(element: PageElement, why: str) -> str:
    return f'# Element: {why}\ndo(action="Click", element="{element.id}")'


def _type(element: PageElement, text: str, why: str) -> str:
    return f'# Element: {why}\ndo(action="Type", argument="{text}", element="{element.id}")'


def _find(elements: list[PageElement], tag: str | None = None, text: str | None = None) -> PageElement:
    for element in elements:
        if (tag is None or element.tag == tag) and (text is None or element.text == text):
            return element
    raise LookupError(f"no <{tag or '*'}> with text {text!r} in the observation")


class MiniWoBScriptedPolicy:
    """Solves a handful of MiniWoB++ tasks from the observation text (see SUPPORTED_TASKS)."""

    SUPPORTED_TASKS = (
        "click-test",
        "click-button",
        "click-link",
        "focus-text",
        "enter-text",
        "click-button-sequence",
        "login-user",
        "click-dialog",
        "choose-list",
    )

    def act(self, task: Task, html: str, step: int) -> str:
        """The next action string for `task` given the current observation html and step index."""
        name = task.extra.get("miniwob_task", "")
        if name not in self.SUPPORTED_TASKS:
            raise ValueError(f"no script for MiniWoB++ task {name!r}; supported: {list(self.SUPPORTED_TASKS)}")
        elements = page_elements(html)
        quoted = _QUOTED.findall(task.intent)
        buttons = [e for e in elements if e.tag == "button"]
        inputs = [e for e in elements if e.tag == "input"]
        if name == "click-test":
            return _click(buttons[0], "the only button")
        if name == "click-button":
            return _click(_find(elements, "button", quoted[0]), f"the {quoted[0]} button")
        if name == "click-link":
            return _click(_find(elements, None, quoted[0]), f"the link {quoted[0]}")
        if name == "focus-text":
            return _click(inputs[0], "the text box")
        if name == "enter-text":
            if inputs[0].attr("value") != quoted[0]:
                return _type(inputs[0], quoted[0], "the text field")
            return _click(_find(elements, "button", "Submit"), "Submit")
        if name == "click-button-sequence":
            label = "ONE" if step == 0 else "TWO"
            return _click(_find(elements, "button", label), f"button {label}")
        if name == "login-user":
            for field, value in zip(inputs, quoted[:2], strict=False):
                if field.attr("value") != value:
                    return _type(field, value, f"the {field.attr('type')} field")
            return _click(_find(elements, "button", "Login"), "Login")
        if name == "click-dialog":
            close = next(e for e in buttons if e.attr("title") == "Close")
            return _click(close, "the dialog's close button")
        # choose-list: "Select X from the list and click Submit."
        wanted = task.intent.removeprefix("Select ").split(" from the list")[0]
        select = _find(elements, "select")
        if f"<option selected>{wanted}</option>" not in html:
            return (
                f'# Element: the list\ndo(action="Select Dropdown Option", argument="{wanted}", element="{select.id}")'
            )
        return _click(_find(elements, "button", "Submit"), "Submit")
