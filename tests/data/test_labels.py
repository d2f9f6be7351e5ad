"""Stage 1's labels (`webrl.data.labels`): the evaluator's score, or the ORM's P(YES) against the threshold, on each
ORM prompt."""

from __future__ import annotations

import pytest

from webrl.data.labels import label_with_evaluator, label_with_orm
from webrl.data.prompts import build_orm_prompt


def test_label_with_orm_thresholds_p_yes(make_trajectory):
    trajectories = [make_trajectory(str(i), outcome=None) for i in range(3)]
    seen = []

    def score(prompts):
        seen.extend(prompts)
        return [0.5, 0.49, 0.9]

    label_with_orm(trajectories, score, threshold=0.5)
    assert [(t.orm_score, t.orm_reward, t.outcome) for t in trajectories] == [
        (0.5, 1.0, 1.0),
        (0.49, 0.0, 0.0),
        (0.9, 1.0, 1.0),
    ]
    t = trajectories[0]
    assert seen[0] == build_orm_prompt(t.task.intent, [s.response for s in t.steps], t.steps[-1].observation)


def test_label_with_evaluator_binarises_the_evaluator_score(make_trajectory):
    trajectories = [
        make_trajectory(task_id, outcome=None, eval_reward=score) for task_id, score in (("a", 0.6), ("b", 0.4))
    ]
    label_with_evaluator(trajectories)
    assert [t.outcome for t in trajectories] == [1.0, 0.0]
    with pytest.raises(ValueError, match="task c\\) has no evaluator reward: use reward_source=orm"):
        label_with_evaluator([make_trajectory("c", outcome=None)])


def test_a_trajectory_without_steps_gets_zeros_without_asking_the_orm(make_trajectory):
    acted, empty = make_trajectory("acted", outcome=None), make_trajectory("empty", num_steps=0, outcome=None)
    seen = []

    def score(prompts):
        seen.extend(prompts)
        return [0.9] * len(prompts)

    label_with_orm([acted, empty], score, threshold=0.5)
    assert len(seen) == 1 and "Do thing acted" in seen[0]
    assert (empty.orm_score, empty.orm_reward, empty.outcome) == (0.0, 0.0, 0.0)
    assert (acted.orm_score, acted.orm_reward, acted.outcome) == (0.9, 1.0, 1.0)
