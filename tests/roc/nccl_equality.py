"""Run under torchrun on a machine with 2+ GPUs (tests/roc/test_roc_distributed.py
does): evaluation across the ranks through NCCL, each rank on its own GPU,
equals one GPU's evaluation of all the pairs, count for count, and a failure
or disagreement on one rank is the same error on every rank (as with gloo,
tests/roc/test_roc_distributed_errors.py). Prints "nccl equality: ok" on rank 0
when every case matched."""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist

# the checkout (two folders up) and tests/ (distributed_common)
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(TESTS), TESTS]

from distributed_common import nccl_verdict  # noqa: E402

from _ext import roc  # noqa: E402


def same(a, b):
    return (np.array_equal(a.false_accepts, b.false_accepts) and
            np.array_equal(a.true_accepts, b.true_accepts) and
            np.array_equal(a.thresholds, b.thresholds) and a.auc == b.auc and
            (a.n_genuine, a.n_impostor, a.n_nan) == (b.n_genuine, b.n_impostor, b.n_nan) and
            [tuple(r) for r in a.tar_at_far] == [tuple(r) for r in b.tar_at_far])


def shared_failures(rank, genuine, score):
    """The cases of this rank whose error is not the one every rank must raise."""
    def progress_dividing_by_zero(done, total):
        return done / 0

    def binned(bins):
        acc = roc.RocAccumulator(mode="binned", bins=bins, group=True)
        acc.update(genuine, score)
        return acc.compute()

    last = dist.get_world_size() - 1
    cases = [
        (lambda: roc.evaluate_pairs(genuine, score, fars=[2.0] if rank == last else [0.1],
                                    group=True),
         "ValueError: evaluate_pairs: rank %d: fars must lie in [0, 1], got 2.0" % last),
        (lambda: roc.evaluate_pairs(genuine, score, progress=progress_dividing_by_zero,
                                    chunk=1 << 20, group=True),
         "RuntimeError: evaluate_pairs: rank 0: ZeroDivisionError: division by zero"),
        (lambda: binned(512 if rank == last else 1024),
         "ValueError: RocAccumulator: the ranks disagree on the option bins: rank 0 has 1024, "
         "rank %d has 512" % last),
    ]
    failures = []
    for call, want in cases:
        try:
            call()
            got = "no error"
        except Exception as error:
            got = "%s: %s" % (type(error).__name__, error)
        if got != want:
            failures.append(("shared failure", got))
    return failures


def nearest_sklearn_failures(device):
    """nearest_sklearn on tied pair scores (genuine scores 0.1 apart, impostors
    on fiftieths) whose rows exact mode's corners leave undecided: the ranks'
    probing passes (no lists on the GPU) give one GPU's report, and the CPU's
    (its lists), count for count."""
    rng = np.random.default_rng(4)
    n = 200000
    genuine = rng.random(n) < 0.05
    score = np.where(genuine, np.round(rng.normal(1, 0.5, n), 1) + 0.05,
                     np.round(rng.normal(0, 0.5, n) * 50) / 50).astype(np.float32)
    nearest = dict(fars=tuple(np.linspace(0.002, 0.6, 61)), far_rule="nearest_sklearn")
    on_cpu = roc.evaluate_pairs(genuine, score, **nearest)
    genuine, score = torch.from_numpy(genuine).to(device), torch.from_numpy(score).to(device)
    one = roc.evaluate_pairs(genuine, score, **nearest)
    a, b = roc.shard_rows(n, True)
    many = roc.evaluate_pairs(genuine[a:b], score[a:b], group=True, **nearest)
    if same(one, many) and same(one, on_cpu) and one.passes > 1 and many.passes > 1:
        return []
    return [("pairs", "nearest_sklearn", one.passes, many.passes)]


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device = torch.device("cuda", local_rank)
    rng = np.random.default_rng(3)
    labels_q, labels_g = rng.integers(0, 300, 3001), rng.integers(0, 300, 2003)
    feat_q = torch.from_numpy(rng.normal(size=(3001, 64)).astype(np.float32)).to(device)
    feat_g = torch.from_numpy(rng.normal(size=(2003, 64)).astype(np.float32)).to(device)
    score = roc.pair_scores(feat_q, feat_g)
    score[5, 7] = float("nan")
    labels_q, labels_g = torch.from_numpy(labels_q).to(device), torch.from_numpy(labels_g).to(device)
    failures = []
    a, b = roc.shard_rows(3001, True)
    for mode in ("exact", "binned", "curve"):
        for source, kwargs, shard in (("score", dict(score=score), dict(score=score[a:b])),
                                      ("features", dict(feat_q=feat_q, feat_g=feat_g),
                                       dict(feat_q=feat_q[a:b], feat_g=feat_g))):
            one = roc.evaluate(labels_q, labels_g, mode=mode, **kwargs)
            many = roc.evaluate(labels_q[a:b], labels_g, mode=mode, group=True, **shard)
            if not same(one, many):
                failures.append((mode, source))
    for same_set in (True, "ordered"):
        a, b = roc.shard_rows(2003, True, same_set=same_set)
        one = roc.evaluate(labels_g, None, feat_q=feat_g, same_set=same_set)
        many = roc.evaluate(labels_g[a:b], labels_g, feat_q=feat_g[a:b], feat_g=feat_g,
                            same_set=same_set, group=True)
        if not same(one, many):
            failures.append(("same_set", same_set))
    genuine = (labels_q[:, None] == labels_g[None, :]).reshape(-1)
    flat = score.reshape(-1)
    a, b = roc.shard_rows(flat.numel(), True)
    if not same(roc.evaluate_pairs(genuine, flat),
                roc.evaluate_pairs(genuine[a:b], flat[a:b], group=True)):
        failures.append(("pairs",))
    failures += nearest_sklearn_failures(device)
    failures += shared_failures(rank, genuine[a:b], flat[a:b])
    return nccl_verdict("nccl equality", failures)


if __name__ == "__main__":
    sys.exit(main())
