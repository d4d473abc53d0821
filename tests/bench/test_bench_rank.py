"""The 1:N ranking benchmark: its peers (benchmarks.rank_peers) compute
torchreid's mAP and CMC, by hand and as rank.evaluate does on its own
scores (between its pessimistic and optimistic values where scores tie),
and their check fails where they do not; the inputs are what they say; the
GEMM's blocks tile the product; each workload runs on the CPU, tiny, and
fills its rows and targets; a row without a time; the command
(scripts/bench_rank.py) starts, refuses to run without a GPU, and, its
workloads stood in for, gives them their sizes and writes its section; on a
GPU, the workloads at small sizes and the command's quick run."""

import numpy as np
import pytest
import torch

from _ext import rank
from benchmarks import rank_inputs, rank_peers, rank_workloads
from benchmarks.roc_table import Table
from benchmarks.sections import targets_table, write_section
from benchmarks.timing import cuda_event_timer, fp32_gemm_rate, host_run
from cli_common import call, load_script, script


def host_timer(fn, repeat=1):
    """The timer's interface (ms of fn()) with the host's clock, for the CPU."""
    return host_run(fn)[1]


def reports(labels_q, labels_g, score, cams_q=None, cams_g=None):
    """rank.evaluate of a score matrix with ties pessimistic and optimistic."""
    return tuple(rank.evaluate(labels_q, labels_g, score=score, cams_q=cams_q, cams_g=cams_g,
                               ties=ties) for ties in ("pessimistic", "optimistic"))


def both_peers(score, labels_q, labels_g, cams_q=None, cams_g=None):
    """torch_sort_ranking's and eval_market1501's results on one score
    matrix (junk, -1, dropped where eval_market1501's loaders drop it)."""
    s = torch.from_numpy(score)
    sort = rank_peers.torch_sort_ranking(
        lambda a, b: s[a:b], torch.from_numpy(labels_q), torch.from_numpy(labels_g),
        None if cams_q is None else torch.from_numpy(cams_q),
        None if cams_g is None else torch.from_numpy(cams_g), chunk_pairs=2 * score.shape[1])()
    keep = labels_g != -1
    market = rank_peers.eval_market1501(-score[:, keep], labels_q, labels_g[keep], cams_q,
                                        None if cams_g is None else cams_g[keep])
    return sort, market


def test_peers_by_hand():
    """Market-1501's protocol on two queries worked by hand: query 0 loses
    its same-camera mate (and the junk entry above everything), so its one
    mate left ranks second behind a distractor: AP 1/2; query 1's mate ranks
    first: AP 1; query 2 has no mate and is skipped."""
    labels_g = np.array([1, 2, -1, 1, 2, 0])
    cams_g = np.array([0, 1, 0, 1, 0, 1])
    labels_q, cams_q = np.array([1, 2, 3]), np.array([0, 0, 0])
    score = np.array([[0.9, 0.1, 0.95, 0.5, 0.3, 0.7],
                      [0.2, 0.6, 0.1, 0.4, 0.8, 0.3],
                      [0.5, 0.4, 0.3, 0.2, 0.1, 0.6]], dtype=np.float32)
    pessimistic, optimistic = reports(labels_q, labels_g, score, cams_q, cams_g)
    assert pessimistic.mean_ap == 0.75 and pessimistic.cmc[0] == 0.5 and pessimistic.n_mated == 2
    for result in both_peers(score, labels_q, labels_g, cams_q, cams_g):
        assert float(result["mean_ap"]) == 0.75 and int(result["n_valid"]) == 2
        cmc = np.asarray(result["cmc"], dtype=np.float64)
        assert cmc.shape == (50,) and cmc[0] == 0.5 and (cmc[1:] == 1).all()
        assert rank_peers.check_peer("peer", result, pessimistic, optimistic) == 0


