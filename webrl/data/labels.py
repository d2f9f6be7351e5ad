"""Stage 1's labels: each trajectory's outcome from the evaluator's score or from the ORM's P(YES).

The ORM itself is a model (`webrl.modules.orm.orm_scorer` builds the scorer); labelling takes the scorer
as a callable, so that this record layer stays free of models and runs on plain trajectories.

Which rollouts get a label at all is decided here too (`unlabelled_reason`), so that the run's labels stage
(`webrl.loop`) and `python -m webrl.process` stage 1 keep out the same episodes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from webrl.data.prompts import ORM_SYSTEM_PROMPT, ORM_USER_TEMPLATE, trajectory_orm_prompt
from webrl.data.trajectory import Trajectory, is_success, orm_accepts

OrmScorer = Callable[[list[str]], list[float]]
"""score(orm_prompts) -> P(YES) of each prompt."""


def unlabelled_reason(trajectory: Trajectory, *, by_evaluator: bool) -> str | None:
    """Why a rollout gets no label and no training, or None when it gets one; `by_evaluator`: the evaluators give
    the rewards.

    A browser, site or engine failure (after its retry) is no evidence about the policy. Nor, when the evaluators
    give the rewards, is an episode they did not judge (a fuzzy task with no judge, an evaluator that could not
    run): a 0 there would teach the critic and actor a failure nobody saw. With ORM rewards the ORM judges it.
    """
    if trajectory.infra_error:
        return "infra_error (the browser, the site or the engine failed)"
    if by_evaluator and trajectory.eval_reward is None:
        return "no evaluator reward"
    if by_evaluator and not trajectory.judged_by_evaluator:
        return "eval_error (the evaluator could not run)"
    return None


def labelable(trajectories: Sequence[Trajectory], *, by_evaluator: bool) -> tuple[list[Trajectory], Counter[str]]:
    """The trajectories that get a label (`unlabelled_reason` is None), in order, and how many of the others each
    reason left out."""
    kept, left_out = [], Counter[str]()
    for trajectory in trajectories:
        reason = unlabelled_reason(trajectory, by_evaluator=by_evaluator)
        if reason is None:
            kept.append(trajectory)
        else:
            left_out[reason] += 1
    return kept, left_out


def label_with_evaluator(trajectories: Sequence[Trajectory]) -> None:
    """outcome = 1[eval_reward >= 0.5] (`is_success`); a trajectory without an evaluator score is an error."""
    for trajectory in trajectories:
        if trajectory.eval_reward is None:
            raise ValueError(
                f"trajectory {trajectory.trajectory_id} (task {trajectory.task.task_id}) has no evaluator reward: "
                "use reward_source=orm"
            )
        trajectory.outcome = 1.0 if is_success(trajectory.eval_reward) else 0.0


def label_with_orm(
    trajectories: Sequence[Trajectory],
    score: OrmScorer,
    *,
    threshold: float,
    chat_template_tokenizer: Any = None,
    system_prompt: str = ORM_SYSTEM_PROMPT,
    user_template: str = ORM_USER_TEMPLATE,
) -> None:
    """orm_score = P(YES), orm_reward = outcome = 1[`orm_accepts(P(YES), threshold)`] (release: `add_overall_reward`).

    `threshold` is the run's `reward.threshold` (the release's 0.5 by default); it has no default here so
    that no caller can silently use another value.

    A trajectory without a step (its episode failed before acting) gets 0 without asking the ORM. The prompts
    are `trajectory_orm_prompt`'s, with the judge's `system_prompt` and `user_template` (the web judge's by
    default): an ORM trained on other wording is asked in that wording.
    """
    labelled = [t for t in trajectories if t.steps]
    prompts = [
        trajectory_orm_prompt(
            t,
            chat_template_tokenizer=chat_template_tokenizer,
            system_prompt=system_prompt,
            user_template=user_template,
        )
        for t in labelled
    ]
    for trajectory, p_yes in zip(labelled, score(prompts) if prompts else [], strict=True):
        trajectory.orm_score = float(p_yes)
        trajectory.orm_reward = 1.0 if orm_accepts(p_yes, threshold) else 0.0
        trajectory.outcome = trajectory.orm_reward
    for trajectory in trajectories:
        if not trajectory.steps:
            trajectory.orm_score, trajectory.orm_reward, trajectory.outcome = 0.0, 0.0, 0.0
