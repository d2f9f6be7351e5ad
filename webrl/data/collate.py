"""Tokenisation and padding of step samples into actor and critic batches.

Sequences follow the tokenisation convention of `webrl.modules.lm` (so that the replay filter,
the reference model and the actor score the same tokens): prompt ids = `prompt_token_ids(tokenizer, prompt)`
(BOS included where the tokenizer adds it, once), action ids = `action_token_ids(tokenizer, action)`, the
action's ids plus the eos token (the action terminator), without the eos when the engine cut the
response at its token budget (`StepSample.truncated`); `action_mask` marks the action ids and eos.
Tokenising prompt and action separately matches what an inference engine sees (prompt ids, then
sampled ids) and avoids a BPE merge across the boundary.

A sequence longer than `max_length` is never cut token-wise, which would drop either the action
or the history: the prompt is re-built with a smaller HTML budget until it fits, so only the end
of the page is lost (the same rule the prompt builder applies by characters). That re-build is
WebRL's actor prompt, so it is made only for a prompt that is that builder's output for the step
(`build_prompt` at the prompt's own length gives it back); any other prompt over the limit (a
project's own prompts) is an error naming the sample, never replaced by a web prompt.

`StepTokenizer.actor_prompt` gives the text of that re-built prompt. The replay filter scores a
replayed step on it (`webrl.data.replay.filter_by_perplexity`'s `fit_prompt`): a scorer handed the
full prompt would cut it from the left instead (`webrl.modules.lm.encode_prompt_action`), losing
the instruction and history, and so judge a sequence the actor never trains on.

Batches are left padded by default, as `webrl.modules.lm.collate_actions` does: actions line up at
the end, and the last real token of every row (the critic's feature) is at position -1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from webrl.data.critic_states import CriticState
from webrl.data.prompts import prompt_token_ids, shrink_page, uses_chat_template
from webrl.data.steps import StepSample


def action_token_ids(tokenizer: Any, action: str, *, truncated: bool = False) -> list[int]:
    """The ids an action is trained and scored on: its text's ids, then the eos token that ended it.

    A response the engine cut at `max_tokens` (`truncated`) never produced that eos: appending it would
    train the actor to stop where it did not, and put log pi(eos | cut text) into the response's log-prob,
    the reference's and the replay filter's confidence. An empty cut response keeps the eos, so that every
    action has at least one token to score.
    """
    if tokenizer.eos_token_id is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no eos_token: actions need a terminator")
    ids = tokenizer(action, add_special_tokens=False)["input_ids"]
    return ids if truncated and ids else [*ids, tokenizer.eos_token_id]


class StepTokenizer:
    """Turns step samples into token ids within `max_length`, cutting only page HTML."""

    def __init__(self, tokenizer: Any, max_length: int) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token: the action terminator cannot be appended")
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token: set tokenizer.pad_token before batching")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self._chat = tokenizer if uses_chat_template(tokenizer) else None

    def encode(self, text: str) -> list[int]:
        """Prompt ids, with the special tokens (BOS) the tokenizer adds at serving time (`prompt_token_ids`)."""
        return prompt_token_ids(self.tokenizer, text)

    def action_ids(self, action: str, *, truncated: bool = False) -> list[int]:
        """`action_token_ids` under this tokenizer."""
        return action_token_ids(self.tokenizer, action, truncated=truncated)

    def fit_prompts(self, sample: StepSample, limit: int, *, with_next: bool = True) -> tuple[list[int], list[int]]:
        """Ids of s (and s' when `with_next`) within `limit` tokens each, cutting page HTML when needed."""
        _, prompt_ids = self._fit(sample, sample.prompt, limit, is_next=False)
        next_ids = self._fit(sample, sample.next_prompt, limit, is_next=True)[1] if with_next else []
        return prompt_ids, next_ids

    def fit_state(self, sample: StepSample, *, next_state: bool) -> list[int]:
        """Ids of s (or s' when `next_state`) within `max_length`, exactly as `fit_prompts` gives them."""
        prompt = sample.next_prompt if next_state else sample.prompt
        return self._fit(sample, prompt, self.max_length, is_next=next_state)[1]

    def actor_prompt(self, sample: StepSample) -> str:
        """The text of s that the actor trains on before `sample.action`: the prompt itself when prompt and
        action fit `max_length`, else the prompt re-built with less page HTML.

        Anything that must score the actor's own sequence (the replay filter) takes its prompt from here;
        `encode` of this text gives exactly the prompt ids of `actor_ids`.
        """
        return self._fit_actor(sample)[0]

    def actor_ids(self, sample: StepSample) -> tuple[list[int], list[int]]:
        """The actor's prompt ids (those of `actor_prompt`) and action ids (eos included unless the response was
        cut), together within `max_length`."""
        _, prompt_ids, action_ids = self._fit_actor(sample)
        return prompt_ids, action_ids

    def _fit_actor(self, sample: StepSample) -> tuple[str, list[int], list[int]]:
        action = self.action_ids(sample.action, truncated=sample.truncated)
        if len(action) >= self.max_length:
            raise ValueError(
                f"task {sample.task_id} step {sample.step_index}: the action alone is {len(action)} tokens, "
                f"not below max_length {self.max_length}"
            )
        text, prompt = self._fit(sample, sample.prompt, self.max_length - len(action), is_next=False)
        return text, prompt, action

    def _fit(self, sample: StepSample, prompt: str, limit: int, *, is_next: bool) -> tuple[str, list[int]]:
        """The prompt's text and ids within `limit` tokens: the prompt itself, or its re-build with less HTML."""
        ids = self.encode(prompt)
        if len(ids) <= limit:
            return prompt, ids

        def build(max_chars: int) -> str:
            return sample.build_prompt(max_chars, chat_template_tokenizer=self._chat, next_state=is_next)

        if build(len(prompt)) != prompt:
            which = "next-state prompt" if is_next else "prompt"
            raise ValueError(
                f"task {sample.task_id} step {sample.step_index} (trajectory {sample.trajectory_id}): the {which} "
                f"needs {len(ids)} tokens, more than the {limit} allowed (max_length {self.max_length}), and it is "
                "not WebRL's actor prompt of the step, whose page could be cut: shorten it or raise max_length"
            )

        # The builder drops the whole page below the size of instruction + history (1 char = "no HTML").
        bare = build(1)
        bare_ids = self.encode(bare)
        if len(bare_ids) > limit:
            raise ValueError(
                f"task {sample.task_id} step {sample.step_index}: the prompt needs {len(bare_ids)} tokens without "
                f"its page HTML, more than the {limit} allowed (max_length {self.max_length}); raise max_length"
            )
        return shrink_page(build, self.encode, prompt, ids, (bare, bare_ids), limit)


def pad(rows: Sequence[Sequence[int]], value: int, padding_side: str = "left") -> torch.Tensor:
    """Pad integer rows into a (B, T) tensor, on the left or on the right."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    width = max((len(row) for row in rows), default=0)
    out = torch.full((len(rows), width), value, dtype=torch.long)  # (B, T)
    for b, row in enumerate(rows):
        span = slice(width - len(row), width) if padding_side == "left" else slice(0, len(row))
        out[b, span] = torch.tensor(row, dtype=torch.long)
    return out


def step_labels(samples: Sequence[StepSample]) -> dict[str, torch.Tensor]:
    """The advantage inputs of a batch of steps (`webrl.modules.losses.compute_advantage`), each (B,)."""
    return {
        "reward": torch.tensor([s.reward for s in samples], dtype=torch.float32),  # (B,)
        "mc_return": torch.tensor([s.mc_return for s in samples], dtype=torch.float32),  # (B,)
        "done": torch.tensor([s.done for s in samples], dtype=torch.bool),  # (B,)
        "outcome": torch.tensor([1.0 if s.mc_return > 0 else 0.0 for s in samples], dtype=torch.float32),  # (B,)
        "step_index": torch.tensor([s.step_index for s in samples], dtype=torch.long),  # (B,)
        "num_steps": torch.tensor([s.num_steps for s in samples], dtype=torch.long),  # (B,)
    }


def _states(step_tokenizer: StepTokenizer, samples: Sequence[StepSample], side: str) -> dict[str, torch.Tensor]:
    pad_id = step_tokenizer.tokenizer.pad_token_id
    pairs = [step_tokenizer.fit_prompts(s, step_tokenizer.max_length) for s in samples]
    states = [p for p, _ in pairs]
    next_states = [n for _, n in pairs]
    return {
        "state_input_ids": pad(states, pad_id, side),  # (B, Ts)
        "state_attention_mask": pad([[1] * len(r) for r in states], 0, side),  # (B, Ts)
        "next_state_input_ids": pad(next_states, pad_id, side),  # (B, Tn)
        "next_state_attention_mask": pad([[1] * len(r) for r in next_states], 0, side),  # (B, Tn)
    }


class CriticStateCollator:
    """Batches of single states for the critic: `input_ids`, `attention_mask` (B, T) and `outcome` (B,).

    Each state is tokenised as `CriticCollator` tokenises it within a pair, so a state has one
    value whichever way it reaches the critic.
    """

    def __init__(self, tokenizer: Any, max_length: int, padding_side: str = "left") -> None:
        self.steps = StepTokenizer(tokenizer, max_length)
        self.padding_side = padding_side

    def __call__(self, states: Sequence[CriticState]) -> dict[str, torch.Tensor]:
        rows = [self.steps.fit_state(state.sample, next_state=state.next_state) for state in states]
        return {
            "input_ids": pad(rows, self.steps.tokenizer.pad_token_id, self.padding_side),  # (B, T)
            "attention_mask": pad([[1] * len(r) for r in rows], 0, self.padding_side),  # (B, T)
            "outcome": torch.tensor([state.outcome for state in states], dtype=torch.float32),  # (B,)
        }


class CriticCollator:
    """Batches of (s, s', outcome) for the release's pair loss; `outcome` = 1[mc_return > 0] as in the release."""

    def __init__(self, tokenizer: Any, max_length: int, padding_side: str = "left") -> None:
        self.steps = StepTokenizer(tokenizer, max_length)
        self.padding_side = padding_side

    def __call__(self, samples: Sequence[StepSample]) -> dict[str, torch.Tensor]:
        return {**_states(self.steps, samples, self.padding_side), **step_labels(samples)}


class ActorCollator:
    """Batches of prompt + action (+ eos) ids with the action mask, advantage inputs and critic states.

    `input_ids` (B, T) holds prompt ids then action ids then eos (none after a cut response); `action_mask`
    (B, T) is 1 on the action and eos positions. The critic's view of s and s' rides along (`state_*`,
    `next_state_*`, tokenised with `critic_tokenizer`) so advantages can be computed in the step;
    when every sample already carries an advantage, `advantage` (B,) comes instead of the states.
    """

    def __init__(
        self, tokenizer: Any, max_length: int, critic_tokenizer: Any = None, padding_side: str = "left"
    ) -> None:
        self.steps = StepTokenizer(tokenizer, max_length)
        self.critic_steps = StepTokenizer(critic_tokenizer, max_length) if critic_tokenizer is not None else self.steps
        self.padding_side = padding_side

    def __call__(self, samples: Sequence[StepSample]) -> dict[str, torch.Tensor]:
        rows, masks = [], []
        for sample in samples:
            prompt, action = self.steps.actor_ids(sample)
            rows.append(prompt + action)
            masks.append([0] * len(prompt) + [1] * len(action))
        side = self.padding_side
        batch = {
            "input_ids": pad(rows, self.steps.tokenizer.pad_token_id, side),  # (B, T)
            "attention_mask": pad([[1] * len(r) for r in rows], 0, side),  # (B, T)
            "action_mask": pad(masks, 0, side),  # (B, T)
        }
        if all(s.advantage is not None for s in samples):
            batch["advantage"] = torch.tensor([s.advantage for s in samples], dtype=torch.float32)  # (B,)
            return {**batch, **step_labels(samples)}
        return {**batch, **_states(self.critic_steps, samples, side), **step_labels(samples)}
