"""bench_roc.py: ROC evaluators side by side on one GPU, in one run.

    make bench                       # builds, then this, writing BENCHMARKS.md
    python scripts/bench_roc.py [--quick] [--markdown BENCHMARKS.md]

Peers: the blog's 2018 kernel as published (dev/cuda/roc_blog.cu), torch
matmul + torch.histc, an exact ROC from torch.sort + cumsum, torchmetrics'
binary_roc (1024 thresholds, and exact), scikit-learn's roc_curve on the CPU
(on a subset, scaled, and labelled so), the exact count done directly with
torch at scale (chunked matmul + searchsorted + bincount). This project:
gpu_roc on a given score matrix, evaluate() binned and exact on a score matrix
and from features, roc_curve() on a score matrix.

Every time is the median of 20 runs (3 for the slow peers) timed with CUDA
events after warm-ups, with L2 flushed before each run and the GPU kept busy
until the call is enqueued (benchmarks.timing.cuda_event_timer: device time; a call
that waits for its result, as gpu_roc does for its NaN count, pays the
wait). Each row reports milliseconds, the ratio of each peer's time to its
own (above 1: faster than the peer), and the fraction reached of the
measured copy bandwidth (score-matrix inputs: the matrix read once) or of the measured fp32 GEMM rate (feature inputs: 2 Q G D
FLOP). Exact results are checked against the torch.sort-based curve first.
"""

import argparse
import ctypes
import datetime
import os
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _ext import roc  # noqa: E402
from benchmarks.sections import write_section  # noqa: E402
from benchmarks.timing import copy_gbps, cuda_event_timer  # noqa: E402

BLOG_LIBRARY = os.path.join(ROOT, "build", "libroc_blog.so")


# ---------------------------------------------------------------------------
# ceilings

def ceilings(timer):
    """Measured copy bandwidth (bytes read + written per second) and fp32 GEMM
    rate (FLOP per second, TF32 off)."""
    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")
    gemm_ms = timer(lambda: torch.matmul(a, b))
    return copy_gbps(timer) * 1e9, 2 * 8192 ** 3 / (gemm_ms / 1e3)


# ---------------------------------------------------------------------------
# data

