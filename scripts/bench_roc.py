"""bench_roc.py: ROC evaluators side by side on one GPU, in one run.

    make bench                       # builds, then this, writing BENCHMARKS.md
    python scripts/bench_roc.py [--quick] [--markdown BENCHMARKS.md]

Peers: the blog's 2018 kernel as published (dev/cuda/roc_blog.cu), torch
matmul + torch.histc, an exact ROC from torch.sort + cumsum, torchmetrics'
binary_roc (1024 thresholds, and exact), scikit-learn's roc_curve on the CPU
(on a subset, scaled, and labelled so). This project: gpu_roc on a given
score matrix, evaluate() binned and exact on a score matrix and from features,
roc_curve() on a score matrix.

Every time is the median of 20 runs (3 for the slow peers) timed with CUDA
events after warm-ups, with L2 flushed before each run and the GPU kept busy
until the call is enqueued (benchlib.cuda_event_timer: device time; a call
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
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from _ext import roc  # noqa: E402
from benchlib import copy_gbps, cuda_event_timer, write_section  # noqa: E402

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
    args = parser.parse_args(argv)
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
    tables = [workload_matrix(timer, 10_000, 21_000, 512, targets, args.quick)]
    if args.quick:
        tables.append(workload_features(timer, 5_000, 20_000, 512, targets))
        tables.append(workload_same_set(timer, 6_000, 512, 10))
    else:
        tables.append(workload_features(timer, 50_000, 200_000, 512, targets))
        tables.append(workload_same_set(timer, 30_000, 512, 10))

    checks = [
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
    lines = ["| target | measured | met |", "|---|---|---|"]
    for name, value, bound, sense in checks:
        met = value >= bound if sense == ">=" else value <= bound
        lines.append("| %s | %.2f | %s |" % (name, value, "yes" if met else "**no**"))
    summary = "\n".join(lines)
    print(summary)

    if args.markdown:
        command = "python scripts/bench_roc.py" + (" --quick" if args.quick else "") + \
            " --markdown " + os.path.basename(args.markdown)
        body = ["## ROC evaluation (`scripts/bench_roc.py`)", "",
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
        write_section(args.markdown, "bench_roc.py", "\n".join(body))
        print("wrote", args.markdown)


if __name__ == "__main__":
    main()
