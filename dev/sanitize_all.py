"""Every family's sanitizer driver in one process, so compute-sanitizer starts
(and PyTorch loads under it) once:

    compute-sanitizer --tool memcheck python3 dev/sanitize_all.py
    compute-sanitizer --tool racecheck python3 dev/sanitize_all.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sanitize_interp  # noqa: E402
import sanitize_pcl_conv  # noqa: E402
import sanitize_roc  # noqa: E402

if __name__ == "__main__":
    sys.argv = sys.argv[:1]  # the drivers' own options keep their defaults
    for driver in (sanitize_roc, sanitize_interp, sanitize_pcl_conv):
        driver.main()
