"""scripts/bench_roc.py's exact peer at scale (torch matmul + searchsorted +
bincount): on the CPU it counts what evaluate(mode="exact") counts, up to the
pairs whose scores differ in their last bits (torch's matmul against one FMA
chain a pair), and the bench's check of it fails where it miscounts."""

import numpy as np
import pytest
import torch

from _ext import roc
from cli_common import load_script


def test_exact_peer_counts_what_evaluate_counts():
    bench = load_script("bench_roc")
    labels_q, feat_q, labels_g, feat_g = bench.scale_embeddings(300, 2000, 64, True, seed=0,
                                                                device="cpu")
    order = torch.randperm(labels_g.numel(), generator=torch.Generator().manual_seed(1))
    labels_g, feat_g = labels_g[order], feat_g[order]  # the peer must not rely on their order
    report = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode="exact")
    run, result = bench.searchsorted_exact(feat_q, feat_g, labels_q, labels_g, step=70)
    run()
    bench.check_peer_exact(result, report)

    counts = report.counts
    assert len(result["levels"]) == len(counts["genuine_scores"]) == 300 * 4
    np.testing.assert_allclose(result["levels"].numpy(), counts["genuine_scores"], atol=1e-6)
    between = result["impostor_between"].numpy()
    at = result["impostor_at"].numpy()
    assert between.sum() + at.sum() == report.n_impostor == 300 * 2000 * 4 - 300 * 4
    moved = np.abs(between - counts["impostor_between"].astype(np.int64)).sum()
    assert moved < 1e-3 * report.n_impostor
    lowest = result["between_min"].numpy()
    assert np.array_equal(np.isfinite(lowest), between > 0)
    both = np.isfinite(lowest) & np.isfinite(counts["impostor_between_min"])
    near = np.abs(lowest[both] - counts["impostor_between_min"][both]) <= 1e-6
    assert near.mean() > 0.99

    result["impostor_between"][len(between) // 2] += 1
    with pytest.raises(AssertionError, match="impostor count"):
        bench.check_peer_exact(result, report)
    result["impostor_between"][len(between) // 2] -= 1
    upper = result["impostor_between"][len(between) // 2:]
    result["impostor_between"][0] += upper.sum()
    upper.zero_()
    with pytest.raises(AssertionError, match="FAR at the median"):
        bench.check_peer_exact(result, report)