def test_peers_on_tied_scores_lie_between_the_tie_policies(rng):
    """Scores on a coarse grid tie mates with non-mates: the pessimistic and
    optimistic values differ, and each peer, whatever order its sort gives
    the ties, lies between them; a result outside fails the check, naming
    the peer and the metric, as does one over other queries."""
    labels_q, labels_g = rng.integers(0, 8, 40), rng.integers(-1, 8, 300)
    cams_q, cams_g = rng.integers(0, 3, 40), rng.integers(0, 3, 300)
    score = (np.round(rng.uniform(-1, 1, (40, 300)) * 8) / 8).astype(np.float32)
    pessimistic, optimistic = reports(labels_q, labels_g, score, cams_q, cams_g)
    assert pessimistic.mean_ap < optimistic.mean_ap and pessimistic.cmc[0] < optimistic.cmc[0]
    for result in both_peers(score, labels_q, labels_g, cams_q, cams_g):
        assert rank_peers.check_peer("peer", result, pessimistic, optimistic) == 0

    result = dict(result, mean_ap=optimistic.mean_ap + 1e-9)
    with pytest.raises(AssertionError, match="peer: mAP .* lies outside rank.evaluate's"):
        rank_peers.check_peer("peer", result, pessimistic, optimistic)
    cmc = pessimistic.cmc.copy()
    cmc[4] -= 1.0 / pessimistic.n_mated
    with pytest.raises(AssertionError, match="peer: rank-5 "):
        rank_peers.check_peer("peer", dict(result, mean_ap=pessimistic.mean_ap, cmc=cmc),
                              pessimistic, optimistic)
    with pytest.raises(AssertionError, match="peer: averages over 3 queries, rank.evaluate "
                                             "over %d" % pessimistic.n_mated):
        rank_peers.check_peer("peer", dict(result, n_valid=3), pessimistic, optimistic)


def test_peers_on_features_agree_with_evaluate():
    """The workloads' check on re-ID features: on rank.evaluate's own scores
    both peers agree with it to float64 rounding; on their own (torch's
    matmul, NumPy's) within the workloads' tolerance; junk (-1) counts, as
    the peer shows when it keeps them."""
    data = rank_inputs.reid_features(120, 900, 30, 4, 100, 60, dim=64, seed=3, device="cpu")
    pessimistic, optimistic = rank_workloads.check_peers(data, torchreid=True)
    sort = rank_workloads.sort_peer(data, rank_peers.matmul_scores(data.feat_q, data.feat_g))()
    rank_peers.check_peer("sort", sort, pessimistic, optimistic,
                          rank_workloads.own_scores_tolerance(pessimistic.n_mated))
    host = rank_workloads._host(data)
    market = rank_peers.torchreid_way(host.feat_q, host.feat_g, host.labels_q, host.labels_g,
                                      host.cams_q, host.cams_g)
    rank_peers.check_peer("torchreid", market, pessimistic, optimistic,
                          rank_workloads.own_scores_tolerance(pessimistic.n_mated))
    kept = rank_peers.torch_sort_ranking(rank_workloads.own_scores(data), data.labels_q,
                                         data.labels_g, data.cams_q, data.cams_g, junk=None)()
    with pytest.raises(AssertionError, match="mAP"):
        rank_peers.check_peer("junk kept", kept, pessimistic, optimistic)


def test_chunks_do_not_change_the_sort_peer(rng):
    """One query a chunk or all at once: the same counts."""
    labels_q, labels_g = torch.from_numpy(rng.integers(0, 6, 25)), torch.from_numpy(
        rng.integers(0, 6, 80))
    score = torch.from_numpy(rng.normal(size=(25, 80)).astype(np.float32))
    one = rank_peers.torch_sort_ranking(lambda a, b: score[a:b], labels_q, labels_g,
                                        chunk_pairs=1)()
    whole = rank_peers.torch_sort_ranking(lambda a, b: score[a:b], labels_q, labels_g)()
    assert int(one["n_valid"]) == int(whole["n_valid"])
    assert torch.equal(one["cmc"], whole["cmc"])
    assert abs(float(one["mean_ap"]) - float(whole["mean_ap"])) < 1e-15


@pytest.mark.parametrize("n_query,n_gallery,block_bytes", [
    (3368, 15913, 1 << 30), (11659, 82161, 1 << 30), (100_000, 10_000_000, 1 << 30),
    (10, 3000, 4 * 10 * 1500), (7, 5000, 4 * 7 * 300), (50, 300, 4 * 200), (3, 4, 1)])
def test_gemm_blocks_tile_the_product(n_query, n_gallery, block_bytes):
    """Every (query, gallery entry) in exactly one block; each block within
    the budget unless a single row or column exceeds it; blocked_gemm runs
    over them."""
    blocks = rank_peers.gemm_blocks(n_query, n_gallery, block_bytes)
    rows = {(r.start, r.stop) for r, _ in blocks}
    cols = {(c.start, c.stop) for _, c in blocks}
    assert len(blocks) == len(rows) * len(cols)
    for spans, n in ((rows, n_query), (cols, n_gallery)):
        edges = sorted(spans)
        assert edges[0][0] == 0 and edges[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(edges, edges[1:]))
    for r, c in blocks:
        n, m = r.stop - r.start, c.stop - c.start
        assert 4 * n * m <= block_bytes or n == 1 or m == 1
    if n_query * n_gallery < 1 << 20:
        rank_peers.blocked_gemm(torch.ones(n_query, 8), torch.ones(n_gallery, 8), block_bytes)()


