"""compare_mxnet.py: the legacy ROC of MXNet 1.9.1 and of this project side by
side, on the same query/gallery files, with every difference accounted for.

    python scripts/compare_mxnet.py query.npz gallery.npz
    python scripts/compare_mxnet.py                  # the embedded demo data set
    make compare-mxnet                               # sets up .venv-mxnet first

Each .npz holds `feature` (N, D) and `label` (N,). The two sides run in two
environments and exchange files: this script (the project's environment)
writes the checked inputs, runs scripts/mxnet_roc.py with MXNet's interpreter
(--mxnet-python, default .venv-mxnet/bin/python), which computes the scores
with mx.nd.dot and the legacy 1024-bin histograms with mx.nd.histogram, and
reads its results back. The project side computes the scores with
torch.matmul and the histograms with cpu_roc (and gpu_roc where a GPU is
present), as scripts/roc11.py does.

The two sides sum the dot products in different orders, so their scores
differ by an ulp or so, and a pair whose two scores straddle a bin edge is
counted in neighbouring bins. The script finds those pairs (it bins both
score matrices itself, with the legacy formula), checks that the per-bin
difference of the histograms is exactly their net movement and that no score
differs by more than float32 rounding allows, and exits with status 1 if any
difference is left unexplained.
"""

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from legacy_bins import legacy_bins, legacy_edges, naive_edge_mismatches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _ext.tools.embeddings import InputError, demo_data, fail, load, query_gallery  # noqa: E402

SCRIPT = "compare_mxnet.py"
MXNET_SIDE = os.path.join(ROOT, "scripts", "mxnet_roc.py")
DEFAULT_MXNET_PYTHON = os.path.join(ROOT, ".venv-mxnet", "bin", "python")
MXNET_STAMP = os.path.join(ROOT, ".venv-mxnet", ".installed")  # the Makefile's
DEFAULT_FARS = (1e-4, 1e-3, 1e-2, 1e-1)
NUM_BINS = 1024
UNIT_ROUNDOFF = 2.0 ** -24  # float32
CHUNK_PAIRS = 1 << 22  # pairs binned at once by the accounting
MOVED_EXAMPLES = 5  # pairs in another bin shown in the report


class Side:
    """One computation of the legacy ROC: its (Q, G) float32 scores and the
    histograms it produced (all pairs, genuine pairs; int64, nbins each)."""

    def __init__(self, name, score, histo_all, histo_genuine):
        self.name = name
        self.score = score
        self.histo_all = np.asarray(histo_all, dtype=np.int64)
        self.histo_genuine = np.asarray(histo_genuine, dtype=np.int64)

    def totals(self):
        """(genuine, impostor, skipped) pair counts of the histograms."""
        genuine = int(self.histo_genuine.sum())
        counted = int(self.histo_all.sum())
        return genuine, counted - genuine, self.score.size - counted


# ---------------------------------------------------------------------------
# the accounting

def rounding_allowance(dim):
    """The most two float32 dot products of the same D-vectors q and g,
    summed in any order (with or without FMA), can differ by, in units of
    u |q| |g| (u = 2^-24): each is within gamma_D * sum_i |q_i g_i| <=
    gamma_D |q| |g| of the exact value, gamma_D = D u / (1 - D u) (Higham,
    Accuracy and Stability of Numerical Algorithms, 3.1), so the two are
    within twice that: about 2 D units."""
    n_u = dim * UNIT_ROUNDOFF
    return 2.0 * dim / (1.0 - n_u) if n_u < 1.0 else math.inf


