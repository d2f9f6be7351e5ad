"""Entry point of `python -m webrl.data` (see `webrl.data.process` for the commands)."""

import sys

from webrl.data.process import main

if __name__ == "__main__":
    sys.exit(main())