def test_reid_features_are_what_they_say():
    data = rank_inputs.reid_features(60, 500, 20, 5, 70, 30, dim=32, seed=1, device="cpu")
    assert data.feat_q.shape == (60, 32) and data.feat_g.shape == (500, 32)
    for feat in (data.feat_q, data.feat_g):
        torch.testing.assert_close(feat.norm(dim=1), torch.ones(len(feat)))
    assert torch.equal(data.labels_q, torch.arange(60) % 20 + 1)
    assert int((data.labels_g == 0).sum()) == 70 and int((data.labels_g == -1).sum()) == 30
    images = torch.bincount(data.labels_g[data.labels_g > 0], minlength=21)[1:]
    assert int(images.min()) == int(images.max()) == 400 // 20
    assert not torch.equal(data.labels_g, data.labels_g.sort().values)  # shuffled
    assert set(data.cams_g.tolist()) == set(range(5)) and int(data.cams_q.max()) < 5
    again = rank_inputs.reid_features(60, 500, 20, 5, 70, 30, dim=32, seed=1, device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(data, again))
    # an identity's images score above others', the same camera's above other cameras'
    score = data.feat_q @ data.feat_g.T
    mate = data.labels_q[:, None] == data.labels_g[None, :]
    same_cam = data.cams_q[:, None] == data.cams_g[None, :]
    strangers = (data.labels_g > 0)[None, :] & ~mate
    assert score[mate].mean() > score[strangers].mean() + 0.1
    assert score[strangers & same_cam].mean() > score[strangers & ~same_cam].mean() + 0.02
    with pytest.raises(ValueError, match="leave 10 images for 20 identities"):
        rank_inputs.reid_features(5, 110, 20, 2, 70, 30, device="cpu")


def test_ijb_and_face_inputs_are_what_they_say():
    g1, g2 = rank_inputs.ijb_c_1n(300, 40, 35, dim=16, device="cpu")
    assert torch.equal(g1.labels_g, torch.arange(40)) and torch.equal(g2.labels_g,
                                                                       torch.arange(40, 75))
    assert g1.feat_q is g2.feat_q and g1.cams_q is None
    assert torch.isin(g1.labels_q, g1.labels_g).logical_xor(
        torch.isin(g2.labels_q, g2.labels_g)).all()  # each probe mated in one gallery
    face = rank_inputs.face_gallery(100, 3000, dim=16, device="cpu")
    assert torch.equal(face.labels_g.sort().values, torch.arange(3000))
    assert torch.equal(face.labels_q[:90], torch.arange(90))
    assert bool((face.labels_q[90:] >= 3000).all())
    mate = face.labels_q[:, None] == face.labels_g[None, :]
    assert int(mate.sum()) == 90
    score = face.feat_q @ face.feat_g.T
    assert score[mate].mean() > score[~mate].mean() + 0.3
    torch.testing.assert_close(face.feat_g.norm(dim=1), torch.ones(3000))
    with pytest.raises(ValueError, match="90 mated probes need a gallery of as many, got 80"):
        rank_inputs.face_gallery(100, 80, device="cpu")


def rows_of(table):
    return {row[0]: row for row in table.rows}


