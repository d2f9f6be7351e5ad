"""Observations in WebRL's text form: simplified HTML with numbered interactive elements.

An observation is what the model reads each turn. WebRL's release shows the model the current
page as simplified HTML (`<tag id="N" attr="…">text</tag>`, ids only on elements it can act on,
docs/method.md §4.1); this module produces that form with one `page.evaluate` (see `observation_script`),
then applies the character budget on the Python side so the cut is marked the same way everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from playwright.async_api import Error as PlaywrightError

from webrl.env.observation_script import OBSERVE_JS

# The attribute the page script stamps on every labelled element; actions find element N with it.
ELEMENT_ATTRIBUTE = "data-webrl-id"
# What Playwright says when a navigation replaced the document a script was running in.
_CONTEXT_LOST = ("Execution context was destroyed", "Cannot find context with specified id", "because of a navigation")
REGIONS = ("page", "viewport", "from_viewport")
"""What part of a page an observation shows (ObservationConfig.region)."""
ABOVE_MARK = "[... the page above is left out: Scroll Up to see it ...]"
"""First line of a from_viewport observation that left out the part of a long page above the viewport."""
PAGE_SCRIPT_ATTEMPTS = 3
"""How often a page script is run when navigations keep replacing its document under it."""
# The page script numbers labelled elements 0, 1, 2, … in decimal; no other id exists.
_ELEMENT_ID = re.compile(r"0|[1-9][0-9]*")


@dataclass
class ObservationConfig:
    """How a page becomes text. Defaults keep a small page within a small model's context."""

    max_chars: int = 12_000
    """Character budget of the html; the end is cut and marked when a page is larger."""
    text_limit: int = 500
    """Each text node and attribute value is clipped to this many characters (WebRL: 500)."""
    region: str = "page"
    """page (all, cut at max_chars) | viewport (the release's) | from_viewport (all if it fits, else from the view)."""
    bbox: bool = False
    """Add `data-bbox="x,y,w,h"` (viewport pixels) to labelled elements, like WebRL's release."""

    def __post_init__(self) -> None:
        if self.max_chars < 100:
            raise ValueError(f"ObservationConfig.max_chars must be >= 100, got {self.max_chars}")
        if self.text_limit < 1:
            raise ValueError(f"ObservationConfig.text_limit must be >= 1, got {self.text_limit}")
        if self.region not in REGIONS:
            raise ValueError(f"ObservationConfig.region must be one of {', '.join(REGIONS)}, got {self.region!r}")


@dataclass
class Observation:
    """The page as the model sees it: simplified html, plus the url and title beside it."""

    html: str
    url: str
    title: str

    @classmethod
    def empty(cls, url: str = "") -> Observation:
        """The observation of a page that could not be read (e.g. the browser died)."""
        return cls(html="", url=url, title="")


def is_element_id(element: str) -> bool:
    """True for an id an observation can give; the agent's element argument must be checked with it."""
    return _ELEMENT_ID.fullmatch(element) is not None


def element_selector(element: str) -> str:
    """CSS selector of labelled element `element` in the page after the last observation.

    The id goes into the selector as it is, so anything but an element id is refused (ValueError):
    an id such as `0"] , *[x="` would otherwise select other elements.
    """
    if not is_element_id(element):
        raise ValueError(f"{element!r} is not an element id")
    return f'[{ELEMENT_ATTRIBUTE}="{element}"]'


def cut_to_budget(html: str, max_chars: int) -> str:
    """Cut `html` to `max_chars` characters at a line end where possible, marking the cut."""
    if len(html) <= max_chars:
        return html
    head = html[:max_chars]
    line_end = head.rfind("\n")
    if line_end > max_chars // 2:
        head = head[:line_end]
    return f"{head}\n[... observation cut: {len(html) - len(head)} more characters ...]"


def cut_to_budget_from_end(html: str, max_chars: int) -> str:
    """Keep the last `max_chars` characters of `html`, from a line start where possible (the end of a long page)."""
    if len(html) <= max_chars:
        return html
    tail = html[-max_chars:]
    line_start = tail.find("\n")
    if 0 <= line_start < max_chars // 2:
        tail = tail[line_start + 1 :]
    return tail


def is_context_lost(err: BaseException) -> bool:
    """Whether a page script failed only because a navigation replaced its document (then it can run again)."""
    return isinstance(err, PlaywrightError) and any(text in str(err) for text in _CONTEXT_LOST)


async def evaluate_settled(page: Any, script: str, arg: Any = None) -> Any:
    """`page.evaluate`, run again in the new document when a navigation destroyed the one it ran in.

    A navigation that commits while a script runs is not a failure of the page or of the agent: the
    script is rerun once the new document has parsed, up to PAGE_SCRIPT_ATTEMPTS times in all.
    """
    for _ in range(PAGE_SCRIPT_ATTEMPTS - 1):
        try:
            return await page.evaluate(script, arg)
        except PlaywrightError as err:
            if not is_context_lost(err):
                raise
            await page.wait_for_load_state("domcontentloaded")
    return await page.evaluate(script, arg)


async def observe(page: Any, config: ObservationConfig | None = None) -> Observation:
    """Render `page` (a Playwright Page) as an Observation and stamp element ids in the DOM.

    A navigation that replaces the document during the observation is waited out and the new page observed.
    """
    config = config or ObservationConfig()
    result = await evaluate_settled(
        page,
        OBSERVE_JS,
        {
            "maxChars": config.max_chars,
            "textLimit": config.text_limit,
            "region": config.region,
            "bbox": config.bbox,
        },
    )
    if result["above"]:
        cut = cut_to_budget_from_end if result["tail"] else cut_to_budget
        html = f"{ABOVE_MARK}\n{cut(result['html'], config.max_chars - len(ABOVE_MARK) - 1)}"
    else:
        html = cut_to_budget(result["html"], config.max_chars)
    return Observation(html=html, url=result["url"], title=result["title"])
