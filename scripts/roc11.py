"""roc11.py: the 2018 ROC evaluation script (ZhengPengkun, 2018-12-22), working
on PyTorch 2.

    python scripts/roc11.py query.npz gallery.npz [--out roc.png]
    python scripts/roc11.py                        # embedded demo data set

Each .npz holds `feature` (N, D) and `label` (N,). As in the blog: the score
matrix is feature_q @ feature_g.T on the GPU, roc.gpu_roc bins every pair into
1024 bins (histo1) and the genuine pairs into histo2, and the ROC is drawn on
a log-x axis into a timestamped PNG. Without a GPU it computes on the CPU
(roc.cpu_roc), and says so.
"""

import argparse
import datetime
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NUM_BINS = 1024


def fail(message):
    sys.exit("roc11.py: " + message)


def demo_data(seed=2018, n_ids=1000, per_query=3, per_gallery=4, dim=128):
    """A face-verification-like data set, the same on every run: identity
    centres on the unit sphere, samples = centre + noise of a per-identity
    difficulty, L2-normalized. 3,000 queries x 4,000 gallery entries."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_ids, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    noise_scale = rng.uniform(0.6, 1.5, n_ids)

    def samples(per_id):
        labels = np.repeat(np.arange(n_ids), per_id)
        noise = rng.standard_normal((labels.size, dim)) / np.sqrt(dim)
        feature = centres[labels] + noise * noise_scale[labels, None]
        feature /= np.linalg.norm(feature, axis=1, keepdims=True)
        return {"feature": feature.astype(np.float32), "label": labels}

    return samples(per_query), samples(per_gallery)


def load(path):
    """feature (N, D) float32 and label (N,) from an .npz, or a one-line error."""
    try:
        data = np.load(path)
    except (OSError, ValueError) as error:
        fail("cannot read %s: %s" % (path, error))
    if not hasattr(data, "files"):
        fail("%s is not an .npz archive (it holds a single array)" % path)
    missing = [key for key in ("feature", "label") if key not in data.files]
    if missing:
        fail("%s has no %s array (it has: %s)" % (path, " or ".join(repr(k) for k in missing),
                                                  ", ".join(data.files) or "nothing"))
    return {"feature": data["feature"], "label": data["label"]}


def checked(name, data):
    """Converts what is safe to convert (float64 features, integer labels as
    int64, float labels to float32 when exact); refuses the rest."""
    feature, label = np.asarray(data["feature"]), np.asarray(data["label"])
    if feature.ndim != 2:
        fail("%s: feature must be (N, D), got shape %s" % (name, feature.shape))
    if not np.issubdtype(feature.dtype, np.number):
        fail("%s: feature must be numeric, got %s" % (name, feature.dtype))
    label = label.reshape(-1) if label.ndim == 2 and 1 in label.shape else label
    if label.ndim != 1 or label.shape[0] != feature.shape[0]:
        fail("%s: label must be (N,) with N = %d features, got shape %s"
             % (name, feature.shape[0], label.shape))
    if np.issubdtype(label.dtype, np.integer) or label.dtype == np.bool_:
        label = label.astype(np.int64)
    elif np.issubdtype(label.dtype, np.floating):
        label = as_float32_labels(name, label)
    else:
        fail("%s: label must be numeric, got %s" % (name, label.dtype))
    return np.ascontiguousarray(feature, dtype=np.float32), np.ascontiguousarray(label)


def as_float32_labels(name, label):
    as_float32 = label.astype(np.float32)
    if np.isnan(as_float32).any() or not np.array_equal(as_float32, label):
        fail("%s: labels are NaN or not exactly representable in float32" % name)
    return as_float32


def run(query, gallery, out_path, start):
    import torch
    from _ext import roc

    feature_q, label_q = checked("query", query)
    feature_g, label_g = checked("gallery", gallery)
    if feature_q.shape[1] != feature_g.shape[1]:
        fail("query features are %d-D but gallery features are %d-D"
             % (feature_q.shape[1], feature_g.shape[1]))
    if label_q.dtype != label_g.dtype:  # integer labels on one side, float on the other
        label_q, label_g = as_float32_labels("query", label_q), as_float32_labels("gallery",
                                                                                    label_g)
    q_size, g_size = feature_q.shape[0], feature_g.shape[0]

    device = "cuda" if torch.cuda.is_available() and roc.built_with_cuda else "cpu"
    if device == "cpu":
        print("no CUDA device (or a CPU-only build): computing on the CPU with cpu_roc")
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

    num_real_true = histo2.sum()
    num_real_false = histo1.sum() - num_real_true
    print("num_real_true, false", int(num_real_true), int(num_real_false))
    if n_nan:
        print("NaN scores skipped:", n_nan)
    print(time.time() - start)
    if num_real_true == 0 or num_real_false == 0:
        fail("no %s pairs: the ROC is undefined" % ("genuine" if num_real_true == 0 else
                                                      "impostor"))

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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("query", nargs="?", help="query .npz (feature, label)")
    parser.add_argument("gallery", nargs="?", help="gallery .npz (feature, label)")
    parser.add_argument("--out", help="PNG to write (default: a timestamp, as in 2018)")
    args = parser.parse_args(argv)
    start = time.time()
    if (args.query is None) != (args.gallery is None):
        fail("give both query.npz and gallery.npz, or neither for the demo data set")
    if args.query is None:
        print("no files given: using the embedded demo data set (3,000 x 4,000 pairs)")
        query, gallery = demo_data()
    else:
        query, gallery = load(args.query), load(args.gallery)
    out_path = args.out or datetime.datetime.now().strftime("%Y-%m-%d-%H-%M-%S") + ".png"
    run(query, gallery, out_path, start)


if __name__ == "__main__":
    main()
