"""The curriculum's filters: intent normalisation for dedupe, the critic's value window, site-balanced
selection, per-phase random streams, and the LLM feasibility judge.

The cheap filters are plain functions over plain values so that each can be tested on hand-made
inputs. The judge exists because generators invent tasks that the site cannot serve (live traffic
on a map, refunds in a shop admin); an agent can only fail those, and the ORM then learns from
noise. WebRL's release asks GPT-4o with per-site rules and a "reason, then [YES]/[NO]" answer
(docs/method.md §3.2). The rules live in `CurriculumConfig.judge_rules` (our wording, editable); the verdict
parser reads the last bracketed verdict, falls back to a last bare upper-case YES/NO, and reports
None when it finds neither, so a rambling small model never crashes a phase.
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.generation import render_messages
from webrl.data.trajectory import Task
from webrl.inference.engine import InferenceEngine, SamplingParams

T = TypeVar("T")

_WORD = re.compile(r"[^\W_]+")


def normalise_intent(text: str) -> str:
    """The dedupe key of an intent: case, Unicode compatibility forms, punctuation and spacing ignored.

    "Show me the price of the red mug." and "show me  the price of the Red Mug" are the same task;
    a model that echoes an example with a changed full stop has not created a new one.
    """
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


_MEANINGFUL_SYMBOL = re.compile(r"[$%#+€£¥]|(?<!\w)-(?=\d)")


def dedupe_key(text: str) -> str:
    """The key under which the curriculum takes two intents for the same task: `normalise_intent`, then the symbols
    that change what is asked (currency, %, #, +, a minus sign), in order.

    Without them "Apply a $10 discount" and "Apply a 10% discount", or "in C++" and "in C#", were one task and the
    second was dropped as a duplicate. Appended, not kept in place, so intents order as their normalised words do.
    """
    key = normalise_intent(text)
    symbols = _MEANINGFUL_SYMBOL.findall(unicodedata.normalize("NFKC", text))
    return f"{key} {' '.join(symbols)}" if symbols else key


def phase_rng(seed: int, phase: int, stream: str) -> random.Random:
    """A random stream derived from (seed, phase, stream) only, never from global state.

    A resumed run that re-enters phase p draws exactly what the first run drew; separate streams
    (seed sampling, template values, selection) keep one consumer's draws from shifting another's.
    """
    digest = hashlib.sha256(f"webrl-curriculum/{seed}/{phase}/{stream}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def value_verdict(value: float, window: tuple[float, float]) -> str | None:
    """None when the critic's P(success) lies in the closed window, else "critic_low" / "critic_high".

    Too low: the agent would almost surely fail (no learning signal); too high: it already solves it.
    """
    low, high = window
    if value != value:  # NaN: a broken critic must not let every task through
        raise ValueError(f"critic returned NaN; cannot apply curriculum.value_window {window}")
    if value < low:
        return "critic_low"
    if value > high:
        return "critic_high"
    return None


def pick_balanced(queues: Mapping[Hashable, list[T]], counts: dict[Hashable, int], n: int) -> list[tuple[Hashable, T]]:
    """Pop up to `n` items, each time from the non-empty queue whose key has the fewest items so far.

    `counts` (items already kept or pending per key) is updated in place. Ties go to the key that
    comes first in `queues`' order, so with equal starting counts this is a round-robin; a site
    that runs out of candidates leaves its share to the others. Deterministic for given inputs.
    """
    picked: list[tuple[Hashable, T]] = []
    order = {key: i for i, key in enumerate(queues)}
    while len(picked) < n:
        live = [key for key in queues if queues[key]]
        if not live:
            break
        key = min(live, key=lambda k: (counts.get(k, 0), order[k]))
        picked.append((key, queues[key].pop(0)))
        counts[key] = counts.get(key, 0) + 1
    return picked


def group_by(items: Sequence[T], key_of: Callable[[T], str]) -> dict[str, list[T]]:
    """Group `items` by `key_of(item)`, keys sorted, items in their input order."""
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(key_of(item), []).append(item)
    return {key: groups[key] for key in sorted(groups)}


JUDGE_SYSTEM_PROMPT = (
    "You review tasks written for an AI assistant that operates a website, and decide whether the "
    "assistant could complete each task using only that website."
)

_BRACKETED = re.compile(r"\[\s*(yes|no)\s*\]", re.IGNORECASE)
_BARE = re.compile(r"\b(YES|NO)\b")


@dataclass
class Verdict:
    """The judge's answer on one task: feasible True/False, or None when the reply held no verdict."""

    feasible: bool | None
    reply: str


def parse_verdict(reply: str) -> bool | None:
    """True for [YES], False for [NO] (the last one wins), else the last bare YES/NO, else None."""
    bracketed = _BRACKETED.findall(reply)
    if bracketed:
        return bracketed[-1].casefold() == "yes"
    bare = _BARE.findall(reply)
    if bare:
        return bare[-1] == "YES"
    return None


def judge_messages(site_description: str, rules: str, intent: str) -> list[dict[str, str]]:
    """The judge prompt for one task: site, its rules, the task, and the answer format."""
    rule_text = f"Rules for this website: {rules}\n" if rules else ""
    user = (
        f"Website: {site_description}.\n{rule_text}\n"
        f"Task: {intent}\n\n"
        "Could the assistant complete this task using only this website? Answer with one sentence "
        "giving your reason, then end with [YES] if the task is feasible or [NO] if it is not."
    )
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


class FeasibilityJudge:
    """Asks an LLM, with per-site rules, whether tasks are feasible; greedy decoding, one batch per call."""

    def __init__(self, engine: InferenceEngine, config: CurriculumConfig, chat_template_tokenizer: Any = None) -> None:
        self.engine = engine
        self.config = config
        self.chat_template_tokenizer = chat_template_tokenizer

    def prompt(self, task: Task) -> str:
        site = task.site
        messages = judge_messages(
            self.config.site_description(site), self.config.judge_rules.get(site, ""), task.intent
        )
        return render_messages(messages, self.chat_template_tokenizer)

    def judge(self, tasks: Sequence[Task], seed: int = 0) -> list[Verdict]:
        """One verdict per task, in order."""
        if not tasks:
            return []
        # Greedy: a feasibility verdict should not depend on the sampling draw.
        params = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=self.config.judge_max_tokens, seed=seed)
        completions = self.engine.generate([self.prompt(task) for task in tasks], params)
        if len(completions) != len(tasks):
            raise RuntimeError(f"judge engine returned {len(completions)} completions for {len(tasks)} prompts")
        return [Verdict(parse_verdict(c.text), c.text) for c in completions]
