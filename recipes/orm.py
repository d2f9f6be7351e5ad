"""Train the outcome reward model on evaluator-labelled trajectories of several policies, then measure it.

    python -m recipes.orm                                   # embedded default (tiny model, CPU)
    python -m recipes.orm --config webrl_smollm2
    python -m recipes.orm orm.data.solver_noise=[0.2,0.6] orm.data.positive_fraction=0.4

The training set (`orm.data`, see `webrl.orm_data`) mixes the SFT actor's rollouts, the demonstrations,
the reference solver with noise and demonstrations made wrong (truncated, wrong answer), each labelled
by the task's evaluator, balanced; the recipe prints how many positives and negatives each source gave
and kept. The ORM is cached under model.cache_dir and reused by `python -m recipes.webrl`. It is then
judged on trajectories it never saw: the SFT actor's sampled rollouts on the held-out test split, where
the programmatic evaluators give the true label (the paper's Table 3 measures its ORM the same way):
accuracy (agreement), precision, recall, AUROC (from P(YES)) and the confusion matrix.
Results go to `<output_dir>/orm/orm_eval.json`: a folder of its own, since `output_dir` is by default the WebRL
run's, whose `config.json` would otherwise be this recipe's (and refuse the run, or be refused by it).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from recipes.webrl import engine_options, launch_and_keep, recipe_config
from webrl.cache_builds import DONE_MARKER
from webrl.data.atomic_io import write_json_atomic
from webrl.data.labels import label_with_orm
from webrl.data.trajectory import orm_accepts, write_trajectories
from webrl.inference.engine import build_engine
from webrl.web_environment import WebEnvironment


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Train (or reuse) the ORM and its threshold, then judge it on the SFT actor's held-out rollouts.

    torch, Lightning and transformers (the metrics, the ORM module, its data and the starting models) are imported
    here, once the config is read, so that `--help` and `--print-config` answer without seconds of imports.
    """
    config = recipe_config(argv, usage=__doc__, runs_phases=False)
    from webrl.metrics import agreement, success_by_site
    from webrl.modules.orm import orm_scorer
    from webrl.orm_data import format_counts
    from webrl.orm_threshold import ensure_orm_threshold
    from webrl.starting_models import ensure_orm, ensure_sft

    out_dir = Path(config.output_dir) / "orm"
    # orm_eval.jsonl resumes by task id: another actor must not reuse its rollouts.
    fabric = launch_and_keep(out_dir, config)
    with WebEnvironment(config) as env:
        sft, demos = ensure_sft(config, fabric, env)
        engine = build_engine(config.rollout.engine, sft, **engine_options(config))
        try:
            orm = ensure_orm(config, fabric, env, engine, sft, demos)
            choice = ensure_orm_threshold(config, fabric, env, engine, sft, orm)
            if hasattr(engine, "wake_up"):
                engine.wake_up()  # asleep while the ORM trained (engines.sleep)
            tasks = env.suite(config.env.test_split, config.env.test_tasks, config.seed)
            held_out, _ = env.run_episodes(
                engine, tasks, out_dir / "orm_eval.jsonl", phase=-1, evaluation=False, seed=config.seed
            )
        finally:
            engine.close()
    score, chat = orm_scorer(orm, batch_size=8, max_length=config.model.max_length, device=fabric.device)
    label_with_orm(held_out, score, chat_template_tokenizer=chat, threshold=config.reward.threshold)
    results = {**agreement(held_out), **success_by_site(held_out, key="eval_reward")}
    results["orm/threshold"] = config.reward.threshold
    if choice is not None:
        for trajectory in held_out:  # the same scores, judged at the calibrated threshold
            if trajectory.orm_score is not None:
                trajectory.orm_reward = float(orm_accepts(trajectory.orm_score, choice.threshold))
        calibrated = {f"calibrated_{key}": value for key, value in agreement(held_out).items()}
        results.update(calibrated, calibration=asdict(choice))
    write_trajectories(out_dir / "orm_eval.jsonl", held_out)  # with each episode's P(YES)
    data = json.loads((orm / DONE_MARKER).read_text()).get("data", {}) if (orm / DONE_MARKER).exists() else {}
    write_json_atomic(out_dir / "orm_eval.json", {"orm": str(orm), "training_data": data, **results})
    print(f"ORM: {orm}")
    if data:
        print(f"trained on (evaluator labels, per source):\n{format_counts(data)}")
    rate = f"{100 * results['success_rate']:.1f}% successful"
    at = f"at threshold {config.reward.threshold:g}"
    print(f"on {len(held_out)} held-out SFT rollouts ({rate}), {at}: {figures(results)}")
    if choice is not None:
        print(f"at the calibrated threshold {choice.threshold:.3f}: {figures(results, 'calibrated_')}")
    return results


def figures(results: dict, prefix: str = "") -> str:
    """Accuracy, balanced accuracy, precision, recall and AUROC as percentages, those present."""
    labels = {"agreement": "accuracy", "balanced_accuracy": "balanced accuracy"}
    names = ("agreement", "balanced_accuracy", "precision", "recall", "auroc")
    present = [name for name in names if f"{prefix}orm/{name}" in results]
    return ", ".join(f"{labels.get(name, name)} {100 * results[f'{prefix}orm/{name}']:.1f}%" for name in present)


if __name__ == "__main__":
    main(sys.argv[1:])
