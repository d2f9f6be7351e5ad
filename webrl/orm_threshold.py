"""The ORM's verdict threshold, chosen on the SFT actor's rollouts of train tasks the ORM never rolled out.

An ORM can rank trajectories well and still say YES to most failures at the paper's P(YES) ≥ 0.5: the
SmolLM2 ORM had AUROC 0.90 and precision 0.67 on held-out rollouts at 0.5. Its training set is balanced
across several policies, so nothing ties 0.5 to the policy it will judge. With
`reward.calibration_tasks=N` the SFT actor is rolled out (at the rollout temperature) on N train-split
tasks outside the ORM's own actor-rollout sample, the ORM scores them, and the threshold that
maximises balanced accuracy against the evaluators' verdicts replaces `reward.threshold`. The choice
never sees the held-out split. The episodes and the choice are cached under the model cache, keyed by
the SFT actor, the ORM and every setting that shapes the rollouts, so a resumed or repeated run reuses
them.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from lightning.fabric import Fabric

from webrl.cache_builds import build_once
from webrl.data.atomic_io import write_json_atomic
from webrl.data.labels import label_with_orm, labelable
from webrl.data.trajectory import Task, Trajectory, is_success, write_trajectories
from webrl.loop_config import WebRLConfig
from webrl.orm_data import ORMDataBuilder, actor_rollout_tasks
from webrl.web_environment import WebEnvironment

CHOICE_FILE = "threshold.json"
"""The chosen threshold and its figures, in the calibration's cache directory."""
SCORED_FILE = "calibration_scored.jsonl"
"""The judged calibration episodes with the ORM's P(YES), beside it: what the choice was made on."""


@dataclass(frozen=True)
class ThresholdChoice:
    """A threshold and what it gives on the calibration rollouts (accept when P(YES) ≥ threshold)."""

    threshold: float
    """The chosen P(YES) threshold."""
    balanced_accuracy: float
    """Mean of recall on successes and on failures at the threshold."""
    precision: float
    """Share of accepted rollouts that succeeded (1.0 when none is accepted)."""
    recall: float
    """Share of successful rollouts accepted."""
    positives: int
    """Successful calibration rollouts (evaluator verdict)."""
    negatives: int
    """Failed calibration rollouts."""


def verdict_figures(scores: list[float], successes: list[bool], threshold: float) -> tuple[float, float, float]:
    """Balanced accuracy, precision and recall of `P(YES) ≥ threshold` against the true outcomes."""
    tp, fp = _accepted(scores, successes, threshold)
    positives = sum(successes)
    negatives = len(successes) - positives
    recall = tp / positives
    specificity = (negatives - fp) / negatives
    precision = tp / (tp + fp) if tp + fp else 1.0
    return (recall + specificity) / 2, precision, recall


def _accepted(scores: list[float], successes: list[bool], threshold: float) -> tuple[int, int]:
    """(successes, failures) that `P(YES) ≥ threshold` accepts: true and false positives."""
    accepted = [score >= threshold for score in scores]
    tp = sum(a and s for a, s in zip(accepted, successes, strict=True))
    fp = sum(a and not s for a, s in zip(accepted, successes, strict=True))
    return tp, fp


def best_threshold(scores: list[float], successes: list[bool], prior: float = 0.5) -> ThresholdChoice:
    """The threshold with the highest balanced accuracy on (`scores`, `successes`).

    Candidates are the midpoints between neighbouring distinct scores (and just outside their range), so
    the threshold sits in the gap it was chosen for rather than on a score. Ties go to higher precision
    (a false success teaches the actor a failure), then to the candidate nearest `prior`. Candidates are
    ranked on exact counts: in floats, two balanced accuracies of exactly 2/3 can differ in the last bit
    ((1/3 + 1) / 2 against (5/6 + 1/2) / 2), and the tie rule would not apply. Scores that no threshold turns into
    better than chance (all equal, or ranking failures above successes) are refused: the tie rule would pick the
    threshold above every score, and the run would go on with an ORM that labels no rollout a success.
    """
    positives = sum(successes)
    negatives = len(successes) - positives
    if not positives or not negatives:
        raise ValueError(
            f"reward.calibration_tasks: the calibration rollouts have {positives} successes of {len(successes)}; "
            "a threshold needs both outcomes, so roll out more tasks"
        )
    distinct = sorted(set(scores))
    gaps = [(low + high) / 2 for low, high in zip(distinct, distinct[1:], strict=False)]
    candidates = [distinct[0] - 1e-6, *gaps, distinct[-1] + 1e-6]
    candidates = [min(max(c, 0.0), 1.0) for c in candidates]

    def rank(threshold: float) -> tuple[int, Fraction, float]:
        tp, fp = _accepted(scores, successes, threshold)
        balanced = tp * negatives + (negatives - fp) * positives  # balanced accuracy × 2·positives·negatives
        precision = Fraction(tp, tp + fp) if tp + fp else Fraction(1)
        return balanced, precision, -abs(threshold - prior)

    threshold = max(candidates, key=rank)
    if rank(threshold)[0] <= positives * negatives:  # balanced accuracy ≤ 1/2: accepting none would "win" on precision
        raise ValueError(
            f"reward.calibration_tasks: no threshold tells the {positives} successes from the {negatives} failures "
            "better than chance (best balanced accuracy 0.5): the ORM's scores carry no signal for this actor, and "
            "every threshold would label nothing or everything a success; retrain the ORM or use "
            "reward.source=evaluator"
        )
    balanced, precision, recall = verdict_figures(scores, successes, threshold)
    return ThresholdChoice(threshold, balanced, precision, recall, positives, negatives)


