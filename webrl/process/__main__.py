"""Entry point of `python -m webrl.process` (see `webrl.process.cli` for the stages)."""

import sys

from webrl.process.cli import main

if __name__ == "__main__":
    sys.exit(main())
