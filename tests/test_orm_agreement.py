"""ORM agreement with the evaluators (`webrl.metrics.agreement`, through torchmetrics) against hand counts."""

from __future__ import annotations

import pytest

from webrl.data.trajectory import Task, Trajectory
from webrl.metrics import agreement


def _judged(task_id: str, score: float | None, truth: float | None, reward: float | None = None) -> Trajectory:
    """A trajectory the ORM scored `score` (reward: P(YES) >= 0.5 unless given) and the evaluator judged `truth`."""
    task = Task(task_id=task_id, intent="open the forum", sites=["forum"], start_url="http://forum/")
    if reward is None and score is not None:
        reward = 1.0 if score >= 0.5 else 0.0
    return Trajectory(task=task, status="exit", eval_reward=truth, orm_score=score, orm_reward=reward)


def test_accuracy_precision_recall_auroc_and_confusion_match_hand_counts():
    episodes = [
        _judged("a", 0.9, 1.0),  # TP
        _judged("b", 0.8, 0.0),  # FP
        _judged("c", 0.6, 1.0),  # TP
        _judged("d", 0.55, 0.0),  # FP
        _judged("e", 0.3, 1.0),  # FN
        _judged("f", 0.2, 0.0),  # TN
        _judged("g", 0.1, 0.0),  # TN
        _judged("h", None, 1.0),  # never labelled by the ORM: not compared
        _judged("i", 0.7, None),  # no evaluator: not compared
    ]
    # tp 2, fp 2, fn 1, tn 2 of 7 compared (fp != fn, so each recall has its own denominator).
    # AUROC: of the 3 x 4 (positive, negative) pairs, the positive scores higher in 4 (0.9) + 3 (0.6) + 2 (0.3).
    assert agreement(episodes) == pytest.approx(
        {
            "orm/agreement": 4 / 7,
            "orm/precision": 2 / 4,
            "orm/recall": 2 / 3,
            "orm/tp": 2.0,
            "orm/fp": 2.0,
            "orm/fn": 1.0,
            "orm/tn": 2.0,
            "orm/compared": 7.0,
            "orm/balanced_accuracy": (2 / 3 + 2 / 4) / 2,  # recall on successes tp/(tp+fn), on failures tn/(tn+fp)
            "orm/auroc": 9 / 12,
        }
    )


def test_the_verdict_is_the_orm_reward_not_a_fresh_threshold_on_the_score():
    # A run with reward.threshold=0.9 rejected a 0.8; the agreement must count that verdict, not 0.8 >= 0.5.
    figures = agreement([_judged("a", 0.8, 1.0, reward=0.0), _judged("b", 0.95, 1.0, reward=1.0)])
    assert (figures["orm/tp"], figures["orm/fn"], figures["orm/recall"]) == (1.0, 1.0, 0.5)


def test_degenerate_sets_give_zeros_and_no_auroc():
    assert agreement([_judged("a", None, 1.0)]) == {}
    # Only failures, all rejected: nothing predicted positive, precision and recall 0 (not a division error).
    only_failures = agreement([_judged("a", 0.2, 0.0), _judged("b", 0.4, 0.0)])
    assert only_failures["orm/agreement"] == 1.0 and only_failures["orm/precision"] == 0.0
    assert only_failures["orm/recall"] == 0.0 and "orm/auroc" not in only_failures
    assert "orm/balanced_accuracy" not in only_failures  # one class: a recall of the other cannot be computed
    # Both outcomes, but one trajectory has a reward without a score (labelled before scores were kept).
    unscored = agreement([_judged("a", 0.9, 1.0), _judged("b", None, 0.0, reward=0.0)])
    assert unscored["orm/agreement"] == 1.0 and "orm/auroc" not in unscored