class Accounting:
    """How the histograms of `other` differ from those of `reference`, and
    whether the pairs the two score matrices put in different legacy bins
    explain it. Fields:

    diff_all, diff_genuine   other's histogram minus reference's, per bin
    net_all, net_genuine     net movement of the pairs whose legacy bin
                             differs: + in the bin other counts them in,
                             - in the bin reference does (NaN: no bin)
    residual(side, kind)     side "reference" or "other", kind "all" or
                             "genuine": that histogram minus the legacy bins
                             of the side's own scores (zero when it bins as
                             the legacy code does)
    n_score_diff, max_abs, max_units   pairs whose two scores differ, and
                             by how much at most (finite pairs): absolutely,
                             and in units of u |q| |g| (u = 2^-24)
    allowance                what rounding_allowance(D) allows, in those units
    n_beyond_bound           pairs differing by more than that (NaN on one
                             side only included)
    n_moved, n_moved_genuine pairs in a different legacy bin
    moved_examples           the first few of them: (query, gallery, score
                             and bin by reference, score and bin by other)
    problems                 one line per unexplained difference; empty
                             when everything is explained
    """

    def __init__(self, reference, other, nbins, dim):
        self.reference, self.other, self.nbins = reference, other, nbins
        self.allowance = rounding_allowance(dim)
        zeros = lambda: np.zeros(nbins, dtype=np.int64)  # noqa: E731
        self.net_all, self.net_genuine = zeros(), zeros()
        self.own = {(side, kind): zeros() for side in ("reference", "other")
                    for kind in ("all", "genuine")}
        self.n_pairs = reference.score.size
        self.n_score_diff = self.n_beyond_bound = self.n_moved = self.n_moved_genuine = 0
        self.max_abs, self.max_units = 0.0, 0.0
        self.moved_examples = []
        self.problems = []

    @property
    def diff_all(self):
        return self.other.histo_all - self.reference.histo_all

    @property
    def diff_genuine(self):
        return self.other.histo_genuine - self.reference.histo_genuine

    def residual(self, side, kind):
        histogram = getattr(getattr(self, side), "histo_" + kind)
        return histogram - self.own[(side, kind)]

    @property
    def explained(self):
        return not self.problems

    def add_rows(self, first_row, score_a, score_b, genuine, scale):
        """Counts one block of rows from query row `first_row` on: the two
        sides' scores, the genuine mask and |q| |g| of each pair, all (rows, G)."""
        nbins = self.nbins
        bins_a, bins_b = legacy_bins(score_a, nbins), legacy_bins(score_b, nbins)
        for side, bins in (("reference", bins_a), ("other", bins_b)):
            counted = bins >= 0
            self.own[(side, "all")] += np.bincount(bins[counted], minlength=nbins)
            self.own[(side, "genuine")] += np.bincount(bins[counted & genuine], minlength=nbins)

        nan_a, nan_b = np.isnan(score_a), np.isnan(score_b)
        differ = ~((score_a == score_b) | (nan_a & nan_b))
        self.n_score_diff += int(np.count_nonzero(differ))
        with np.errstate(invalid="ignore", divide="ignore"):
            # NaN against a number, inf - inf, |q| |g| = 0: NaN or inf units,
            # beyond any allowance
            gap = np.abs(score_a.astype(np.float64) - score_b)
            units = np.where(differ, gap / (scale * UNIT_ROUNDOFF), 0.0)
            beyond = differ & ~(units <= self.allowance)
        self.n_beyond_bound += int(np.count_nonzero(beyond))
        finite = differ & np.isfinite(score_a) & np.isfinite(score_b)
        if finite.any():
            self.max_abs = max(self.max_abs, float(gap[finite].max()))
            self.max_units = max(self.max_units, float(units[finite].max()))

        moved = bins_a != bins_b
        self.n_moved += int(np.count_nonzero(moved))
        for i, j in zip(*np.nonzero(moved)):
            if len(self.moved_examples) == MOVED_EXAMPLES:
                break
            self.moved_examples.append((first_row + int(i), int(j), score_a[i, j],
                                        int(bins_a[i, j]), score_b[i, j], int(bins_b[i, j])))
        self.n_moved_genuine += int(np.count_nonzero(moved & genuine))
        for net, mask in ((self.net_all, moved), (self.net_genuine, moved & genuine)):
            into, out_of = mask & (bins_b >= 0), mask & (bins_a >= 0)
            net += np.bincount(bins_b[into], minlength=nbins)
            net -= np.bincount(bins_a[out_of], minlength=nbins)

    def conclude(self):
        """Fills `problems` once every row has been added."""
        names = {"reference": self.reference.name, "other": self.other.name}
        for kind, diff, net in (("all pairs", self.diff_all, self.net_all),
                                ("genuine pairs", self.diff_genuine, self.net_genuine)):
            bad = np.flatnonzero(diff != net)
            if bad.size:
                shown = ", ".join("bin %d: %+d vs %+d" % (k, diff[k], net[k]) for k in bad[:5])
                self.problems.append(
                    "%s, %d bins: %s - %s differs from the net movement of the pairs that "
                    "changed bin (%s%s)" % (kind, bad.size, self.other.name, self.reference.name,
                                            shown, ", ..." if bad.size > 5 else ""))
        for side in ("reference", "other"):
            for kind in ("all", "genuine"):
                residual = self.residual(side, kind)
                bad = np.flatnonzero(residual)
                if bad.size:
                    self.problems.append(
                        "%s's %s histogram is not the legacy binning of its own scores in %d "
                        "bins (bin %d: %+d)" % (names[side], "genuine" if kind == "genuine"
                                                else "all-pairs", bad.size, bad[0],
                                                residual[bad[0]]))
        if self.n_beyond_bound:
            self.problems.append(
                "%d pairs' scores differ by more than float32 rounding allows (%.4g u|q||g|; "
                "largest finite difference %.3g u|q||g|; NaN on one side only counts as "
                "beyond)" % (self.n_beyond_bound, self.allowance, self.max_units))
        return self


