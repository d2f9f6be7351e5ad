"""WebArena's programmatic evaluators: string_match, url_match and program_html (docs/method.md §9.2).

Each listed eval type scores 0 or 1 and the task's score is their product, like WebArena's
`EvaluatorComb`; a task succeeds only at 1.0. The rules follow WebArena's evaluation harness (and
WebArena-Lite's additions `must_exclude`, `one_of` and program_html `fuzzy_match`):

- strings are normalised by stripping, dropping one pair of surrounding quotes and lower-casing;
  the answer is normalised once on its own and again inside each comparison, as WebArena does;
- `must_include` alternatives are separated by " |OR| "; a one-character reference that is a task's
  only `must_include` is matched against whole word tokens cut as NLTK cuts them, so that "3" matches
  neither "13" nor "3.5" nor "1,300";
- url_match compares host+path (the reference contained in the page's, "GOLD in PRED", the default
  when `url_note` is missing), then every reference query parameter as a set of decoded values, so
  parameter order and `+` for a space do not matter but a lengthened value does;
- program_html opens a target's page and reads it once its scripts have settled (WebArena sleeps 3 s);
  an empty locator reads the page's HTML (`page.content()`), not its text; a `fuzzy_match` list in
  `required_contents` is one reference, its items joined, as WebArena-Lite asks its judge.

`fuzzy_match` needs an LLM judge; without one the result says `needs_judge` instead of guessing, so
callers can route the trajectory to the ORM. A program_html `url` or `locator` of `func:name(...)` is one of
WebArena's helpers (`webrl.env.webarena_helpers`): in the url it gives the page to open, in the locator the
content to check. Every such expression is checked before the first page is opened: a helper webrl lacks
raises `MissingHelperError` naming it and the ones there are; a helper that cannot answer (the shop's REST
API out of reach) raises `EvaluationError` naming the task, the field and the cause.
"""

from __future__ import annotations

import contextlib
import html
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from webrl.data.trajectory import Task, is_success
from webrl.env.magento_api import MagentoApiError, ShopUnreachableError
from webrl.env.webarena_helpers import (
    PREFIX,
    HelperCall,
    HelperCallError,
    UnknownHelperError,
    WebArenaHelpers,
    parse_call,
)

# judge(intent, answer, reference) -> a score in [0, 1] or a bool, or an awaitable of one.
Judge = Callable[[str, str, str], Any]

_OR = " |OR| "
NOT_AVAILABLE = "N/A"
# The longest a program_html target's page may take to settle after its load event (WebArena waits 3 s).
SETTLE_MS = 3000


class EvaluationError(RuntimeError):
    """A task whose evaluator cannot run here; the message names the task."""


class EvaluatorSiteError(EvaluationError):
    """The site an evaluator reads did not answer (a WebArena helper's REST call): the site failed, not the agent."""


class MissingHelperError(EvaluationError):
    """A task whose evaluator calls a WebArena `func:` helper webrl lacks; the message lists the ones it has."""


@dataclass
class EvalResult:
    """`score` is the product of `per_type` scores; `needs_judge` marks an unscored fuzzy_match.

    `details` carries backend-specific figures worth keeping in the trajectory (MiniWoB's raw reward).
    """

    score: float
    per_type: dict[str, float] = field(default_factory=dict)
    needs_judge: bool = False
    details: dict[str, Any] = field(default_factory=dict)


def clean_answer(text: str) -> str:
    """WebArena's normalisation: strip, drop one pair of surrounding quotes, lower-case."""
    text = text.strip()
    for quote in ("'", '"'):
        if text.startswith(quote) and text.endswith(quote):
            text = text[1:-1]
            break
    return text.lower()


