"""The ROC benchmark's workloads: each makes its inputs (roc_inputs), checks
this project's exact results against a peer where one is exact, times the
peers (roc_peers) and this project's calls with the timer it is given, and
returns its table (roc_table) for scripts/bench_roc.py to write. `targets`
collects the times that the driver's targets compare, by name.

    workload_matrix       the blog's size: a given score matrix and features
    workload_features     1e10 pairs from features (no score matrix fits)
    workload_same_set     one set against itself
    workload_scale        the 2.6e11-pair and IFRT sizes, easy and hard
    workload_pairs        an IJB-C-sized pair list, and 4e9 flat pairs
    workload_curve        flat pairs from 1e7 to 4e8: the curve and the exact
                          summary beside a sort, and scikit-learn on the GPU
    workload_distributed  one GPU against all of them, under torchrun
"""

import time

import numpy as np
import torch

from _ext import roc
from benchmarks.roc_inputs import embeddings, flat_pairs, ijb_like, scale_embeddings, unit
from benchmarks.roc_peers import (PEER_EXACT, blog_kernel, check_peer_exact, chunked_gemm,
                                  chunked_matmul_histc, histc_pair, insightface_pairs,
                                  reduce_runs, same_set_histc, searchsorted_exact,
                                  sklearn_gpu_curve, sklearn_scaled, sort_roc, torchmetrics_roc)
from benchmarks.roc_table import Table
from benchmarks.timing import group_wall, nccl_group


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
    ours = [x.cpu().numpy() for x in roc.roc_curve(labels_q, labels_g, score=score)]
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
    targets["matrix curve"] = table.add("roc_curve (sklearn's points), score matrix", timer(
        lambda: roc.roc_curve(labels_q, labels_g, score=score), repeat=3), "bytes")

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
    gemm_alone = chunked_gemm(feat_q, feat_g, step)
    table.add("fp32 GEMM alone (chunked torch.matmul)", timer(gemm_alone, repeat=3), "flop",
              "TF32 off")
    del gemm_alone
    table.add("torch matmul + histc pair, chunked", timer(
        chunked_matmul_histc(feat_q, feat_g, labels_q, labels_g, step), repeat=3), "flop")
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
    table.add("torch matmul + triu + histc pair", timer(same_set_histc(feats, labels)), "flop")
    table.add("evaluate exact, same set, from features", timer(lambda: roc.evaluate(
        labels, None, feat_q=feats, same_set=True)), "flop")
    table.add("evaluate binned, same set, from features", timer(lambda: roc.evaluate(
        labels, None, feat_q=feats, same_set=True, mode="binned")), "flop")
    table.add("evaluate exact, same set, score matrix", timer(lambda: roc.evaluate(
        labels, None, score=score, same_set=True)), "-")
    return table


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
    insightface_pairs(host_feat, host_a, host_b, host_genuine)
    table.add("InsightFace's way (NumPy batches + sklearn, CPU)",
              (time.perf_counter() - start) * 1e3, "-", "scores the pairs, then roc_curve")
    report = roc.evaluate_pairs(genuine, score)
    reference = roc_curve(host_genuine, host_score)
    assert np.array_equal(roc.roc_curve_pairs(genuine, score)[0].cpu().numpy(), reference[0])
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
    flags, values = flat_pairs(n_big)
    result = {}

    def run():
        result["r"] = roc.evaluate_pairs(flags, values)
    targets["flat big"] = big.add("evaluate_pairs exact, %.0e pairs" % n_big, timer(run, repeat=1),
                                  "bytes", "%d genuine levels; device memory peak %.0f MiB" % (
                                      len(result["r"].counts["genuine_scores"]),
                                      result["r"].device_bytes_peak / 2**20))
    tables.append(big)
    return tables


