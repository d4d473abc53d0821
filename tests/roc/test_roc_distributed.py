"""Evaluation across processes (torch.distributed, gloo on the CPU; NCCL on the
2-GPU machine): every rank's report equals one process's on all the pairs,
count for count. Failures and disagreements: test_roc_distributed_errors.py."""

import os

import numpy as np
import pytest
import torch.distributed as dist
from distributed_common import launch, run_nccl_script

from _ext import roc
from _ext.roc._distributed import _shard


# ---------------------------------------------------------------------------
# the data every rank and the single process see

def data(seed=7):
    rng = np.random.default_rng(seed)
    out = {"labels_q": rng.integers(0, 9, 103), "labels_g": rng.integers(0, 9, 71),
           "feat_q": rng.normal(size=(103, 12)).astype(np.float32),
           "feat_g": rng.normal(size=(71, 12)).astype(np.float32)}
    out["score"] = roc.pair_scores(out["feat_q"], out["feat_g"])
    out["score"][3, 5] = out["score"][40, 2] = np.nan
    out["set_labels"] = rng.integers(0, 7, 97)
    out["set_feat"] = rng.normal(size=(97, 12)).astype(np.float32)
    out["genuine"] = rng.random(5000) < 0.2
    out["pair_score"] = np.round(rng.normal(size=5000) + out["genuine"], 2).astype(np.float32)
    # genuine scores 0.1 apart (odd hundredths), five tied impostor scores (even
    # hundredths) between two of them
    out["run_genuine"] = rng.random(4000) < 0.05
    out["run_score"] = np.where(out["run_genuine"], np.round(rng.normal(1, 0.5, 4000), 1) + 0.05,
                                np.round(rng.normal(0, 0.5, 4000) * 50) / 50).astype(np.float32)
    return out


def plain(values):
    """A list with NaN as None, so that equal arrays compare equal."""
    return [None if isinstance(v, float) and v != v else v for v in np.asarray(values).tolist()]


def summary(report):
    """What must be equal, count for count."""
    return {"fpr": plain(report.fpr), "tpr": plain(report.tpr),
            "thresholds": plain(report.thresholds),
            "false_accepts": plain(report.false_accepts),
            "n": (report.n_genuine, report.n_impostor, report.n_nan),
            "auc": report.auc, "eer": report.eer,
            "tar": [tuple(row) for row in report.tar_at_far],
            "counts": {k: (plain(v) if isinstance(v, np.ndarray) else v)
                       for k, v in report.counts.items()}}


