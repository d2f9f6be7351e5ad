"""Run-level figures computed from trajectories: success per site, errored episodes, ORM agreement with evaluators."""

from __future__ import annotations

from collections import defaultdict

import torch
from torchmetrics.functional.classification import (
    binary_accuracy,
    binary_auroc,
    binary_confusion_matrix,
    binary_precision,
    binary_recall,
)

from webrl.data.trajectory import Trajectory, is_success


def success_by_site(trajectories: list[Trajectory], key: str = "eval_reward") -> dict[str, float]:
    """`success_rate` overall and `success_rate/<site>`, reading the reward field `key` (`is_success`: >= 0.5).

    Trajectories whose `key` is None (no evaluator, no label) are left out of the rates and counted
    in `unlabelled`, and those among them whose fuzzy_match reference had no judge to ask also in
    `unjudged`; those the browser, the site or the engine failed (`Trajectory.infra_error`, after a retry)
    are left out too, whatever their label, and counted in `infra_errors`.
    """
    hits: dict[str, list[float]] = defaultdict(list)
    unlabelled = unjudged = infra = 0
    for trajectory in trajectories:
        if trajectory.infra_error:
            infra += 1
            continue
        value = getattr(trajectory, key)
        if value is None:
            unlabelled += 1
            unjudged += is_unjudged(trajectory)
            continue
        hits[trajectory.task.site].append(1.0 if is_success(value) else 0.0)
    every = [hit for site_hits in hits.values() for hit in site_hits]
    out = {"success_rate": sum(every) / len(every) if every else 0.0, "episodes": float(len(every))}
    for site, site_hits in sorted(hits.items()):
        out[f"success_rate/{site}"] = sum(site_hits) / len(site_hits)
    if unlabelled:
        out["unlabelled"] = float(unlabelled)
    if unjudged:
        out["unjudged"] = float(unjudged)
    if infra:
        out["infra_errors"] = float(infra)
    return out


def is_unjudged(trajectory: Trajectory) -> bool:
    """True when the evaluator left the trajectory unscored for want of an LLM judge (a fuzzy_match reference)."""
    return bool(trajectory.metadata.get("eval", {}).get("needs_judge"))


def errored(trajectories: list[Trajectory]) -> float:
    """How many episodes ended in an error (status "error": the browser, the site or the task's evaluator failed)."""
    return float(sum(trajectory.status == "error" for trajectory in trajectories))


def infra_errors(trajectories: list[Trajectory]) -> float:
    """How many episodes the browser, the site or the engine failed twice (`Trajectory.infra_error`): kept out of
    the rates."""
    return float(sum(trajectory.infra_error for trajectory in trajectories))


def agreement(trajectories: list[Trajectory]) -> dict[str, float]:
    """How the ORM's verdicts compare with the programmatic evaluator's, where a trajectory has both.

    The evaluator is the truth: `orm/agreement` (accuracy), precision, recall, the confusion matrix
    (`orm/tp`, `orm/fp`, `orm/fn`, `orm/tn`) and balanced accuracy (where both outcomes occur) from the ORM's
    reward, and `orm/auroc` from its score P(YES),
    which needs both outcomes among the compared and every one of them scored. torchmetrics computes them.
    """
    compared = [t for t in trajectories if t.orm_reward is not None and t.eval_reward is not None]
    if not compared:
        return {}
    verdict = torch.tensor([int(is_success(t.orm_reward)) for t in compared])
    truth = torch.tensor([int(is_success(t.eval_reward)) for t in compared])
    (tn, fp), (fn, tp) = binary_confusion_matrix(verdict, truth).tolist()
    out = {
        "orm/agreement": binary_accuracy(verdict, truth).item(),
        "orm/precision": binary_precision(verdict, truth).item(),
        "orm/recall": binary_recall(verdict, truth).item(),
        "orm/tp": float(tp),
        "orm/fp": float(fp),
        "orm/fn": float(fn),
        "orm/tn": float(tn),
        "orm/compared": float(len(compared)),
    }
    if tp + fn and tn + fp:  # mean recall of the two classes: what a constant verdict cannot game
        out["orm/balanced_accuracy"] = (tp / (tp + fn) + tn / (tn + fp)) / 2
    scores = [t.orm_score for t in compared]
    if 0 < int(truth.sum()) < len(compared) and all(score is not None for score in scores):
        out["orm/auroc"] = binary_auroc(torch.tensor(scores, dtype=torch.float32), truth).item()
    return out