def test_workloads_on_the_cpu():
    """Each workload, tiny, on the CPU: its rows and targets; torchreid's
    way where it fits the limit, else a row that says what it would need;
    the face gallery's sort peer on a sample, its time scaled."""
    targets = {}
    table = rank_workloads.workload_reid(host_timer, "market", "tiny", 40, 300, 10, 3, targets,
                                         30, 20, dim=16, device="cpu")
    rows = rows_of(table)
    assert list(rows) == [rank_workloads.PEER_GEMM, rank_workloads.PEER_SORT,
                          rank_workloads.PEER_TORCHREID, rank_workloads.THIS]
    assert all(row[1] > 0 for row in rows.values())
    assert "peak host memory" in rows[rank_workloads.PEER_TORCHREID][3]
    assert "mated pairs, Q = 40 queries." in table.work
    assert table.markdown(None, 1e12).startswith("### tiny size: 40 queries x 300 gallery")

    table = rank_workloads.workload_reid(host_timer, "big", "tiny", 40, 300, 10, 3, targets,
                                         dim=16, device="cpu", torchreid_limit=1000)
    note = rows_of(table)[rank_workloads.PEER_TORCHREID]
    assert note[1] is None and note[3] == ("not run: it would hold about 0.0003 GB of host "
                                           "memory (25 bytes a pair), over the 1e-06 GB "
                                           "allowed it here")
    tables = rank_workloads.workload_ijb(host_timer, targets, 90, 12, 10, dim=16, device="cpu")
    assert [t.title[:18] for t in tables] == ["IJB-C 1:N size, G1", "IJB-C 1:N size, G2"]
    table = rank_workloads.workload_face(host_timer, 60, 400, targets, 20, dim=16, device="cpu")
    assert rows_of(table)[rank_workloads.PEER_SORT][3].startswith(
        "on 20 of the 60 queries, time x 3;")
    assert set(targets) == {"%s %s" % (key, what) for key in (
        "market", "big", "ijb G1", "ijb G2", "face") for what in ("gemm", "evaluate")}


def test_table_row_without_a_time():
    """A peer not run: its row "-" throughout, no column of ratios to it."""
    table = Table("title", "work", ["peer", "not run"])
    table.flop = 1e12
    table.add("peer", 2.0, "flop")
    table.add("not run", None, "-", "why")
    table.add("ours", 1.0, "flop")
    assert table.markdown(None, 1e15).splitlines()[4:] == [
        "| method | ms | x vs peer | of ceiling | note |", "|---|---|---|---|---|",
        "| peer | 2.000 | 1.00 | 50% of fp32 GEMM |  |", "| not run | - | - | - | why |",
        "| ours | 1.000 | 2.00 | 100% of fp32 GEMM |  |"]


def test_targets_table_and_host_timing():
    assert targets_table([("a", 1.25, 1.3, "<="), ("b", 50.0, 50.0, "<"),
                          ("c", 3.0, 3.0, ">=")]).splitlines() == [
        "| target | measured | met |", "|---|---|---|", "| a | 1.25 | yes |",
        "| b | 50.00 | **no** |", "| c | 3.00 | yes |"]
    result, ms, peak = host_run(lambda: np.ones(1 << 20).sum())
    assert result == 1 << 20 and ms > 0 and peak >= 8 << 20
    assert fp32_gemm_rate(host_timer, device="cpu", n=64) > 0


def test_sizes_and_targets_of_the_command():
    bench = load_script("bench_rank")
    assert bench.reid_sizes(False) == list(bench.REID_SIZES)
    quick = bench.reid_sizes(True)
    assert quick[0] == ("market", "Market-1501 / 8", 421, 1989, 93, 6, 349, 125)
    assert [size[5] for size in quick] == [size[5] for size in bench.REID_SIZES]
    assert bench.face_size(False) == (100_000, 10_000_000, 1_000)
    targets = {"%s %s" % (key, what): value for key, value in (
        ("market", (1.0, 1.2)), ("msmt", (1.0, 1.4)), ("market500k", (1.0, 1.3)),
        ("face", (2.0, 2.4)), ("ijb G1", (0.5, 49.0)), ("ijb G2", (0.5, 51.0)))
        for what, value in zip(("gemm", "evaluate"), value)}
    summary = targets_table(bench.target_checks(targets, bench.REID_SIZES, (10**5, 10**7)))
    assert summary.splitlines()[2:] == [
        "| Market-1501 size: rank.evaluate <= 1.3x the fp32 GEMM alone | 1.20 | yes |",
        "| MSMT17 size: rank.evaluate <= 1.3x the fp32 GEMM alone | 1.40 | **no** |",
        "| Market-1501 + 500k distractors size: rank.evaluate <= 1.3x the fp32 GEMM alone "
        "| 1.30 | yes |",
        "| face gallery, 100000 probes x 10000000: rank.evaluate <= 1.3x the fp32 GEMM alone "
        "| 1.20 | yes |",
        "| IJB-C 1:N size, G1: end to end from template features, ms (under 50) | 49.00 | yes |",
        "| IJB-C 1:N size, G2: end to end from template features, ms (under 50) | 51.00 "
        "| **no** |"]
    assert "face" not in targets_table(bench.target_checks(targets, bench.REID_SIZES[:1]))
    assert "the GEMM alone about 1.02 s" in bench.face_estimate(1000, 100_000, 1e11)


