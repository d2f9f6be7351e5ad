"""Command line of the embedded sites.

python -m webrl.env.sites serve [--port 8000]          # serve the sites; prints the base URL first
python -m webrl.env.sites counts                        # per-site / per-template task counts
python -m webrl.env.sites generate [--check]            # (re)write or verify the shipped suites
python -m webrl.env.sites check --split test [--policy exit]   # run a policy in Chromium, print success
python -m webrl.env.sites demos --split train --out runs/demos # reference-solver trajectories as JSONL

`check` and `demos` drive the policy through the rollout driver (`collect_rollouts`) with the
library's default observation budget, episode limits and completion-form prompts; the SFT
demonstrations of a run come from `webrl.supervised.collect_demonstrations`, which uses the run's.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

from webrl.data.prompts import actor_prompt_for_step
from webrl.env.sites.data import DEFAULT_SEED
from webrl.env.sites.embedded import EmbeddedSites
from webrl.env.sites.scorecard import failures, summary
from webrl.env.sites.server import SitesServer
from webrl.env.sites.suite import SPLITS, SUITE_DIR, build_suites, load_suite, suite_counts, suite_text, write_suites
from webrl.inference.rollout import collect_rollouts_sync
from webrl.inference.scripted import ScriptedEngine

POLICIES = {"reference": ScriptedEngine.for_embedded_sites, "exit": ScriptedEngine.exit_at_once}


def _serve(args: argparse.Namespace) -> int:
    server = SitesServer(args.host, args.port, seed=args.seed, max_episodes=args.max_episodes)
    print(server.base_url, flush=True)  # first line: EmbeddedSites reads it
    for placeholder, url in server.url_map.items():
        print(f"  {placeholder} -> {url}", flush=True)
    if args.exit_with_parent:
        # The parent holds our stdin open; EOF means it is gone (even if killed), so shut down too.
        threading.Thread(target=lambda: (sys.stdin.read(), server.request_shutdown()), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def _counts(args: argparse.Namespace) -> int:
    for split in SPLITS:
        tasks = load_suite(split)
        print(f"{split}: {json.dumps(suite_counts(tasks))}")
        if args.templates:
            per = {}
            for task in tasks:
                per[task.intent_template_id] = per.get(task.intent_template_id, 0) + 1
            print("  per template: " + ", ".join(f"{tid}:{n}" for tid, n in sorted(per.items())))
    return 0


def _generate(args: argparse.Namespace) -> int:
    if args.check:
        stale = [
            split
            for split, tasks in build_suites(args.seed).items()
            if (SUITE_DIR / f"{split}.json").read_text(encoding="utf-8") != suite_text(tasks)
        ]
        print("suites are up to date" if not stale else f"stale suites: {stale}; run without --check")
        return 1 if stale else 0
    for split, path in write_suites(seed=args.seed).items():
        print(f"wrote {path} ({len(load_suite(split))} tasks)")
    return 0


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
    parser = argparse.ArgumentParser(prog="python -m webrl.env.sites", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the sites until interrupted")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument("--seed", type=int, default=DEFAULT_SEED, help="data seed (the shipped tasks need the default)")
    serve.add_argument("--max-episodes", type=int, default=1024, help="live episode overlays kept (LRU)")
    serve.add_argument("--exit-with-parent", action="store_true", help="stop when stdin closes (used by EmbeddedSites)")
    counts = commands.add_parser("counts", help="print task counts per split and site")
    counts.add_argument("--templates", action="store_true", help="also print counts per template")
    generate = commands.add_parser("generate", help="write the task suites into the package")
    generate.add_argument("--check", action="store_true", help="only verify that the shipped files are current")
    generate.add_argument("--seed", type=int, default=DEFAULT_SEED)
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
    if args.command == "serve":
        return _serve(args)
    if args.command == "counts":
        return _counts(args)
    if args.command == "generate":
        return _generate(args)
    return _run(args, args.out if args.command == "demos" else None)


if __name__ == "__main__":
    sys.exit(main())
