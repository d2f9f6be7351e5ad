"""Training samples: one (state, action, next state, outcome) record per agent step.

Critic and actor train on steps, not trajectories. A `StepSample` carries what both need: the
prompt the model saw (byte for byte, from `Step.prompt`), the raw response it gave, the prompt of
the next state, and the outcome labels of its trajectory. It also keeps the pieces the prompts are
built from (intent, earlier responses, page HTML) so that collation can re-build a prompt with a
smaller HTML budget instead of cutting tokens.

Conventions follow the WebRL release (docs/method.md §6.1): the trajectory's outcome is copied onto
every step as `reward`; `mc_return` is the discounted sum of those rewards from the step to the
end; the next state of the last step is its own page with its own action appended to the history.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from webrl.data.atomic_io import JsonlError, read_jsonl, write_jsonl_atomic
from webrl.data.prompts import DEFAULT_MAX_CHARS, build_actor_prompt
from webrl.data.trajectory import Trajectory, TrajectoryFileError, is_success

PromptBuilder = Callable[[str, Sequence[str], str], str]
"""prompt(intent, earlier raw responses, page) -> the state's prompt: `trajectory_to_samples`'s `prompt_builder`."""

FINAL_PROMPT_KEY = "final_prompt"
"""`Trajectory.metadata` key of the prompt of the state after the last step, where the driver recorded one:
`trajectory_to_samples` then uses it as the last step's s' instead of building one."""

DEFAULT_GAMMA = 0.9
"""Discount γ of each step's mc_return and of the actor's advantage (`AdvantageConfig.gamma`): the one default of γ,
kept here, at the bottom, so that the data pipeline needs nothing from the models to compute returns."""


@dataclass
class StepSample:
    """One training step; `prompt` is s, `next_prompt` is s', `action` the raw response a.

    `score` is the replay filter's geometric-mean action probability (replayed steps only);
    `advantage` is filled when advantages are computed ahead of the actor update. `truncated` is its
    step's `Step.truncated`: the action has no end-of-sequence token to train on.
    """

    task_id: str
    intent: str
    trajectory_id: str
    phase: int
    step_index: int
    num_steps: int
    prompt: str
    next_prompt: str
    action: str
    history: list[str]
    html: str
    next_html: str
    reward: float
    mc_return: float
    done: bool
    trajectory_reward: float
    score: float | None = None
    advantage: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False

    def build_prompt(self, max_chars: int, chat_template_tokenizer: Any = None, *, next_state: bool = False) -> str:
        """s (or s' with `next_state`) re-built within `max_chars` characters; only the page HTML shrinks."""
        history = [*self.history, self.action] if next_state else self.history
        html = self.next_html if next_state else self.html
        return build_actor_prompt(
            self.intent, history, html, max_chars=max_chars, chat_template_tokenizer=chat_template_tokenizer
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepSample:
        return cls(**data)


def trajectory_outcome(trajectory: Trajectory) -> float:
    """The 0/1 outcome training uses, from `Trajectory.success_label`; an unlabelled trajectory is an error."""
    label = trajectory.success_label
    if label is None:
        raise ValueError(
            f"trajectory {trajectory.trajectory_id} (task {trajectory.task.task_id}) has no outcome, evaluator or ORM "
            "reward: label it first (python -m webrl.process stage=[1])"
        )
    return 1.0 if is_success(label) else 0.0


def mc_returns(rewards: list[float], gamma: float) -> list[float]:
    """Discounted returns G_t = r_t + gamma * G_{t+1}, computed backwards from the last step.

    [C] `add_mc_return`: with the release's reward broadcast (the outcome copied onto every step) a
    success of T steps gets G_t = (1 - gamma^(T-t)) / (1 - gamma) >= 1 and a failure 0.
    """
    returns = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def trajectory_to_samples(
    trajectory: Trajectory,
    *,
    gamma: float = DEFAULT_GAMMA,
    max_chars: int = DEFAULT_MAX_CHARS,
    chat_template_tokenizer: Any = None,
    prompt_builder: PromptBuilder | None = None,
) -> list[StepSample]:
    """Step samples of one labelled trajectory (release convention: outcome on every step).

    `prompt` (and `next_prompt`, but for the last step) is the recorded `Step.prompt`: the driver
    records each prompt once, as the model saw it, and training never re-renders one, so a step
    without a record is an error. The last step's next state is the one the model never acted on:
    its prompt is `trajectory.metadata[FINAL_PROMPT_KEY]` where the driver recorded it, else
    `prompt_builder(intent, every response, last page)`, else WebRL's actor prompt
    (`build_actor_prompt` with `max_chars` and the chat template), as the web driver would have built it.
    A project with prompts of its own passes its `prompt_builder` (or records the final prompt).
    """
    unrecorded = [step.index for step in trajectory.steps if not step.prompt]
    if unrecorded:
        raise ValueError(
            f"trajectory {trajectory.trajectory_id} (task {trajectory.task.task_id}): steps {unrecorded} have no "
            "recorded prompt; training reads the prompt the episode driver recorded"
        )
    outcome = trajectory_outcome(trajectory)
    steps = trajectory.steps
    rewards = [outcome] * len(steps)
    returns = mc_returns(rewards, gamma)
    intent = trajectory.task.intent
    responses = [step.response for step in steps]
    final_prompt = _final_prompt(trajectory, prompt_builder, max_chars, chat_template_tokenizer)
    samples = []
    for i, step in enumerate(steps):
        history = responses[:i]
        last = i == len(steps) - 1
        next_html = step.observation if last else steps[i + 1].observation
        next_prompt = final_prompt if last else steps[i + 1].prompt
        samples.append(
            StepSample(
                task_id=trajectory.task.task_id,
                intent=intent,
                trajectory_id=trajectory.trajectory_id,
                phase=trajectory.phase,
                step_index=i,
                num_steps=len(steps),
                prompt=step.prompt,
                next_prompt=next_prompt,
                action=step.response,
                history=history,
                html=step.observation,
                next_html=next_html,
                reward=rewards[i],
                mc_return=returns[i],
                done=last,
                trajectory_reward=outcome,
                truncated=step.truncated,
            )
        )
    return samples


def _final_prompt(
    trajectory: Trajectory, prompt_builder: PromptBuilder | None, max_chars: int, chat_template_tokenizer: Any
) -> str:
    """The last step's s': the recorded final prompt, else the given builder's, else WebRL's actor prompt."""
    recorded = trajectory.metadata.get(FINAL_PROMPT_KEY)
    if recorded or not trajectory.steps:
        return recorded or ""
    intent, responses, page = (
        trajectory.task.intent,
        [s.response for s in trajectory.steps],
        trajectory.steps[-1].observation,
    )
    if prompt_builder is not None:
        return prompt_builder(intent, responses, page)
    return build_actor_prompt(
        intent, responses, page, max_chars=max_chars, chat_template_tokenizer=chat_template_tokenizer
    )


def write_samples(path: str | os.PathLike, samples: Iterable[StepSample]) -> None:
    """Write step samples as JSONL atomically (temp file + rename)."""
    write_jsonl_atomic(path, (sample.to_dict() for sample in samples))


def iter_samples(path: str | os.PathLike) -> Iterator[StepSample]:
    """Read a step-sample JSONL file; a torn last line is dropped with a warning, any other bad line is an error."""
    try:
        records, _ = read_jsonl(path)
    except JsonlError as err:
        raise TrajectoryFileError(str(err)) from err
    for number, data in records:
        try:
            yield StepSample.from_dict(data)
        except (AttributeError, TypeError) as err:
            raise TrajectoryFileError(f"{path}:{number}: not a step-sample record ({err})") from err


def read_samples(path: str | os.PathLike) -> list[StepSample]:
    """Every step sample of a JSONL file, in file order."""
    return list(iter_samples(path))
