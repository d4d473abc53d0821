"""plot_roc.py: ROC curves of several curve files overlaid in one PNG.

    ext-plot-roc out.png a.npz b.npz [--label A --label B] [--title T]
    (or: python scripts/plot_roc.py ...)          needs matplotlib

A curve file is what `ext-roc --curve FILE.npz` writes: the curve (fpr, tpr,
...) with its AUC and TAR@FAR rows, so that it can be drawn on its own; a
file of RocReport.save_curve (fpr and tpr only) is drawn without them. The
FPR axis is logarithmic; points at FPR 0 are drawn on a dotted line left of
the smallest positive FPR. TAR@FAR targets are marked (hollow where the
target lies below 1 / impostor pairs, which no threshold resolves).
"""

import argparse
import os

import numpy as np

from .cli import add_version, quiet_on_closed_pipe, require
from .embeddings import InputError, check_writable, fail, load

PROG = "ext-plot-roc"
DPI = 120   # the labels are placed at the resolution the PNG is written at
CURVE_EXTRAS = ("auc", "far", "tar", "far_below_resolution", "label", "mode", "n_impostor")


def curve_of_report(report, label=None):
    """The plot's view of a RocReport."""
    return {"label": label or "ROC", "fpr": report.fpr, "tpr": report.tpr, "auc": report.auc,
            "mode": report.mode,
            "targets": [(row.far, row.tar, row.below_resolution) for row in report.tar_at_far]}


def read_curve(path, label=None):
    """The plot's view of a curve file; InputError naming the file if unusable."""
    data = load(path, keys=("fpr", "tpr"), optional=CURVE_EXTRAS)
    fpr, tpr = np.asarray(data["fpr"]), np.asarray(data["tpr"])
    for name, values in (("fpr", fpr), ("tpr", tpr)):
        if values.ndim != 1 or values.size == 0 or not np.issubdtype(values.dtype, np.floating):
            raise InputError("%s: %s must be a non-empty 1-D float array, got %s %s"
                             % (path, name, values.dtype, values.shape))
        if not (np.isfinite(values).all() and values.min() >= 0 and values.max() <= 1):
            raise InputError("%s: %s must lie in [0, 1]" % (path, name))
    if fpr.shape != tpr.shape:
        raise InputError("%s: fpr has %d points but tpr %d" % (path, fpr.size, tpr.size))
    targets = []
    if all(k in data for k in ("far", "tar", "far_below_resolution")):
        targets = [(float(f), float(t), bool(b)) for f, t, b in
                   zip(data["far"], data["tar"], data["far_below_resolution"])
                   if np.isfinite(t)]
    if label is None:
        label = str(data["label"]) if "label" in data else \
            os.path.splitext(os.path.basename(path))[0]
    auc = float(data["auc"]) if "auc" in data else None
    return {"label": label, "fpr": fpr, "tpr": tpr, "auc": auc,
            "mode": str(data["mode"]) if "mode" in data else None, "targets": targets}


