"""rank.py: 1:N identification and re-ID ranking of embeddings: CMC, mAP,
mINP, MAP@R and TPIR at FPIR, exact (rank.evaluate).

    ext-rank query.npz gallery.npz           (or: python scripts/rank.py ...)
    ext-rank query.npz gallery.npz --cams    Market-1501's protocol: same id and
                                             same camera excluded, label -1 junk
    ext-rank set.npz --same-set              retrieval within one set
    ext-rank --ijb IJBC/meta features.npz --templates IJBC/meta/ijbc_face_tid_mid.txt
             --flip add --face-scores IJBC/meta/ijbc_name_5pts_score.txt
                                             IJB-C 1:N as InsightFace's ijb_evals.py: G1, G2
                                             and their mean

Each set .npz holds `feature` (N, D) and `label` (N,), and with --cams
`cam` (N,). Scores are the cosine similarity (--similarity dot for raw dot
products) of every (query, gallery) pair, computed tile by tile and never
stored. Prints the CMC at ranks 1, 5, 10, 20, the mean metrics and a TPIR at
FPIR table; --json writes a small summary, --plot draws the CMC curve and
--plot-dir the detection-and-identification rate against FPIR. With --ijb,
the queries are IJB probe templates and each gallery's templates (ijb_1n.py),
built from the image features as ext-roc --templates builds them. On the
CPU, NumPy is all it needs (matplotlib for the plots).
"""

import argparse
import json
import sys
import time

import numpy as np

import _ext

from . import embeddings, ijb_1n, templates
from . import roc as roc_tool
from .cli import add_version, bare_list_options, far_value, quiet_on_closed_pipe, require
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
    parser.add_argument("query", help="query .npz: feature (N, D), label (N,) [, cam (N,)]; "
                                      "with --ijb: the image features .npz")
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
    parser.add_argument("--fpir-rule", choices=FPIR_RULES,
                        help="the published rule of the TPIR@FPIR table (default: nist; with "
                             "--ijb, insightface_ijb)")
    parser.add_argument("--similarity", choices=("cosine", "dot"), default="cosine",
                        help="the score of a pair of features (default: cosine)")
    parser.add_argument("--json", metavar="PATH", help="write a JSON summary")
    parser.add_argument("--plot", metavar="PNG", help="draw the CMC curve (needs matplotlib)")
    parser.add_argument("--plot-dir", metavar="PNG",
                        help="draw the detection-and-identification rate (TPIR) against FPIR, "
                             "log FPIR from 1e-4 to 1, under --fpir-rule; with --ijb, G1 and "
                             "G2 (needs matplotlib)")
    parser.add_argument("--label", help="the run's name in the plot and the JSON")
    ijb = parser.add_argument_group("IJB-B / IJB-C 1:N (InsightFace's metadata)")
    ijb.add_argument("--ijb", metavar="META",
                     help="the directory of InsightFace's 1:N lists (*_1N_probe_mixed.csv, "
                          "*_1N_gallery_G1.csv, *_1N_gallery_G2.csv; IJB-B's S1, S2), or their "
                          "prefix (IJBC/meta/ijbc): the probe templates against each gallery, "
                          "reported with their mean as ijb_evals.py reports them. The features "
                          ".npz holds the image features, as ext-roc --templates takes them")
    ijb.add_argument("--templates", nargs="?", const="", metavar="TID_MID_FILE",
                     help="with --ijb: template and media of each feature row from this file "
                          "(`image_name template_id media_id` a line), else from the features "
                          "file's `template` and `media` arrays")
    ijb.add_argument("--flip", choices=templates.FLIP_MODES,
                     help="with --ijb: fuse each image's feature with its flipped copy's, as "
                          "ext-roc --flip (InsightFace's 1:N: add)")
    ijb.add_argument("--face-scores", nargs="?", const="", metavar="NAME_5PTS_SCORE_FILE",
                     help="with --ijb: scale each image feature by its face detector score, as "
                          "ext-roc --face-scores (InsightFace's 1:N does)")
    ijb.add_argument("--strict", action="store_true",
                     help="with --ijb: image feature rows that are non-finite or all zero, and "
                          "templates left without one, are errors (default: warnings)")
    add_version(parser)
    return parser


