"""Where the wall time of one small evaluate() goes, phase by phase: each of
the C calls the Python side makes (and the labels' preparation before them) timed
with a synchronization after it, min over repeats. The sum is a little above
the plain call's wall time (the synchronizations between phases cost
themselves); the plain call is printed beside it.

    python3 dev/phases_eval.py [Q G D]     # default: the blog's 10,000 x 21,000 x 512
    python3 dev/phases_eval.py --pairs N   # evaluate_pairs from features, N pairs (LFW: 6000)
    python3 dev/phases_eval.py --trace [Q G D]
                                           # one exact call's host events (Python functions,
                                           # CUDA runtime calls) and kernels, in order
"""

import collections
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext import roc  # noqa: E402
from _ext.roc import _evaluate  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_eval import blog_size  # noqa: E402  (its workload: the blog's, or Q G D)

TIMED = ("roc_eval_create", "roc_eval_create_pairs", "roc_eval_add_rows", "roc_eval_counts",
         "roc_eval_summarize")


class TimedLib:
    """The cffi lib, with the calls in TIMED timed (synchronized after)."""

    def __init__(self, lib, totals):
        self._lib, self._totals = lib, totals

    def __getattr__(self, name):
        attr = getattr(self._lib, name)
        if name not in TIMED:
            return attr

        def timed(*args):
            t0 = time.perf_counter()
            out = attr(*args)
            torch.cuda.synchronize()
            self._totals[name] += time.perf_counter() - t0
            return out
        return timed


def timed_codes(codes, totals):
    def timed(*args, **kwargs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = codes(*args, **kwargs)
        torch.cuda.synchronize()
        totals["labels"] += time.perf_counter() - t0
        return out
    return timed


# the labels' preparation (label_codes before the C side compared labels by value)
LABELS = "comparable_labels" if hasattr(_evaluate, "comparable_labels") else "label_codes"


def phases(run, repeat=20):
    lib, codes = _evaluate.lib, getattr(_evaluate, LABELS)
    best_total, best = float("inf"), None
    try:
        for _ in range(repeat):
            totals = collections.Counter()
            _evaluate.lib = TimedLib(lib, totals)
            setattr(_evaluate, LABELS, timed_codes(codes, totals))
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run()
            torch.cuda.synchronize()
            total = time.perf_counter() - t0
            if total < best_total:
                best_total, best = total, totals
    finally:
        _evaluate.lib = lib
        setattr(_evaluate, LABELS, codes)
    plain = float("inf")
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run()
        torch.cuda.synchronize()
        plain = min(plain, time.perf_counter() - t0)
    rest = best_total - sum(best.values())
    for name, t in list(best.items()) + [("the rest (Python)", rest)]:
        print("  %-26s %8.3f ms" % (name, t * 1e3))
    print("  %-26s %8.3f ms (plain call %.3f ms)" % ("sum", best_total * 1e3, plain * 1e3))


def trace(run):
    """One call's events in the order they began (ms from the first): the
    Python functions of _ext (with their self time), the CUDA runtime calls and
    the kernels, so that the gaps between synchronizations show."""
    run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA],
                                with_stack=False) as prof:
        run()
        torch.cuda.synchronize()
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    t0 = events[0].time_range.start
    for e in events:
        where = "gpu" if e.device_type == torch.autograd.DeviceType.CUDA else "cpu"
        print("  %8.3f %7.3f %s %s" % ((e.time_range.start - t0) / 1e3,
                                      (e.time_range.end - e.time_range.start) / 1e3, where,
                                      e.name[:90]))


def main():
    args = sys.argv[1:]
    torch.manual_seed(0)
    tracing = args[:1] == ["--trace"]
    if tracing:
        args = args[1:]
    if args[:1] == ["--pairs"]:
        n = int(args[1]) if len(args) > 1 else 6000
        feat = torch.randn(2 * n, 512, device="cuda")
        index_a = torch.arange(n, device="cuda")
        index_b = torch.arange(n, 2 * n, device="cuda")
        genuine = torch.rand(n, device="cuda") < 0.5
        for mode in ("exact", "binned"):
            print("evaluate_pairs %d pairs from features, %s" % (n, mode))
            phases(lambda: roc.evaluate_pairs(genuine, feat_a=feat, feat_b=feat, index_a=index_a,
                                              index_b=index_b, mode=mode))
        return
    labels_q, feat_q, labels_g, feat_g = blog_size(args)
    (n_query, dim), n_gallery = feat_q.shape, feat_g.shape[0]
    score = roc.pair_scores(feat_q, feat_g)
    if tracing:
        trace(lambda: roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g))
        return
    for mode in ("exact", "binned"):
        print("evaluate %d x %d x %d from features, %s" % (n_query, n_gallery, dim, mode))
        phases(lambda: roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=mode))
        print("evaluate %d x %d from the score matrix, %s" % (n_query, n_gallery, mode))
        phases(lambda: roc.evaluate(labels_q, labels_g, score=score, mode=mode))


if __name__ == "__main__":
    main()
