"""Prompt builders shared by rollouts and training: one function per prompt, used on both sides.

A step's training prompt must be byte-identical to the prompt the model saw when it acted, or
the log-probabilities trained on are not those of the behaviour policy. So the episode driver
(`WebEnvironment.run_episodes`, for rollouts and demonstrations alike) builds each prompt once with
`build_actor_prompt` and records it, and training reads the record. Where training has to build a
prompt (the last step's next state, or a shorter page for a prompt over the token budget) it calls
the same builder with the same arguments (intent, earlier raw responses, the current page HTML);
nothing else goes into a prompt.

Actor prompt (WebRL release, docs/method.md §4.2). Completion form, for models without a chat template
(base models, and our tiny model, whose tokenizer has the Llama-3 markers as special tokens):

    Task Instruction: {intent}\\n\\n
    Round 0\\n\\n<|eot_id|><|start_header_id|>user<|end_header_id|>\\n{intent}\\n\\n
    <|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n{response_0}\\n\\n
    Round 1\\n\\n ... user ... \\n** Simplified html **\\n\\n ... assistant ... \\n{response_1}\\n\\n
    Round t\\n\\n ... user ... \\n{current html}\\n\\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n

(one string, no line breaks other than the `\\n` shown). Earlier rounds show the intent (round 0)
or a placeholder instead of their page: only the current page's HTML is in the prompt. The text
carries no BOS; the tokenizer adds it, in training as in serving. The model ends its answer with
`<|eot_id|>` (the stop token at serving time, appended to the action in training).

Chat form: when a tokenizer with a `chat_template` is given (e.g. SmolLM2-135M-Instruct), the
same rounds become messages: user "Round i\\n\\n{U_i}" (the first prefixed by the task
instruction), assistant "{response_i}", and the template renders them with
`add_generation_prompt=True`. The answer then ends with the tokenizer's end-of-turn/eos token. A template
may render the BOS itself (Llama-3's does); `prompt_token_ids`, which training and the engines encode
prompts with, then adds no second one.

Budget: the whole prompt is kept within `max_chars` characters by cutting the END of the page
HTML only; the instruction and the history are never cut (if they alone exceed the budget the
HTML is dropped entirely and the prompt is longer than the budget). The release cuts the HTML
the same way, at 16384 − 512 characters.

The critic reads the actor prompt of a state (the release's critic ignores the action), so there
is no separate critic prompt. The ORM prompt (docs/method.md §5.1) is `build_orm_prompt`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from webrl.data.trajectory import Step, Task, Trajectory

DEFAULT_MAX_CHARS = 16384 - 512
HTML_PLACEHOLDER = "** Simplified html **"
_PAGE_PROBE = "x"
"""A page of one non-blank character, to measure the text around a page (`_with_page`)."""
EOT = "<|eot_id|>"
USER_HEADER = "<|start_header_id|>user<|end_header_id|>"
ASSISTANT_HEADER = "<|start_header_id|>assistant<|end_header_id|>"
SYSTEM_HEADER = "<|start_header_id|>system<|end_header_id|>"

# Our own wording of the ORM's instructions (the release's text is not copied). The model is
# trained to answer with a single YES or NO token right after the assistant header.
ORM_SYSTEM_PROMPT = (
    "You judge whether a web-browsing agent accomplished what a user asked for. You are given the "
    "user's intent, the actions the agent took (one per line, each with the agent's own notes), and "
    "the page the agent was looking at when it stopped, as simplified HTML. Decide whether the task was "
    "completed successfully: the requested change was made or the requested information was given "
    "correctly in the final answer. Answer with a single word: YES if it succeeded, NO otherwise."
)
"""The web judge's instructions, the default `system_prompt` of every ORM prompt builder."""

ORM_USER_TEMPLATE = "The User Intent:\n{intent}\n\nAction History:\n{actions}\n\nThe Current Screenshot:\n{page}"
"""The web judge's user turn, the default `user_template`: `{intent}`, `{actions}` (one response a line) and
`{page}` (the final page) are filled with `str.format`; another agent project passes its own wording."""


