"""The ROC evaluators this project is timed beside, each as its users write
it, and the checks that the exact ones count what evaluate() counts:

    blog_kernel           the blog's 2018 kernel as published (dev/cuda/roc_blog.cu), via ctypes
    histc_pair            torch.histc of every pair and of the genuine ones
    chunked_matmul_histc  the same from features, the matmul in chunks of rows
    same_set_histc        the same over one set's upper triangle
    sort_roc              an exact ROC by torch.sort + cumsum (scikit-learn's curve)
    torchmetrics_roc      torchmetrics' binary_roc, binned or exact
    sklearn_scaled        scikit-learn's roc_curve on the CPU, on a subset, time scaled
    insightface_pairs     InsightFace's IJB scoring: NumPy batches, then roc_curve
    chunked_gemm          torch.matmul alone in chunks of rows, the floor from features
    searchsorted_exact    the exact count done directly with torch (check_peer_exact checks it)

All but blog_kernel take tensors on any device; none imports _ext.
"""

import ctypes
import os
import time

import numpy as np
import torch

from benchmarks.roc_inputs import unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOG_LIBRARY = os.path.join(ROOT, "build", "libroc_blog.so")
PEER_EXACT = "torch matmul + searchsorted + bincount, chunked"


def chunked(n_query, step, fn):
    for row in range(0, n_query, step):
        fn(row, min(row + step, n_query))


# ---------------------------------------------------------------------------
# binned: histograms of the scores

def blog_kernel():
    """The blog's kernel through ctypes, or None if its library is not built."""
    if not os.path.exists(BLOG_LIBRARY):
        return None
    library = ctypes.CDLL(BLOG_LIBRARY)
    library.roc_blog_launch.restype = ctypes.c_int
    library.roc_blog_launch.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int] + \
        [ctypes.c_void_p] * 5

    def run(score, histo1, histo2, labels_q, labels_g):
        err = library.roc_blog_launch(score.data_ptr(), score.shape[0], score.shape[1],
                                      histo1.data_ptr(), histo2.data_ptr(), labels_q.data_ptr(),
                                      labels_g.data_ptr(), torch.cuda.current_stream().cuda_stream)
        assert err == 0, "blog kernel launch failed: %d" % err
    return run


def histc_pair(score, labels_q, labels_g, bins=1024):
    """torch.histc of every pair, and of the genuine ones (others pushed out of range)."""
    genuine = labels_q[:, None] == labels_g[None, :]
    all_pairs = torch.histc(score, bins, -1.0, 1.0)
    genuine_pairs = torch.histc(torch.where(genuine, score, 3.0), bins, -1.0, 1.0)
    return all_pairs, genuine_pairs


def chunked_matmul_histc(feat_q, feat_g, labels_q, labels_g, step=2048):
    """run(): histc_pair of the unit rows' cosines, step query rows at a time,
    each chunk's scores into one reused buffer."""
    out = torch.empty(step, feat_g.shape[0], device=feat_q.device)
    unit_g_t = unit(feat_g).T.contiguous()
    unit_q = unit(feat_q)

    def run():
        chunked(feat_q.shape[0], step, lambda a, b: histc_pair(
            torch.matmul(unit_q[a:b], unit_g_t, out=out[:b - a]), labels_q[a:b], labels_g))
    return run


def same_set_histc(feats, labels, bins=1024):
    """run(): histc_pair over one set against itself, each unordered pair
    once (the upper triangle, no self-pairs), from the full score matrix."""
    n = feats.shape[0]
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device=feats.device), 1)

    def run():
        s = unit(feats) @ unit(feats).T
        genuine = labels[:, None] == labels[None, :]
        all_pairs = torch.histc(torch.where(upper, s, 3.0), bins, -1, 1)
        genuine_pairs = torch.histc(torch.where(upper & genuine, s, 3.0), bins, -1, 1)
        return all_pairs, genuine_pairs
    return run


# ---------------------------------------------------------------------------
# exact: the curve through every distinct score

