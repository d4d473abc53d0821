"""Where one evaluate() from features goes on the GPU: wall time against the
fp32 GEMM alone, then torch.profiler's table of kernels and runtime calls
(the module's own kernels and its allocations and synchronizations too).

    python3 dev/profile_eval.py [Q G D]      # default: the blog's 10,000 x 21,000 x 512
    python3 dev/profile_eval.py --scale easy|hard [Q IDS]
                                             # bench_roc.py's workload (4 images an
                                             # identity), default 10,000 x 650,000 ids
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import roc  # noqa: E402
from benchmarks.roc_inputs import scale_embeddings  # noqa: E402
from benchmarks.roc_peers import chunked_gemm  # noqa: E402


def wall(fn, repeat=10):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def blog_size(args):
    n_query, n_gallery, dim = (int(a) for a in args) if len(args) > 2 else (10_000, 21_000, 512)
    labels_q = torch.arange(n_query, device="cuda")
    labels_g = torch.arange(n_gallery, device="cuda")
    feat_q = torch.randn(n_query, dim, device="cuda")
    feat_g = torch.randn(n_gallery, dim, device="cuda")
    feat_g[:n_query] = feat_q + 0.3 * torch.randn(n_query, dim, device="cuda")
    return labels_q, feat_q, labels_g, feat_g


def scale_workload(form, args):
    n_query, n_ids = (int(a) for a in args) if len(args) > 1 else (10_000, 650_000)
    return scale_embeddings(n_query, n_ids, 512, form == "hard", seed=4)


def main():
    args = sys.argv[1:]
    torch.backends.cuda.matmul.allow_tf32 = False
    labels_q, feat_q, labels_g, feat_g = (scale_workload(args[1], args[2:])
                                          if args[:1] == ["--scale"] else blog_size(args))
    (n_query, dim), n_gallery = feat_q.shape, feat_g.shape[0]
    gemm = wall(chunked_gemm(feat_q, feat_g), repeat=3)
    print("%d x %d x %d: fp32 GEMM alone %.3f ms" % (n_query, n_gallery, dim, gemm))
    for mode in ("exact", "binned"):
        run = lambda: roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g,  # noqa
                                   mode=mode)
        ms = wall(run, repeat=3)
        print("%s: %.3f ms (%.2fx the GEMM)" % (mode, ms, ms / gemm))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