def embeddings(n_query, n_gallery, dim, seed, same_set=False, per_id=1):
    """Face-like embeddings: query i is identity i // per_id; the first
    n_query / per_id gallery entries are one sample of each query identity,
    the rest identities of their own (one genuine match per query for
    per_id = 1, as in the blog)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    n_ids = n_query // per_id
    centres = torch.nn.functional.normalize(
        torch.randn(n_ids, dim, device="cuda", generator=generator), dim=1)
    labels_q = torch.arange(n_query, device="cuda") // per_id
    feat_q = centres[labels_q] + 0.07 * torch.randn(n_query, dim, device="cuda",
                                                    generator=generator)
    if same_set:
        return labels_q, feat_q, None, None
    labels_g = torch.arange(n_gallery, device="cuda") + n_ids
    labels_g[:n_ids] = torch.arange(n_ids, device="cuda")
    feat_g = torch.randn(n_gallery, dim, device="cuda", generator=generator) / dim ** 0.5
    feat_g[:n_ids] = centres + 0.07 * torch.randn(n_ids, dim, device="cuda", generator=generator)
    return labels_q, feat_q, labels_g, feat_g


def unit(x):
    return torch.nn.functional.normalize(x, dim=1)


# ---------------------------------------------------------------------------
# peers

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
    try:
        from torchmetrics.functional.classification import binary_roc
    except ImportError:
        return None
    return lambda score, target: binary_roc(score.reshape(-1), target.reshape(-1),
                                            thresholds=thresholds)


# ---------------------------------------------------------------------------
# the table

class Table:
    def __init__(self, title, work, peers):
        self.title, self.work, self.peers, self.rows = title, work, peers, []

    def add(self, name, ms, kind, note=""):
        self.rows.append((name, ms, kind, note))
        print("  %-46s %10.3f ms  %s" % (name, ms, note), flush=True)
        return ms

    def ms(self, name):
        return next(row[1] for row in self.rows if row[0] == name)

    def markdown(self, copy_bw, gemm_rate):
        peers = [p for p in self.peers if any(row[0] == p for row in self.rows)]
        head = "| method | ms | " + " | ".join("x vs %s" % p for p in peers) + " | of ceiling | note |"
        lines = ["### " + self.title, "", self.work, "", head,
                 "|" + "---|" * (4 + len(peers))]
        for name, ms, kind, note in self.rows:
            ratios = " | ".join("%.2f" % (self.ms(p) / ms) for p in peers)
            if kind == "bytes":
                ceiling = "%.0f%% of copy BW" % (100 * self.bytes / (ms / 1e3) / copy_bw)
            elif kind == "flop":
                ceiling = "%.0f%% of fp32 GEMM" % (100 * self.flop / (ms / 1e3) / gemm_rate)
            else:
                ceiling = "-"
            lines.append("| %s | %.3f | %s | %s | %s |" % (name, ms, ratios, ceiling, note))
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# workloads

def workload_matrix(timer, n_query, n_gallery, dim, targets, quick):
    """A given score matrix and features, one genuine match per query (the blog's size)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    labels_q, feat_q, labels_g, feat_g = embeddings(n_query, n_gallery, dim, seed=1)
    score = unit(feat_q) @ unit(feat_g).T
    genuine = labels_q[:, None] == labels_g[None, :]
    flabels_q, flabels_g = labels_q.float(), labels_g.float()
    pairs = n_query * n_gallery
    table = Table("%d x %d pairs, D = %d, one genuine match per query" % (n_query, n_gallery, dim),
                  "Score-matrix rows read %.0f MB (Q G 4 bytes); feature rows compute %.1f GFLOP "
                  "(2 Q G D)." % (pairs * 4 / 1e6, 2 * pairs * dim / 1e9),
                  ["blog kernel", "torch.histc pair", "torch.sort exact ROC",
                   "torch matmul + histc pair", "fp32 GEMM alone (torch.matmul)"])
    table.bytes, table.flop = pairs * 4, 2 * pairs * dim

    # correctness first: roc_curve and evaluate against the torch.sort curve
    fpr, tpr, thr = (x.cpu().numpy() for x in sort_roc(score, genuine))
    ours = roc.roc_curve(labels_q, labels_g, score=score)
    same_curve = all(np.array_equal(a, b) for a, b in zip(ours, (fpr, tpr, thr)))
    report = roc.evaluate(labels_q, labels_g, score=score)
    reduced = reduce_runs(fpr, tpr, thr)
    same_exact = all(np.array_equal(a, b) for a, b in zip(
        (report.fpr, report.tpr, report.thresholds), reduced))
    print("  checks: roc_curve == torch.sort curve: %s; evaluate exact == its corners: %s"
          % (same_curve, same_exact))
    assert same_curve and same_exact, "exact results differ from the torch.sort ROC"

    histo1 = torch.zeros(1024, device="cuda")
    histo2 = torch.zeros(1024, device="cuda")
    blog = blog_kernel()
    if blog is not None:
        table.add("blog kernel", timer(lambda: blog(score, histo1, histo2, flabels_q, flabels_g)),
                  "bytes", "2018, float counters")
    table.add("torch.histc pair", timer(lambda: histc_pair(score, labels_q, labels_g)), "bytes")
    table.add("torch.sort exact ROC", timer(lambda: sort_roc(score, genuine)), "bytes",
              "sklearn's curve")
    for thresholds, name in ((1024, "torchmetrics binary_roc, 1024 thresholds"),
                             (None, "torchmetrics binary_roc, exact")):
        fn = torchmetrics_roc(thresholds)
        if fn is not None and not quick:
            table.add(name, timer(lambda: fn(score, genuine), repeat=3), "bytes",
                      "sigmoids scores outside [0, 1]")
    table.add("scikit-learn roc_curve (CPU)", sklearn_scaled(score, genuine), "-",
              "1/100 of the rows, time x 100")

    int_histo1 = torch.zeros(1024, dtype=torch.int64, device="cuda")
    int_histo2 = torch.zeros(1024, dtype=torch.int64, device="cuda")
    targets["gpu_roc"] = table.add(
        "gpu_roc (this project)", timer(lambda: roc.gpu_roc(score, histo1, histo2, flabels_q,
                                                             flabels_g)), "bytes")
    table.add("gpu_roc, int64 histograms", timer(lambda: roc.gpu_roc(
        score, int_histo1, int_histo2, labels_q, labels_g)), "bytes")
    table.add("evaluate binned, score matrix", timer(lambda: roc.evaluate(
        labels_q, labels_g, score=score, mode="binned")), "bytes")
    targets["exact"] = table.add("evaluate exact, score matrix", timer(lambda: roc.evaluate(
        labels_q, labels_g, score=score)), "bytes")
    table.add("roc_curve (sklearn's points), score matrix", timer(lambda: roc.roc_curve(
        labels_q, labels_g, score=score), repeat=3), "bytes")

    table.add("fp32 GEMM alone (torch.matmul)", timer(lambda: torch.matmul(feat_q, feat_g.T)),
              "flop", "TF32 off")
    table.add("torch matmul + histc pair", timer(lambda: histc_pair(
        unit(feat_q) @ unit(feat_g).T, labels_q, labels_g)), "flop")
    targets["features binned"] = table.add("evaluate binned, from features", timer(
        lambda: roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode="binned")),
        "flop")
    targets["features exact"] = table.add("evaluate exact, from features", timer(
        lambda: roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g)), "flop")
    targets["gemm"] = table.ms("fp32 GEMM alone (torch.matmul)")
    targets["blog"] = table.ms("blog kernel") if blog is not None else None
    targets["histc"] = table.ms("torch.histc pair")
    targets["sort"] = table.ms("torch.sort exact ROC")
    return table