def sort_roc(score, genuine):
    """Exact ROC by torch.sort + cumsum: scikit-learn's curve (drop_intermediate)."""
    s = score.reshape(-1)
    y = genuine.reshape(-1)
    s_sorted, order = torch.sort(s, descending=True, stable=True)
    y_sorted = y[order]
    last = torch.nonzero(torch.diff(s_sorted)).squeeze(1)
    last = torch.cat([last, torch.tensor([s.numel() - 1], device=s.device)])
    tps = torch.cumsum(y_sorted, 0, dtype=torch.int64)[last]
    fps = last + 1 - tps
    thresholds = s_sorted[last]
    if fps.numel() > 2:
        keep = torch.ones(fps.numel(), dtype=torch.bool, device=s.device)
        keep[1:-1] = (torch.diff(fps, 2) != 0) | (torch.diff(tps, 2) != 0)
        fps, tps, thresholds = fps[keep], tps[keep], thresholds[keep]
    zero = torch.zeros(1, dtype=torch.int64, device=s.device)
    fps, tps = torch.cat([zero, fps]), torch.cat([zero, tps])
    thresholds = torch.cat([torch.tensor([float("inf")], device=s.device),
                            thresholds.double()])
    return fps.double() / fps[-1], tps.double() / tps[-1], thresholds


def reduce_runs(fpr, tpr, thresholds):
    """A curve less the inner points of horizontal runs (evaluate()'s exact curve)."""
    n = len(fpr)
    keep = np.ones(n, dtype=bool)
    if n > 3:
        keep[2:-1] = ~((tpr[1:-2] == tpr[2:-1]) & (tpr[2:-1] == tpr[3:]))
    return fpr[keep], tpr[keep], thresholds[keep]


def torchmetrics_roc(thresholds):
    """binary_roc(score, target) with `thresholds` (None: exact), or None
    where torchmetrics is not installed."""
    try:
        from torchmetrics.functional.classification import binary_roc
    except ImportError:
        return None
    return lambda score, target: binary_roc(score.reshape(-1), target.reshape(-1),
                                            thresholds=thresholds)