def shards(n, world, rank, uneven):
    """Consecutive shards; uneven ones leave rank 1 with no rows (rank 0 takes a
    third when there are other ranks, the rest split what is left)."""
    if not uneven:
        return _shard(n, rank, world, False)
    sizes = [n if world == 2 else n // 3, 0]
    rest = n - sizes[0]
    sizes += [rest // (world - 2) + (r < rest % (world - 2)) for r in range(world - 2)]
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return int(bounds[rank]), int(bounds[rank + 1])


RULES = ("max_tpr", "nearest", "first_above", "interpolate", "nearest_sklearn")
# targets on tied pair scores (data()'s run_score) where exact mode's corners leave
# nearest_sklearn undecided: the ranks' probing passes decide them (one process:
# its CPU lists)
NEAREST_FARS = tuple(np.linspace(0.002, 0.6, 61))


def scenarios(d, world, rank, group):
    """(name, result) of every scenario on this rank."""
    out = {}
    for uneven in (False, True):
        a, b = shards(103, world, rank, uneven)
        for mode in ("exact", "binned", "curve"):
            for source in ("score", "features"):
                kwargs = (dict(score=d["score"][a:b]) if source == "score" else
                          dict(feat_q=d["feat_q"][a:b], feat_g=d["feat_g"]))
                for rule in (RULES if mode == "exact" and source == "score" else ("max_tpr",)):
                    report = roc.evaluate(d["labels_q"][a:b], d["labels_g"], mode=mode,
                                          far_rule=rule, bins=97, group=group, **kwargs)
                    out[("all", uneven, mode, source, rule)] = summary(report)
        fpr, tpr, thresholds = roc.roc_curve(d["labels_q"][a:b], d["labels_g"],
                                             score=d["score"][a:b], group=group)
        out[("roc_curve", uneven)] = (fpr.tolist(), tpr.tolist(), thresholds.tolist())
    for same_set in (True, "ordered"):
        a, b = roc.shard_rows(97, group, same_set=same_set)
        report = roc.evaluate(d["set_labels"][a:b], d["set_labels"], feat_q=d["set_feat"][a:b],
                              feat_g=d["set_feat"], same_set=same_set, group=group)
        out[("same_set", same_set)] = summary(report)
    # a rank with no genuine pairs: its queries' labels are in no gallery entry
    a, b = _shard(103, rank, world, False)
    labels_q = d["labels_q"][a:b] if rank else np.full(b - a, 99)
    report = roc.evaluate(labels_q, d["labels_g"], score=d["score"][a:b], group=group)
    out["no_genuine_on_rank_0"] = summary(report)
    pair_a, pair_b = _shard(5000, rank, world, False)
    a, b = _shard(103, rank, world, False)
    for mode in ("exact", "binned"):
        report = roc.evaluate_pairs(d["genuine"][pair_a:pair_b], d["pair_score"][pair_a:pair_b],
                                    mode=mode, group=group)
        out[("pairs", mode)] = summary(report)
        acc = roc.RocAccumulator(d["labels_g"], d["feat_g"], mode=mode, group=group)
        for start in range(a, b, 10):
            end = min(start + 10, b)
            acc.update(d["labels_q"][start:end], d["feat_q"][start:end])
        out[("accumulator", mode)] = summary(acc.compute())
    pair_a, pair_b = _shard(4000, rank, world, False)
    report = roc.evaluate_pairs(d["run_genuine"][pair_a:pair_b], d["run_score"][pair_a:pair_b],
                                fars=NEAREST_FARS, far_rule="nearest_sklearn", group=group)
    out[("pairs", "nearest_sklearn")] = summary(report), report.passes
    return out


def every_scenario(rank, world):
    return scenarios(data(), world, rank, dist.group.WORLD)


@pytest.fixture(scope="module", params=[2, 3], ids=["2 ranks", "3 ranks"])
def ranks(request):
    world = request.param
    return world, launch(every_scenario, world)


# ---------------------------------------------------------------------------
# one process, the reference

@pytest.fixture(scope="module")
def single():
    d = data()
    out = {}
    for uneven in (False, True):
        for mode in ("exact", "binned", "curve"):
            for source in ("score", "features"):
                kwargs = (dict(score=d["score"]) if source == "score" else
                          dict(feat_q=d["feat_q"], feat_g=d["feat_g"]))
                for rule in (RULES if mode == "exact" and source == "score" else ("max_tpr",)):
                    out[("all", uneven, mode, source, rule)] = summary(roc.evaluate(
                        d["labels_q"], d["labels_g"], mode=mode, far_rule=rule, bins=97,
                        **kwargs))
        fpr, tpr, thresholds = roc.roc_curve(d["labels_q"], d["labels_g"], score=d["score"])
        out[("roc_curve", uneven)] = (fpr.tolist(), tpr.tolist(), thresholds.tolist())
    for same_set in (True, "ordered"):
        out[("same_set", same_set)] = summary(roc.evaluate(
            d["set_labels"], None, feat_q=d["set_feat"], same_set=same_set))
    return d, out


def test_every_rank_reports_what_one_process_does(ranks, single):
    world, results = ranks
    d, expected = single
    for rank, result in results.items():
        for key, want in expected.items():
            assert result[key] == want, (rank, key)


def test_a_rank_without_genuine_pairs(ranks):
    world, results = ranks
    d = data()
    labels_q = d["labels_q"].copy()
    a, b = _shard(103, 0, world, False)
    labels_q[a:b] = 99
    want = summary(roc.evaluate(labels_q, d["labels_g"], score=d["score"]))
    for result in results.values():
        assert result["no_genuine_on_rank_0"] == want


def test_pairs_and_accumulator_across_ranks(ranks):
    world, results = ranks
    d = data()
    for mode in ("exact", "binned"):
        want = summary(roc.evaluate_pairs(d["genuine"], d["pair_score"], mode=mode))
        acc = summary(roc.evaluate(d["labels_q"], d["labels_g"], feat_q=d["feat_q"],
                                   feat_g=d["feat_g"], mode=mode))
        for result in results.values():
            assert result[("pairs", mode)] == want
            assert result[("accumulator", mode)] == acc
    nearest = roc.evaluate_pairs(d["run_genuine"], d["run_score"], fars=NEAREST_FARS,
                                 far_rule="nearest_sklearn")
    for result in results.values():
        report, passes = result[("pairs", "nearest_sklearn")]
        assert report == summary(nearest)
        assert nearest.passes == 1 and passes > 1  # the lists, and the ranks' probes


def test_group_needs_initialised_torch_distributed():
    assert not dist.is_initialized()
    for group in (True, "world"):
        with pytest.raises(ValueError, match="evaluate: torch.distributed is not initialised"):
            roc.evaluate(np.array([0, 1]), np.array([0, 1]), score=np.eye(2, dtype=np.float32),
                         group=group)
    with pytest.raises(ValueError, match="shard_rows: torch.distributed is not initialised"):
        roc.shard_rows(10)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("n", [0, 1, 5, 97, 1000])
def test_shards_cover_the_rows_and_balance_the_triangle(world, n):
    for triangle in (False, True):
        bounds = [_shard(n, r, world, triangle) for r in range(world)]
        assert bounds[0][0] == 0 and bounds[-1][1] == n
        assert all(bounds[r][1] == bounds[r + 1][0] for r in range(world - 1))
        if triangle and n >= 100:
            pairs = [sum(n - 1 - i for i in range(a, b)) for a, b in bounds]
            assert max(pairs) - min(pairs) <= 2 * n  # one row either side of the ideal cut


# ---------------------------------------------------------------------------
# the 2-GPU machine: NCCL

NCCL_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nccl_equality.py")


@pytest.mark.gpu
def test_nccl_ranks_equal_one_gpu():
    run_nccl_script(NCCL_SCRIPT, "nccl equality")
