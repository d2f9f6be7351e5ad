"""Run a scripted policy on the embedded sites in Chromium.

python -m webrl.inference check --split test [--policy exit]   # run a policy, print its success
python -m webrl.inference demos --split train --out runs/demos # reference-solver trajectories as JSONL

Both drive the policy through the rollout driver (`collect_rollouts`) with the library's default
observation budget, episode limits and completion-form prompts; the SFT demonstrations of a run come
from `webrl.starting_models.collect_demonstrations`, which uses the run's. They live here, not with the
sites' own command line (`python -m webrl.env.sites`), because the environment does not import engines.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from webrl.data.prompts import actor_prompt_for_step
from webrl.env.sites.embedded import EmbeddedSites
from webrl.env.sites.scorecard import failures, summary
from webrl.env.sites.suite import SPLITS, load_suite
from webrl.inference.rollout import collect_rollouts_sync
from webrl.inference.scripted import ScriptedEngine

POLICIES = {"reference": ScriptedEngine.for_embedded_sites, "exit": ScriptedEngine.exit_at_once}


def _select(args: argparse.Namespace, url_map: dict[str, str]):
    tasks = load_suite(args.split, url_map)
    if args.templates:
        wanted = {int(t) for t in args.templates.split(",")}
        tasks = [t for t in tasks if t.intent_template_id in wanted]
    return tasks[: args.limit] if args.limit else tasks


def _run(args: argparse.Namespace, out: Path | None) -> int:
    engine = POLICIES[args.policy]()
    with EmbeddedSites() as sites:
        result = collect_rollouts_sync(
            engine,
            _select(args, sites.url_map),
            sites.backend(),
            concurrency=args.concurrency,
            prompt_builder=engine.wrap(actor_prompt_for_step),
            writer=out / f"{args.split}.jsonl" if out else None,
            progress=False,
        )
    print(json.dumps(summary(result.trajectories, result.metrics["rollout/wall_s"])))
    unsolved = failures(result.trajectories)
    if args.policy == "reference" and unsolved:
        print("\n".join(unsolved[:50]), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webrl.inference", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("check", "run a policy on a split and print its success"), ("demos", "write demonstrations")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--split", choices=SPLITS, default="train")
        sub.add_argument("--concurrency", type=int, default=8)
        sub.add_argument("--limit", type=int, default=0, help="first N tasks only")
        sub.add_argument("--templates", default="", help="comma-separated template ids")
        sub.add_argument("--policy", choices=sorted(POLICIES), default="reference")
        if name == "demos":
            sub.add_argument("--out", type=Path, required=True, help="directory for <split>.jsonl")
    args = parser.parse_args(argv)
    return _run(args, args.out if args.command == "demos" else None)


if __name__ == "__main__":
    sys.exit(main())
