"""Feasibility judge: an LLM decides whether a generated task can be done on its website.

Generators invent tasks that the site cannot serve (live traffic on a map, refunds in a shop admin);
an agent can only fail those, and the ORM then learns from noise. WebRL's release asks GPT-4o with
per-site rules and a "reason, then [YES]/[NO]" answer (method §3). The rules live in
`CurriculumConfig.judge_rules` (our wording, editable); the verdict parser reads the last bracketed
verdict, falls back to a last bare upper-case YES/NO, and reports None when it finds neither, so a
rambling small model never crashes a phase.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webrl.data.curriculum_config import CurriculumConfig
from webrl.data.curriculum_generation import render_messages
from webrl.data.trajectory import Task
from webrl.inference.engine import InferenceEngine, SamplingParams

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