def check_combination(parser, args):
    """A usage error for options that do not go together."""
    if args.ijb is not None:
        if args.gallery is not None or args.same_set or args.cams:
            parser.error("--ijb takes one features file, and neither --same-set nor --cams")
    else:
        if args.same_set == (args.gallery is not None):
            parser.error("give a query and a gallery, or one set with --same-set")
        for name in ("templates", "flip", "face_scores"):
            if getattr(args, name) is not None:
                parser.error("--%s needs --ijb" % name.replace("_", "-"))
        if args.strict:
            parser.error("--strict needs --ijb")


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


def draw_cmc(path, reports, label):
    """The CMC curve, rank 1 to max_rank, of each report ({name: RankReport};
    with --ijb, G1 and G2) into a PNG."""
    matplotlib = require("matplotlib", "--plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, report in reports.items():
        ranks = np.arange(1, len(report.cmc) + 1)
        ax.plot(ranks, report.cmc, marker="." if len(ranks) <= 50 else None,
                label="%s (rank-1 %.2f%%, mAP %.2f%%)" % (
                    " ".join(filter(None, (label, name))) or "CMC", 100 * report.cmc[0],
                    100 * report.mean_ap))
    ax.set_xlabel("rank")
    ax.set_ylabel("identification rate")
    ax.set_xlim(0.5, len(ranks) + 0.5)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(linestyle="--", linewidth=0.5)
    ax.legend(loc="lower right")
    ax.set_title("CMC, %s mated queries" % " / ".join(str(r.n_mated) for r in reports.values()))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ijb_searches(args):
    """(inputs record, warnings, {gallery name: evaluate keyword arguments}) of
    --ijb: the probe templates against each gallery's, their features built
    from the image features as ext-roc --templates builds them."""
    lists = ijb_1n.find_lists(args.ijb)
    probes = ijb_1n.read_list(lists.probes)
    galleries = {name: ijb_1n.read_list(path) for name, path in lists.galleries.items()}
    inputs = {"features": args.query, "probes": lists.probes, **lists.galleries}
    warnings = []
    ids, feature = roc_tool.ijb_templates(args, args.query, inputs, warnings)
    probe_rows = ijb_1n.template_rows(lists.probes, probes, ids, args.query)
    searches = {}
    for name, gallery in galleries.items():
        rows = ijb_1n.template_rows(lists.galleries[name], gallery, ids, args.query)
        searches[name] = dict(labels_q=probes.subject, labels_g=gallery.subject,
                              feat_q=feature[probe_rows], feat_g=feature[rows])
    return inputs, warnings, searches


def draw_dir(path, curves, label, rule):
    """TPIR (the detection-and-identification rate) against FPIR, log FPIR,
    one curve a gallery ({name: TpirAtFpir rows}), into a PNG. A curve has the
    points its rule answers (none without a non-mated search)."""
    matplotlib = require("matplotlib", "--plot-dir")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4.5))
    drawn = 0
    for name, rows in curves.items():
        points = [(row.fpir, row.tpir) for row in rows if np.isfinite(row.tpir)]
        if points:
            fpir, tpir = zip(*points)
            ax.plot(fpir, tpir, label=" ".join(filter(None, (label, name))) or "TPIR")
            drawn += 1
    if not drawn:
        ax.text(0.5, 0.5, "no non-mated search: no FPIR", ha="center",
                transform=ax.transAxes)
    ax.set_xscale("log")
    ax.set_xlim(ijb_1n.CURVE_FPIRS[0], 1.0)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("false positive identification rate (FPIR)")
    ax.set_ylabel("detection and identification rate (TPIR)")
    ax.grid(linestyle="--", linewidth=0.5)
    if drawn:
        ax.legend(loc="lower right")
    ax.set_title("DIR vs FPIR (%s)" % rule)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_json(path, out):
    with open(path, "w") as f:
        json.dump(out, f, allow_nan=False, indent=1)
        f.write("\n")