# Word tokens as NLTK's word_tokenize (WebArena's tokenizer) cuts them, in the respects that decide whether a
# one-character reference stands alone: a number keeps its inner "." "," ":" and "-" ("3.5", "1,024", "3:30",
# "1-3" are one token each, so "3" is not in them), while sentence-final periods, brackets, quotes, the symbols
# below and clitics ("'s", "n't") come off as tokens of their own. Applied in this order.
_TOKEN_SPLITS = (
    re.compile(r"""((?<=[^\s.])\.)(?=[\])}>"']*(?:\s|$))"""),  # a period that ends a word
    re.compile(r"""(\.\.\.|--|''|[?!()\[\]{}<>;@#$%&"`*])"""),  # always a token of its own
    re.compile(r"([,:])(?!\d)"),  # a comma or colon not inside a number
    re.compile(r"(?<=[^'\s])('s|'m|'d|'ll|'re|'ve|n't)(?=\s|$)"),  # clitics
    re.compile(r"(?:(?<=\s)|^)(')(?!re|ve|ll|m|t|s|d|n)"),  # an opening single quote
    re.compile(r"(')(?=\s|$)"),  # a closing single quote
)


def _word_tokens(text: str) -> list[str]:
    """NLTK-like word tokens, plus the parts of each token with a "/" (WebArena-Lite counts "3" in "3/4")."""
    for pattern in _TOKEN_SPLITS:
        text = pattern.sub(r" \1 ", text)
    tokens = text.split()
    return tokens + [part for token in tokens if "/" in token for part in token.split("/") if part]


def includes(reference: str, prediction: str, tokenize: bool = False) -> bool:
    """True when any ` |OR| ` alternative of `reference` occurs in `prediction` (both cleaned)."""
    pred = clean_answer(prediction)
    for alternative in reference.split(_OR):
        ref = clean_answer(alternative)
        if tokenize and len(ref) == 1:
            if ref in _word_tokens(pred):
                return True
        elif ref in pred:
            return True
    return False


def exact(reference: str, prediction: str) -> bool:
    return clean_answer(prediction) == clean_answer(reference)


async def _ask_judge(judge: Judge, intent: str, answer: str, reference: str) -> bool:
    verdict = judge(intent, answer, reference)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return is_success(float(verdict))


async def _fuzzy(references: list[str], content: str, intent: str, judge: Judge | None) -> tuple[float, bool]:
    """Every reference judged equivalent to `content`; (0, True) when there is no judge to ask."""
    if judge is None:
        return 0.0, True
    for reference in references:
        if not await _ask_judge(judge, intent, content, reference):
            return 0.0, False
    return 1.0, False


async def string_match(
    references: dict[str, Any],
    answer: str | None,
    intent: str = "",
    judge: Judge | None = None,
    string_note: str = "",
) -> tuple[float, bool]:
    """Score an answer against `reference_answers`; return (score, needs_judge).

    `fuzzy_match: "N/A"` marks an unachievable task: the answer "N/A" passes at once; any other
    answer is for the judge to compare with `string_note` (the reason the task cannot be done).
    """
    if answer is None or not answer.strip():
        return 0.0, False
    pred = clean_answer(answer)
    score = 1.0
    needs_judge = False
    for approach, value in references.items():
        if approach == "exact_match":
            score *= float(exact(value, pred))
        elif approach == "must_include":
            score *= float(all(includes(ref, pred, tokenize=len(value) == 1) for ref in value))
        elif approach == "must_exclude":
            score *= float(not any(includes(ref, pred) for ref in value))
        elif approach == "one_of":
            score *= float(any(includes(ref, pred) for ref in value))
        elif approach == "fuzzy_match":
            if value == NOT_AVAILABLE and exact(NOT_AVAILABLE, pred):
                continue
            refs = [string_note] if value == NOT_AVAILABLE else value
            verdict, unjudged = await _fuzzy(refs, pred, intent, judge)
            score *= verdict
            needs_judge = needs_judge or unjudged
        else:
            raise EvaluationError(f"unsupported reference type {approach!r}")
    return (0.0, True) if needs_judge else (score, False)


def _host_path(url: str) -> tuple[str, dict[str, list[str]]]:
    """(host + path without a trailing /, decoded query values per key); localhost is 127.0.0.1."""
    parts = urlsplit(url.strip())
    host = parts.netloc.replace("localhost", "127.0.0.1", 1) if parts.hostname == "localhost" else parts.netloc
    return host + parts.path.rstrip("/"), parse_qs(parts.query)