def test_section_of_the_command(tmp_path):
    """The section: its heading and command name the options, the ceiling, the
    tables and the targets; written beside the other sections."""
    bench = load_script("bench_rank")
    table = Table("a workload", "its work", ["peer"])
    table.flop = 1e12
    table.add("peer", 2.0, "flop")
    args = bench.parse_args(["--large", "--markdown", str(tmp_path / "BENCHMARKS.md")])
    text = bench.section(args, "GPU X", 5e13, [table], "| target | measured | met |")
    assert text.startswith("## 1:N identification and re-ID ranking "
                           "(`scripts/bench_rank.py --large`)\n\nDevice: GPU X, ")
    assert "Command: `python scripts/bench_rank.py --large --markdown BENCHMARKS.md`." in text
    assert "fp32 GEMM 50.0 TFLOP/s" in text and "### a workload" in text
    assert text.endswith("### Targets\n\n| target | measured | met |\n")
    assert "(also `make bench`)" in bench.section(bench.parse_args([]), "GPU X", 5e13, [], "")
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n<!-- other start -->\nx\n<!-- other end -->\n")
    write_section(str(path), "bench_rank.py --large", text)
    written = path.read_text()
    assert "<!-- other start -->\nx\n<!-- other end -->" in written
    assert "<!-- bench_rank.py --large start -->\n## 1:N identification" in written


def test_distributed_shards_checks_and_section(tmp_path, monkeypatch):
    """--distributed (benchmarks.rank_distributed): a rank's shard of the
    queries or of the gallery, the reports compared apart from their device
    memory, and rank 0's section with its target (>= 0.925 x the GPUs at the
    face gallery's size, identical)."""
    from benchmarks import rank_distributed
    data = rank_inputs.reid_features(20, 60, 8, 3, 5, 4, 8, seed=1, device="cpu")
    queries = rank_distributed._shard(data, "queries", 5, 12)
    assert len(queries.labels_q) == len(queries.feat_q) == len(queries.cams_q) == 7
    assert queries.labels_g is data.labels_g
    gallery = rank_distributed._shard(data, "gallery", 10, 40)
    assert len(gallery.labels_g) == len(gallery.feat_g) == len(gallery.cams_g) == 30
    assert torch.equal(gallery.feat_g, data.feat_g[10:40])
    one = rank_distributed._evaluate(data)
    other = rank_distributed._evaluate(data)
    other.device_bytes_peak = 123
    assert rank_distributed._same(one, other)
    assert not rank_distributed._same(one, rank_distributed._evaluate(data, ties="pessimistic"))

    comm = {"seconds": 0.01, "bytes": 2e6, "world_size": 2}
    rows = [("MSMT17 size", "queries", 1.0, 0.6, comm, True),
            ("face gallery 8 x 80", "queries", 10.0, 5.2, comm, True),
            ("face gallery 8 x 80", "gallery", 10.0, 6.0, comm, True)]
    bench = load_script("bench_rank")
    monkeypatch.setattr(bench, "workload_distributed", lambda reid, face: (0, 2, rows))
    monkeypatch.setattr(bench.torch.cuda, "get_device_name", lambda: "GPU X")
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n")
    bench.distributed(bench.parse_args(["--distributed", "--large", "--markdown", str(path)]))
    text = path.read_text()
    assert "<!-- bench_rank.py --distributed --large start -->" in text
    assert "## 1:N ranking on 2 GPUs (`scripts/bench_rank.py --distributed --large`)" in text
    assert "| face gallery 8 x 80 | queries | 10.00 | 5.20 | 1.92x | 0.010 | 2.0 MB | yes |" in text
    assert ("| face gallery 8 x 80, gallery in shards: 2 GPUs >= 1.85x one GPU, identical | "
            "1.67 | **no** |") in text
    assert "MSMT17 size, queries in shards: 2 GPUs" not in text


