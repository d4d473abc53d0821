"""BENCHMARKS.md as sections, one a benchmark script: each script rewrites
its own and keeps the others.
"""

import os


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
