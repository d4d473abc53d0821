"""One call of each feature pass mode (store, binned, exact) and of torch's
fp32 GEMM at 10,000 x 21,000 x 512, for Nsight Compute to compare kernel by
kernel (build with NVCC_FLAGS="... -lineinfo" for the source view):

    ncu --clock-control none --set full --import-source yes \\
        -k regex:'feature_pass|gemm' -o fp python3 dev/ncu_feature_pass.py

With --scale: exact mode on bench_roc.py's 2.6e11 workload cut to 10,000 x
84,000, easy then hard (30,000 genuine levels among the impostors, more than
the shared gap counters hold).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import roc  # noqa: E402
from benchmarks.roc_inputs import scale_embeddings  # noqa: E402


def scale():
    for hard in (False, True):
        labels_q, feat_q, labels_g, feat_g = scale_embeddings(10_000, 21_000, 512, hard, seed=4)
        roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g)
    torch.cuda.synchronize()


def main():
    if sys.argv[1:] == ["--scale"]:
        return scale()
    torch.backends.cuda.matmul.allow_tf32 = False
    n_query, n_gallery, dim = 10_000, 21_000, 512
    torch.manual_seed(0)
    labels_q = torch.arange(n_query, device="cuda")
    labels_g = torch.arange(n_gallery, device="cuda")
    feat_q = torch.randn(n_query, dim, device="cuda")
    feat_g = torch.randn(n_gallery, dim, device="cuda")
    feat_g[:n_query] = feat_q + 0.3 * torch.randn(n_query, dim, device="cuda")
    feat_q = torch.nn.functional.normalize(feat_q, dim=1)
    feat_g = torch.nn.functional.normalize(feat_g, dim=1)
    roc.pair_scores(feat_q, feat_g)
    for mode in ("binned", "exact"):
        roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=mode)
    feat_q @ feat_g.T
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