def account(reference, other, labels_q, labels_g, norm_q, norm_g, dim, nbins,
            chunk_pairs=CHUNK_PAIRS):
    """Accounting of `other` against `reference` (two Sides of the same
    query/gallery sets), block of rows by block of rows."""
    n_query, n_gallery = reference.score.shape
    if other.score.shape != (n_query, n_gallery):
        raise ValueError("score shapes differ: %s and %s" % (reference.score.shape,
                                                            other.score.shape))
    result = Accounting(reference, other, nbins, dim)
    rows = max(1, chunk_pairs // max(n_gallery, 1))
    for begin in range(0, n_query, rows):
        end = min(begin + rows, n_query)
        genuine = labels_q[begin:end, None] == labels_g[None, :]
        result.add_rows(begin, reference.score[begin:end], other.score[begin:end], genuine,
                        np.multiply.outer(norm_q[begin:end], norm_g))
    return result.conclude()


def tar_at_far(histo_all, histo_genuine, fars):
    """TAR at each FAR target from legacy histograms, or None where the ROC
    is undefined (no genuine or no impostor pair). Thresholds are the bin
    edges: a pair is accepted at bin k when its bin is k or above; TAR@FAR f
    is the largest TAR among the thresholds whose FAR is <= f (accepting
    nothing, FAR 0 and TAR 0, is one of them)."""
    genuine = np.concatenate([[0], np.cumsum(histo_genuine[::-1])])
    impostor = np.concatenate([[0], np.cumsum((histo_all - histo_genuine)[::-1])])
    if genuine[-1] == 0 or impostor[-1] == 0:
        return [None for _ in fars]
    tar, far = genuine / genuine[-1], impostor / impostor[-1]
    return [float(tar[far <= target].max()) for target in fars]


# ---------------------------------------------------------------------------
# the two sides

def find_mxnet_python(python):
    """The interpreter to run the MXNet side with (a path or a command), or
    InputError saying why there is none. .venv-mxnet counts only once the
    Makefile has stamped it complete."""
    found = shutil.which(python)
    if found is None:
        raise InputError("no MXNet interpreter at %s: run `make .venv-mxnet` (installs MXNet "
                         "1.9.1 from PyPI into .venv-mxnet) or pass --mxnet-python" % python)
    if os.path.abspath(found) == DEFAULT_MXNET_PYTHON and not os.path.exists(MXNET_STAMP):
        raise InputError(".venv-mxnet is not completely set up (no .venv-mxnet/.installed): "
                         "run `make .venv-mxnet`")
    return found


def run_mxnet(python, inputs, nbins, workdir):
    """Runs scripts/mxnet_roc.py with MXNet's interpreter on the checked
    inputs; returns (Side, description of its versions)."""
    found = find_mxnet_python(python)
    feature_q, label_q, feature_g, label_g = inputs
    query, gallery = os.path.join(workdir, "query.npz"), os.path.join(workdir, "gallery.npz")
    out = os.path.join(workdir, "mxnet.npz")
    np.savez(query, feature=feature_q, label=label_q)
    np.savez(gallery, feature=feature_g, label=label_g)
    # The MXNet side must see its own NumPy (< 1.24), not this environment's.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([found, MXNET_SIDE, query, gallery, out, "--bins", str(nbins)],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise InputError("the MXNet side (%s scripts/mxnet_roc.py) failed: %s"
                         % (python, lines[-1] if lines else "exit status %d" % done.returncode))
    with np.load(out) as result:
        side = Side("MXNet " + str(result["mxnet_version"]), result["score"],
                    result["histo_all"], result["histo_genuine"])
        versions = "NumPy %s, Python %s" % (result["numpy_version"], result["python_version"])
        if not np.array_equal(result["edges"], legacy_edges(nbins)):
            raise InputError("the MXNet side used other bin edges than legacy_edges(%d)" % nbins)
    return side, versions


