"""Runs _ext/tools/roc11.py from a checkout (installed: the `ext-roc11` command)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _ext.tools.roc11 import main  # noqa: E402

if __name__ == "__main__":
    main()