def calibration_tasks(config: WebRLConfig, env: WebEnvironment) -> list[Task]:
    """`reward.calibration_tasks` train-split tasks (seeded) outside the tasks the ORM's actor source rolled out."""
    pool = env.suite(config.env.train_split, 0, config.seed)
    if config.orm.data.actor_rollouts:  # those tasks' rollouts trained the ORM
        seen = {task.task_id for task in actor_rollout_tasks(config, env)}
        pool = [task for task in pool if task.task_id not in seen]
    wanted = config.reward.calibration_tasks
    if wanted > len(pool):
        raise ValueError(
            f"reward.calibration_tasks={wanted}: only {len(pool)} tasks of split {config.env.train_split!r} are "
            f"outside the ORM's {config.orm.rollout_tasks} actor-rollout tasks (orm.rollout_tasks)"
        )
    return sorted(random.Random(config.seed + 4).sample(pool, wanted), key=lambda t: t.task_id)


def calibration_dir(config: WebRLConfig, sft: Path, orm: Path) -> Path:
    """Where the calibration's episodes and choice are cached: keyed by all that shapes them (of `env`, the ORM's
    `orm_episode_settings`: the run's evaluation split and size do not count).

    The ORM scores prompts cut to `model.max_length`. The path of an ORM the run trains (`orm_dir`) already holds it,
    so it is keyed here only for a given ORM (`model.orm`); keyed always, it would move every calibration built.
    """
    from webrl.starting_models import cache_key, orm_episode_settings

    parts = [
        str(sft),
        str(orm),
        config.reward.calibration_tasks,
        orm_episode_settings(config),
        config.orm.rollout_tasks,
        config.orm.data.actor_rollouts,
        config.rollout.sampling_fields(),
        config.reward.threshold,
        config.seed,
    ]
    if config.model.orm:
        parts.append(config.model.max_length)
    return Path(config.model.cache_dir) / f"orm-threshold-{cache_key(*parts)}"


def ensure_orm_threshold(
    config: WebRLConfig, fabric: Fabric, env: WebEnvironment, engine: Any, sft: Path, orm: Path
) -> ThresholdChoice | None:
    """The calibrated threshold (built once, then read from the cache); None when `reward.calibration_tasks` is 0.

    Every rank takes its share of the rollouts; rank 0 scores them and writes the choice, which every
    rank then reads. The calibration runs once (`webrl.cache_builds.build_once`): a run that needs the same choice
    while another makes it waits and reads it, instead of appending to the other's episodes.
    """
    if not config.reward.calibration_tasks:
        return None
    target = calibration_dir(config, sft, orm)
    build_once(
        target,
        lambda: _calibrate(config, fabric, env, engine, orm, target),
        fabric,
        done=lambda path: (path / CHOICE_FILE).exists(),
    )
    choice = ThresholdChoice(**json.loads((target / CHOICE_FILE).read_text()))
    fabric.print(
        f"[orm] threshold {choice.threshold:.3f} (calibration: {choice.positives} successes, {choice.negatives} "
        f"failures; balanced accuracy {choice.balanced_accuracy:.3f}, precision {choice.precision:.3f})"
    )
    return choice


def _calibrate(config: WebRLConfig, fabric: Fabric, env: WebEnvironment, engine: Any, orm: Path, target: Path) -> None:
    """Roll the SFT actor out on the calibration tasks; rank 0 scores the rollouts with the ORM and writes the choice.

    Every rank learns whether rank 0's choice failed (rollouts of one outcome only, a scorer that fails) and
    raises too: waiting for a choice that will not come, the others would sit in a collective until its timeout.
    """
    tasks = calibration_tasks(config, env)
    if hasattr(engine, "wake_up"):
        engine.wake_up()  # asleep while the ORM trained (engines.sleep)
    fabric.print(f"[orm] choosing the ORM threshold on the SFT actor's rollouts of {len(tasks)} train tasks")
    rollouts = ORMDataBuilder(config, fabric, env, target).run("calibration", engine, tasks, evaluation=False)
    error: Exception | None = None
    if fabric.is_global_zero:
        try:
            _choose(config, orm, target, rollouts, fabric.device)
        except Exception as err:  # any failure: the other ranks must hear of it before it is raised
            error = err
    failed = fabric.broadcast(None if error is None else f"{type(error).__name__}: {error}", src=0)
    if error is not None:
        raise error
    if failed is not None:
        raise RuntimeError(f"[orm] the threshold calibration failed on rank 0: {failed}")


def _choose(config: WebRLConfig, orm: Path, target: Path, rollouts: list[Trajectory], device: Any) -> None:
    """Score the judged calibration rollouts with the ORM and write them and the threshold chosen on them."""
    from webrl.modules.orm import orm_scorer

    judged, _ = labelable(rollouts, by_evaluator=True)  # the evaluators' verdicts are what the ORM is matched to
    score, chat = orm_scorer(orm, batch_size=8, max_length=config.model.max_length, device=device)
    label_with_orm(judged, score, chat_template_tokenizer=chat, threshold=config.reward.threshold)
    write_trajectories(target / SCORED_FILE, judged)
    scores = [float(t.orm_score) for t in judged]
    choice = best_threshold(scores, [is_success(t.eval_reward) for t in judged], config.reward.threshold)
    write_json_atomic(target / CHOICE_FILE, asdict(choice))
