"""Data and ORM prompts of another project: its own prompt builder, recorded final prompts, its own judge wording.

The web prompts stay the defaults; a project's prompts are used as given, and a prompt of its own that does not fit
`max_length` is an error naming the sample, never replaced by a web-template prompt.
"""

from __future__ import annotations

import pytest

from webrl.data.collate import ActorCollator, CriticCollator
from webrl.data.labels import label_with_orm
from webrl.data.prompts import build_actor_prompt, build_orm_prompt, trajectory_orm_prompt
from webrl.data.steps import FINAL_PROMPT_KEY, trajectory_to_samples
from webrl.data.trajectory import Step, Task, Trajectory

JUDGE = "You grade arithmetic. Say YES or NO."
TEMPLATE = "Q: {intent}\nWork: {actions}\nShown: {page}"


def own_prompt(intent: str, history: list[str], page: str) -> str:
    """A short prompt of another agent project: no web template, no HTML markers."""
    return f"Solve {intent}. So far: {' | '.join(history)}. Now: {page}. Next:"


def arithmetic_trajectory(outcome: float = 1.0, page: str = "2+2") -> Trajectory:
    task = Task(task_id="sum", intent="add two numbers", sites=["math"], start_url="")
    trajectory = Trajectory(task=task, outcome=outcome, status="exit", trajectory_id="traj-sum")
    responses = ["write 2+2", "answer 4"]
    for i, response in enumerate(responses):
        prompt = own_prompt(task.intent, responses[:i], page)
        trajectory.steps.append(Step(index=i, prompt=prompt, observation=page, response=response))
    return trajectory


def test_the_last_next_state_comes_from_the_given_builder_not_the_web_prompt():
    samples = trajectory_to_samples(arithmetic_trajectory(), prompt_builder=own_prompt)
    assert samples[0].next_prompt == samples[1].prompt  # recorded prompts are kept as they are
    assert samples[1].next_prompt == "Solve add two numbers. So far: write 2+2 | answer 4. Now: 2+2. Next:"
    assert [s.done for s in samples] == [False, True]


def test_a_recorded_final_prompt_wins_over_every_builder():
    trajectory = arithmetic_trajectory()
    trajectory.metadata[FINAL_PROMPT_KEY] = "the state after the answer"
    assert trajectory_to_samples(trajectory, prompt_builder=own_prompt)[1].next_prompt == "the state after the answer"
    assert trajectory_to_samples(trajectory)[1].next_prompt == "the state after the answer"


def test_without_a_builder_the_web_prompt_stays_the_default():
    samples = trajectory_to_samples(arithmetic_trajectory())
    assert samples[1].next_prompt == build_actor_prompt("add two numbers", ["write 2+2", "answer 4"], "2+2")


def test_own_prompts_that_fit_are_tokenised_as_given(tiny_tokenizer):
    samples = trajectory_to_samples(arithmetic_trajectory(), prompt_builder=own_prompt)
    batch = CriticCollator(tiny_tokenizer, max_length=200)(samples)
    last_next = batch["next_state_input_ids"][1][batch["next_state_attention_mask"][1].bool()].tolist()
    assert last_next == tiny_tokenizer(samples[1].next_prompt)["input_ids"]


def test_an_own_prompt_over_max_length_is_an_error_naming_the_sample(tiny_tokenizer):
    samples = trajectory_to_samples(arithmetic_trajectory(page="1+1 " * 40), prompt_builder=own_prompt)
    needed = len(tiny_tokenizer(samples[0].prompt)["input_ids"])
    limit = needed - 5  # a web prompt this long would have been re-built; this one must not be
    with pytest.raises(ValueError, match=r"task sum step 0 \(trajectory traj-sum\): the prompt needs \d+ tokens"):
        CriticCollator(tiny_tokenizer, max_length=limit)(samples)
    with pytest.raises(ValueError, match="not WebRL's actor prompt of the step"):
        ActorCollator(tiny_tokenizer, max_length=limit)(samples)


def test_orm_prompt_with_a_judge_of_ones_own():
    prompt = build_orm_prompt(
        "add two numbers", ["write 2+2", "answer\n4"], "4", system_prompt=JUDGE, user_template=TEMPLATE
    )
    assert prompt == (
        "<|start_header_id|>system<|end_header_id|>\n\nYou grade arithmetic. Say YES or NO.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nQ: add two numbers\nWork: write 2+2\nanswer; 4\nShown: 4"
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    default = trajectory_orm_prompt(arithmetic_trajectory())
    assert "web-browsing agent" in default and "The User Intent:\nadd two numbers" in default


def test_labelling_asks_the_scorer_in_the_judges_wording():
    trajectories = [arithmetic_trajectory(outcome=None), arithmetic_trajectory(outcome=None)]
    seen: list[str] = []

    def scorer(prompts: list[str]) -> list[float]:
        seen.extend(prompts)
        return [0.8, 0.2]

    label_with_orm(trajectories, scorer, threshold=0.5, system_prompt=JUDGE, user_template=TEMPLATE)
    assert seen == [trajectory_orm_prompt(t, system_prompt=JUDGE, user_template=TEMPLATE) for t in trajectories]
    assert all(JUDGE in prompt and "Q: add two numbers" in prompt for prompt in seen)
    assert [(t.orm_score, t.outcome) for t in trajectories] == [(0.8, 1.0), (0.2, 0.0)]