def test_command_runs_its_workloads_and_writes_its_section(tmp_path, monkeypatch, capsys):
    """main() as on a GPU, the workloads replaced by stand-ins that record
    what they are asked: --quick --large passes each size divided by 8 (the
    cameras kept), prints the face gallery's estimate before any workload,
    checks every target and writes its section beside the others."""
    bench = load_script("bench_rank")
    calls = []

    def stand_in(kind):
        def workload(timer, *args, **kwargs):
            calls.append((kind,) + args)
            print("running", kind)
            targets = next(a for a in args if isinstance(a, dict))
            keys = {"reid": [args[0]], "ijb": ["ijb G1", "ijb G2"], "face": ["face"]}[kind]
            tables = []
            for key in keys:
                targets[key + " gemm"], targets[key + " evaluate"] = 10.0, 12.0
                table = Table("table of " + key, "work", [])
                table.add("row", 1.0, "-")
                tables.append(table)
            return tables if kind == "ijb" else tables[0]
        return workload

    for kind in ("reid", "ijb", "face"):
        monkeypatch.setattr(bench, "workload_" + kind, stand_in(kind))
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench.torch.cuda, "get_device_name", lambda: "GPU X")
    monkeypatch.setattr(bench.roc, "built_with_cuda", True)
    monkeypatch.setattr(bench, "cuda_event_timer", lambda **options: host_timer)
    monkeypatch.setattr(bench, "fp32_gemm_rate", lambda timer: 5e13)
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n<!-- other start -->\nx\n<!-- other end -->\n")
    bench.main(["--quick", "--large", "--markdown", str(path)])

    assert [call[:7] + call[8:] for call in calls[:3]] == [
        ("reid", "market", "Market-1501 / 8", 421, 1989, 93, 6, 349, 125),
        ("reid", "msmt", "MSMT17 / 8", 1457, 10270, 382, 15, 0, 0),
        ("reid", "market500k", "Market-1501 + 500k distractors / 8", 421, 64489, 93, 6,
         62849, 125)]
    assert [call[0] for call in calls[3:]] == ["ijb", "face"]
    assert calls[4][1:3] == (12_500, 1_250_000) and calls[4][4:] == (125, 512)
    out = capsys.readouterr().out
    assert out.index("face gallery: 12500 probes x 1250000") < out.index("running reid")
    assert "| IJB-C 1:N size, G2: end to end from template features, ms (under 50) | 12.00 " \
           "| yes |" in out
    text = path.read_text()
    assert "<!-- other start -->\nx\n<!-- other end -->" in text
    section = text.split("<!-- bench_rank.py --quick --large start -->\n")[1]
    assert section.startswith("## 1:N identification and re-ID ranking (`scripts/bench_rank.py "
                              "--quick --large`)\n\nDevice: GPU X, ")
    assert "(3 runs; 3 for the sort peer; one at the face gallery's size)" in section
    assert [line for line in section.splitlines() if line.startswith("### ")] == [
        "### table of market", "### table of msmt", "### table of market500k",
        "### table of ijb G1", "### table of ijb G2", "### table of face", "### Targets"]
    assert section.count("| 1.20 | yes |") == 4 and section.count("| 12.00 | yes |") == 2


def test_command_starts(tmp_path):
    """--help, as its own process from elsewhere: the command finds and imports
    every module of the benchmark; the options stay those BENCHMARKS.md's
    commands name."""
    out = script("bench_rank.py", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for option in ("--quick", "--large", "--markdown"):
        assert option in out.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a GPU-less run")
def test_command_refuses_without_a_gpu(capsys):
    status, _, err = call(load_script("bench_rank").main, ["--quick"], capsys)
    assert status == 1 and "bench_rank.py: needs a CUDA device and a CUDA build" in err


@pytest.mark.gpu
def test_workloads_on_the_gpu():
    """Each workload, small, on the GPU: the peers' checks pass on the
    evaluator's GPU scores, and the rows are filled."""
    once = cuda_event_timer(warmup=0, repeat=1, flush_bytes=1 << 20)
    targets = {}
    tables = [rank_workloads.workload_reid(once, "market", "small", 300, 2000, 60, 6, targets,
                                           200, 100, dim=256)]
    tables += rank_workloads.workload_ijb(once, targets, 900, 80, 70, dim=64)
    tables.append(rank_workloads.workload_face(once, 500, 20_000, targets, 50, dim=64))
    assert len(targets) == 8
    for table in tables:
        assert all(row[1] is None or row[1] > 0 for row in table.rows)
        assert rank_workloads.THIS in rows_of(table)


@pytest.mark.gpu
def test_quick_run_writes_its_section(tmp_path, capsys):
    bench = load_script("bench_rank")
    path = tmp_path / "BENCHMARKS.md"
    bench.main(["--quick", "--markdown", str(path)])
    text = path.read_text()
    assert "<!-- bench_rank.py --quick start -->" in text
    assert "Command: `python scripts/bench_rank.py --quick --markdown BENCHMARKS.md`." in text
    assert "| IJB-C 1:N size, G1: end to end" in capsys.readouterr().out
