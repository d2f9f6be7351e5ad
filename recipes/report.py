"""Write a run's HTML report: learning curves, per-site success, curriculum, replay, ORM, losses, trajectories.

    python -m recipes.report runs/webrl_tiny                  # writes runs/webrl_tiny/report.html
    python -m recipes.report runs/webrl_tiny --embed-screenshot-mb 5 --train-per-phase 8
    python -m recipes.report runs/compare/webrl --baseline runs/other_run  # more baselines on the success plot

The file is self-contained (inline SVG plots, inline JSON and JS, embedded screenshots): open it
offline, copy it anywhere. The loop also rewrites it after every phase, so a running job can be watched.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from webrl.run_report import ReportConfig, RunReport


def main(argv: list[str] | None = None) -> Path:
    defaults = ReportConfig()
    parser = argparse.ArgumentParser(prog="python -m recipes.report", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory (output_dir of recipes.webrl)")
    parser.add_argument(
        "--embed-screenshot-mb",
        type=float,
        default=defaults.embed_screenshot_mb,
        help="screenshots embedded up to this many MB; later ones are linked by path",
    )
    parser.add_argument(
        "--train-per-phase",
        type=int,
        default=defaults.train_per_phase,
        help="training rollouts per phase in the trajectory browser",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="draw this run's held-out success on the success plot (repeatable)",
    )
    parser.add_argument(
        "--no-siblings",
        action="store_true",
        help="do not draw the run directory's siblings (the other methods of a recipes.compare root)",
    )
    args = parser.parse_args(argv)
    if not args.run_dir.is_dir():
        raise SystemExit(f"run_dir={args.run_dir}: not a directory")
    config = ReportConfig(
        embed_screenshot_mb=args.embed_screenshot_mb,
        train_per_phase=args.train_per_phase,
        baselines=[str(path) for path in args.baseline],
        sibling_baselines=not args.no_siblings,
    )
    try:
        path = RunReport(args.run_dir, config).write()
    except ValueError as err:
        raise SystemExit(f"config error: {err}") from None
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)")
    return path


if __name__ == "__main__":
    main()