def figure(curves, title=None):
    """A matplotlib figure of the curves, every point and marker inside the
    axes and every label inside the figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    positive = [c["fpr"][c["fpr"] > 0].min() for c in curves if (c["fpr"] > 0).any()]
    positive += [far for c in curves for far, _, _ in c["targets"] if far > 0]
    zero_x = min(positive, default=1e-6) / 10  # where FPR 0 is drawn
    left, right = zero_x / 2, 2.0              # margins keep whole markers inside

    fig, ax = plt.subplots(figsize=(7.5, 5.5), dpi=DPI, layout="constrained")
    ax.axvline(zero_x, color="0.6", lw=0.8, ls=":")
    any_below = False
    labels, markers = [], []
    for index, curve in enumerate(curves):
        color = "C%d" % (index % 10)
        legend = curve["label"]
        if curve["auc"] is not None and np.isfinite(curve["auc"]):
            legend += ", AUC %.5f" % curve["auc"]
        line, = ax.plot(np.where(curve["fpr"] > 0, curve["fpr"], zero_x), curve["tpr"],
                        color=color, lw=1.3, label=legend)
        for far, tar, below in curve["targets"]:
            any_below |= below
            x = far if far > 0 else zero_x
            markers += ax.plot([x], [tar], "o", ms=5, color=color,
                               mfc="white" if below else color)
            if len(curves) == 1:
                labels.append(ax.annotate(
                    "%.4f @ %.0e" % (tar, far), (x, tar), xytext=(6, -4),
                    textcoords="offset points", fontsize=7,
                    arrowprops=dict(arrowstyle="-", color=color, lw=0.5, alpha=0.6,
                                    shrinkA=0, shrinkB=3)))
    ax.set_xscale("log")
    ax.set_xlim(left, right)
    exponents = np.arange(np.ceil(np.log10(zero_x * 3)), 1).astype(int)
    exponents = exponents[::-1][::int(np.ceil(len(exponents) / 10))][::-1]   # at most 10
    ax.set_xticks([zero_x, *10.0 ** exponents],
                  ["0", *("$10^{%d}$" % e for e in exponents)])
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("false accept rate (FPR, log scale; FPR 0 on the dotted line)")
    ax.set_ylabel("true accept rate (TPR)")
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    handles, names = ax.get_legend_handles_labels()
    if any(curve["targets"] for curve in curves):
        handles.append(Line2D([], [], ls="", marker="o", ms=5, color="0.3"))
        names.append("TAR @ FAR target")
    if any_below:
        handles.append(Line2D([], [], ls="", marker="o", ms=5, color="0.3", mfc="white"))
        names.append("target below 1 / impostor pairs")
    ax.legend(handles, names, loc="best", fontsize=8)
    if labels:
        _place_labels(fig, ax, labels, line, markers)
    return fig


def _place_labels(fig, ax, labels, curve_line, markers):
    """Moves each marker label (left to right) to the first spot inside the axes
    that is clear of the curve, the markers, the legend and the labels placed
    before it, else clear of all but the curve, else merely inside. Below-right and
    above-left of a point of a rising curve are free of it, so those come
    first, further away step by step."""
    for label in labels:
        label.set_in_layout(False)   # the layout is settled first, without them
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    curve = curve_line.get_transform().transform(curve_line.get_xydata())
    taken = [marker.get_window_extent(renderer) for marker in markers]
    taken.append(ax.get_legend().get_window_extent(renderer))

    def quality(extent):
        """0: outside the axes, 1: inside, 2: and clear of markers, legend and
        labels, 3: and clear of the curve."""
        if not (box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0
                and extent.y1 <= box.y1):
            return 0
        padded = extent.padded(3)
        if any(padded.overlaps(other) for other in taken):
            return 1
        # the curve rises: over the label's x-range it spans y(x0) .. y(x1)
        within = (curve[:, 0] >= extent.x0) & (curve[:, 0] <= extent.x1)
        ends = np.interp([extent.x0, extent.x1], curve[:, 0], curve[:, 1])
        low = min(ends[0], curve[within, 1].min(initial=np.inf))
        high = max(ends[1], curve[within, 1].max(initial=-np.inf))
        return 3 if high < extent.y0 or low > extent.y1 else 2

    for label in sorted(labels, key=lambda t: t.xy[0]):
        step = label.get_fontsize() * 1.4
        spots = [spot for k in range(24) for spot in
                 ((6, -4 - k * step, "left", "top"), (-6, 4 + k * step, "right", "bottom"),
                  (-6, -4 - k * step, "right", "top"), (6, 4 + k * step, "left", "bottom"))]
        best, best_quality = spots[0], -1
        for spot in spots:
            _move(label, spot)
            found = quality(_text_extent(label, renderer))
            if found > best_quality:
                best, best_quality = spot, found
                if found == 3:
                    break
        _move(label, best)
        taken.append(_text_extent(label, renderer))


def _text_extent(label, renderer):
    """The box of an annotation's text, without its leader line."""
    from matplotlib.text import Text
    label.update_positions(renderer)
    return Text.get_window_extent(label, renderer)


def _move(label, spot):
    dx, dy, ha, va = spot
    label.set_position((dx, dy))
    label.set_ha(ha)
    label.set_va(va)


def draw(curves, path, title=None):
    import matplotlib.pyplot as plt
    fig = figure(curves, title)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def make_parser():
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="PNG to write")
    parser.add_argument("curves", nargs="+", help="curve files (ext-roc --curve FILE.npz)")
    parser.add_argument("--label", action="append",
                        help="legend label of each curve, in order (default: the label the "
                             "file records, else its name)")
    parser.add_argument("--title", help="the plot's title (default: none)")
    add_version(parser)
    return parser


@quiet_on_closed_pipe
def main(argv=None):
    args = make_parser().parse_args(argv)
    try:
        require("matplotlib", "drawing curves")
        if args.label is not None and len(args.label) != len(args.curves):
            raise InputError("%d --label for %d curve files: give one per file, or none"
                             % (len(args.label), len(args.curves)))
        check_writable(args.out)
        labels = args.label or [None] * len(args.curves)
        curves = [read_curve(path, label) for path, label in zip(args.curves, labels)]
        draw(curves, args.out, args.title)
    except InputError as error:
        fail(PROG, str(error))
    print("saved", args.out)


if __name__ == "__main__":
    main()