def run(args):
    from _ext import rank
    for path in (args.json, args.plot, args.plot_dir):
        if path:
            check_writable(path)
    for option, path in (("--plot", args.plot), ("--plot-dir", args.plot_dir)):
        if path:
            require("matplotlib", option)
    fpir_rule = args.fpir_rule or ("insightface_ijb" if args.ijb else "nist")
    fpirs = tuple(args.fpir or (ijb_1n.TABLE_FPIRS if args.ijb else rank.DEFAULT_FPIRS))
    # the curve's targets are counted with the table's, and kept apart from them
    curve_fpirs = ijb_1n.CURVE_FPIRS if args.plot_dir else ()
    start = time.perf_counter()
    if args.ijb:
        inputs, warnings, searches = ijb_searches(args)
        for warning in warnings:
            print("%s: warning: %s" % (PROG, warning), file=sys.stderr)
        if args.flip is None and args.face_scores is None:
            print("%s: %s" % (PROG, roc_tool.PUBLISHED_IJB_NOTE), file=sys.stderr)
        junk = None
    else:
        inputs, kwargs = sets(args)
        warnings, searches, junk = None, {"": kwargs}, args.junk
    loaded = time.perf_counter()
    reports, curves = {}, {}
    for name, kwargs in searches.items():
        report = rank.evaluate(kwargs.pop("labels_q"), kwargs.pop("labels_g", None), junk=junk,
                               ties=args.ties, max_rank=args.max_rank, ap=args.ap,
                               fpirs=fpirs + curve_fpirs, fpir_rule=fpir_rule,
                               similarity=args.similarity, **kwargs)
        curves[name] = report.tpir_at_fpir[len(fpirs):]
        report.tpir_at_fpir = report.tpir_at_fpir[:len(fpirs)]
        reports[name] = report
    done = time.perf_counter()
    if args.ijb:
        mean = ijb_1n.mean_of(reports, reports["G1"].n_queries)
        for name, report in reports.items():
            print("%s (%s):\n%s\n" % (name, inputs[name], report.table()))
        print(ijb_1n.table(reports, mean))
    else:
        print(reports[""].table())
    print("%.3f s (loading %.3f s, evaluation %.3f s)" % (done - start, loaded - start,
                                                         done - loaded))
    if args.json:
        if args.ijb:
            out = {"galleries": {name: r.to_dict() for name, r in reports.items()},
                   "mean": ijb_1n.mean_dict(mean),
                   "warnings": warnings}
        else:
            out = reports[""].to_dict()
        out.update(label=args.label, inputs=inputs, version=_ext.__version__,
                   options={"cams": args.cams, "same_set": args.same_set, "junk": junk,
                            "similarity": args.similarity, "flip": args.flip,
                            "face_scores": args.face_scores is not None},
                   timing={"load_s": loaded - start, "evaluate_s": done - loaded})
        write_json(args.json, out)
        print("saved", args.json)
    if args.plot:
        draw_cmc(args.plot, reports, args.label)
        print("saved", args.plot)
    if args.plot_dir:
        draw_dir(args.plot_dir, curves, args.label, fpir_rule)
        print("saved", args.plot_dir)


@quiet_on_closed_pipe
def main(argv=None):
    parser = make_parser()
    args = parser.parse_args(bare_list_options(sys.argv[1:] if argv is None else argv,
                                               roc_tool.LIST_OPTIONS))
    check_combination(parser, args)
    try:
        run(args)
    except (InputError, ValueError, TypeError, RuntimeError, MemoryError, OSError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(message if message.startswith(PROG + ": ") else "%s: %s" % (PROG, message),
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