def sklearn_scaled(score, genuine, fraction=100):
    from sklearn.metrics import roc_curve
    rows = max(1, score.shape[0] // fraction)
    s = score[:rows].cpu().numpy().ravel()
    y = genuine[:rows].cpu().numpy().ravel()
    start = time.perf_counter()
    roc_curve(y, s)
    return (time.perf_counter() - start) * 1e3 * score.shape[0] / rows


def chunked(n_query, step, fn):
    for row in range(0, n_query, step):
        fn(row, min(row + step, n_query))


def workload_features(timer, n_query, n_gallery, dim, targets):
    """10^10 pairs from features: no score matrix fits; peers chunk their matmul."""
    torch.backends.cuda.matmul.allow_tf32 = False
    labels_q, feat_q, labels_g, feat_g = embeddings(n_query, n_gallery, dim, seed=2)
    pairs = n_query * n_gallery
    table = Table("%d x %d pairs (%.0e), D = %d, from features" % (n_query, n_gallery, pairs, dim),
                  "%.1f TFLOP (2 Q G D); a score matrix would take %.0f GB." % (
                      2 * pairs * dim / 1e12, pairs * 4 / 1e9),
                  ["fp32 GEMM alone (chunked torch.matmul)", "torch matmul + histc pair, chunked"])
    table.flop = 2 * pairs * dim
    step = 2048
    out = torch.empty(step, n_gallery, device="cuda")
    gallery_t = feat_g.T.contiguous()
    unit_g_t = unit(feat_g).T.contiguous()
    unit_q = unit(feat_q)

    def gemm_alone():
        chunked(n_query, step, lambda a, b: torch.matmul(feat_q[a:b], gallery_t, out=out[:b - a]))

    def matmul_histc():
        chunked(n_query, step, lambda a, b: histc_pair(
            torch.matmul(unit_q[a:b], unit_g_t, out=out[:b - a]), labels_q[a:b], labels_g))

    table.add("fp32 GEMM alone (chunked torch.matmul)", timer(gemm_alone, repeat=3), "flop",
              "TF32 off")
    table.add("torch matmul + histc pair, chunked", timer(matmul_histc, repeat=3), "flop")
    report = {}
    for mode in ("binned", "exact"):
        def run(mode=mode):
            report[mode] = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g,
                                        mode=mode)
        ms = timer(run, repeat=3)
        targets["1e10 " + mode] = table.add(
            "evaluate %s, from features" % mode, ms, "flop", "evaluator's device memory peak "
            "%.0f MiB" % (report[mode].device_bytes_peak / 2**20))
    assert report["exact"].n_impostor == report["binned"].n_impostor
    targets["1e10 gemm"] = table.ms("fp32 GEMM alone (chunked torch.matmul)")
    return table