def sklearn_scaled(score, genuine, fraction=100):
    """ms of scikit-learn's roc_curve on the first 1/fraction of the rows,
    times fraction (the whole matrix would take minutes on the CPU)."""
    from sklearn.metrics import roc_curve
    rows = max(1, score.shape[0] // fraction)
    s = score[:rows].cpu().numpy().ravel()
    y = genuine[:rows].cpu().numpy().ravel()
    start = time.perf_counter()
    roc_curve(y, s)
    return (time.perf_counter() - start) * 1e3 * score.shape[0] / rows


def sklearn_gpu_curve():
    """scikit-learn's roc_curve on CUDA torch tensors (its array API: dispatch on,
    SCIPY_ARRAY_API=1 set before scipy is imported, as bench_roc.py does),
    drop_intermediate=False (True raises a TypeError there), as fn(score,
    genuine); None where this scikit-learn or its array API support is
    missing."""
    try:
        import sklearn
        from sklearn.metrics import roc_curve
        import array_api_compat  # noqa: F401  (scikit-learn's array API needs it)
    except ImportError:
        return None

    def run(score, genuine):
        with sklearn.config_context(array_api_dispatch=True):
            return roc_curve(genuine.reshape(-1), score.reshape(-1), drop_intermediate=False)
    try:
        run(torch.tensor([0.1, 0.9], device="cuda"), torch.tensor([False, True], device="cuda"))
    except Exception:  # noqa: BLE001 (no array API path in this scikit-learn)
        return None
    return run


def insightface_pairs(feat, index_a, index_b, genuine, batch=100_000):
    """InsightFace's IJB script on NumPy arrays: each batch of listed pairs
    scored as the sum of the templates' products, then scikit-learn's
    roc_curve of all of them."""
    from sklearn.metrics import roc_curve
    n = genuine.size
    scored = np.empty(n, np.float32)
    for begin in range(0, n, batch):
        end = min(begin + batch, n)
        scored[begin:end] = np.sum(feat[index_a[begin:end]] * feat[index_b[begin:end]], axis=1)
    return roc_curve(genuine, scored)


# ---------------------------------------------------------------------------
# from features at scale: the GEMM alone, and the exact count beside it

def chunked_gemm(feat_q, feat_g, step=512):
    """torch.matmul of the rows in chunks into one reused buffer (TF32 off)."""
    out = torch.empty(step, feat_g.shape[0], device=feat_q.device)
    gallery_t = feat_g.T.contiguous()

    def run():
        chunked(feat_q.shape[0], step,
                lambda a, b: torch.matmul(feat_q[a:b], gallery_t, out=out[:b - a]))
    return run


def searchsorted_exact(feat_q, feat_g, labels_q, labels_g, step=64):
    """The exact count done directly with torch, evaluate(mode="exact")'s peer
    from features: the genuine levels (distinct genuine cosines, from the
    genuine pairs' dot products), then for each chunk of rows torch.matmul of
    the unit rows, torch.searchsorted into the levels, torch.bincount (int64)
    of each impostor's gap or level, and scatter_reduce's lowest score of each
    (the curve's thresholds): evaluate's raw exact counts. Returns run() and
    the last run's levels and counts (impostor_at, impostor_between, between_min)."""
    unit_q, unit_g_t = unit(feat_q), unit(feat_g).T.contiguous()
    out = torch.empty(step, feat_g.shape[0], device=feat_q.device)
    result = {}

    def genuine_levels():
        order = torch.argsort(labels_g)
        sorted_g = labels_g[order]
        first = torch.searchsorted(sorted_g, labels_q)
        many = torch.searchsorted(sorted_g, labels_q, right=True) - first
        rows = torch.repeat_interleave(torch.arange(labels_q.numel(), device=feat_q.device), many)
        start = torch.repeat_interleave(first - torch.cumsum(many, 0) + many, many)
        cols = order[start + torch.arange(rows.numel(), device=feat_q.device)]
        return torch.unique((unit_q[rows] * unit_g_t.T[cols]).sum(1))

    def run():
        levels = genuine_levels()
        n = levels.numel()
        counts = torch.zeros(2 * n + 2, dtype=torch.int64, device=feat_q.device)
        lowest = torch.full((2 * n + 2,), float("inf"), device=feat_q.device)
        for a in range(0, feat_q.shape[0], step):
            b = min(a + step, feat_q.shape[0])
            s = torch.matmul(unit_q[a:b], unit_g_t, out=out[:b - a])
            gap = torch.searchsorted(levels, s)  # levels below the score
            on = levels[gap.clamp(max=n - 1)] == s
            slot = (2 * gap + on).masked_fill_(labels_q[a:b, None] == labels_g[None, :],
                                               2 * n + 1).reshape(-1)
            counts += torch.bincount(slot, minlength=2 * n + 2)
            lowest.scatter_reduce_(0, slot, s.reshape(-1), "amin")
        result.update(levels=levels, impostor_at=counts[1:2 * n:2],
                      impostor_between=counts[0:2 * n + 1:2], between_min=lowest[0:2 * n + 1:2])
    return run, result


def check_peer_exact(result, report):
    """The peer counts what evaluate does: every impostor, and the same share
    at or above the median genuine score (the scores themselves differ in
    their last bits: cuBLAS's order of sums against one FMA chain a pair)."""
    at, between = result["impostor_at"].cpu().numpy(), result["impostor_between"].cpu().numpy()
    assert at.sum() + between.sum() == report.n_impostor, "peer: impostor count"
    levels = result["levels"].cpu().numpy()
    median = np.median(report.counts["genuine_scores"])
    j = np.searchsorted(levels, median)  # peer levels below the median
    peer_far = (at[j:].sum() + between[j + 1:].sum()) / report.n_impostor
    k = np.searchsorted(report.counts["genuine_scores"], median)
    far = (report.counts["impostor_at"][k:].sum() +
           report.counts["impostor_between"][k + 1:].sum()) / report.n_impostor
    assert abs(peer_far - far) <= 1e-4, "peer: FAR at the median genuine score %g, not %g" % (
        peer_far, far)