def _query_matches(reference: dict[str, list[str]], page: dict[str, list[str]], exact_set: bool) -> bool:
    if exact_set:
        return {k: set(v) for k, v in reference.items()} == {k: set(v) for k, v in page.items()}
    return all(any(value in page.get(key, []) for value in values) for key, values in reference.items())


def url_match(reference_url: str, page_url: str, url_note: str | None = None) -> float:
    """1.0 when the page URL matches a ` |OR| ` alternative of `reference_url`.

    "GOLD in PRED" (WebArena's rule, and the default): the reference's host+path occurs in the
    page's, and each reference query parameter has one of its values among the page's values for
    that key (extra page parameters are fine). "EXACT": host+path equal and the same parameters.
    Two details differ from WebArena's code, on purpose: a trailing / of the path never matters
    (WebArena drops it only at the very end of the URL, so `issues/?a=1` missed `issues?a=1`), and
    each alternative is checked with its own parameters (WebArena pools them across alternatives,
    which makes alternatives with different parameters impossible to satisfy).
    """
    exact_rule = url_note == "EXACT"
    page_base, page_query = _host_path(page_url)
    for alternative in reference_url.split(_OR):
        if not alternative.strip():
            continue
        base, query = _host_path(alternative)
        base_ok = base == page_base if exact_rule else base in page_base
        if base_ok and _query_matches(query, page_query, exact_rule):
            return 1.0
    return 0.0


def _helper_calls(targets: list[dict[str, Any]], task_id: str) -> dict[tuple[int, str], HelperCall]:
    """Every target's `func:` url and locator, parsed; the named error for a helper webrl cannot call."""
    calls: dict[tuple[int, str], HelperCall] = {}
    for i, target in enumerate(targets):
        for key in ("url", "locator"):
            value = str(target.get(key, ""))
            where = f"eval.program_html[{i}].{key}"
            if value.startswith("lambda:"):
                raise EvaluationError(f"task {task_id}: {where} is a lambda: locator webrl does not run")
            if not value.startswith(PREFIX):
                continue
            try:
                calls[(i, key)] = parse_call(value)
            except UnknownHelperError as err:
                raise MissingHelperError(f"task {task_id}: {where} {err}") from err
            except HelperCallError as err:
                raise EvaluationError(f"task {task_id}: {where} {err}") from err
    return calls


async def _run_helper(helpers: WebArenaHelpers, call: HelperCall, page: Any, task_id: str, where: str) -> str:
    try:
        return await helpers.run(call, page)
    except ShopUnreachableError as err:
        raise EvaluatorSiteError(f"task {task_id}: {where} calls {call.name}(), which failed: {err}") from err
    except MagentoApiError as err:
        raise EvaluationError(f"task {task_id}: {where} calls {call.name}(), which failed: {err}") from err


async def open_target(page: Any, url: str, settle_ms: float = SETTLE_MS) -> None:
    """Open a target's page and let the scripts that render it finish before anything is read.

    Much of what WebArena checks is drawn by scripts after the HTML arrives (Magento's admin product form,
    GitLab's merge request sidebar): WebArena waits for the load event and then 3 s. This waits until the
    network has been quiet for half a second, at most `settle_ms`, so a page that keeps polling costs no more.
    A page whose load event never comes (a stalled image) is read as it is once the page's timeout has passed.
    """
    await page.goto(url, wait_until="domcontentloaded")
    with contextlib.suppress(PlaywrightTimeoutError):
        await page.wait_for_load_state("load")
        await page.wait_for_load_state("networkidle", timeout=settle_ms)


async def select_content(page: Any, locator: str) -> str:
    """What a program_html locator selects: the page's HTML when empty, else a JS expression's value."""
    if not locator.strip():
        return await page.content()
    value = await page.evaluate(f"() => {{ try {{ return {locator}; }} catch (e) {{ return null; }} }}")
    return "" if value is None else str(value)


