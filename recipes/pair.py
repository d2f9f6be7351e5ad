"""Pair held-out evaluations of the same tasks: each one's success, and every pair's gained, lost, p and episode steps.

    python -m recipes.pair runs/webrl_learning runs/order1_actor runs/neg_actor
    python -m recipes.pair sft=runs/webrl_learning/phase_000/eval.rank0.jsonl webrl=runs/webrl_learning --json pair.json

Each argument is a run directory (its last evaluated phase) or an evaluation's trajectories (`eval_<name>-<id>.jsonl`
of `recipes.evaluate`, a phase's `eval.rankR.jsonl` with its other ranks' shards), optionally named `NAME=PATH`. Every
later argument is paired with every earlier one: tasks gained and lost, the exact McNemar p, and how many of the lost
and gained tasks the later evaluation ended in fewer, as many or more steps. The evaluations must have run the same
tasks; a different split or sample is refused, naming the tasks.
"""

from __future__ import annotations

import argparse
from itertools import combinations
from pathlib import Path
from typing import Any

from webrl.data.atomic_io import write_json_atomic
from webrl.evaluation.pairing import load_evaluation, pair, summarise
from webrl.evaluation.stats import format_p


def format_summary(summary: dict[str, Any]) -> str:
    low, high = summary["wilson_95"]
    sites = ", ".join(
        f"{site} {100 * rate['successes'] / rate['tasks']:.1f}" for site, rate in summary["sites"].items()
    )
    return (
        f"{summary['name']}: {summary['successes']}/{summary['tasks']} ({100 * summary['rate']:.1f} %, "
        f"95 % Wilson [{100 * low:.1f}, {100 * high:.1f}]), mean steps {summary['mean_steps']:.2f}; % by site: {sites}"
    )


def format_pair(paired: dict[str, Any]) -> str:
    def steps(change: dict[str, int]) -> str:
        return f"{change['shorter']} shorter, {change['same']} as long, {change['longer']} longer"

    return (
        f"{paired['before']} -> {paired['after']} ({paired['tasks']} tasks): {paired['gained']} gained, "
        f"{paired['lost']} lost, exact McNemar p = {format_p(paired['p_value'])}; lost: {steps(paired['lost_steps'])}; "
        f"gained: {steps(paired['gained_steps'])}"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m recipes.pair", description=__doc__.split("\n")[0])
    parser.add_argument("evaluations", nargs="+", metavar="[NAME=]PATH", help="run directories or eval .jsonl files")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the summaries and pairs as JSON")
    args = parser.parse_args(argv)
    if len(args.evaluations) < 2:
        parser.error("give at least two evaluations to pair")
    try:
        evaluations = [load_evaluation(spec) for spec in args.evaluations]
        pairs = [pair(before, after) for before, after in combinations(evaluations, 2)]
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f"pair error: {err}") from None
    result = {"evaluations": [summarise(evaluation) for evaluation in evaluations], "pairs": pairs}
    for line in [*map(format_summary, result["evaluations"]), *map(format_pair, pairs)]:
        print(line)
    if args.json:
        write_json_atomic(args.json, result)
    return result


if __name__ == "__main__":
    main()
