"""Runs _ext/tools/rank.py from a checkout (installed: the `ext-rank` command)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _ext.tools.rank import main  # noqa: E402

if __name__ == "__main__":
    main()
