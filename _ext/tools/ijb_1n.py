"""IJB-B / IJB-C 1:N identification as InsightFace's ijb_evals.py (-N) runs it:
the probe templates of `*_1N_probe_mixed.csv` searched against each gallery
of `*_1N_gallery_G1.csv` and `*_1N_gallery_G2.csv` (IJB-B's lists are named
S1 and S2) apart, each evaluated by rank.evaluate, then the two reported
with their mean: the rank-k rates pooled over every probe (the hits of both
galleries over the probe templates) and the TPIR of the two averaged.

Each list holds one row per image, with a header naming its columns
(TEMPLATE_ID, SUBJECT_ID, FILENAME, ...); a template's subject is read from
it, and the template features are built from the image features as
ext-roc --templates builds them (templates.py).
"""

import collections
import csv
import glob
import os

import numpy as np

from ..roc._report import _json_number
from .embeddings import InputError

PROBES = "_1N_probe_mixed.csv"
# each gallery's name and the suffixes of its list: IJB-C's, then IJB-B's
GALLERIES = (("G1", ("_1N_gallery_G1.csv", "_1N_gallery_S1.csv")),
             ("G2", ("_1N_gallery_G2.csv", "_1N_gallery_S2.csv")))
COLUMNS = ("TEMPLATE_ID", "SUBJECT_ID")
# the CMC ranks ijb_evals.py prints
MEAN_RANKS = (1, 5, 10)
# ijb_evals.py's FPIR targets: its table's rows, and its DIR-vs-FPIR curve's
# points, 10^(-4 + 0.04 i) for i = 0 .. 99, and 1
TABLE_FPIRS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
CURVE_FPIRS = tuple(10.0 ** (-4 + 4 * i / 100) for i in range(100)) + (1.0,)

Lists = collections.namedtuple("Lists", "probes galleries")
Lists.__doc__ = """The paths of the probe list and of each gallery's, {name: path}."""

Subjects = collections.namedtuple("Subjects", "template subject")
Subjects.__doc__ = """A list's templates (ascending, int64) and the subject of each."""


def find_lists(meta):
    """The lists of `meta`: a directory holding one `*_1N_probe_mixed.csv`
    (InsightFace's IJBC/meta), or the prefix of their names (IJBC/meta/ijbc).
    InputError naming what is missing."""
    if os.path.isdir(meta):
        found = sorted(glob.glob(os.path.join(glob.escape(meta), "*" + PROBES)))
        if len(found) != 1:
            raise InputError("--ijb %s: %s *%s in that directory%s" % (
                meta, "no" if not found else "%d" % len(found), PROBES,
                "" if not found else " (%s): give the prefix of one, as %s"
                % (", ".join(os.path.basename(p) for p in found), found[0][:-len(PROBES)])))
        prefix = found[0][:-len(PROBES)]
    else:
        prefix = meta
        if not os.path.isfile(prefix + PROBES):
            raise InputError("--ijb %s: no %s (nor a directory %s)" % (meta, prefix + PROBES,
                                                                       meta))
    galleries = {}
    for name, suffixes in GALLERIES:
        paths = [prefix + suffix for suffix in suffixes if os.path.isfile(prefix + suffix)]
        if not paths:
            raise InputError("--ijb %s: no %s (nor %s, IJB-B's name)"
                             % (meta, prefix + suffixes[0], os.path.basename(prefix + suffixes[1])))
        galleries[name] = paths[0]
    return Lists(prefix + PROBES, galleries)


