"""roc11.py: the 2018 ROC evaluation script (ZhengPengkun, 2018-12-22), working
on PyTorch 2, or on NumPy alone.

    ext-roc11 query.npz gallery.npz [--out roc.png]   (or: python scripts/roc11.py ...)
    ext-roc11                                         embedded demo data set

Each .npz holds `feature` (N, D) and `label` (N,). As in the blog: the score
matrix is feature_q @ feature_g.T on the GPU, roc.gpu_roc bins every pair into
1024 bins (histo1) and the genuine pairs into histo2, and the ROC is drawn on
a log-x axis into a timestamped PNG. Without a GPU it computes on the CPU
(roc.cpu_roc; without torch, with NumPy), and says so. It prints the blog's
`num_real_true, false` line and the elapsed time, saying what that covers.

The plot needs matplotlib: where it is not installed the script says so and
computes without plotting (--out, which asks for a plot, then fails before
the work); --no-plot skips it.
"""

import argparse
import datetime
import sys
import time

import numpy as np

from .cli import add_version, optional, quiet_on_closed_pipe, require
from .embeddings import InputError, check_writable, demo_data, fail, load, query_gallery

PROG = "ext-roc11"

NUM_BINS = 1024


def run(paths, out_path):
    """paths: (query.npz, gallery.npz), or None for the demo data set; out_path:
    the PNG, or None for no plot."""
    from _ext import roc
    torch = optional("torch")

    device = "cuda" if torch is not None and torch.cuda.is_available() and roc.built_with_cuda \
        else "cpu"
    if device == "cpu":
        print("no CUDA device (or a CPU-only build%s): computing on the CPU with cpu_roc"
              % (", or no torch" if torch is None else ""))
    else:
        torch.empty(1, device=device)  # the CUDA context, before the clock
    start = time.perf_counter()
    if paths is None:
        (query, gallery), names = demo_data(), ("query", "gallery")
    else:
        (query, gallery), names = (load(paths[0]), load(paths[1])), paths
    feature_q, label_q, feature_g, label_g = query_gallery(query, gallery, names)
    q_size, g_size = feature_q.shape[0], feature_g.shape[0]
    if torch is None:   # NumPy arrays: cpu_roc takes them as they are
        score = feature_q @ feature_g.T
        histo1 = np.zeros((NUM_BINS,), np.float32)
        histo2 = np.zeros((NUM_BINS,), np.float32)
        n_nan = roc.cpu_roc(score, histo1, histo2, label_q, label_g)
        histo1, histo2 = histo1.astype(np.float64), histo2.astype(np.float64)
    else:
        feature_q = torch.from_numpy(feature_q).to(device)
        feature_g = torch.from_numpy(feature_g).to(device)
        score = torch.matmul(feature_q, torch.t(feature_g))
        labels_q = torch.from_numpy(label_q).contiguous().to(device)
        labels_g = torch.from_numpy(label_g).contiguous().to(device)
        histo1 = torch.zeros((NUM_BINS,), device=device)
        histo2 = torch.zeros((NUM_BINS,), device=device)
        n_nan = (roc.gpu_roc if device == "cuda" else roc.cpu_roc)(score, histo1, histo2,
                                                                    labels_q, labels_g)
        histo1 = histo1.cpu().numpy().astype(np.float64)
        histo2 = histo2.cpu().numpy().astype(np.float64)
    elapsed = time.perf_counter() - start

    num_real_true = histo2.sum()
    num_real_false = histo1.sum() - num_real_true
    print("num_real_true, false", int(num_real_true), int(num_real_false))
    if n_nan:
        print("NaN scores skipped:", n_nan)
    print("elapsed %.3f s: %s, the %d x %d score matrix and its %s histogram on %s, with the "
          "copies; start-up and imports excluded" % (
              elapsed, "making the demo data" if paths is None else "loading the files",
              q_size, g_size, "gpu_roc" if device == "cuda" else "cpu_roc", device))
    if num_real_true == 0 or num_real_false == 0:
        raise InputError("no %s pairs: the ROC is undefined"
                         % ("genuine" if num_real_true == 0 else "impostor"))
    if out_path is None:
        return
    histo1 = np.cumsum(histo1[::-1])
    histo2 = np.cumsum(histo2[::-1])
    tpr = histo2 / num_real_true
    fpr = (histo1 - histo2) / num_real_false
    plot(fpr, tpr, out_path, "%d x %d pairs" % (q_size, g_size))
    print("saved", out_path)


def plot(fpr, tpr, out_path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.plot(fpr, tpr, "b")
    plt.xlim([1e-8, 1.01])
    plt.ylim([-0.01, 1.01])
    plt.xscale("log")
    plt.xlabel("fpr")
    plt.ylabel("tpr")
    plt.title(title)
    plt.grid(True)
    plt.savefig(out_path)
    plt.close()


def make_parser():
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("query", nargs="?", help="query .npz (feature, label)")
    parser.add_argument("gallery", nargs="?", help="gallery .npz (feature, label)")
    plot = parser.add_mutually_exclusive_group()
    plot.add_argument("--out", help="PNG to write (needs matplotlib; default: a timestamped "
                                    "PNG, as in 2018, where matplotlib is installed)")
    plot.add_argument("--no-plot", action="store_true", help="compute and print, draw nothing")
    add_version(parser)
    return parser


def plot_path(args):
    """The PNG to draw, or None; InputError (before any work) where --out asks
    for one that cannot be drawn or written."""
    if args.no_plot:
        return None
    if args.out is not None:
        require("matplotlib", "--out")
        out_path = args.out
    elif optional("matplotlib") is None:
        print("%s: note: matplotlib is not installed: no plot (pip install matplotlib to "
              "draw one)" % PROG, file=sys.stderr)
        return None
    else:
        out_path = datetime.datetime.now().strftime("%Y-%m-%d-%H-%M-%S") + ".png"
    check_writable(out_path)
    return out_path


@quiet_on_closed_pipe
def main(argv=None):
    args = make_parser().parse_args(argv)
    if (args.query is None) != (args.gallery is None):
        fail(PROG, "give both query.npz and gallery.npz, or neither for the demo data set")
    try:
        out_path = plot_path(args)
        if args.query is None:
            print("no files given: using the embedded demo data set (3,000 x 4,000 pairs)")
        run(None if args.query is None else (args.query, args.gallery), out_path)
    except (InputError, ValueError, TypeError, RuntimeError, MemoryError) as error:
        fail(PROG, str(error).splitlines()[0] if str(error) else type(error).__name__)


if __name__ == "__main__":
    main()
