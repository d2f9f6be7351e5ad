"""Average the weights of model directories trained from the same start into a new model directory.

    python -m recipes.average_weights runs/mean3 runs/webrl_learning/phase_001/actor \\
        runs/order1_actor/phase_001/actor runs/order2_actor/phase_001/actor
    python -m recipes.evaluate model.actor=runs/mean3 env.test_split=validation env.test_tasks=0

The first argument is the new directory (it must not exist); the others are two or more model directories with the
same weights' names and shapes, such as the actors of branches that reran one stage in other batch orders
(`recipes.branch`, `actor.order_seed`). Each weight becomes the mean of theirs; config and tokenizer come from the
first. A mismatch names the directory and the tensor.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.average_weights",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", type=Path, help="the averaged model's new directory")
    parser.add_argument("sources", type=Path, nargs="+", help="two or more model directories to average")
    args = parser.parse_args(argv)
    from webrl.modules.weight_average import average_model_dirs  # torch: not for --help

    try:
        target = average_model_dirs(args.sources, args.target)
    except (ValueError, OSError) as err:
        raise SystemExit(f"average_weights: {err}") from None
    print(f"averaged {len(args.sources)} models into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
