"""Command line of the embedded sites.

python -m webrl.env.sites serve [--port 8000]          # serve the sites; prints the base URL first
python -m webrl.env.sites counts                        # per-site / per-template task counts
python -m webrl.env.sites generate [--check]            # (re)write or verify the shipped suites

Running a policy on the sites (the reference solver, or exiting at once) needs an engine and the rollout
driver, which sit above the environment: that is `python -m webrl.inference check|demos`.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading

from webrl.env.sites.data import DEFAULT_SEED
from webrl.env.sites.server import SitesServer
from webrl.env.sites.suite import SPLITS, SUITE_DIR, build_suites, load_suite, suite_counts, suite_text, write_suites


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
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "counts":
        return _counts(args)
    return _generate(args)


if __name__ == "__main__":
    sys.exit(main())
