"""The ROC plots (ext-roc --plot, ext-plot-roc): every point and marker inside
the axes, every label inside the figure, marker labels clear of each other;
curve files drawn on their own; unusable curve files refused in one line."""

import os

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from _ext import roc  # noqa: E402
from _ext.tools import plot_roc  # noqa: E402
from _ext.tools import roc as roc_tool  # noqa: E402
from cli_common import call, in_tmp, one_line, write_sets  # noqa: E402,F401  (in_tmp)


def inside(inner, outer, slack=0.5):
    return (inner.x0 >= outer.x0 - slack and inner.x1 <= outer.x1 + slack
            and inner.y0 >= outer.y0 - slack and inner.y1 <= outer.y1 + slack)


def check_nothing_clipped(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    box = ax.get_window_extent(renderer)
    page = fig.bbox
    (x_lo, x_hi), (y_lo, y_hi) = ax.get_xlim(), ax.get_ylim()
    data_lines = [line for line in ax.lines if len(line.get_xdata()) and
                  not line.get_linestyle() == ":"]
    assert data_lines
    for line in data_lines:
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        assert x_lo < x.min() and x.max() < x_hi and y_lo < y.min() and y.max() < y_hi
        assert inside(line.get_window_extent(renderer), box)    # whole markers too
    labels = [text for text in ax.texts]
    extents = [Text.get_window_extent(text, renderer) for text in labels]   # less leader lines
    for extent in extents:
        assert inside(extent, box)
    for i, a in enumerate(extents):
        assert not any(a.overlaps(b) for b in extents[i + 1:])
    ticks = [label for label, at in zip(ax.get_xticklabels(), ax.get_xticks())
             if x_lo <= at <= x_hi]
    ticks += [label for label, at in zip(ax.get_yticklabels(), ax.get_yticks())
              if y_lo <= at <= y_hi]
    assert ticks
    for artist in [ax.get_legend(), ax.title, ax.xaxis.label, ax.yaxis.label, *ticks]:
        if artist.get_visible() and (not hasattr(artist, "get_text") or artist.get_text()):
            assert inside(artist.get_window_extent(renderer), page), artist
    return labels


@pytest.mark.parametrize("kind", ["good", "chance", "few pairs"])
def test_one_report_nothing_clipped(rng, kind):
    n = {"good": 4000, "chance": 4000, "few pairs": 30}[kind]
    genuine = rng.random(n) < 0.3
    score = rng.normal(size=n) + (2.5 * genuine if kind != "chance" else 0)
    fars = (0, 1e-6, 1e-4, 1e-3, 1e-2, 0.03, 0.1, 0.5, 1)
    report = roc.evaluate_pairs(genuine, score.astype(np.float32), fars=fars)
    assert any(row.below_resolution for row in report.tar_at_far)
    fig = plot_roc.figure([plot_roc.curve_of_report(report, "mine")], "a title")
    labels = check_nothing_clipped(fig)
    assert len(labels) == len(fars)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["mine, AUC %.5f" % report.auc, "TAR @ FAR target",
                      "target below 1 / impostor pairs"]
    plt.close(fig)


def test_overlay_nothing_clipped(rng):
    curves = []
    for shift in (0.5, 1.5, 3.0):
        genuine = rng.random(3000) < 0.2
        score = (rng.normal(size=3000) + shift * genuine).astype(np.float32)
        curves.append(plot_roc.curve_of_report(roc.evaluate_pairs(genuine, score), "s%g" % shift))
    fig = plot_roc.figure(curves)
    assert check_nothing_clipped(fig) == []   # overlays: markers, no marker labels
    plt.close(fig)


def test_plot_roc_overlays_curve_files(in_tmp, rng, capsys):
    write_sets(in_tmp, rng)
    status, out, err = call(roc_tool.main, ["query.npz", "gallery.npz", "--curve", "a.npz",
                                            "--label", "model A", "--plot", "a.png"], capsys)
    assert status == 0, err
    genuine = rng.random(500) < 0.5
    roc.evaluate_pairs(genuine, rng.normal(size=500).astype(np.float32)).save_curve("b.npz")
    a, b = plot_roc.read_curve("a.npz"), plot_roc.read_curve("b.npz")
    assert a["label"] == "model A" and a["auc"] is not None and len(a["targets"]) == 6
    assert b["label"] == "b" and b["auc"] is None and b["targets"] == []
    assert plot_roc.read_curve("b.npz", "B")["label"] == "B"
    status, out, err = call(plot_roc.main, ["both.png", "a.npz", "b.npz", "--title", "t"],
                            capsys)
    assert status == 0, err
    assert out == "saved both.png\n"
    for name in ("a.png", "both.png"):
        assert os.path.getsize(name) > 10000


def test_plot_roc_refuses_what_it_cannot_draw(in_tmp, capsys):
    np.savez("features.npz", feature=np.ones((3, 2)), label=[1, 2, 3])
    np.savez("wide.npz", fpr=[0.0, 0.5, 1.5], tpr=[0.0, 0.5, 1.0])
    np.savez("short.npz", fpr=[0.0, 1.0], tpr=[0.0, 0.5, 1.0])
    np.savez("fine.npz", fpr=[0.0, 0.5, 1.0], tpr=[0.0, 0.5, 1.0])
    for argv, message in [
            (["o.png", "features.npz"], "features.npz has no 'fpr' or 'tpr' array (it has: "
                                        "feature, label)"),
            (["o.png", "wide.npz"], "wide.npz: fpr must lie in [0, 1]"),
            (["o.png", "short.npz"], "short.npz: fpr has 2 points but tpr 3"),
            (["o.png", "fine.npz", "missing.npz"], "cannot read missing.npz: No such file or "
                                                   "directory"),
            (["o.png", "fine.npz", "fine.npz", "--label", "x"],
             "1 --label for 2 curve files: give one per file, or none")]:
        status, out, err = call(plot_roc.main, argv, capsys)
        assert status == 1
        assert one_line(err, "ext-plot-roc") == "ext-plot-roc: " + message
        assert not os.path.exists("o.png")
