"""Runs _ext/tools/roc_table.py from a checkout (installed: the `ext-roc-table` command)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _ext.tools.roc_table import main  # noqa: E402

if __name__ == "__main__":
    main()
