"""The Template record and the evaluator helpers every site's templates are written with.

A `Template` is one WebArena-style intent template ("What is the price of {product}?") plus two
functions: every valid instantiation with its evaluator, computed from the seeded data
(`instances`), and the reference plan that solves an instantiation (`plan`, moves of `moves.py`).
Keeping intent, check and solution side by side means no template ships without the other two.

Evaluators follow WebArena (docs/method.md §9.2): string_match for questions, url_match for navigation,
program_html for state changes, where the check page is read in the episode's own browser context
(and therefore its own copy-on-write state). Every evaluator is chosen so that the start state
fails it: an agent that exits at once scores 0.

Template ids: 1xx shopping, 2xx shopping_admin, 3xx reddit (forum), 4xx gitlab, 5xx map.
`held_out` templates appear only in the test split.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from webrl.data.trajectory import Task
from webrl.env.sites.data import DEFAULT_SEED, build_tables
from webrl.env.sites.moves import Move
from webrl.env.sites.store import EpisodeStore, EpisodeView

Instance = tuple[dict[str, Any], dict[str, Any]]  # (instantiation_dict, eval block)


@dataclass(frozen=True)
class Template:
    """One intent template: how to instantiate it, check it and solve it."""

    template_id: int
    site: str
    intent: str
    instances: Callable[[EpisodeView], Sequence[Instance]]
    plan: Callable[[dict[str, Any]], list[Move]]
    start: str = ""
    held_out: bool = False

    @property
    def start_template(self) -> str:
        return self.start or f"{SITE_PLACEHOLDERS[self.site]}/"

    def task(self, task_id: int | str, values: dict[str, Any], eval_block: dict[str, Any]) -> Task:
        return Task(
            task_id=str(task_id),
            intent=self.intent.format(**values),
            sites=[self.site],
            start_url=self.start_template.format(**values),
            eval=eval_block,
            intent_template=self.intent,
            instantiation_dict=dict(values),
            intent_template_id=self.template_id,
            require_login=False,
            require_reset=False,
        )


SITE_PLACEHOLDERS = {
    "shopping": "__SHOPPING__",
    "shopping_admin": "__SHOPPING_ADMIN__",
    "reddit": "__REDDIT__",
    "gitlab": "__GITLAB__",
    "map": "__MAP__",
}


def _block(types: list[str], answers=None, url: str = "", note: str = "EXACT", targets=None) -> dict[str, Any]:
    return {
        "eval_types": types,
        "reference_answers": answers,
        "reference_url": url,
        "url_note": note,
        "program_html": targets or [],
        "string_note": "",
        "reference_answer_raw_annotation": "",
    }


def exact(value: object) -> dict[str, Any]:
    """string_match: the answer must equal `value` (case-insensitive)."""
    return _block(["string_match"], {"exact_match": str(value)})


def include(*values: object) -> dict[str, Any]:
    """string_match: the answer must contain every value (case-insensitive)."""
    return _block(["string_match"], {"must_include": [str(v) for v in values]})


def at_url(url: str) -> dict[str, Any]:
    """url_match: the final page must be `url` (placeholders kept; trailing slash ignored)."""
    return _block(["url_match"], url=url)


def page_check(url: str, locator: str, *, exact: str | None = None, include: Sequence[str] = ()) -> dict[str, Any]:
    """program_html: the content `locator` selects on page `url` must equal `exact` / contain `include`."""
    required: dict[str, Any] = {}
    if exact is not None:
        required["exact_match"] = exact
    if include:
        required["must_include"] = list(include)
    return _block(["program_html"], targets=[{"url": url, "locator": locator, "required_contents": required}])


def text_of(selector: str) -> str:
    """A program_html locator: the visible text of the element `selector` (None when it is absent)."""
    return f"document.querySelector({selector!r})?.innerText"


def value_of(name: str) -> str:
    """A program_html locator: the current value of the form control named `name`."""
    return f"document.querySelector('[name=\"{name}\"]')?.value"


def values_rng(template_id: int, *key: object) -> random.Random:
    """A per-instance RNG for values a template invents (a new price, a quantity), fixed by its key."""
    return random.Random("/".join(str(k) for k in (template_id, *key)))


@functools.lru_cache(maxsize=4)
def base_view(seed: int = DEFAULT_SEED) -> EpisodeView:
    """A read-only view of the seeded data, the state every episode starts from."""
    return EpisodeStore(build_tables(seed)).view("")