def project_sides(inputs, nbins):
    """The project's Sides: cpu_roc on torch.matmul's CPU scores, and
    gpu_roc on its CUDA scores where a GPU is present."""
    import torch
    from _ext import roc

    feature_q, label_q, feature_g, label_g = inputs
    devices = ["cpu"]
    if torch.cuda.is_available() and roc.built_with_cuda:
        devices.append("cuda")
    sides = []
    for device in devices:
        score = torch.matmul(torch.from_numpy(feature_q).to(device),
                             torch.t(torch.from_numpy(feature_g).to(device)))
        histo1 = torch.zeros(nbins, dtype=torch.int64, device=device)
        histo2 = torch.zeros(nbins, dtype=torch.int64, device=device)
        roc_fn = roc.gpu_roc if device == "cuda" else roc.cpu_roc
        roc_fn(score, histo1, histo2, torch.from_numpy(label_q).to(device),
               torch.from_numpy(label_g).to(device))
        sides.append(Side(roc_fn.__name__, score.cpu().numpy(), histo1.cpu().numpy(),
                          histo2.cpu().numpy()))
    return sides


# ---------------------------------------------------------------------------
# the report

def table(mxnet, projects, accountings, fars, nbins, shape, versions):
    sides = [mxnet] + projects
    totals = [side.totals() for side in sides]
    tars = [tar_at_far(side.histo_all, side.histo_genuine, fars) for side in sides]
    width = 16
    header = "%-34s" % "" + "".join("%*s" % (width, side.name) for side in sides) + \
        "".join("%*s" % (width, "%s - MXNet" % side.name) for side in projects)
    lines = ["%s vs _ext.roc: %s x %s pairs, %d legacy bins (MXNet side: %s)"
             % (mxnet.name, "{:,}".format(shape[0]), "{:,}".format(shape[1]), nbins, versions),
             "", header]

    def row(label, values, fmt, diff_fmt):
        cells = ["%*s" % (width, "n/a" if v is None else fmt.format(v)) for v in values]
        for value in values[1:]:
            diff = None if value is None or values[0] is None else value - values[0]
            cells.append("%*s" % (width, "n/a" if diff is None else diff_fmt.format(diff)))
        lines.append("%-34s" % label + "".join(cells))

    row("genuine pairs", [t[0] for t in totals], "{:,}", "{:+,}")
    row("impostor pairs", [t[1] for t in totals], "{:,}", "{:+,}")
    row("NaN scores skipped", [t[2] for t in totals], "{:,}", "{:+,}")
    for i, far in enumerate(fars):
        row("TAR @ FAR %.0e" % far, [t[i] for t in tars], "{:.6f}", "{:+.6f}")

    for result in accountings:
        lines += ["", "%s against %s, pair by pair:" % (result.other.name, mxnet.name)]
        lines += accounting_lines(result, mxnet.name)
        if result.explained:
            lines.append("  every difference is explained by the order in which the two "
                         "sides summed the scores")
        else:
            lines += ["  UNEXPLAINED: " + problem for problem in result.problems]

    inner = max(nbins - 1, 0)
    lines += [
        "",
        "TAR@FAR: from the cumulative legacy histograms, thresholds at the bin edges; the",
        "  largest TAR whose FAR <= the target (the project's max_tpr rule); the same code",
        "  for every column.",
        "MXNet: mx.nd.dot(feature_q, feature_g, transpose_b=True); mx.nd.histogram of",
        "  mx.nd.clip(score, -1, 1) with float32 edges at the smallest float32 of each",
        "  legacy bin, so its [e_k, e_k+1) bins are trunc((s + 1) / 2 * %d) exactly"
        % max(nbins - 1, 0),
        "  (%d of the %d inner edges are not float32(2k/%d - 1)); genuine pairs by"
        % (naive_edge_mismatches(nbins), inner, max(inner, 1)),
        "  mx.nd.broadcast_equal on the labels.",
        "Project: torch.matmul(feature_q, feature_g.T), then %s with int64 histograms"
        % " / ".join(side.name for side in projects),
        "  (torch %s, NumPy %s)." % (torch_version(), np.__version__),
    ]
    return "\n".join(lines)


