"""roc.py: exact (or binned) ROC of embeddings, with a TAR@FAR table.

    ext-roc query.npz gallery.npz          (or: python scripts/roc.py ...)
    ext-roc set.npz --same-set             every pair of one set, once
    ext-roc                                the embedded demo data set

Each .npz holds `feature` (N, D) and `label` (N,). Scores are the cosine
similarity (--similarity dot for raw dot products) of every (query, gallery)
pair, computed tile by tile and never stored, so Q x G may exceed any memory.
Prints a TAR@FAR table with thresholds and false-accept counts; --plot draws
the ROC (log-x, the TAR@FAR points marked), --json writes the whole report.
"""

import argparse
import json
import sys
import time

from .embeddings import InputError, checked, demo_data, fail, load, query_gallery


DEFAULT_FARS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)


class ProgressBar:
    """A one-line progress bar on stderr, shown once a run takes over a second."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.start = time.perf_counter()
        self.shown = False

    def __call__(self, done, total):
        elapsed = time.perf_counter() - self.start
        if not self.enabled or (elapsed < 1.0 and not self.shown):
            return
        self.shown = True
        fraction = done / total if total else 1.0
        bar = "#" * int(30 * fraction)
        sys.stderr.write("\r[%-30s] %5.1f%%  %.3g / %.3g pairs  %.1f s"
                         % (bar, 100 * fraction, done, total, elapsed))
        sys.stderr.flush()

    def close(self):
        if self.shown:
            sys.stderr.write("\n")


def plot(report, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    positive = report.fpr > 0
    ax.plot(report.fpr[positive], report.tpr[positive], "b-", lw=1.2,
            label="ROC (%s), AUC %.5f" % (report.mode, report.auc))
    for row in report.tar_at_far:
        if row.far > 0:
            ax.plot([row.far], [row.tar], "ro", ms=4)
            ax.annotate("%.4f @ %.0e" % (row.tar, row.far), (row.far, row.tar),
                        textcoords="offset points", xytext=(4, -12), fontsize=7)
    smallest = report.fpr[positive].min() if positive.any() else 1e-8
    ax.set_xscale("log")
    ax.set_xlim(min(smallest, min((r.far for r in report.tar_at_far if r.far > 0), default=1)) / 2,
                1.01)
    ax.set_ylim(-0.01, 1.01)
    ax.set_xlabel("false accept rate (FPR)")
    ax.set_ylabel("true accept rate (TPR)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("query", nargs="?", help="query .npz (feature, label)")
    parser.add_argument("gallery", nargs="?", help="gallery .npz (omit with --same-set)")
    parser.add_argument("--same-set", action="store_true",
                        help="one set: every unordered pair once, no self-pairs")
    parser.add_argument("--mode", choices=("exact", "binned"), default="exact")
    parser.add_argument("--bins", type=int, default=1024, help="binned mode: number of bins")
    parser.add_argument("--range", type=float, nargs=2, default=(-1.0, 1.0),
                        metavar=("LO", "HI"), help="binned mode: score range")
    parser.add_argument("--far", type=float, nargs="+", default=DEFAULT_FARS,
                        help="FAR targets of the table (default: 1e-6 .. 1e-1)")
    parser.add_argument("--far-rule", default="max_tpr",
                        choices=("max_tpr", "nearest", "first_above", "interpolate"))
    parser.add_argument("--similarity", choices=("cosine", "dot"), default="cosine")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if present)")
    parser.add_argument("--chunk", type=int, help="pairs per step")
    parser.add_argument("--plot", metavar="PNG", help="draw the ROC into this file")
    parser.add_argument("--json", metavar="FILE", help="write the report as JSON")
    parser.add_argument("--no-progress", action="store_true")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
        from _ext import roc

        if args.query is None:
            if args.gallery is not None:
                raise InputError("give query.npz and gallery.npz, or one file with --same-set")
            print("no files given: the embedded demo data set (3,000 x 4,000 pairs)")
            query, gallery = demo_data()
            feature_q, label_q, feature_g, label_g = query_gallery(query, gallery)
            args.same_set = False
        elif args.same_set:
            if args.gallery is not None:
                raise InputError("--same-set takes one file, got two")
            feature_q, label_q = checked("set", load(args.query))
            feature_g = label_g = None
        else:
            if args.gallery is None:
                raise InputError("give a gallery .npz too, or --same-set for one set")
            feature_q, label_q, feature_g, label_g = query_gallery(load(args.query),
                                                                   load(args.gallery))
        device = args.device or ("cuda" if torch.cuda.is_available() and roc.built_with_cuda
                                 else "cpu")
        n_query = feature_q.shape[0]
        n_pairs = n_query * (n_query - 1) // 2 if args.same_set else n_query * feature_g.shape[0]
        print("%s pairs on %s, %s mode" % ("{:,}".format(n_pairs), device, args.mode))
        progress = ProgressBar(not args.no_progress)
        start = time.perf_counter()
        try:
            report = roc.evaluate(
                label_q, label_g, feat_q=feature_q, feat_g=feature_g, same_set=args.same_set,
                mode=args.mode, bins=args.bins, range=tuple(args.range), fars=tuple(args.far),
                far_rule=args.far_rule, device=device, chunk=args.chunk,
                similarity=args.similarity, progress=progress)
        finally:
            progress.close()
        seconds = time.perf_counter() - start
    except InputError as error:
        fail("roc.py", str(error))
    except (ValueError, TypeError, RuntimeError, MemoryError) as error:
        fail("roc.py", str(error).splitlines()[0] if str(error) else type(error).__name__)

    print(report.table())
    print("%.3f s" % seconds)
    if args.plot:
        title = "%s pairs" % "{:,}".format(report.n_genuine + report.n_impostor)
        plot(report, args.plot, title)
        print("saved", args.plot)
    if args.json:
        out = report.to_dict()
        out.update(seconds=seconds, device=device, similarity=args.similarity,
                   same_set=args.same_set)
        with open(args.json, "w") as f:
            json.dump(out, f)
        print("saved", args.json)


if __name__ == "__main__":
    main()
