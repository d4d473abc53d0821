"""rank.evaluate across processes (torch.distributed, gloo, 2 ranks): each rank
counts its shard of the queries (or, shard="gallery", every query against its
shard of the gallery), and every rank reports what one process does on all of
them, count for count (per-query arrays and top-k included)."""

import os

import numpy as np
import pytest
import torch.distributed as dist
from distributed_common import launch, run_nccl_script

from _ext import rank, roc
from _ext.roc._distributed import _shard

WORLD = 2


def data(seed=11):
    rng = np.random.default_rng(seed)
    out = {"labels_q": rng.integers(0, 9, 103), "labels_g": rng.integers(-1, 12, 71),
           "cams_q": rng.integers(0, 3, 103), "cams_g": rng.integers(0, 3, 71),
           "feat_q": rng.normal(size=(103, 12)).astype(np.float32),
           "feat_g": rng.normal(size=(71, 12)).astype(np.float32),
           "set_labels": rng.integers(0, 20, 97),
           "set_feat": rng.normal(size=(97, 12)).astype(np.float32)}
    score = roc.pair_scores(out["feat_q"], out["feat_g"])
    out["score"] = np.round(score, 1)  # ties
    out["score"][3, 5] = out["score"][40, 2] = np.nan
    return out


def plain(values):
    """A list with NaN as None, so that equal arrays compare equal."""
    return [None if isinstance(v, float) and v != v else v
            for v in np.asarray(values).reshape(-1).tolist()]


def summary(report):
    """What must be equal, count for count."""
    out = {"report": report.to_dict()}
    for name, values in (report.per_query or {}).items():
        out[name] = plain(values)
    if report.topk is not None:
        out["topk"] = (plain(report.topk[0]), plain(report.topk[1]))
    return out


def shard(n, world, rank, uneven):
    """Consecutive shards; the uneven ones give rank 1 no rows."""
    if uneven:
        return (0, n) if rank == 0 else (n, n)
    return _shard(n, rank, world, False)


SCENARIOS = {
    "features, cameras, top-k": dict(source="features", cams=True, topk=5),
    "score, NIST, pessimistic": dict(source="score", ties="pessimistic"),
    "score, legacy 1:N": dict(source="score", fpir_rule="insightface_1n_legacy",
                              fpirs=(0.01, 0.1, 0.5)),
    "score, studio, trapezoid": dict(source="score", fpir_rule="insightface_studio",
                                     ap="trapezoid", junk=None),
}


def run(d, name, a, b, group, gallery=False):
    """Scenario `name` on queries [a, b) against the gallery, or (gallery) on
    every query against gallery entries [a, b)."""
    kwargs = dict(SCENARIOS[name])
    source, cams = kwargs.pop("source"), kwargs.pop("cams", False)
    q, g = (slice(None), slice(a, b)) if gallery else (slice(a, b), slice(None))
    inputs = (dict(feat_q=d["feat_q"][q], feat_g=d["feat_g"][g]) if source == "features"
              else dict(score=np.ascontiguousarray(d["score"][q][:, g])))
    if cams:
        inputs.update(cams_q=d["cams_q"][q], cams_g=d["cams_g"][g])
    if gallery:
        kwargs["shard"] = "gallery"
    return rank.evaluate(d["labels_q"][q], d["labels_g"][g], per_query=True, group=group,
                         **inputs, **kwargs)


def scenarios(rank_, world):
    d = data()
    group = dist.group.WORLD
    out = {}
    for uneven in (False, True):
        a, b = shard(103, world, rank_, uneven)
        for name in SCENARIOS:
            out[(name, uneven)] = summary(run(d, name, a, b, group))
        a, b = shard(71, world, rank_, uneven)
        for name in SCENARIOS:
            out[(name, uneven, "gallery")] = summary(run(d, name, a, b, group, gallery=True))
    a, b = _shard(97, rank_, world, False)
    out["same_set"] = summary(rank.evaluate(
        d["set_labels"][a:b], d["set_labels"], feat_q=d["set_feat"][a:b], feat_g=d["set_feat"],
        same_set=True, per_query=True, topk=3, group=group))
    # disagreements: every rank raises the same error
    for key, kwargs in (("topk", dict(topk=rank_)),
                        ("cameras", dict(cams_q=d["cams_q"][a:b], cams_g=d["cams_g"])
                         if rank_ else {}),
                        ("gallery shards", dict(shard="gallery"))):
        try:
            rank.evaluate(d["labels_q"][a:b], d["labels_g"], score=d["score"][a:b], group=group,
                          **kwargs)
            out[key] = None
        except ValueError as error:
            out[key] = str(error)
    return out


def test_every_rank_reports_what_one_process_does():
    results = launch(scenarios, WORLD)
    d = data()
    for name in SCENARIOS:
        want = summary(run(d, name, 0, 103, None))
        for rank_, result in results.items():
            for uneven in (False, True):
                assert result[(name, uneven)] == want, (rank_, name, uneven)
                assert result[(name, uneven, "gallery")] == want, (rank_, name, uneven, "gallery")
    want = summary(rank.evaluate(d["set_labels"], feat_q=d["set_feat"], same_set=True,
                                 per_query=True, topk=3))
    for rank_, result in results.items():
        assert result["same_set"] == want, rank_
        assert "evaluate: the ranks disagree on the option topk" in result["topk"]
        assert "evaluate: the ranks disagree on the cameras" in result["cameras"]
        assert ('evaluate: shard="gallery": every rank passes all the queries, but the ranks '
                'hold [48, 49]') in result["gallery shards"]
    assert results[0]["topk"] == results[1]["topk"]


# ---------------------------------------------------------------------------
# the 2-GPU machine: NCCL

NCCL_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nccl_rank.py")


@pytest.mark.gpu
def test_nccl_ranks_equal_one_gpu():
    run_nccl_script(NCCL_SCRIPT, "nccl rank")
