"""rank.py: 1:N identification and re-ID ranking of embeddings: CMC, mAP,
mINP, MAP@R and TPIR at FPIR, exact (rank.evaluate).

    ext-rank query.npz gallery.npz           (or: python scripts/rank.py ...)
    ext-rank query.npz gallery.npz --cams    Market-1501's protocol: same id and
                                             same camera excluded, label -1 junk
    ext-rank set.npz --same-set              retrieval within one set

Each set .npz holds `feature` (N, D) and `label` (N,), and with --cams
`cam` (N,). Scores are the cosine similarity (--similarity dot for raw dot
products) of every (query, gallery) pair, computed tile by tile and never
stored. Prints the CMC at ranks 1, 5, 10, 20, the mean metrics and a TPIR at
FPIR table; --json writes a small summary, --plot draws the CMC curve. On
the CPU, NumPy is all it needs (matplotlib for --plot).
"""

import argparse
import json
import sys
import time

import numpy as np

import _ext

from . import embeddings
from .cli import add_version, far_value, quiet_on_closed_pipe, require
from .embeddings import InputError, check_writable

PROG = "ext-rank"
TIES = ("expected", "pessimistic", "optimistic")
APS = ("noninterpolated", "trapezoid")
FPIR_RULES = ("nist", "insightface_ijb", "insightface_1n_legacy", "insightface_studio")


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not an integer: %r" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %d" % value)
    return value


def junk_label(text):
    if text == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("an integer label or 'none', got %r" % text) from None


def make_parser():
    parser = argparse.ArgumentParser(
        prog=PROG, description="1:N identification and re-ID ranking of embeddings: CMC, "
                               "mAP, mINP, MAP@R and TPIR at FPIR, exact.")
    parser.add_argument("query", help="query .npz: feature (N, D), label (N,) [, cam (N,)]")
    parser.add_argument("gallery", nargs="?",
                        help="gallery .npz, as the query (omitted with --same-set)")
    parser.add_argument("--cams", action="store_true",
                        help="read `cam` from both sets and exclude, for each query, the gallery "
                             "entries with its label and its camera (Market-1501)")
    parser.add_argument("--same-set", action="store_true",
                        help="one set: every entry queries all the others")
    parser.add_argument("--junk", type=junk_label, default=-1, metavar="LABEL",
                        help="gallery entries with this label are excluded (default: -1; "
                             "'none': keep every entry)")
    parser.add_argument("--ties", choices=TIES, default="expected",
                        help="a mate tied with non-mates: every metric's mean over random "
                             "orders of the ties (expected, default), or ranked after them "
                             "(pessimistic) or before (optimistic)")
    parser.add_argument("--max-rank", type=positive_int, default=50,
                        help="CMC length (default 50)")
    parser.add_argument("--ap", choices=APS, default="noninterpolated",
                        help="average precision: torchreid's (noninterpolated, default) or "
                             "layumi's trapezoids")
    parser.add_argument("--fpir", type=far_value, nargs="+", action="extend", metavar="FPIR",
                        help="TPIR at these FPIR targets (default: 1e-4 1e-3 1e-2 1e-1)")
    parser.add_argument("--fpir-rule", choices=FPIR_RULES, default="nist",
                        help="the published rule of the TPIR@FPIR table (default: nist)")
    parser.add_argument("--similarity", choices=("cosine", "dot"), default="cosine",
                        help="the score of a pair of features (default: cosine)")
    parser.add_argument("--json", metavar="PATH", help="write a JSON summary")
    parser.add_argument("--plot", metavar="PNG", help="draw the CMC curve (needs matplotlib)")
    parser.add_argument("--label", help="the run's name in the plot and the JSON")
    add_version(parser)
    return parser


def sets(args):
    """(inputs record, evaluate keyword arguments) of the files."""
    keys = ("feature", "label", "cam") if args.cams else ("feature", "label")
    hint = " (--cams reads `cam` (N,) from each set)" if args.cams else ""
    query = embeddings.load(args.query, keys, hint=hint)
    if args.same_set:
        feature, label = embeddings.checked(args.query, query)
        kwargs = dict(labels_q=label, feat_q=feature, same_set=True)
        if args.cams:
            kwargs["cams_q"] = embeddings.integers_of(args.query, "cam", query["cam"],
                                                      feature.shape[0])
        return {"set": args.query}, kwargs
    gallery = embeddings.load(args.gallery, keys, hint=hint)
    feature_q, label_q, feature_g, label_g = embeddings.query_gallery(
        query, gallery, (args.query, args.gallery))
    kwargs = dict(labels_q=label_q, labels_g=label_g, feat_q=feature_q, feat_g=feature_g)
    if args.cams:
        kwargs["cams_q"] = embeddings.integers_of(args.query, "cam", query["cam"],
                                                  feature_q.shape[0])
        kwargs["cams_g"] = embeddings.integers_of(args.gallery, "cam", gallery["cam"],
                                                  feature_g.shape[0])
    return {"query": args.query, "gallery": args.gallery}, kwargs


def draw_cmc(path, report, label):
    """The CMC curve, rank 1 to max_rank, into a PNG."""
    matplotlib = require("matplotlib", "--plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ranks = np.arange(1, len(report.cmc) + 1)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot(ranks, report.cmc, marker="." if len(ranks) <= 50 else None,
            label="%s (rank-1 %.2f%%, mAP %.2f%%)" % (label or "CMC", 100 * report.cmc[0],
                                                      100 * report.mean_ap))
    ax.set_xlabel("rank")
    ax.set_ylabel("identification rate")
    ax.set_xlim(0.5, len(ranks) + 0.5)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(linestyle="--", linewidth=0.5)
    ax.legend(loc="lower right")
    ax.set_title("CMC, %d mated queries" % report.n_mated)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args):
    from _ext import rank
    for path in (args.json, args.plot):
        if path:
            check_writable(path)
    if args.plot:
        require("matplotlib", "--plot")
    start = time.perf_counter()
    inputs, kwargs = sets(args)
    loaded = time.perf_counter()
    report = rank.evaluate(kwargs.pop("labels_q"), kwargs.pop("labels_g", None), junk=args.junk,
                           ties=args.ties, max_rank=args.max_rank, ap=args.ap,
                           fpirs=tuple(args.fpir or rank.DEFAULT_FPIRS),
                           fpir_rule=args.fpir_rule, similarity=args.similarity, **kwargs)
    done = time.perf_counter()
    print(report.table())
    print("%.3f s (loading %.3f s, evaluation %.3f s)" % (done - start, loaded - start,
                                                         done - loaded))
    if args.json:
        out = report.to_dict()
        out.update(label=args.label, inputs=inputs, version=_ext.__version__,
                   options={"cams": args.cams, "same_set": args.same_set, "junk": args.junk,
                            "similarity": args.similarity},
                   timing={"load_s": loaded - start, "evaluate_s": done - loaded})
        with open(args.json, "w") as f:
            json.dump(out, f, allow_nan=False, indent=1)
            f.write("\n")
        print("saved", args.json)
    if args.plot:
        draw_cmc(args.plot, report, args.label)
        print("saved", args.plot)


@quiet_on_closed_pipe
def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.same_set == (args.gallery is not None):
        parser.error("give a query and a gallery, or one set with --same-set")
    try:
        run(args)
    except (InputError, ValueError, TypeError, RuntimeError, MemoryError, OSError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(message if message.startswith(PROG + ": ") else "%s: %s" % (PROG, message),
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
