"""roc_table.py: the TAR@FAR table papers print, from ext-roc's JSON reports:
a method a row, a FAR target a column, TAR in percent, and the AUC.

    ext-roc-table a.json b.json [--label A --label B] [--format latex]
    (or: python scripts/roc_table.py ...)

The cells are 100 x TAR with two decimals, as InsightFace's IJB scripts print
them, and a last column holds 100 x AUC. A row is named by --label, else by
the label its report records (ext-roc --label), else by its file's name. The
columns are the --far targets, else every target some report holds,
ascending; a target a report lacks is a dash, and one below 1 / impostor
pairs (no threshold resolves it) is starred. Reports counted under different
FAR rules or modes are compared with a warning.
"""

import argparse
import csv
import io
import json
import math
import os
import sys

from .cli import add_version, far_value, quiet_on_closed_pipe
from .embeddings import InputError, check_writable, fail

PROG = "ext-roc-table"
FORMATS = ("markdown", "latex", "csv")
MISSING = {"markdown": "-", "latex": "--", "csv": ""}
BELOW = {"markdown": "\\*", "latex": "$^*$", "csv": ""}
FOOTNOTE = "below 1 / impostor pairs: no threshold resolves the target"
LATEX_SPECIAL = {"\\": "\\textbackslash{}", "&": "\\&", "%": "\\%", "$": "\\$", "#": "\\#",
                 "_": "\\_", "{": "\\{", "}": "\\}", "~": "\\textasciitilde{}",
                 "^": "\\textasciicircum{}"}


class Report:
    """What the table needs of one ext-roc --json report."""

    def __init__(self, path, label, auc, targets, far_rule, mode):
        self.path = path
        self.label = label
        self.auc = auc            # None where undefined
        self.targets = targets    # {far: (tar or None, below_resolution)}
        self.far_rule = far_rule
        self.mode = mode

    def target(self, far):
        """(tar or None, below_resolution) at `far`; (None, False) where the
        report has no such target."""
        return next((value for target, value in self.targets.items()
                     if math.isclose(target, far, rel_tol=1e-9)), (None, False))


def rate(path, what, value, optional=False):
    """A number in [0, 1] (None where optional and null); InputError naming the file."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0.0 <= value <= 1.0:
        raise InputError("%s: %s must be a number in [0, 1], got %r" % (path, what, value))
    return float(value)


def read_report(path):
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except OSError as error:
        raise InputError("cannot read %s: %s" % (path, error.strerror or error)) from None
    except ValueError as error:   # UnicodeDecodeError and JSONDecodeError too
        raise InputError("%s is not JSON (%s)" % (path, error)) from None
    if not isinstance(data, dict) or not isinstance(data.get("tar_at_far"), list) or \
            "auc" not in data:
        raise InputError("%s is not a report of ext-roc --json (it has no tar_at_far rows "
                         "and auc)" % path)
    targets = {}
    for row in data["tar_at_far"]:
        if not isinstance(row, dict):
            raise InputError("%s: a tar_at_far row must be an object, got %r" % (path, row))
        far = rate(path, "a row's far", row.get("far"))
        targets[far] = (rate(path, "the tar at far %g" % far, row.get("tar"), optional=True),
                        row.get("below_resolution") is True)
    label = data.get("label")
    if not isinstance(label, str) or not label:
        label = os.path.splitext(os.path.basename(path))[0]
    return Report(path, label, rate(path, "auc", data["auc"], optional=True), targets,
                  data.get("far_rule"), data.get("mode"))


def far_label(far, latex=False):
    """1e-06 (LaTeX: $10^{-6}$), 2.5e-04 ($2.5 \\cdot 10^{-4}$), 0."""
    if far == 0:
        return "0"
    mantissa, exponent = ("%.6e" % far).split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    if not latex:
        return "%se%s" % (mantissa, exponent)
    power = "10^{%d}" % int(exponent)
    return "$%s$" % (power if mantissa == "1" else "%s \\cdot %s" % (mantissa, power))


def table(reports, fars, fmt, decimals):
    """The table's text in `fmt`."""
    def percent(value):
        return MISSING[fmt] if value is None else "%.*f" % (decimals, 100 * value)

    def starred(tar, below):
        return below and tar is not None

    cells = [[report.target(far) for far in fars] for report in reports]
    header = ["Method"] + [far_label(far, fmt == "latex") for far in fars] + ["AUC"]
    rows = [[report.label] + [percent(tar) + (BELOW[fmt] if starred(tar, below) else "")
                              for tar, below in row] + [percent(report.auc)]
            for report, row in zip(reports, cells)]
    any_starred = any(starred(*target) for row in cells for target in row)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows([header] + rows)
        return out.getvalue()
    if fmt == "markdown":
        lines = ["| " + " | ".join(row) + " |" for row in [header] + rows]
        lines.insert(1, "|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|")
        if any_starred:
            lines += ["", "\\* " + FOOTNOTE]
        return "\n".join(lines) + "\n"
    escape = str.maketrans(LATEX_SPECIAL)
    lines = ["\\begin{tabular}{l%s}" % ("r" * (len(header) - 1)), "\\hline",
             " & ".join(header) + " \\\\", "\\hline"]
    lines += [" & ".join([row[0].translate(escape)] + row[1:]) + " \\\\" for row in rows]
    lines += ["\\hline", "\\end{tabular}"]
    if any_starred:
        lines.append("% $^*$ " + FOOTNOTE)
    return "\n".join(lines) + "\n"


def differences(reports):
    """Warnings where the reports were counted under different FAR rules or modes."""
    out = []
    for what, key in (("FAR rules", "far_rule"), ("modes", "mode")):
        values = {getattr(report, key) for report in reports}
        if len(values) > 1:
            out.append("the reports were counted under different %s (%s): their TARs do not "
                       "compare" % (what, ", ".join("%s: %s" % (report.path, getattr(report, key))
                                                    for report in reports)))
    return out


def decimals_value(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not an integer: %r" % text) from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError("must lie in 0 .. 10, got %r" % text)
    return value


def make_parser():
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="reports of ext-roc --json, one per method (a row each)")
    parser.add_argument("--label", action="append",
                        help="each row's name, in the order of the reports (default: the label "
                             "a report records, else its file's name)")
    parser.add_argument("--far", type=far_value, nargs="+", action="extend",
                        help="the columns' FAR targets; repeat or list several (default: every "
                             "target of the reports)")
    parser.add_argument("--format", choices=FORMATS, default="markdown",
                        help="markdown (default), latex (a tabular) or csv")
    parser.add_argument("--decimals", type=decimals_value, default=2,
                        help="decimals of the percentages (default 2)")
    parser.add_argument("--output", metavar="FILE", help="write the table here (default: "
                                                          "standard output)")
    add_version(parser)
    return parser


@quiet_on_closed_pipe
def main(argv=None):
    args = make_parser().parse_args(argv)
    try:
        if args.label is not None and len(args.label) != len(args.reports):
            raise InputError("%d --label for %d reports: give one per report, or none"
                             % (len(args.label), len(args.reports)))
        if args.output:
            check_writable(args.output)
        reports = [read_report(path) for path in args.reports]
        for report, label in zip(reports, args.label or []):
            report.label = label
        fars = args.far or sorted({far for report in reports for far in report.targets})
        text = table(reports, fars, args.format, args.decimals)
    except InputError as error:
        fail(PROG, str(error))
    for warning in differences(reports):
        print("%s: warning: %s" % (PROG, warning), file=sys.stderr)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        print("saved", args.output, file=sys.stderr)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
