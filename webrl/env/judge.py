"""An LLM judge for WebArena's `fuzzy_match` references, behind any OpenAI-compatible chat endpoint.

WebArena scores a fuzzy reference by asking a chat model whether the agent's answer means the same as
the reference, and counts only a plain "correct" (a "partially correct" or "incorrect" verdict scores 0);
for an unachievable task (`fuzzy_match: "N/A"`) the reference is the task's `string_note`, the reason it
cannot be done. `OpenAIJudge` asks that question of the model named in the run config
(env.judge_url, env.judge_model) and is the `Judge` callable the evaluators take. The API key is read
from the environment variable the config names (env.judge_api_key_env), never from the config itself,
and never logged. A request that fails after its retries, or a reply with no verdict, raises
`JudgeError`, an EvaluationError: that episode ends in "error" with the reason, and no other.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

import openai

from webrl.env.evaluators import EvaluatorSiteError

JUDGE_SYSTEM_PROMPT = (
    "You grade a student's answer to a question about a website, given the reference answer. "
    "Wording may differ; what counts is whether the student's answer means the same as the reference. "
    'A reference of "N/A" means the task cannot be done on the site. '
    "End your reply with exactly one verdict: correct, partially correct, or incorrect."
)
_VERDICT = re.compile(r"\b(partially correct|incorrect|correct)\b")


class JudgeError(EvaluatorSiteError):
    """The judge could not be asked, or its reply held no verdict; the message names the endpoint and model.

    A site the evaluator reads, for this purpose: the judge failed, not the agent, so the episode is an infra error
    (retried once, then out of the rates and labels) rather than a 0 that a judge outage would give every
    fuzzy task.
    """


def judge_messages(intent: str, answer: str, reference: str) -> list[dict[str, str]]:
    """The chat the judge is sent for one (question, answer, reference) triple."""
    user = f"Question: {intent}\nReference answer: {reference}\nStudent answer: {answer}\nVerdict:"
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def verdict_score(reply: str) -> float:
    """1.0 for the verdict "correct", 0.0 for "partially correct" or "incorrect" (the last verdict named wins).

    Raises ValueError when the reply names none.
    """
    found = _VERDICT.findall(reply.lower())
    if not found:
        raise ValueError(f"no verdict (correct / partially correct / incorrect) in the reply {reply[:200]!r}")
    return 1.0 if found[-1] == "correct" else 0.0


class OpenAIJudge:
    """`judge(intent, answer, reference) -> 1.0 | 0.0` from a chat model at an OpenAI-compatible `base_url`.

    Args:
        base_url: the server's URL ending in /v1.
        model: the model name the server knows.
        api_key_env: the environment variable holding the API key; a local server without one gets "EMPTY".
        timeout_s: limit for one request.
        max_retries: retries (with backoff, by the `openai` client) of a failed request.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self.base_url, self.model = base_url, model
        self.calls = 0
        # The synchronous client, run in a thread: it belongs to no event loop, and rollouts start several.
        self.client = openai.OpenAI(
            base_url=base_url,
            api_key=os.environ.get(api_key_env) or "EMPTY",
            timeout=timeout_s,
            max_retries=max_retries,
        )

    def __repr__(self) -> str:
        return f"OpenAIJudge(base_url={self.base_url!r}, model={self.model!r})"

    def ask(self, intent: str, answer: str, reference: str) -> float:
        """The verdict as a score, asked synchronously."""
        self.calls += 1
        try:
            response: Any = self.client.chat.completions.create(
                model=self.model, messages=judge_messages(intent, answer, reference), temperature=0.0, max_tokens=256
            )
        except openai.OpenAIError as err:
            raise JudgeError(f"judge {self.model} at {self.base_url} failed: {type(err).__name__}: {err}") from err
        reply = response.choices[0].message.content or ""
        try:
            return verdict_score(reply)
        except ValueError as err:
            raise JudgeError(f"judge {self.model} at {self.base_url}: {err}") from err

    async def __call__(self, intent: str, answer: str, reference: str) -> float:
        return await asyncio.to_thread(self.ask, intent, answer, reference)


def build_judge(url: str, model: str, api_key_env: str) -> OpenAIJudge | None:
    """The judge a run config asks for (env.judge_url, env.judge_model, env.judge_api_key_env); None without a URL."""
    return OpenAIJudge(url, model, api_key_env) if url else None
