"""bench_roc.py: ROC evaluators side by side on one GPU, in one run.

    make bench                       # builds, then this, writing BENCHMARKS.md
    python scripts/bench_roc.py [--quick] [--markdown BENCHMARKS.md]

Peers: the blog's 2018 kernel as published (dev/cuda/roc_blog.cu), torch
matmul + torch.histc, an exact ROC from torch.sort + cumsum, torchmetrics'
binary_roc (1024 thresholds, and exact), scikit-learn's roc_curve on the CPU
(on a subset, scaled, and labelled so) and on the GPU (its array API), the
exact count done directly with torch at scale (chunked matmul + searchsorted
+ bincount). This project: gpu_roc on a given score matrix, evaluate() binned
and exact on a score matrix and from features, roc_curve() on a score matrix,
evaluate_pairs() and roc_curve_pairs() on lists of pairs.

Every time is the median of 20 runs (3 for the slow peers) timed with CUDA
events after warm-ups, with L2 flushed before each run and the GPU kept busy
until the call is enqueued (benchmarks.timing.cuda_event_timer: device
time; a call that waits for its result, as gpu_roc does for its NaN count,
pays the wait). Each row reports milliseconds, the ratio of each peer's time
to its own (above 1: faster than the peer), and the fraction reached of the
measured copy bandwidth (score-matrix inputs: the matrix read once) or of
the measured fp32 GEMM rate (feature inputs: 2 Q G D FLOP). Exact results
are checked against the torch.sort-based curve first.

The inputs, peers and workloads are modules of the benchmarks package
(roc_inputs, roc_peers, roc_workloads); this script measures the ceilings,
runs the workloads the options ask for, checks the targets and writes the
section of --markdown.
"""

import argparse
import datetime
import os
import sys

# scikit-learn's array API (its GPU roc_curve, a peer) needs SciPy's, which
# is read when SciPy is first imported
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _ext import roc  # noqa: E402
from benchmarks.roc_workloads import (workload_curve, workload_distributed,  # noqa: E402
                                      workload_features, workload_matrix, workload_pairs,
                                      workload_same_set, workload_scale)
from benchmarks.sections import targets_table, write_section  # noqa: E402
from benchmarks.timing import copy_gbps, cuda_event_timer, fp32_gemm_rate  # noqa: E402


def ceilings(timer):
    """Measured copy bandwidth (bytes read + written per second) and fp32 GEMM
    rate (FLOP per second, TF32 off)."""
    return copy_gbps(timer) * 1e9, fp32_gemm_rate(timer)


def distributed(args):
    """Under torchrun: workload_distributed, then rank 0 writes its section
    (its own with --ifrt, without the targets)."""
    rank, world, rows = workload_distributed(args.ifrt)
    if rank != 0 or not args.markdown:
        return
    lines = ["## ROC evaluation on %d GPUs (`scripts/bench_roc.py --distributed%s`)" % (
                 world, " --ifrt" if args.ifrt else ""), "",
             "Device: %d x %s, %s, NCCL (NVLink multicast off). Command: `torchrun "
             "--nproc-per-node=%d scripts/bench_roc.py --distributed%s --markdown %s`. "
             "Exact mode from features (D = 512, 4 gallery images per identity); the one-GPU "
             "time is rank 0 alone on the same inputs, the result compared count for count; "
             "wall times with the GPUs synchronized; communication = the collectives of the "
             "levels and counts (report.communication)." % (
                 world, torch.cuda.get_device_name(), datetime.date.today().isoformat(), world,
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
    write_section(args.markdown, name, "\n".join(lines + ([] if args.ifrt else targets)) + "\n")
    print("wrote", args.markdown)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--markdown", help="write the tables to this file (BENCHMARKS.md)")
    parser.add_argument("--ifrt", action="store_true",
                        help="the IFRT size instead of 2.6e11 (1,000,000 x 2,600,000 pairs, "
                             "hard, exact: minutes)")
    parser.add_argument("--only", choices=("matrix", "pairs", "curve", "scale"),
                        help="one group of workloads (its own section of --markdown): the "
                             "blog's size, 1e10 and same set; lists of pairs; flat pairs' "
                             "curves beside a sort; the 2.6e11 and IFRT sizes")
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
    if args.only in (None, "curve"):
        tables += workload_curve(timer, targets, args.quick)
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
        ("roc_curve on the blog's score matrix <= 40 ms", targets["matrix curve"], 40.0, "<="),
    ]
    for key, (curve_ms, sort_ms, sk_ms) in sorted(
            (k, v) for k, v in targets.items() if k.startswith("curve ")):
        n = key.split()[1]
        checks.append(("roc_curve_pairs <= 1.2x torch.sort + cumsum (%s pairs)" % n,
                       curve_ms / sort_ms, 1.2, "<="))
        if sk_ms is not None:
            checks.append(("roc_curve_pairs faster than scikit-learn on the GPU (%s pairs)" % n,
                           curve_ms / sk_ms, 1.0, "<"))
    for key, (exact_ms, sort_ms) in sorted(
            (k, v) for k, v in targets.items() if k.startswith("exact ")):
        _, n, positive = key.split()
        if float(n) >= 1e8:
            checks.append(("evaluate_pairs exact <= 0.6x torch.sort + cumsum (%s pairs, %s%% "
                           "positive)" % (n, float(positive) * 100), exact_ms / sort_ms, 0.6,
                           "<="))
    for name, _, _ in scale if not args.ifrt else ():
        for form in ("easy", "hard"):
            for mode in ("exact", "binned"):
                checks.append(("%s %s from features, %s <= 1.15x the GEMM alone" % (
                    mode, name, form), targets["%s %s %s" % (name, form, mode)] /
                    targets[name + " gemm"], 1.15, "<="))
    if args.ifrt and scale:
        checks.append(("IFRT size, hard, exact <= 70 s", targets["IFRT hard exact"] / 1e3,
                       70.0, "<="))
    for key, (wide_ms, narrow_ms) in sorted(
            (k, v) for k, v in targets.items() if k.startswith("float64 ")):
        _, what, n = key.split()
        checks.append(("float64 scores within 1.5x of float32, %s (%s pairs)" % (
            "evaluate_pairs exact" if what == "exact" else "roc_curve_pairs", n),
            wide_ms / narrow_ms, 1.5, "<="))
    if "flat big" in targets and not args.quick:
        checks.append(("4e9 flat pairs, exact <= 0.6 s", targets["flat big"] / 1e3, 0.6, "<="))
    if "ijb flat" in targets:
        checks += [("IJB-C size, flat scores, exact <= 1 ms", targets["ijb flat"], 1.0, "<="),
                   ("IJB-C size, from template features, exact <= 20 ms",
                    targets["ijb features"], 20.0, "<=")]
    summary = targets_table(checks)
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
