"""Stage 1's labels (`webrl.data.labels`): the ORM's P(YES) against the threshold, on each ORM prompt."""

from __future__ import annotations

from webrl.data.labels import label_with_orm
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