def read_list(path):
    """Subjects of one list: the TEMPLATE_ID and SUBJECT_ID columns, named by
    its header, one row per image; every row of a template must give one
    subject. InputError naming the file, line or column at fault."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise InputError("%s: cannot be read as CSV (%s)" % (path, error)) from None
    if not rows:
        raise InputError("%s is empty (a header naming %s is expected)"
                         % (path, ", ".join(COLUMNS)))
    header = [name.strip() for name in rows[0]]
    missing = [name for name in COLUMNS if name not in header]
    if missing:
        raise InputError("%s: no %s column in its header (it has: %s)"
                         % (path, " or ".join(missing), ", ".join(header)))
    where = [header.index(name) for name in COLUMNS]
    values = np.empty((len(rows) - 1, 2), np.int64)
    for line, row in enumerate(rows[1:], start=2):
        for k, (column, name) in enumerate(zip(where, COLUMNS)):
            text = row[column].strip() if column < len(row) else ""
            try:
                values[line - 2, k] = int(text)
            except ValueError:
                raise InputError("%s line %d: %s must be an integer, got %r"
                                 % (path, line, name, text)) from None
    if values.shape[0] == 0:
        raise InputError("%s has a header but no rows" % path)
    template, first = np.unique(values[:, 0], return_index=True)
    subject = values[first, 1]
    conflict = np.flatnonzero(values[:, 1] != subject[np.searchsorted(template,
                                                                       values[:, 0])])
    if conflict.size:
        i = conflict[0]
        raise InputError("%s line %d: template %d has SUBJECT_ID %d, but line %d gave %d"
                         % (path, i + 2, values[i, 0], values[i, 1],
                            first[np.searchsorted(template, values[i, 0])] + 2,
                            subject[np.searchsorted(template, values[i, 0])]))
    return Subjects(template, subject)


def template_rows(path, subjects, ids, features_path):
    """The rows of the template features (of template ids `ids`, ascending)
    that hold a list's templates; InputError naming those the features lack."""
    rows = np.minimum(np.searchsorted(ids, subjects.template), ids.size - 1)
    absent = subjects.template[ids[rows] != subjects.template]
    if absent.size:
        shown = ", ".join(str(t) for t in absent[:5]) + (", ..." if absent.size > 5 else "")
        raise InputError("%s: %d of its %d templates have no image in %s (template ids %s)"
                         % (path, absent.size, subjects.template.size, features_path, shown))
    return rows


def mean_of(reports, n_probes):
    """ijb_evals.py's mean of the galleries' reports {name: RankReport}: the
    rank-k rate as the galleries' hits together over the n_probes probe
    templates (each probe's subject is in one gallery), and each FPIR
    target's TPIR averaged over the galleries."""
    first = next(iter(reports.values()))
    ranks = [k for k in MEAN_RANKS if k <= first.max_rank]
    cmc = {k: sum(r.cmc[k - 1] * r.n_mated for r in reports.values()) / n_probes
           for k in ranks}
    rows = [{"fpir": row.fpir,
             "tpir": float(np.mean([r.tpir_at_fpir[i].tpir for r in reports.values()]))}
            for i, row in enumerate(first.tpir_at_fpir)]
    return {"cmc": cmc, "tpir_at_fpir": rows}


def table(reports, mean):
    """The galleries' rank-k rates and TPIR rows beside their mean, as text."""
    ranks = list(mean["cmc"])
    names = list(reports)
    lines = ["%-6s" % "" + "".join("%11s" % ("rank-%d" % k) for k in ranks)]
    for name in names:
        lines.append("%-6s" % name + "".join("%11.6f" % reports[name].cmc[k - 1]
                                             for k in ranks))
    lines.append("%-6s" % "mean" + "".join("%11.6f" % mean["cmc"][k] for k in ranks))
    if mean["tpir_at_fpir"]:
        lines.append("%11s" % "FPIR" + "".join("  %10s  %12s" % (name + " TPIR",
                                                                   name + " threshold")
                                               for name in names) + "  %10s" % "mean TPIR")
        for i, row in enumerate(mean["tpir_at_fpir"]):
            cells = "".join("  %10.6f  %12.6f" % (reports[name].tpir_at_fpir[i].tpir,
                                                  reports[name].tpir_at_fpir[i].threshold)
                            for name in names)
            below = any(reports[name].tpir_at_fpir[i].below_resolution for name in names)
            lines.append("%10.0e%s%s  %10.6f" % (row["fpir"], "*" if below else " ", cells,
                                                row["tpir"]))
    return "\n".join(lines)


def mean_dict(mean):
    """The mean for the JSON: the CMC keyed by rank, NaN as None."""
    return {"cmc": {str(k): _json_number(v) for k, v in mean["cmc"].items()},
            "tpir_at_fpir": [{"fpir": row["fpir"], "tpir": _json_number(row["tpir"])}
                             for row in mean["tpir_at_fpir"]]}
