"""BENCHMARKS.md as sections, one a benchmark script: each script rewrites
its own and keeps the others; and the targets table a section ends with.
"""

import operator
import os

MEETS = {">=": operator.ge, "<=": operator.le, "<": operator.lt}


def write_section(path, name, section):
    """Replaces the section of `path` that script `name` wrote last, keeping the
    others (each section sits between markers naming its script)."""
    start, end = "<!-- %s start -->" % name, "<!-- %s end -->" % name
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    block = "%s\n%s\n%s" % (start, section.rstrip("\n"), end)
    if start in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def targets_table(checks):
    """The markdown table of (target, measured value, bound, sense) rows,
    sense one of MEETS: each value, and whether it meets its bound."""
    lines = ["| target | measured | met |", "|---|---|---|"]
    for name, value, bound, sense in checks:
        met = MEETS[sense](value, bound)
        lines.append("| %s | %.2f | %s |" % (name, value, "yes" if met else "**no**"))
    return "\n".join(lines)
