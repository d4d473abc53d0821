"""The ROC benchmark: its peers (benchmarks.roc_peers) count what they claim
on the CPU, the exact one at scale (torch matmul + searchsorted + bincount)
what evaluate(mode="exact") counts up to the pairs whose scores differ in
their last bits (torch's matmul against one FMA chain a pair), and its check
fails where it miscounts; the table's ratios and ceilings; the command
(scripts/bench_roc.py) starts and refuses to run without a GPU; on a GPU,
each workload at a small size and the command's quick run."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_curve

from _ext import roc
from benchmarks import roc_inputs, roc_peers, roc_workloads
from benchmarks.roc_table import Table
from benchmarks.timing import cuda_event_timer
from cli_common import call, load_script, script


def test_exact_peer_counts_what_evaluate_counts():
    labels_q, feat_q, labels_g, feat_g = roc_inputs.scale_embeddings(300, 2000, 64, True, seed=0,
                                                                     device="cpu")
    order = torch.randperm(labels_g.numel(), generator=torch.Generator().manual_seed(1))
    labels_g, feat_g = labels_g[order], feat_g[order]  # the peer must not rely on their order
    report = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode="exact")
    run, result = roc_peers.searchsorted_exact(feat_q, feat_g, labels_q, labels_g, step=70)
    run()
    roc_peers.check_peer_exact(result, report)

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
        roc_peers.check_peer_exact(result, report)
    result["impostor_between"][len(between) // 2] -= 1
    upper = result["impostor_between"][len(between) // 2:]
    result["impostor_between"][0] += upper.sum()
    upper.zero_()
    with pytest.raises(AssertionError, match="FAR at the median"):
        roc_peers.check_peer_exact(result, report)


def test_sort_roc_is_sklearns_curve_and_evaluates_corners(rng):
    """The matrix workload's check, on the CPU: the torch.sort curve is
    scikit-learn's, point for point, and roc_curve returns it; evaluate's
    exact curve is the same less the inner points of horizontal runs. Scores
    on a coarse grid, so that many tie across genuine and impostor pairs."""
    labels_q, labels_g = rng.integers(0, 30, 40), rng.integers(0, 30, 70)
    score = torch.from_numpy((np.round(rng.uniform(-1, 1, (40, 70)) * 64) / 64)
                             .astype(np.float32))
    genuine = torch.from_numpy(labels_q[:, None] == labels_g[None, :])
    curve = [x.numpy() for x in roc_peers.sort_roc(score, genuine)]
    reference = roc_curve(genuine.numpy().ravel(), score.numpy().ravel().astype(np.float64))
    for ours, theirs in zip(curve, reference):
        assert np.array_equal(ours, theirs)

    labels_q, labels_g = torch.from_numpy(labels_q), torch.from_numpy(labels_g)
    for ours, peer in zip(roc.roc_curve(labels_q, labels_g, score=score), curve):
        assert np.array_equal(ours, peer)
    report = roc.evaluate(labels_q, labels_g, score=score)
    reduced = roc_peers.reduce_runs(*curve)
    assert len(reduced[0]) < len(curve[0])  # the grid makes horizontal runs
    for ours, peer in zip((report.fpr, report.tpr, report.thresholds), reduced):
        assert np.array_equal(ours, peer)


def test_histogram_peers_count_every_pair_once(rng):
    """torch.histc of every pair and of the genuine ones (the others pushed
    out of its range); over one set, each unordered pair once."""
    labels_q, labels_g = torch.from_numpy(rng.integers(0, 5, 30)), torch.from_numpy(
        rng.integers(0, 5, 50))
    score = torch.from_numpy(rng.uniform(-1, 1, (30, 50)).astype(np.float32))
    all_pairs, genuine_pairs = roc_peers.histc_pair(score, labels_q, labels_g)
    n_genuine = int((labels_q[:, None] == labels_g[None, :]).sum())
    assert all_pairs.sum() == 30 * 50 and genuine_pairs.sum() == n_genuine

    labels = torch.from_numpy(rng.integers(0, 6, 40))
    feats = torch.from_numpy(rng.normal(size=(40, 8)).astype(np.float32))
    all_pairs, genuine_pairs = roc_peers.same_set_histc(feats, labels)()
    same = labels[:, None] == labels[None, :]
    assert all_pairs.sum() == 40 * 39 // 2
    assert genuine_pairs.sum() == (int(same.sum()) - 40) // 2


def test_table_ratios_and_ceilings():
    """Each peer's time over the row's; bytes against the copy bandwidth,
    FLOP against the GEMM rate; a peer with no row gets no column."""
    table = Table("title", "work", ["peer", "absent peer"])
    table.bytes, table.flop = 1e9, 1e12
    table.add("peer", 2.0, "bytes", "a note")
    table.add("ours", 1.0, "flop")
    table.add("on the CPU", 4.0, "-")
    assert table.ms("ours") == 1.0
    assert table.markdown(copy_bw=1e12, gemm_rate=1e15).splitlines() == [
        "### title", "", "work", "",
        "| method | ms | x vs peer | of ceiling | note |",
        "|---|---|---|---|---|",
        "| peer | 2.000 | 1.00 | 50% of copy BW | a note |",
        "| ours | 1.000 | 2.00 | 100% of fp32 GEMM |  |",
        "| on the CPU | 4.000 | 0.50 | - |  |"]


def test_command_starts(tmp_path):
    """--help, as its own process from elsewhere: the command finds and imports
    every module of the benchmark; the options stay those that BENCHMARKS.md's
    commands name."""
    out = script("bench_roc.py", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for option in ("--quick", "--markdown", "--ifrt", "--only {matrix,pairs,curve,scale}",
                   "--distributed"):
        assert option in out.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a GPU-less run")
def test_command_refuses_without_a_gpu(capsys):
    status, _, err = call(load_script("bench_roc").main, ["--quick"], capsys)
    assert status == 1 and "bench_roc.py: needs a CUDA device and a CUDA build" in err


@pytest.fixture
def once():
    return cuda_event_timer(warmup=0, repeat=1, flush_bytes=1 << 20)


@pytest.mark.gpu
def test_workloads_at_small_sizes(once):
    """Every single-GPU workload but the pair lists (fixed at the IJB-C size),
    small: its checks pass and it fills its rows and targets."""
    targets = {}
    tables = [roc_workloads.workload_matrix(once, 400, 900, 64, targets, quick=True),
              roc_workloads.workload_features(once, 300, 2500, 64, targets),
              roc_workloads.workload_same_set(once, 500, 64, 10),
              roc_workloads.workload_scale(once, 200, 1000, 64, targets, "small")]
    assert {"gpu_roc", "exact", "features binned", "features exact", "gemm", "histc", "sort",
            "1e10 binned", "1e10 exact", "1e10 gemm", "small easy exact", "small easy binned",
            "small hard exact", "small hard binned", "small gemm"} <= set(targets)
    names = [row[0] for table in tables for row in table.rows]
    assert roc_peers.PEER_EXACT + ", hard" in names
    assert all(row[1] > 0 for table in tables for row in table.rows)
    for table in tables:
        assert table.markdown(1e12, 1e15).startswith("### " + table.title)


@pytest.mark.gpu
def test_pair_list_inputs():
    """ijb_like: the genuine pairs first, two distinct templates each;
    flat_pairs: about 1% positive, the positives scored higher."""
    feat, index_a, index_b, genuine = roc_inputs.ijb_like(600, 50, 3000, dim=32)
    assert feat.shape == (600, 32) and genuine[:50].all() and not genuine[50:].any()
    assert (index_a[:50] != index_b[:50]).all()
    assert int(index_a.max()) < 600 and int(index_b.max()) < 600
    flags, values = roc_inputs.flat_pairs(1 << 20)
    assert 0.008 < flags.float().mean() < 0.012
    assert values[flags].mean() > values[~flags].mean() + 0.9


@pytest.mark.gpu
def test_quick_matrix_run_writes_its_section(tmp_path, capsys):
    bench = load_script("bench_roc")
    (tmp_path / "BENCHMARKS.md").write_text("# Benchmarks\n\n<!-- other start -->\nx\n"
                                            "<!-- other end -->\n")
    bench.main(["--quick", "--only", "matrix", "--markdown", str(tmp_path / "BENCHMARKS.md")])
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "<!-- other start -->\nx\n<!-- other end -->" in text
    assert "<!-- bench_roc.py --quick --only matrix start -->" in text
    assert ("Command: `python scripts/bench_roc.py --quick --only matrix --markdown "
            "BENCHMARKS.md`") in text
    assert "| gpu_roc >= 4x faster than the torch.histc pair |" in capsys.readouterr().out