def accounting_lines(result, reference_name):
    """The pair-by-pair rows of one Accounting, the moved pairs shown."""
    name = result.other.name

    def item(label, value):
        return "  %-40s %s" % (label, value)

    def own_bins(side):
        return yes(not result.residual(side, "all").any()
                   and not result.residual(side, "genuine").any())

    lines = [
        item("max |per-bin difference|", "all pairs %d, genuine %d"
             % (np.abs(result.diff_all).max(), np.abs(result.diff_genuine).max())),
        item("pairs whose scores differ", "{:,} of {:,}".format(result.n_score_diff,
                                                                result.n_pairs)
             + (", by at most %.3g" % result.max_abs if result.n_score_diff else "")),
        item("  in units of u|q||g| (u = 2^-24)", "at most %.3g; float32 rounding allows %.4g"
             % (result.max_units, result.allowance)),
        item("pairs beyond float32 rounding", "{:,}".format(result.n_beyond_bound)),
        item("pairs in another legacy bin", "{:,} (genuine {:,}){}".format(
            result.n_moved, result.n_moved_genuine,
            "; (query, gallery): score -> bin" if result.n_moved else "")),
    ]
    edges = legacy_edges(result.nbins)
    for i, j, score_a, bin_a, score_b, bin_b in result.moved_examples:
        lines.append("    (%d, %d): MXNet %.9g -> %d, %s %.9g -> %d; edge %.9g"
                     % (i, j, score_a, bin_a, name, score_b, bin_b, edges[max(bin_a, bin_b)]))
    if result.n_moved > len(result.moved_examples):
        lines.append("    ... and {:,} more".format(result.n_moved - len(result.moved_examples)))
    lines += [
        item("per-bin difference = their net movement", "all pairs %s, genuine %s" % (
            yes(np.array_equal(result.diff_all, result.net_all)),
            yes(np.array_equal(result.diff_genuine, result.net_genuine)))),
        item("histograms = legacy bins of own scores", "%s %s, %s %s" % (
            reference_name, own_bins("reference"), name, own_bins("other"))),
    ]
    return lines


def torch_version():
    import torch
    return torch.__version__


def yes(flag):
    return "yes" if flag else "NO"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("query", nargs="?", help="query .npz (feature, label)")
    parser.add_argument("gallery", nargs="?", help="gallery .npz (feature, label)")
    parser.add_argument("--mxnet-python", default=os.environ.get("MXNET_PYTHON")
                        or DEFAULT_MXNET_PYTHON,
                        help="interpreter with MXNet 1.9.1 (default: $MXNET_PYTHON, else "
                             ".venv-mxnet/bin/python)")
    parser.add_argument("--bins", type=int, default=NUM_BINS,
                        help="legacy bins (default %d, as in 2018)" % NUM_BINS)
    parser.add_argument("--far", type=float, nargs="+", default=list(DEFAULT_FARS),
                        help="FAR targets of the TAR rows (default 1e-4 1e-3 1e-2 1e-1)")
    parser.add_argument("--workdir", help="keep the exchanged files (the checked inputs and "
                                          "MXNet's mxnet.npz) in this folder")
    args = parser.parse_args(argv)
    if (args.query is None) != (args.gallery is None):
        fail(SCRIPT, "give both query.npz and gallery.npz, or neither for the demo data set")
    if args.bins < 1:
        fail(SCRIPT, "--bins must be at least 1, got %d" % args.bins)
    try:
        if args.query is None:
            print("no files given: using the embedded demo data set (3,000 x 4,000 pairs)")
            query, gallery = demo_data()
        else:
            query, gallery = load(args.query), load(args.gallery)
        inputs = query_gallery(query, gallery)
        feature_q, label_q, feature_g, label_g = inputs
        if feature_q.shape[0] == 0 or feature_g.shape[0] == 0:
            raise InputError("no pairs: the %s set is empty"
                             % ("query" if feature_q.shape[0] == 0 else "gallery"))
        if args.workdir:
            os.makedirs(args.workdir, exist_ok=True)
            mxnet, versions = run_mxnet(args.mxnet_python, inputs, args.bins, args.workdir)
        else:
            with tempfile.TemporaryDirectory() as workdir:
                mxnet, versions = run_mxnet(args.mxnet_python, inputs, args.bins, workdir)
    except (InputError, OSError) as error:
        fail(SCRIPT, str(error))

    projects = project_sides(inputs, args.bins)
    norm_q = np.linalg.norm(feature_q.astype(np.float64), axis=1)
    norm_g = np.linalg.norm(feature_g.astype(np.float64), axis=1)
    accountings = [account(mxnet, side, label_q, label_g, norm_q, norm_g, feature_q.shape[1],
                           args.bins) for side in projects]
    print(table(mxnet, projects, accountings, args.far, args.bins,
                (feature_q.shape[0], feature_g.shape[0]), versions))
    if not all(result.explained for result in accountings):
        sys.exit(1)


if __name__ == "__main__":
    main()