def scale_embeddings(n_query, n_ids, dim, hard, seed, per_id=4, device="cuda"):
    """The 2.6e11-pair (and IFRT-size) workload: a Gaussian gallery of n_ids
    identities with per_id images each, queries near image 0 of identity
    i % n_ids. Easy: all of an identity's images near its centre (every
    genuine score high). Hard: images 1.. are random directions, so 3 of 4
    genuine scores lie inside the impostor mass (hard pairs, label noise).
    On `device` (the tests make it on the CPU)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    centres = unit(torch.randn(n_ids, dim, device=device, generator=generator))
    labels_g = torch.arange(n_ids, device=device).repeat_interleave(per_id)
    feat_g = torch.empty(n_ids * per_id, dim, device=device)
    step = 1 << 18
    for start in range(0, n_ids * per_id, step):
        rows = slice(start, min(start + step, n_ids * per_id))
        ids = labels_g[rows]
        noise = torch.randn(ids.numel(), dim, device=device, generator=generator) / dim ** 0.5
        first = (torch.arange(rows.start, rows.stop, device=device) % per_id) == 0
        near = centres[ids] + 0.5 * noise  # cosine about 0.8 with a query of its identity
        far = noise
        feat_g[rows] = torch.where(first[:, None] | (not hard), near, far)
    labels_q = torch.arange(n_query, device=device) % n_ids
    feat_q = centres[labels_q] + 0.5 / dim ** 0.5 * torch.randn(n_query, dim, device=device,
                                                                 generator=generator)
    return labels_q, feat_q, labels_g, feat_g


def chunked_gemm(feat_q, feat_g, step=512):
    """torch.matmul of the rows in chunks into one reused buffer (TF32 off)."""
    out = torch.empty(step, feat_g.shape[0], device="cuda")
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


PEER_EXACT = "torch matmul + searchsorted + bincount, chunked"


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


def workload_scale(timer, n_query, n_ids, dim, targets, name, forms=("easy", "hard"),
                   modes=("exact", "binned"), peer_exact=True):
    """All pairs of n_query queries against 4 n_ids gallery images, from features,
    easy and hard, beside the chunked GEMM alone and (peer_exact) the hard form's
    exact count done directly with torch (searchsorted_exact)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    pairs = n_query * n_ids * 4
    table = Table("%s: %d x %d pairs (%.2g), D = %d, 4 gallery images per identity" % (
        name, n_query, n_ids * 4, pairs, dim),
        "%.0f TFLOP (2 Q G D); %d genuine pairs, of which 3 in 4 inside the impostor mass in the "
        "hard form." % (2 * pairs * dim / 1e12, 4 * n_query),
        ["fp32 GEMM alone (chunked torch.matmul)"] +
        ([PEER_EXACT + ", hard"] if peer_exact else []))
    table.flop = 2 * pairs * dim
    for form in forms:
        hard = form == "hard"
        labels_q, feat_q, labels_g, feat_g = scale_embeddings(n_query, n_ids, dim, hard, seed=4)
        if form == forms[0]:
            table.add("fp32 GEMM alone (chunked torch.matmul)",
                      timer(chunked_gemm(feat_q, feat_g)), "flop", "TF32 off")
        report = {}
        for mode in modes:
            def run(mode=mode):
                report[mode] = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g,
                                            mode=mode)
            ms = timer(run)
            targets["%s %s %s" % (name, form, mode)] = table.add(
                "evaluate %s, %s" % (mode, form), ms, "flop",
                "evaluator's device memory peak %.0f MiB beyond the inputs; %d genuine pairs"
                % (report[mode].device_bytes_peak / 2**20, report[mode].n_genuine))
        if len(report) == 2:
            assert report["exact"].n_impostor == report["binned"].n_impostor
        if peer_exact and hard and "exact" in report:  # the form where the count costs
            run, result = searchsorted_exact(feat_q, feat_g, labels_q, labels_g)
            table.add(PEER_EXACT + ", hard", timer(run), "flop")
            check_peer_exact(result, report["exact"])
        del labels_q, feat_q, labels_g, feat_g
        torch.cuda.empty_cache()
    targets[name + " gemm"] = table.ms("fp32 GEMM alone (chunked torch.matmul)")
    return table