def workload_curve(timer, targets, quick):
    """Flat pairs (a classifier's scores) at sizes up to 4e8: scikit-learn's
    curve by this project (its points, and every point) beside a torch.sort +
    cumsum curve and scikit-learn's own GPU path, checked equal first; the
    exact summary at 0.1% and 1% positive beside the sort."""
    sk_gpu = sklearn_gpu_curve()
    tables = []
    for n in ((1_000_000, 10_000_000) if quick else (10_000_000, 100_000_000, 400_000_000)):
        for positive in (0.001, 0.01):
            genuine, score = flat_pairs(n, positive=positive)
            name = "%.0e pairs, %g%% positive" % (n, 100 * positive)
            table = Table("Flat pairs: %s" % name, "Reads %.1f GB (a float32 score and a bool "
                          "flag a pair)." % (n * 5 / 1e9),
                          ["torch.sort + cumsum", "scikit-learn roc_curve on the GPU"])
            table.bytes = n * 5
            want = [x.cpu().numpy() for x in sort_roc(score, genuine)]
            got = [x.cpu().numpy() for x in roc.roc_curve_pairs(genuine, score)]
            assert all(np.array_equal(a, b) for a, b in zip(got, want)), \
                "roc_curve_pairs differs from the torch.sort curve at " + name
            sort_ms = table.add("torch.sort + cumsum", timer(
                lambda: sort_roc(score, genuine), repeat=3), "bytes", "sklearn's points")
            if positive == 0.001:
                sk_ms = None
                if sk_gpu is not None:
                    sk_ms = table.add("scikit-learn roc_curve on the GPU", timer(
                        lambda: sk_gpu(score, genuine), repeat=3), "bytes",
                        "array API, drop_intermediate=False")
                curve_ms = table.add("roc_curve_pairs (sklearn's points)", timer(
                    lambda: roc.roc_curve_pairs(genuine, score), repeat=3), "bytes")
                table.add("roc_curve_pairs, drop_intermediate=False", timer(
                    lambda: roc.roc_curve_pairs(genuine, score, drop_intermediate=False),
                    repeat=3), "bytes")
                targets["curve %.0e" % n] = (curve_ms, sort_ms, sk_ms)
            exact_ms = table.add("evaluate_pairs exact", timer(
                lambda: roc.evaluate_pairs(genuine, score)), "bytes")
            targets["exact %.0e %g" % (n, positive)] = (exact_ms, sort_ms)
            if positive == 0.001:
                # float64 scores float32 cannot hold (each 1e-12 off a float32 value)
                wide = score.double() + 1e-12 * torch.rand(n, device=score.device,
                                                           dtype=torch.float64)
                targets["float64 exact %.0e" % n] = (table.add(
                    "evaluate_pairs exact, float64 scores", timer(
                        lambda: roc.evaluate_pairs(genuine, wide)), "-"), exact_ms)
                targets["float64 curve %.0e" % n] = (table.add(
                    "roc_curve_pairs, float64 scores", timer(
                        lambda: roc.roc_curve_pairs(genuine, wide), repeat=3), "-"), curve_ms)
                del wide
            tables.append(table)
            del genuine, score
            torch.cuda.empty_cache()
    return tables


def workload_distributed(ifrt):
    """Under torchrun, one process a GPU: the 2.6e11-pair workload (the IFRT
    size instead with ifrt: minutes a row), easy and hard, exact, on one GPU
    (rank 0 alone) and on all of them (group=True), checked equal count for
    count. Wall times with the GPUs synchronized (the evaluation waits for its
    counts). Returns (rank, world size, rows); rank 0's rows are (size, form,
    one-GPU s, all-GPU s, report.communication, identical), the others' empty."""
    import torch.distributed as dist
    rank, world = nccl_group()
    sizes = [("IFRT", 1_000_000, 650_000)] if ifrt else [("2.6e11", 100_000, 650_000)]
    rows = []

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
            many_s, many = group_wall(lambda: roc.evaluate(
                labels_q[a:b], labels_g, feat_q=feat_q[a:b], feat_g=feat_g, group=True))
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
    dist.destroy_process_group()
    return rank, world, rows
