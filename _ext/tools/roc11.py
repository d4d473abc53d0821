"""roc11.py: the 2018 ROC evaluation script (ZhengPengkun, 2018-12-22), working
on PyTorch 2.

    ext-roc11 query.npz gallery.npz [--out roc.png]   (or: python scripts/roc11.py ...)
    ext-roc11                                         embedded demo data set

Each .npz holds `feature` (N, D) and `label` (N,). As in the blog: the score
matrix is feature_q @ feature_g.T on the GPU, roc.gpu_roc bins every pair into
1024 bins (histo1) and the genuine pairs into histo2, and the ROC is drawn on
a log-x axis into a timestamped PNG. Without a GPU it computes on the CPU
(roc.cpu_roc), and says so. It prints the blog's `num_real_true, false` line
and the elapsed time, saying what that covers.
"""

import argparse
import datetime
import time

import numpy as np

from .embeddings import InputError, check_writable, demo_data, fail, load, query_gallery

PROG = "ext-roc11"

NUM_BINS = 1024


def run(paths, out_path):
    """paths: (query.npz, gallery.npz), or None for the demo data set."""
    import torch
    from _ext import roc

    device = "cuda" if torch.cuda.is_available() and roc.built_with_cuda else "cpu"
    if device == "cpu":
        print("no CUDA device (or a CPU-only build): computing on the CPU with cpu_roc")
    else:
        torch.empty(1, device=device)  # the CUDA context, before the clock
    start = time.perf_counter()
    if paths is None:
        (query, gallery), names = demo_data(), ("query", "gallery")
    else:
        (query, gallery), names = (load(paths[0]), load(paths[1])), paths
    feature_q, label_q, feature_g, label_g = query_gallery(query, gallery, names)
    q_size, g_size = feature_q.shape[0], feature_g.shape[0]
    feature_q = torch.from_numpy(feature_q).to(device)
    feature_g = torch.from_numpy(feature_g).to(device)
    score = torch.matmul(feature_q, torch.t(feature_g))
    labels_q = torch.from_numpy(label_q).contiguous().to(device)
    labels_g = torch.from_numpy(label_g).contiguous().to(device)
    histo1 = torch.zeros((NUM_BINS,), device=device)
    histo2 = torch.zeros((NUM_BINS,), device=device)
    roc_fn = roc.gpu_roc if device == "cuda" else roc.cpu_roc
    n_nan = roc_fn(score, histo1, histo2, labels_q, labels_g)
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
              q_size, g_size, roc_fn.__name__, device))
    if num_real_true == 0 or num_real_false == 0:
        raise InputError("no %s pairs: the ROC is undefined"
                         % ("genuine" if num_real_true == 0 else "impostor"))

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


def main(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("query", nargs="?", help="query .npz (feature, label)")
    parser.add_argument("gallery", nargs="?", help="gallery .npz (feature, label)")
    parser.add_argument("--out", help="PNG to write (default: a timestamp, as in 2018)")
    args = parser.parse_args(argv)
    if (args.query is None) != (args.gallery is None):
        fail(PROG, "give both query.npz and gallery.npz, or neither for the demo data set")
    out_path = args.out or datetime.datetime.now().strftime("%Y-%m-%d-%H-%M-%S") + ".png"
    try:
        check_writable(out_path)
        if args.query is None:
            print("no files given: using the embedded demo data set (3,000 x 4,000 pairs)")
        run(None if args.query is None else (args.query, args.gallery), out_path)
    except (InputError, ValueError, TypeError, RuntimeError, MemoryError) as error:
        fail(PROG, str(error).splitlines()[0] if str(error) else type(error).__name__)


if __name__ == "__main__":
    main()
