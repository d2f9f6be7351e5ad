"""SFT baseline: demonstrations from the reference solver, then behaviour cloning; evaluated on the test split.

    python -m recipes.sft                                    # embedded default (tiny model, CPU)
    python -m recipes.sft --config webrl_smollm2

The checkpoint is cached under model.cache_dir and reused by `python -m recipes.webrl`. With several processes
(`fabric.devices`), every rank trains and rank 0 alone evaluates: the evaluation runs every held-out task in one
process, and on every rank it wrote each task once per rank into the same files.
"""

from __future__ import annotations

import sys

from recipes.evaluate import evaluate_checkpoint
from recipes.webrl import launch_fabric, recipe_config
from webrl.web_environment import WebEnvironment


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Build (or reuse) the SFT actor, then evaluate it on rank 0; {} on the other ranks.

    torch and Lightning (`webrl.distributed`, `webrl.starting_models`) are imported here, once the config is read,
    so that `--help` and `--print-config` answer in a second rather than after seconds of imports they never use.
    """
    config = recipe_config(argv, usage=__doc__, runs_phases=False)
    from webrl.distributed import close_process_group
    from webrl.starting_models import ensure_sft

    fabric = launch_fabric(config)
    with WebEnvironment(config) as env:
        sft, demos = ensure_sft(config, fabric, env)
        fabric.print(f"SFT checkpoint: {sft} ({len(demos)} demonstrations)")
        # The other ranks leave rather than wait in a collective for rank 0's evaluation, which can outlast the
        # process group's timeout (30 minutes).
        close_process_group(fabric)
        if not fabric.is_global_zero:
            return {}
        return evaluate_checkpoint(config, env, sft, name="sft")


if __name__ == "__main__":
    main(sys.argv[1:])