def uses_chat_template(tokenizer: Any) -> bool:
    """True when `tokenizer` can render the chat form (it has a non-empty `chat_template`)."""
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def prompt_token_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The ids of `prompt` with the special tokens `tokenizer` adds (its BOS), but never a second BOS.

    Training and every engine encode prompts through this, so that both see the same ids. A chat template may
    render the BOS itself (Llama-3's starts with `{{ bos_token }}`); a tokenizer that also adds BOS on encode
    would then put a second one in front, a sequence the model never saw in pretraining or from a server that
    renders its chat itself. Only that added BOS is dropped: a tokenizer that adds none (SmolLM2's) or a prompt
    without a leading BOS (the completion form) is encoded as `tokenizer(prompt)` encodes it.
    """
    ids = tokenizer(prompt)["input_ids"]
    bos = tokenizer.bos_token_id
    if bos is not None and ids[:2] == [bos, bos] and tokenizer("")["input_ids"][:1] == [bos]:
        return ids[1:]
    return ids


def build_actor_prompt(
    intent: str,
    history: Sequence[str],
    html: str,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    chat_template_tokenizer: Any = None,
) -> str:
    """The actor's prompt for round `len(history)`: instruction, earlier raw responses, current page.

    `history` holds the raw model responses of earlier rounds (their `# Element:` / `# Note:`
    comments included); `html` is the simplified HTML of the current page. Without a tokenizer
    that has a chat template the completion form is built (module docstring); with one, the
    chat form. The end of `html` is cut so that the prompt fits in `max_chars` characters.
    """
    if uses_chat_template(chat_template_tokenizer):
        return _with_page(
            lambda page: _render_chat(chat_template_tokenizer, _actor_messages(intent, history, page)), html, max_chars
        )
    return _with_page(lambda page: _actor_completion(intent, history, page), html, max_chars)


def actor_prompt_for_step(
    task: Task,
    steps_so_far: Sequence[Step],
    html: str,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    chat_template_tokenizer: Any = None,
) -> str:
    """The prompt for the next step of `task`, after `steps_so_far`, on a page showing `html`."""
    return build_actor_prompt(
        task.intent,
        [step.response for step in steps_so_far],
        html,
        max_chars=max_chars,
        chat_template_tokenizer=chat_template_tokenizer,
    )


def trajectory_prompts(
    trajectory: Trajectory,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    chat_template_tokenizer: Any = None,
) -> list[str]:
    """Rebuild every step's prompt from the stored trajectory (intent, responses, observations)."""
    return [
        actor_prompt_for_step(
            trajectory.task,
            trajectory.steps[:i],
            step.observation,
            max_chars=max_chars,
            chat_template_tokenizer=chat_template_tokenizer,
        )
        for i, step in enumerate(trajectory.steps)
    ]


def build_orm_prompt(
    intent: str,
    responses: Sequence[str],
    final_html: str,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    chat_template_tokenizer: Any = None,
    system_prompt: str = ORM_SYSTEM_PROMPT,
    user_template: str = ORM_USER_TEMPLATE,
) -> str:
    """The ORM's prompt for a finished trajectory, ending where the model answers YES or NO.

    `responses` are the raw responses of every step (each becomes one line of the action
    history, its newlines replaced by "; "), `final_html` the page observed at the last step.
    Only the end of `final_html` is cut to fit `max_chars`. Like the actor prompt, the completion
    form carries no `<|begin_of_text|>`: the tokenizer adds BOS. `system_prompt` and `user_template`
    default to the web judge's (`ORM_SYSTEM_PROMPT`, `ORM_USER_TEMPLATE`); a judge of other tasks passes its own.
    """

    def user(page: str) -> str:
        return orm_user_text(intent, responses, page, user_template)

    if uses_chat_template(chat_template_tokenizer):
        return _with_page(
            lambda page: _render_chat(chat_template_tokenizer, _orm_messages(system_prompt, user(page))),
            final_html,
            max_chars,
        )
    return _with_page(lambda page: _orm_completion(system_prompt, user(page)), final_html, max_chars)


def trajectory_orm_prompt(
    trajectory: Trajectory,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    chat_template_tokenizer: Any = None,
    system_prompt: str = ORM_SYSTEM_PROMPT,
    user_template: str = ORM_USER_TEMPLATE,
) -> str:
    """The ORM's prompt for a finished trajectory: its intent, every response, and the page of its last action.

    The page is the one the last action was taken on, as the release's `build_rm_data` uses (the
    last trace step's HTML); a trajectory that ended before its first step shows its final page.
    `system_prompt` and `user_template` are those of `build_orm_prompt`.
    """
    final_html = trajectory.steps[-1].observation if trajectory.steps else trajectory.final_observation
    return build_orm_prompt(
        trajectory.task.intent,
        [step.response for step in trajectory.steps],
        final_html,
        max_chars=max_chars,
        chat_template_tokenizer=chat_template_tokenizer,
        system_prompt=system_prompt,
        user_template=user_template,
    )


def orm_user_text(
    intent: str, responses: Sequence[str], final_html: str, user_template: str = ORM_USER_TEMPLATE
) -> str:
    """The ORM's user turn: intent, one action per line, final page. Also the ShareGPT `human` value."""
    actions = "\n".join(response.replace("\n", "; ") for response in responses)
    return user_template.format(intent=intent, actions=actions, page=final_html)


def _with_page(render: Callable[[str], str], html: str, max_chars: int) -> str:
    """`render(html)` with the end of `html` cut so that the whole prompt fits in `max_chars` characters.

    The text around the page is measured with a page of one visible character, not with an empty one: a chat
    template that trims each message (Llama-3's `content | trim`) also drops the blank line before an empty
    page, which would leave that much too little for the text and too much for the page. The prompt would then
    overrun `max_chars`, and a re-build at the prompt's own length (`webrl.data.collate.StepTokenizer`) would
    show more page than the prompt holds and not be recognised as the step's prompt.
    """
    if max_chars <= 0:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    budget = max_chars - (len(render(_PAGE_PROBE)) - len(_PAGE_PROBE))
    return render(html[: max(budget, 0)])


def _user_turn(round_index: int, content: str) -> str:
    return f"Round {round_index}\n\n{EOT}{USER_HEADER}\n{content}\n\n{EOT}{ASSISTANT_HEADER}\n"


def _actor_completion(intent: str, history: Sequence[str], html: str) -> str:
    parts = [f"Task Instruction: {intent}\n\n"]
    for i, response in enumerate(history):
        parts.append(_user_turn(i, intent if i == 0 else HTML_PLACEHOLDER))
        parts.append(f"{response}\n\n")
    parts.append(_user_turn(len(history), html))
    return "".join(parts)


def _actor_messages(intent: str, history: Sequence[str], html: str) -> list[dict[str, str]]:
    messages = []
    for i, response in enumerate(history):
        messages.append({"role": "user", "content": f"Round {i}\n\n{intent if i == 0 else HTML_PLACEHOLDER}"})
        messages.append({"role": "assistant", "content": response})
    messages.append({"role": "user", "content": f"Round {len(history)}\n\n{html}"})
    messages[0]["content"] = f"Task Instruction: {intent}\n\n{messages[0]['content']}"
    return messages


def _orm_completion(system_prompt: str, user: str) -> str:
    return f"{SYSTEM_HEADER}\n\n{system_prompt}{EOT}{USER_HEADER}\n\n{user}{EOT}{ASSISTANT_HEADER}\n\n"


def _orm_messages(system_prompt: str, user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]


def _render_chat(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


PAGE_REBUILDS = 8
"""Rounds of re-building an over-long prompt with a page sized from its characters per token (`shrink_page`)."""


def shrink_page(
    build: Callable[[int], str],
    encode: Callable[[str], list[int]],
    prompt: str,
    ids: list[int],
    bare: tuple[str, list[int]],
    limit: int,
) -> tuple[str, list[int]]:
    """`prompt` re-built by `build(max_chars)` with less page until its `encode`d ids fit `limit`; `bare` (the
    prompt without its page, which must fit) when no round does.

    Each round sizes the page from the last one's characters per token, so a page denser at its start takes
    another. The actor's batches (`webrl.data.collate.StepTokenizer`) and the ORM's prompts fit this way: only the
    end of the page is lost, never the instruction, the history or the answer.
    """
    bare_prompt, bare_ids = bare
    for _ in range(PAGE_REBUILDS):
        page_chars, page_tokens = len(prompt) - len(bare_prompt), len(ids) - len(bare_ids)
        if page_chars <= 0 or page_tokens <= 0:
            break
        prompt = build(max(len(bare_prompt) + (limit - len(bare_ids)) * page_chars // page_tokens, 1))
        ids = encode(prompt)
        if len(ids) <= limit:
            return prompt, ids
    return bare_prompt, bare_ids
