"""Branch a run directory at a stage boundary, to change a setting from there on without redoing what came before.

    python -m recipes.branch runs/webrl_tiny runs/lr_3e-4 --phase 1 --after critic
    python -m recipes.webrl --config runs/lr_3e-4/config.json actor.train.lr=3e-4 resume.allow_changes=[actor.train.lr]

The new directory holds copies of what phase 1's stages up to the critic wrote (and every earlier
phase), marked done, and a config.json whose output_dir is the new directory; the relaunch runs phase
1's actor, sync and evaluation with the new value, then the later phases, and records the change in
config_changes.json from phase 1's actor. `branched_from.json` names the source run and the branch
point; the branch logs to its own W&B run (`webrl/run_branch.py`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from webrl.run_branch import RunBranch
from webrl.run_state import STAGES


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m recipes.branch", description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path, help="the run directory to branch (output_dir of recipes.webrl)")
    parser.add_argument("destination", type=Path, help="the new run directory (must not exist)")
    parser.add_argument("--phase", type=int, required=True, help="the phase to branch in")
    parser.add_argument(
        "--after", required=True, metavar="STAGE", help=f"the last stage of that phase to keep: {', '.join(STAGES)}"
    )
    args = parser.parse_args(argv)
    try:
        branch = RunBranch(args.source, args.phase, args.after)
        layout = branch.write(args.destination)
    except ValueError as err:
        raise SystemExit(f"branch error: {err}") from None
    print(
        f"branched {branch.source.root} after phase {branch.phase}'s {branch.after} into {layout.root} "
        f"({len(branch.files())} stage files, replay phases {branch.replay_phases()}). Relaunch with "
        f"`python -m recipes.webrl --config {layout.config_path} KEY=VALUE resume.allow_changes=[KEY]`"
    )
    return layout.root


if __name__ == "__main__":
    main()
