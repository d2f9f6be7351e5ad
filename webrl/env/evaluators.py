"""WebArena's programmatic evaluators: string_match, url_match and program_html (docs/method.md §9.2).

Each listed eval type scores 0 or 1 and the task's score is their product, like WebArena's
`EvaluatorComb`; a task succeeds only at 1.0. The string rules follow WebArena's: the answer is
stripped of one pair of quotes and lower-cased; `must_include` alternatives are separated by
" |OR| "; a one-character reference that is a task's only `must_include` is matched against whole
word tokens so that "3" does not match "13". `fuzzy_match` needs an LLM judge; without one the
result says `needs_judge` instead of guessing, so callers can route the trajectory to the ORM.
"""

from __future__ import annotations

import html
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webrl.data.trajectory import Task, is_success

# judge(intent, answer, reference) -> a score in [0, 1] or a bool, or an awaitable of one.
Judge = Callable[[str, str, str], Any]

_OR = " |OR| "


class EvaluationError(RuntimeError):
    """A task whose evaluator cannot run here (e.g. WebArena's `func:` helpers); names the task."""


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
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return text.lower()


def _word_tokens(text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", text.replace("/", " / "))


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


async def _ask_judge(judge: Judge, intent: str, answer: str, reference: str) -> float:
    verdict = judge(intent, answer, reference)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return float(verdict)


async def string_match(
    references: dict[str, Any], answer: str | None, intent: str = "", judge: Judge | None = None
) -> tuple[float, bool]:
    """Score an answer against `reference_answers`; return (score, needs_judge)."""
    if answer is None or not answer.strip():
        return 0.0, False
    score = 1.0
    needs_judge = False
    for approach, value in references.items():
        if approach == "exact_match":
            score *= float(clean_answer(answer) == clean_answer(value))
        elif approach == "must_include":
            score *= float(all(includes(ref, answer, tokenize=len(value) == 1) for ref in value))
        elif approach == "must_exclude":
            score *= float(not any(includes(ref, answer) for ref in value))
        elif approach == "one_of":
            score *= float(any(includes(ref, answer) for ref in value))
        elif approach == "fuzzy_match":
            if value == "N/A":
                score *= float(clean_answer(answer) == "n/a")
            elif judge is None:
                needs_judge = True
                score = 0.0
            else:
                for ref in value:
                    score *= float(is_success(await _ask_judge(judge, intent, answer, ref)))
        else:
            raise EvaluationError(f"unsupported reference type {approach!r}")
    return score, needs_judge


def _normalise_url(url: str) -> str:
    return url.strip().replace("://localhost", "://127.0.0.1").rstrip("/")


def url_match(reference_url: str, page_url: str, url_note: str = "EXACT") -> float:
    """1.0 when the page URL equals a ` |OR| ` alternative (EXACT) or contains one (GOLD in PRED)."""
    pred = _normalise_url(page_url)
    refs = [_normalise_url(ref) for ref in reference_url.split(_OR) if ref.strip()]
    if url_note == "GOLD in PRED":
        return float(any(ref in pred for ref in refs))
    return float(pred in refs)


async def _select_content(page: Any, locator: str, task_id: str) -> str:
    if not locator.strip():
        return await page.evaluate("() => document.body ? document.body.innerText : ''")
    if locator.startswith(("func:", "lambda:")):
        raise EvaluationError(f"task {task_id}: locator {locator[:60]!r} uses WebArena helpers webrl does not ship")
    value = await page.evaluate(f"() => {{ try {{ return {locator}; }} catch (e) {{ return null; }} }}")
    return "" if value is None else str(value)


def content_match(required: dict[str, Any], content: str) -> float:
    """Apply program_html's required_contents (exact_match / must_include / must_exclude) to `content`."""
    score = 1.0
    for approach, value in required.items():
        if approach == "exact_match":
            score *= float(clean_answer(content) == clean_answer(value))
        elif approach == "must_include":
            score *= float(all(includes(ref, content) for ref in value))
        elif approach == "must_exclude":
            score *= float(not any(includes(ref, content) for ref in value))
        else:
            raise EvaluationError(f"unsupported required_contents type {approach!r}")
    return score


async def program_html(targets: list[dict[str, Any]], page: Any, task_id: str = "?") -> float:
    """Check page content per target: navigate (or stay on "last"), run prep actions, select, match."""
    score = 1.0
    for target in targets:
        url = target["url"]
        if url.startswith("func:"):
            raise EvaluationError(f"task {task_id}: program_html url {url[:60]!r} needs WebArena helper functions")
        if url != "last":
            await page.goto(url, wait_until="domcontentloaded")
        for prep in target.get("prep_actions") or []:
            await page.evaluate(f"() => {{ {prep} }}")
        content = html.unescape(await _select_content(page, target.get("locator", ""), task_id))
        score *= content_match(target["required_contents"], content)
    return score


async def evaluate_task(task: Task, page: Any, answer: str | None, judge: Judge | None = None) -> EvalResult:
    """Score a finished episode: `page` is its final page, `answer` its exit message (or None)."""
    block = task.eval or {}
    types = block.get("eval_types") or []
    if not types:
        raise EvaluationError(f"task {task.task_id} has no programmatic evaluator (eval.eval_types is empty)")
    per_type: dict[str, float] = {}
    needs_judge = False
    # url_match reads the final URL before program_html may navigate away from it.
    if "url_match" in types:
        per_type["url_match"] = url_match(block["reference_url"], page.url, block.get("url_note") or "EXACT")
    if "string_match" in types:
        per_type["string_match"], needs_judge = await string_match(
            block["reference_answers"], answer, task.intent, judge
        )
    if "program_html" in types:
        per_type["program_html"] = await program_html(block["program_html"], page, task.task_id)
    score = 1.0
    for value in per_type.values():
        score *= value
    return EvalResult(score=score, per_type=per_type, needs_judge=needs_judge)
