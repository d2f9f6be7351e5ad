"""LLM task generation for the curriculum: the in-breadth evolving prompt and its reply parser.

WebRL (docs/method.md §3.1) shows a generator LLM up to 10 tasks that the agent failed on one website, as a
bulleted list of back-ticked tasks, and asks for new tasks of the same domain that are more
diverse, of similar difficulty and realistic, reusing the examples' concrete names; every
back-ticked span of the reply is one new task. The prompt here is our own wording of that recipe.

Any engine with `generate(prompts, SamplingParams) -> list[Completion]` serves: SmolLM2-135M-
Instruct through `HFEngine` on CPU (its chat template renders the messages), an OpenAI-compatible
endpoint, or a large vLLM model. Small models answer loosely, so the parser accepts whatever
spans it can and records why it dropped the rest instead of failing the phase.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from webrl.curriculum.config import CurriculumConfig
from webrl.data.prompts import uses_chat_template
from webrl.inference.engine import InferenceEngine, SamplingParams, digest_seed

GENERATOR_SYSTEM_PROMPT = (
    "You write tasks for an AI assistant that operates a website on behalf of its users. "
    "Each task is one instruction, written the way a real user would ask it."
)

# Markers that show the model is talking about the prompt instead of writing a task.
_PROMPT_ECHOES = ("given task", "created task")
_BACKTICK_RUN = re.compile(r"`+")
_CODE_LIKE = re.compile(r"\b(?:do|exit|go_backward|go_forward)\(|[{}<>\[\]|\\]")


@dataclass
class GenerationRequest:
    """One generator call: a site and the failed intents shown to the model as examples."""

    site: str
    seeds: list[str]


@dataclass
class ParsedReply:
    """The tasks read from one reply, and each dropped span with the reason it was dropped."""

    tasks: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)


def render_messages(messages: list[dict[str, str]], chat_template_tokenizer: Any = None) -> str:
    """One prompt string: the tokenizer's chat template when it has one, plain paragraphs otherwise.

    The plain form suits completion-mode engines and endpoints that wrap the text as one user turn.
    """
    if uses_chat_template(chat_template_tokenizer):
        return chat_template_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return "\n\n".join(message["content"] for message in messages) + "\n\n"


def generation_messages(site_description: str, seeds: Sequence[str]) -> list[dict[str, str]]:
    """The evolving prompt for one site: the seed tasks as a back-ticked bulleted list, then the brief."""
    examples = "\n".join(f"- `{seed}`" for seed in seeds)
    user = (
        f"The website is {site_description}. Users asked the assistant to do these tasks on it:\n"
        f"{examples}\n\n"
        "Write new tasks for the same website, taking these as inspiration. The new tasks must:\n"
        "1. belong to the same domain and use what this website offers;\n"
        "2. be more varied than the examples, both in what they ask and in how they are worded;\n"
        "3. be about as hard as the examples (a little easier or harder is fine);\n"
        "4. be realistic: something a real user would want and the website can do;\n"
        "5. reuse the concrete names found in the examples (products, places, user names, projects) "
        "instead of inventing new ones.\n"
        "Put each new task on its own line as a bullet, wrapped in backticks, like the examples."
    )
    return [{"role": "system", "content": GENERATOR_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_task_list(reply: str, min_chars: int = 12, max_chars: int = 300) -> ParsedReply:
    """Every back-ticked span of `reply` as one candidate task, checked and cleaned.

    Spans are read line by line, since a task is one line: a backtick left unpaired on its line
    opens a span that runs onto later lines and is dropped as "multiline", once, with its whole
    text, so that the parse count is a count of spans. The next line with an unpaired backtick
    closes it; a line with paired backticks only, or a code fence, ends it unclosed (a stray
    backtick, "I`ve", must not swallow the list below it). Runs of three or more backticks are
    code fences and are ignored; "``" is an empty span. Dropped spans carry one of the reasons
    "empty", "multiline", "too_short", "too_long", "garbage".
    """
    parsed = ParsedReply()
    pending: list[str] | None = None  # the pieces of a span opened on an earlier line
    for line in reply.splitlines():
        delimiters, spans, fenced = _backticks(line)
        if pending is not None:
            if not delimiters and not spans and not fenced:
                pending.append(line)
                continue
            if len(delimiters) % 2:
                pending.append(line[: delimiters[0]])
                delimiters = delimiters[1:]
            parsed.rejected.append((" ".join(" ".join(pending).split()), "multiline"))
            pending = None
        spans += [
            line[opening + 1 : closing] for opening, closing in zip(delimiters[::2], delimiters[1::2], strict=False)
        ]
        for span in spans:
            text = _clean(span)
            reason = _check(text, min_chars, max_chars)
            if reason is None:
                parsed.tasks.append(text)
            else:
                parsed.rejected.append((text, reason))
        if len(delimiters) % 2:
            # An unpaired backtick opens a span (text follows it, or nothing but a bullet precedes it) or
            # closes one whose opening is not in the reply.
            after, before = line[delimiters[-1] + 1 :], line[: delimiters[-1]].lstrip("-*• \t")
            if after.strip() or not before.strip():
                pending = [after]
            else:
                parsed.rejected.append((before.strip(), "multiline"))
    if pending is not None:
        parsed.rejected.append((" ".join(" ".join(pending).split()), "multiline"))
    return parsed


def _backticks(line: str) -> tuple[list[int], list[str], bool]:
    """The positions of the single backticks of one line, its empty spans ("``"), and whether it has a fence."""
    delimiters: list[int] = []
    spans: list[str] = []
    fenced = False
    for run in _BACKTICK_RUN.finditer(line):
        width = run.end() - run.start()
        if width == 1:
            delimiters.append(run.start())
        elif width == 2:
            spans.append("")
        else:
            fenced = True
    return delimiters, spans, fenced


def _clean(span: str) -> str:
    text = " ".join(span.split())
    while len(text) >= 2 and text[0] + text[-1] in ('""', "''", "\u201c\u201d", "\u2018\u2019"):
        text = text[1:-1].strip()
    return text


def _check(text: str, min_chars: int, max_chars: int) -> str | None:
    if not text:
        return "empty"
    if len(text) < min_chars:
        return "too_short"
    if len(text) > max_chars:
        return "too_long"
    letters = sum(ch.isalpha() for ch in text)
    visible = sum(not ch.isspace() for ch in text)
    lowered = text.casefold()
    if (
        len(text.split()) < 3
        or letters < 0.6 * visible
        or _CODE_LIKE.search(text)
        or any(echo in lowered for echo in _PROMPT_ECHOES)
    ):
        return "garbage"
    return None


class TaskGenerator:
    """Evolves failed tasks into new candidate intents with an LLM (in-breadth evolving, docs/method.md §3.1).

    All calls of a phase go to the engine as one batch, so a vLLM engine decodes them together;
    the sampling seed comes from the caller (the curriculum derives it from (seed, phase)), and each call
    gets its own seed derived from it and the call's index: engines that seed per request (vLLM, an
    OpenAI server) would otherwise draw the same noise for every call, so a site's turns, whose prompts
    are alike (the same seeds when the site has few failures), would return the same reply.
    """

    def __init__(self, engine: InferenceEngine, config: CurriculumConfig, chat_template_tokenizer: Any = None) -> None:
        self.engine = engine
        self.config = config
        self.chat_template_tokenizer = chat_template_tokenizer

    def prompt(self, request: GenerationRequest) -> str:
        """The exact prompt string of one call, ending with the configured reply prefix."""
        messages = generation_messages(self.config.site_description(request.site), request.seeds)
        return render_messages(messages, self.chat_template_tokenizer) + self.config.reply_prefix

    def generate(self, requests: Sequence[GenerationRequest], seed: int) -> list[tuple[str, ParsedReply]]:
        """Run every call in one engine batch; return (raw reply, parsed tasks) per request, in order."""
        if not requests:
            return []
        params = SamplingParams(
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            max_tokens=self.config.max_tokens,
            stop=list(self.config.stop),
            seed=seed,
            seeds=[digest_seed(seed, call) for call in range(len(requests))],
        )
        completions = self.engine.generate([self.prompt(request) for request in requests], params)
        if len(completions) != len(requests):
            raise RuntimeError(f"engine returned {len(completions)} completions for {len(requests)} prompts")
        results = []
        for completion in completions:
            reply = self.config.reply_prefix + completion.text
            parsed = parse_task_list(reply, self.config.min_task_chars, self.config.max_task_chars)
            results.append((reply, parsed))
        return results
