"""Where one evaluate() from features goes on the GPU: wall time against the
fp32 GEMM alone, then torch.profiler's table of kernels and runtime calls
(the module's own kernels and its allocations and synchronizations too).

    python3 dev/profile_eval.py [Q G D]      # default: the blog's 10,000 x 21,000 x 512
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import roc  # noqa: E402


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


def main():
    n_query, n_gallery, dim = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else \
        (10_000, 21_000, 512)
    torch.backends.cuda.matmul.allow_tf32 = False
    labels_q = torch.arange(n_query, device="cuda")
    labels_g = torch.arange(n_gallery, device="cuda")
    feat_q = torch.randn(n_query, dim, device="cuda")
    feat_g = torch.randn(n_gallery, dim, device="cuda")
    feat_g[:n_query] = feat_q + 0.3 * torch.randn(n_query, dim, device="cuda")
    gallery_t = feat_g.T.contiguous()
    gemm = wall(lambda: feat_q @ gallery_t)
    print("%d x %d x %d: fp32 GEMM alone %.3f ms" % (n_query, n_gallery, dim, gemm))
    for mode in ("exact", "binned"):
        run = lambda: roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g,  # noqa
                                   mode=mode)
        ms = wall(run)
        print("%s: %.3f ms (%.2fx the GEMM)" % (mode, ms, ms / gemm))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