def ijb_like(n_templates=23_124, n_genuine=19_557, n_impostor=15_638_932, dim=512, seed=5):
    """IJB-C-sized pair list from synthetic template features: identities of a
    few templates each (centre + noise of a per-identity difficulty), the
    genuine pairs drawn within identities, the impostor pairs across them."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    n_ids = n_templates // 6
    identity = torch.randint(0, n_ids, (n_templates,), device="cuda", generator=generator)
    centres = unit(torch.randn(n_ids, dim, device="cuda", generator=generator))
    spread = 0.03 + 0.08 * torch.rand(n_ids, device="cuda", generator=generator)
    feat = unit(centres[identity] + spread[identity, None] *
                torch.randn(n_templates, dim, device="cuda", generator=generator))
    order = torch.argsort(identity)
    a = torch.randint(0, n_templates, (4 * n_genuine,), device="cuda", generator=generator)
    # a genuine partner: a neighbour in identity order with the same identity
    position = torch.empty_like(order)
    position[order] = torch.arange(n_templates, device="cuda")
    b = order[(position[a] + 1) % n_templates]
    same = (identity[a] == identity[b]) & (a != b)
    a, b = a[same][:n_genuine], b[same][:n_genuine]
    ia = torch.randint(0, n_templates, (n_impostor,), device="cuda", generator=generator)
    ib = torch.randint(0, n_templates, (n_impostor,), device="cuda", generator=generator)
    keep = identity[ia] != identity[ib]
    index_a, index_b = torch.cat([a, ia[keep]]), torch.cat([b, ib[keep]])
    genuine = torch.zeros(index_a.numel(), dtype=torch.bool, device="cuda")
    genuine[:a.numel()] = True
    return feat, index_a, index_b, genuine


def workload_pairs(timer, targets, quick):
    """Lists of pairs: an IJB-C-sized protocol (as a flat score vector and from
    template features) beside the ways people score it today, and 4e9 flat pairs."""
    from sklearn.metrics import roc_curve
    feat, index_a, index_b, genuine = ijb_like()
    score = torch.empty(genuine.numel(), device="cuda")
    for begin in range(0, genuine.numel(), 1 << 20):
        end = min(begin + (1 << 20), genuine.numel())
        score[begin:end] = (feat[index_a[begin:end]] * feat[index_b[begin:end]]).sum(1)
    n = genuine.numel()
    table = Table("IJB-C-sized pair list: %d pairs, %d genuine, %d templates, D = %d" % (
        n, int(genuine.sum()), feat.shape[0], feat.shape[1]),
        "Flat rows read the scores and flags (%.0f MB); template rows score the listed pairs "
        "(2 D FLOP each, %.1f GFLOP)." % (n * 5 / 1e6, 2 * n * feat.shape[1] / 1e9),
        ["torchmetrics binary_roc, exact", "scikit-learn roc_curve (CPU)",
         "InsightFace's way (NumPy batches + sklearn, CPU)"])
    table.bytes = n * 5
    table.flop = 2 * n * feat.shape[1]
    fn = torchmetrics_roc(None)
    if fn is not None:
        table.add("torchmetrics binary_roc, exact", timer(lambda: fn(score, genuine), repeat=3),
                  "bytes", "sorts every score")
    host_score, host_genuine = score.cpu().numpy(), genuine.cpu().numpy()
    start = time.perf_counter()
    roc_curve(host_genuine, host_score)
    table.add("scikit-learn roc_curve (CPU)", (time.perf_counter() - start) * 1e3, "-",
              "on the flat scores")
    host_feat = feat.cpu().numpy()
    host_a, host_b = index_a.cpu().numpy(), index_b.cpu().numpy()
    start = time.perf_counter()
    scored = np.empty(n, np.float32)
    for begin in range(0, n, 100_000):  # InsightFace's IJB script: batches of 100,000 pairs
        end = min(begin + 100_000, n)
        scored[begin:end] = np.sum(host_feat[host_a[begin:end]] * host_feat[host_b[begin:end]],
                                   axis=1)
    roc_curve(host_genuine, scored)
    table.add("InsightFace's way (NumPy batches + sklearn, CPU)",
              (time.perf_counter() - start) * 1e3, "-", "scores the pairs, then roc_curve")
    report = roc.evaluate_pairs(genuine, score)
    reference = roc_curve(host_genuine, host_score)
    assert np.array_equal(roc.roc_curve_pairs(genuine, score)[0], reference[0])
    targets["ijb flat"] = table.add("evaluate_pairs exact, flat scores", timer(
        lambda: roc.evaluate_pairs(genuine, score)), "bytes", "AUC %.6f" % report.auc)
    table.add("roc_curve_pairs (sklearn's points), flat scores", timer(
        lambda: roc.roc_curve_pairs(genuine, score), repeat=3), "bytes")
    targets["ijb features"] = table.add("evaluate_pairs exact, from template features", timer(
        lambda: roc.evaluate_pairs(genuine, feat_a=feat, feat_b=feat, index_a=index_a,
                                   index_b=index_b)), "flop", "scores the listed pairs")
    tables = [table]
    del score
    n_big = 400_000_000 if quick else 4_000_000_000
    big = Table("%.0e flat pairs (a classifier's scores), 1%% positive" % n_big,
                "Reads %.0f GB (a float32 score and a bool flag a pair)." % (n_big * 5 / 1e9), [])
    big.bytes = n_big * 5
    generator = torch.Generator(device="cuda").manual_seed(6)
    flags = torch.empty(n_big, dtype=torch.bool, device="cuda")
    values = torch.empty(n_big, dtype=torch.float32, device="cuda")
    for begin in range(0, n_big, 1 << 28):
        end = min(begin + (1 << 28), n_big)
        flags[begin:end] = torch.rand(end - begin, device="cuda", generator=generator) < 0.01
        values[begin:end] = torch.randn(end - begin, device="cuda", generator=generator)
        values[begin:end] += flags[begin:end]
    result = {}

    def run():
        result["r"] = roc.evaluate_pairs(flags, values)
    targets["flat big"] = big.add("evaluate_pairs exact, %.0e pairs" % n_big, timer(run, repeat=1),
                                  "bytes", "%d genuine levels; device memory peak %.0f MiB" % (
                                      len(result["r"].counts["genuine_scores"]),
                                      result["r"].device_bytes_peak / 2**20))
    tables.append(big)
    return tables


def distributed(args):
    """Under torchrun, one process a GPU: the 2.6e11-pair workload (the IFRT
    size instead with --ifrt, its own section: minutes a row), easy and hard,
    exact, on one GPU (rank 0 alone) and on all of them (group=True), checked
    equal count for count; rank 0 writes the section. Wall times with the GPUs
    synchronized (the evaluation waits for its counts)."""
    import torch.distributed as dist
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cuda.matmul.allow_tf32 = False
    sizes = [("IFRT", 1_000_000, 650_000)] if args.ifrt else [("2.6e11", 100_000, 650_000)]
    rows, device = [], torch.cuda.get_device_name()

    def timed(fn):
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        dist.barrier()
        return time.perf_counter() - start, result

    for name, n_query, n_ids in sizes:
        for hard in (False, True):
            labels_q, feat_q, labels_g, feat_g = scale_embeddings(n_query, n_ids, 512, hard,
                                                                  seed=4)
            one = None
            if rank == 0:
                start = time.perf_counter()
                one = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g)
                torch.cuda.synchronize()
                one_s = time.perf_counter() - start
            a, b = roc.shard_rows(n_query, True)
            many_s, many = timed(lambda: roc.evaluate(labels_q[a:b], labels_g, feat_q=feat_q[a:b],
                                                      feat_g=feat_g, group=True))
            if rank == 0:
                same = (np.array_equal(one.false_accepts, many.false_accepts) and
                        np.array_equal(one.true_accepts, many.true_accepts) and
                        one.auc == many.auc and one.n_impostor == many.n_impostor)
                comm = many.communication
                rows.append((name, "hard" if hard else "easy", one_s, many_s, comm, same))
                print("  %s %s: 1 GPU %.2f s, %d GPUs %.2f s (%.2fx), communication %.3f s "
                      "(%.2f%%), %.1f MB sent by rank 0, identical: %s" % (
                          name, rows[-1][1], one_s, world, many_s, one_s / many_s,
                          comm["seconds"], 100 * comm["seconds"] / many_s, comm["bytes"] / 1e6,
                          same), flush=True)
            del labels_q, feat_q, labels_g, feat_g, one, many
            torch.cuda.empty_cache()
    if rank == 0 and args.markdown:
        lines = ["## ROC evaluation on %d GPUs (`scripts/bench_roc.py --distributed%s`)" % (
                     world, " --ifrt" if args.ifrt else ""), "",
                 "Device: %d x %s, %s, NCCL (NVLink multicast off). Command: `torchrun "
                 "--nproc-per-node=%d scripts/bench_roc.py --distributed%s --markdown %s`. "
                 "Exact mode from features (D = 512, 4 gallery images per identity); the one-GPU "
                 "time is rank 0 alone on the same inputs, the result compared count for count; "
                 "wall times with the GPUs synchronized; communication = the collectives of the "
                 "levels and counts (report.communication)." % (
                     world, device, datetime.date.today().isoformat(), world,
                     " --ifrt" if args.ifrt else "", os.path.basename(args.markdown)), "",
                 "| workload | 1 GPU s | %d GPUs s | speed-up | communication s (share) | bytes "
                 "sent by rank 0 | identical to 1 GPU |" % world, "|---|---|---|---|---|---|---|"]
        for name, form, one_s, many_s, comm, same in rows:
            lines.append("| %s %s | %.2f | %.2f | %.2fx | %.3f (%.2f%%) | %.1f MB | %s |" % (
                name, form, one_s, many_s, one_s / many_s, comm["seconds"],
                100 * comm["seconds"] / many_s, comm["bytes"] / 1e6, "yes" if same else "**no**"))
        targets = ["", "| target | measured | met |", "|---|---|---|"]
        for name, form, one_s, many_s, comm, same in rows:
            if name == "2.6e11":
                targets.append("| %d GPUs >= %.2fx one GPU, %s | %.2f | %s |" % (
                    world, 0.925 * world, form, one_s / many_s,
                    "yes" if one_s / many_s >= 0.925 * world else "**no**"))
                targets.append("| communication <= 1%% of the time, %s | %.2f%% | %s |" % (
                    form, 100 * comm["seconds"] / many_s,
                    "yes" if comm["seconds"] <= 0.01 * many_s else "**no**"))
        name = "bench_roc.py --distributed" + (" --ifrt" if args.ifrt else "")
        write_section(args.markdown, name,
                      "\n".join(lines + ([] if args.ifrt else targets)) + "\n")
        print("wrote", args.markdown)
    dist.destroy_process_group()


def workload_same_set(timer, n, dim, per_id):
    """One set against itself: each unordered pair once, no self-pairs."""
    torch.backends.cuda.matmul.allow_tf32 = False
    labels, feats, _, _ = embeddings(n, 0, dim, seed=3, same_set=True, per_id=per_id)
    pairs = n * (n - 1) // 2
    table = Table("same set: %d samples, %d per identity, D = %d (%.2e pairs)" % (
        n, per_id, dim, pairs), "%.1f GFLOP over the upper triangle (2 D per pair); the full "
        "matrix is %.1f GB." % (2 * pairs * dim / 1e9, n * n * 4 / 1e9),
        ["torch matmul + triu + histc pair"])
    table.flop = 2 * pairs * dim
    score = unit(feats) @ unit(feats).T
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device="cuda"), 1)

    def peer():
        s = unit(feats) @ unit(feats).T
        genuine = labels[:, None] == labels[None, :]
        all_pairs = torch.histc(torch.where(upper, s, 3.0), 1024, -1, 1)
        genuine_pairs = torch.histc(torch.where(upper & genuine, s, 3.0), 1024, -1, 1)
        return all_pairs, genuine_pairs

    table.add("torch matmul + triu + histc pair", timer(peer), "flop")
    table.add("evaluate exact, same set, from features", timer(lambda: roc.evaluate(
        labels, None, feat_q=feats, same_set=True)), "flop")
    table.add("evaluate binned, same set, from features", timer(lambda: roc.evaluate(
        labels, None, feat_q=feats, same_set=True, mode="binned")), "flop")
    table.add("evaluate exact, same set, score matrix", timer(lambda: roc.evaluate(
        labels, None, score=score, same_set=True)), "-")
    return table


# ---------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--markdown", help="write the tables to this file (BENCHMARKS.md)")
    parser.add_argument("--ifrt", action="store_true",
                        help="the IFRT size instead of 2.6e11 (1,000,000 x 2,600,000 pairs, "
                             "hard, exact: minutes)")
    parser.add_argument("--only", choices=("matrix", "pairs", "scale"),
                        help="one group of workloads (its own section of --markdown): the "
                             "blog's size, 1e10 and same set; lists of pairs; the 2.6e11 and "
                             "IFRT sizes")
    parser.add_argument("--distributed", action="store_true",
                        help="under torchrun: one GPU against all of them (see distributed())")
    args = parser.parse_args(argv)
    if args.distributed:
        return distributed(args)
    if not torch.cuda.is_available() or not roc.built_with_cuda:
        sys.exit("bench_roc.py: needs a CUDA device and a CUDA build")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    timer = cuda_event_timer(warmup=1 if args.quick else 3, repeat=3 if args.quick else 20)
    copy_bw, gemm_rate = ceilings(timer)
    device = torch.cuda.get_device_name()
    print("%s: copy %.0f GB/s (read + write), fp32 GEMM %.1f TFLOP/s (TF32 off)"
          % (device, copy_bw / 1e9, gemm_rate / 1e12))

    targets = {}
    tables = []
    once = cuda_event_timer(warmup=0, repeat=1)
    if args.only in (None, "matrix"):
        tables.append(workload_matrix(timer, 10_000, 21_000, 512, targets, args.quick))
        if args.quick:
            tables.append(workload_features(timer, 5_000, 20_000, 512, targets))
            tables.append(workload_same_set(timer, 6_000, 512, 10))
        else:
            tables.append(workload_features(timer, 50_000, 200_000, 512, targets))
            tables.append(workload_same_set(timer, 30_000, 512, 10))
    torch.cuda.empty_cache()
    if args.only in (None, "pairs"):
        tables += workload_pairs(timer, targets, args.quick)
        torch.cuda.empty_cache()
    scale = [("2.6e11", 100_000, 650_000)] if not args.quick else [("2.6e10", 10_000, 650_000)]
    if args.ifrt:  # the target's case only: minutes a row
        scale = [("IFRT", 1_000_000, 650_000)]
    if args.only in (None, "scale"):
        for name, n_query, n_ids in scale:
            forms, modes = (("hard",), ("exact",)) if name == "IFRT" else (("easy", "hard"),
                                                                           ("exact", "binned"))
            # the peer takes minutes at the IFRT size, and more memory than the evaluator
            tables.append(workload_scale(once, n_query, n_ids, 512, targets, name, forms, modes,
                                         peer_exact=name != "IFRT"))
    else:
        scale = []

    checks = [] if args.only not in (None, "matrix") or args.ifrt else [
        ("gpu_roc >= 3x faster than the blog kernel",
         targets["blog"] / targets["gpu_roc"] if targets.get("blog") else float("nan"), 3.0, ">="),
        ("gpu_roc >= 4x faster than the torch.histc pair",
         targets["histc"] / targets["gpu_roc"], 4.0, ">="),
        ("gpu_roc >= 70% of copy bandwidth",
         10_000 * 21_000 * 4 / (targets["gpu_roc"] / 1e3) / copy_bw, 0.70, ">="),
        ("exact on a score matrix >= 10x faster than torch.sort",
         targets["sort"] / targets["exact"], 10.0, ">="),
        ("binned from features <= 1.15x the GEMM alone (blog size)",
         targets["features binned"] / targets["gemm"], 1.15, "<="),
        ("exact from features <= 1.15x the GEMM alone (blog size)",
         targets["features exact"] / targets["gemm"], 1.15, "<="),
        ("binned from features <= 1.15x the GEMM alone (large)",
         targets["1e10 binned"] / targets["1e10 gemm"], 1.15, "<="),
        ("exact from features <= 1.15x the GEMM alone (large)",
         targets["1e10 exact"] / targets["1e10 gemm"], 1.15, "<="),
    ]
    for name, _, _ in scale if not args.ifrt else ():
        for form in ("easy", "hard"):
            for mode in ("exact", "binned"):
                checks.append(("%s %s from features, %s <= 1.15x the GEMM alone" % (
                    mode, name, form), targets["%s %s %s" % (name, form, mode)] /
                    targets[name + " gemm"], 1.15, "<="))
    if args.ifrt and scale:
        checks.append(("IFRT size, hard, exact <= 70 s", targets["IFRT hard exact"] / 1e3,
                       70.0, "<="))
    if "ijb flat" in targets:
        checks += [("IJB-C size, flat scores, exact <= 1 ms", targets["ijb flat"], 1.0, "<="),
                   ("IJB-C size, from template features, exact <= 20 ms",
                    targets["ijb features"], 20.0, "<=")]
    lines = ["| target | measured | met |", "|---|---|---|"]
    for name, value, bound, sense in checks:
        met = value >= bound if sense == ">=" else value <= bound
        lines.append("| %s | %.2f | %s |" % (name, value, "yes" if met else "**no**"))
    summary = "\n".join(lines)
    print(summary)

    if args.markdown:
        options = (" --quick" if args.quick else "") + (" --only " + args.only if args.only
                                                         else "") + (" --ifrt" if args.ifrt else "")
        command = "python scripts/bench_roc.py" + options + " --markdown " + \
            os.path.basename(args.markdown)
        body = ["## ROC evaluation (`scripts/bench_roc.py%s`)" % options, "",
                "Device: %s, %s. Command: `%s` (also `make bench`)." % (
                    device, datetime.date.today().isoformat(), command),
                "Measured ceilings: copy %.0f GB/s (bytes read + written), fp32 GEMM %.1f "
                "TFLOP/s (torch.matmul 8192^3, TF32 off)." % (copy_bw / 1e9, gemm_rate / 1e12),
                "Ratios are a peer's time over the row's time (above 1: the row is faster). "
                "Times: median of CUDA-event timings after warm-ups (20 runs; 3 for the slow "
                "peers), L2 flushed before each and the GPU kept busy until the call is "
                "enqueued, so that they are device times; gpu_roc's include its wait for the "
                "NaN count.",
                ""]
        for table in tables:
            body += [table.markdown(copy_bw, gemm_rate), ""]
        body += ["### Targets", "", summary, ""]
        write_section(args.markdown, "bench_roc.py" + options, "\n".join(body))
        print("wrote", args.markdown)


if __name__ == "__main__":
    main()
