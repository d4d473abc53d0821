"""Where roc_curve() and roc_curve_pairs() spend their time on the GPU, beside
the torch.sort + cumsum curve (bench_roc.py's peer): wall times, the distinct
scores and the points kept, then the Python functions by their own time
(cProfile: the C calls show as the cffi functions that make them) and
torch.profiler's kernels.

    python3 dev/profile_curve.py                 # the blog's score matrix (2.1e8 pairs)
    python3 dev/profile_curve.py --flat N [P]    # N flat pairs, P positive (default 0.001)
"""

import cProfile
import os
import pstats
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import roc  # noqa: E402
from benchmarks.roc_inputs import embeddings, unit  # noqa: E402
from benchmarks.roc_peers import sort_roc  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_eval import wall  # noqa: E402


def flat(n, positive, seed=6):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    genuine = torch.rand(n, device="cuda", generator=generator) < positive
    score = torch.randn(n, device="cuda", generator=generator) + 2 * genuine
    return genuine, score


def main():
    args = sys.argv[1:]
    torch.backends.cuda.matmul.allow_tf32 = False
    if args[:1] == ["--flat"]:
        genuine, score = flat(int(float(args[1])), float(args[2]) if len(args) > 2 else 1e-3)
        curve = lambda: roc.roc_curve_pairs(genuine, score)  # noqa: E731
        exact = lambda: roc.evaluate_pairs(genuine, score)  # noqa: E731
    else:
        labels_q, feat_q, labels_g, feat_g = embeddings(10_000, 21_000, 512, seed=1)
        score = unit(feat_q) @ unit(feat_g).T
        genuine = labels_q[:, None] == labels_g[None, :]
        curve = lambda: roc.roc_curve(labels_q, labels_g, score=score)  # noqa: E731
        exact = lambda: roc.evaluate(labels_q, labels_g, score=score)  # noqa: E731
    distinct = torch.unique(score.reshape(-1)).numel()
    points = len(curve()[0])
    print("%d pairs, %d genuine, %d distinct scores, %d points kept" % (
        score.numel(), int(genuine.sum()), distinct, points))
    for name, fn in (("torch.sort + cumsum", lambda: sort_roc(score, genuine)),
                     ("curve", curve), ("exact", exact)):
        print("%-20s %9.3f ms" % (name, wall(fn, repeat=3)))
    profile = cProfile.Profile()
    profile.runcall(curve)
    pstats.Stats(profile).sort_stats("tottime").print_stats(12)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        curve()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15))


if __name__ == "__main__":
    main()