async def content_match(
    required: dict[str, Any], content: str, intent: str = "", judge: Judge | None = None
) -> tuple[float, bool]:
    """Apply program_html's required_contents to `content`; return (score, needs_judge).

    exact_match, must_include (with ` |OR| ` alternatives, no word tokens), must_exclude, and
    fuzzy_match (a string whose ` |OR| `-separated parts must all be judged equivalent to the content, or
    a list whose items, joined by ", ", make one reference).
    """
    content = html.unescape(content)
    score = 1.0
    needs_judge = False
    for approach, value in required.items():
        if approach == "exact_match":
            score *= float(exact(value, content))
        elif approach == "must_include":
            score *= float(all(includes(ref, content) for ref in value))
        elif approach == "must_exclude":
            score *= float(not any(includes(ref, content) for ref in value))
        elif approach == "fuzzy_match":
            # A list is one reference, its items joined, as WebArena-Lite asks its judge: the items are the
            # facts the content must carry together ("refund", "12.99"), none of them an equivalent on its own.
            refs = value.split(_OR) if isinstance(value, str) else [", ".join(value)]
            verdict, unjudged = await _fuzzy(refs, content, intent, judge)
            score *= verdict
            needs_judge = needs_judge or unjudged
        else:
            raise EvaluationError(f"unsupported required_contents type {approach!r}")
    return (0.0, True) if needs_judge else (score, False)


async def program_html(
    targets: list[dict[str, Any]],
    page: Any,
    task_id: str = "?",
    intent: str = "",
    judge: Judge | None = None,
    helpers: WebArenaHelpers | None = None,
) -> tuple[float, bool]:
    """Check page content per target: navigate (or stay on "last"), run prep actions, select, match.

    A `func:` url is the helper's value for the page as it is then; a `func:` locator's value is the content.
    """
    calls = _helper_calls(targets, task_id)
    helpers = helpers or WebArenaHelpers()
    score = 1.0
    needs_judge = False
    for i, target in enumerate(targets):
        url = target["url"]
        if (i, "url") in calls:
            url = await _run_helper(helpers, calls[(i, "url")], page, task_id, f"eval.program_html[{i}].url")
        if url != "last":
            await open_target(page, url)
        for prep in target.get("prep_actions") or []:
            await page.evaluate(f"() => {{ try {{ {prep} }} catch (e) {{}} }}")
        if (i, "locator") in calls:
            where = f"eval.program_html[{i}].locator"
            content = await _run_helper(helpers, calls[(i, "locator")], page, task_id, where)
        else:
            content = await select_content(page, target.get("locator", ""))
        verdict, unjudged = await content_match(target["required_contents"], content, intent, judge)
        score *= verdict
        needs_judge = needs_judge or unjudged
    return score, needs_judge


async def evaluate_task(
    task: Task, page: Any, answer: str | None, judge: Judge | None = None, helpers: WebArenaHelpers | None = None
) -> EvalResult:
    """Score a finished episode: `page` is its final page, `answer` its exit message (or None).

    `helpers` runs program_html's `func:` helpers; the default has no site URLs, so the shopping ones fail.
    """
    block = task.eval or {}
    types = block.get("eval_types") or []
    if not types:
        raise EvaluationError(f"task {task.task_id} has no programmatic evaluator (eval.eval_types is empty)")
    per_type: dict[str, float] = {}
    needs_judge = False
    # url_match reads the final URL before program_html may navigate away from it.
    if "url_match" in types:
        per_type["url_match"] = url_match(block["reference_url"], page.url, block.get("url_note"))
    if "string_match" in types:
        per_type["string_match"], unjudged = await string_match(
            block["reference_answers"], answer, task.intent, judge, block.get("string_note") or ""
        )
        needs_judge = needs_judge or unjudged
    if "program_html" in types:
        per_type["program_html"], unjudged = await program_html(
            block["program_html"], page, task.task_id, task.intent, judge, helpers
        )
        needs_judge = needs_judge or unjudged
    score = 1.0
    for value in per_type.values():
        score *= value
    return EvalResult(score=score, per_type=per_type, needs_judge=needs_judge)
