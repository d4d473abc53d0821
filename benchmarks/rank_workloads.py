"""The 1:N ranking benchmark's workloads: each makes its inputs (rank_inputs),
checks every peer (rank_peers) on rank.evaluate's own scores against
rank.evaluate before any timing, times the peers and rank.evaluate with the
timer it is given, and returns its table (roc_table.Table) for
scripts/bench_rank.py to write. `targets` collects the times that the
driver's targets compare, by name ("<key> gemm", "<key> evaluate").

    workload_reid   re-ID features with cameras, distractors and junk
                    (Market-1501, MSMT17, Market + 500k distractors)
    workload_ijb    IJB-C 1:N: the probes against G1, and against G2
    workload_face   a face gallery of 10^7 and 10^5 probes (checks and the
                    sort peer on a sample of the probes)
    ranking_table   what each of them runs on its inputs

Each runs where its inputs are (the tests run them on the CPU, tiny).
"""

import os

import numpy as np
import torch

from _ext import rank, roc
from benchmarks.rank_inputs import RankSet, face_gallery, ijb_c_1n, reid_features
from benchmarks.rank_peers import (TORCHREID_BYTES_PER_PAIR, blocked_gemm, check_peer,
                                   eval_market1501, matmul_scores, torch_sort_ranking,
                                   torchreid_way)
from benchmarks.roc_table import Table
from benchmarks.timing import host_run

PEER_GEMM = "fp32 GEMM alone (blocked torch.matmul)"
PEER_SORT = "torch matmul + per-row torch.sort, chunked"
PEER_TORCHREID = "torchreid's way (CPU: distance matrix + np.argsort)"
THIS = "rank.evaluate (this project)"
# The largest host memory torchreid's way may take here: above it, its row
# says what it would need instead of running.
TORCHREID_LIMIT_BYTES = 16e9
# How far outside rank.evaluate's interval a peer may lie on its own
# scores, which are not the evaluator's (cuBLAS's sums in another order than
# one FMA chain a pair, a few 1e-6 apart): the mates and non-mates whose
# order that changes sit deep in the lists, where they move mAP by about
# 1e-5, and turn a query's rank-1 hit into a miss (1 / n) only now and then;
# a peer with a wrong formula moves every query. The larger of the two.
OWN_SCORES_TOLERANCE = 1e-3
OWN_SCORES_QUERIES = 3


def _queries(data, rows):
    """data with its queries cut to `rows` (a slice, contiguous copies)."""
    def cut(x):
        return x[rows].contiguous() if x is not None else None
    return data._replace(labels_q=cut(data.labels_q), feat_q=cut(data.feat_q),
                         cams_q=cut(data.cams_q))


def evaluate(data, **options):
    """rank.evaluate of the RankSet's queries against its gallery from
    features, with its cameras where it has them."""
    return rank.evaluate(data.labels_q, data.labels_g, feat_q=data.feat_q, feat_g=data.feat_g,
                         cams_q=data.cams_q, cams_g=data.cams_g, **options)


def sort_peer(data, scores):
    """torch_sort_ranking of the RankSet's labels and cameras, on scores(a, b)."""
    return torch_sort_ranking(scores, data.labels_q, data.labels_g, data.cams_q, data.cams_g)


def own_scores(data):
    """scores(a, b) by roc.pair_scores: rank.evaluate's own fp32 bits."""
    return lambda a, b: roc.pair_scores(data.feat_q[a:b], data.feat_g)


def _host(data):
    """The RankSet as NumPy arrays on the host."""
    return RankSet(*(x.cpu().numpy() if x is not None else None for x in data))


def _with_torch_peak(fn, device):
    """(fn(), the most torch memory allocated on the GPU during it beyond what
    was allocated before, or None where `device` is not a GPU)."""
    if device.type != "cuda":
        return fn(), None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = fn()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() - before


def _peak_note(peak):
    return "" if peak is None else "; torch peak %.0f MiB beyond the inputs" % (peak / 2**20)


def own_scores_tolerance(n_valid):
    """check_peer's tolerance for a peer on its own scores, over n_valid queries."""
    return max(OWN_SCORES_TOLERANCE, OWN_SCORES_QUERIES / max(n_valid, 1))


def _metrics(mean_ap, cmc):
    return "mAP %.4f, rank-1 %.4f" % (float(mean_ap), float(cmc[0]))


def check_peers(data, torchreid):
    """The sort peer (and with `torchreid`, torchreid's way) on rank.evaluate's
    own scores, each within float64 rounding of rank.evaluate's interval
    between pessimistic and optimistic ties (rank_peers.check_peer; one point
    where no mate ties a non-mate). Returns the two reports."""
    pessimistic = evaluate(data, ties="pessimistic", per_query=True)
    optimistic = evaluate(data, ties="optimistic")
    tied = int(np.count_nonzero(pessimistic.per_query["mate_tied"]))
    check_peer(PEER_SORT, sort_peer(data, own_scores(data))(), pessimistic, optimistic)
    if torchreid:
        host = _host(data)
        keep = host.labels_g != -1  # the loaders drop junk
        distances = -roc.pair_scores(data.feat_q, data.feat_g).cpu().numpy()[:, keep]
        check_peer(PEER_TORCHREID, eval_market1501(
            distances, host.labels_q, host.labels_g[keep], host.cams_q,
            host.cams_g[keep] if host.cams_g is not None else None), pessimistic, optimistic)
    print("  checks: %s%s on rank.evaluate's scores agree with it to float64 rounding (%d of "
          "%d mated pairs tie a non-mate: there, between its pessimistic and optimistic values)"
          % (PEER_SORT, " and " + PEER_TORCHREID if torchreid else "", tied,
             pessimistic.n_mated_pairs), flush=True)
    return pessimistic, optimistic


def ranking_table(timer, title, data, targets, key, sample=None, slow_repeat=3,
                  torchreid_limit=TORCHREID_LIMIT_BYTES):
    """The table of one query set against one gallery: the peers checked
    (check_peers), then timed: the GEMM alone, the sort peer on its own
    (cuBLAS) scores, torchreid's way where its host memory stays within
    torchreid_limit, and rank.evaluate with default options (and the
    cameras where the data has them). sample: the checks and the sort peer on
    every (Q / sample)-th query only, its time scaled to all of them (and
    torchreid's way not run). The sort peer is timed over slow_repeat runs."""
    torch.backends.cuda.matmul.allow_tf32 = False
    device = data.feat_q.device
    n_query, n_gallery, dim = data.feat_q.shape[0], data.feat_g.shape[0], data.feat_q.shape[1]
    pairs = n_query * n_gallery
    torchreid_bytes = TORCHREID_BYTES_PER_PAIR * pairs
    torchreid = sample is None and torchreid_bytes <= torchreid_limit
    checked = data
    if sample is not None:  # spread over the queries (the face gallery's unmated ones last)
        checked = _queries(data, slice(0, n_query, max(1, n_query // sample)))
        sample = checked.feat_q.shape[0]
    pessimistic, optimistic = check_peers(checked, torchreid)

    table = Table(title, None, [PEER_GEMM, PEER_SORT, PEER_TORCHREID])
    table.flop = 2 * pairs * dim

    ms, peak = _with_torch_peak(lambda: timer(blocked_gemm(data.feat_q, data.feat_g)), device)
    targets[key + " gemm"] = table.add(PEER_GEMM, ms, "flop", "TF32 off" + _peak_note(peak))

    result = {}

    def timed_sort_peer():
        run = sort_peer(checked, matmul_scores(checked.feat_q, checked.feat_g))
        return timer(lambda: result.update(r=run()), repeat=slow_repeat)
    ms, peak = _with_torch_peak(timed_sort_peer, device)
    found = result.pop("r")
    off = check_peer(PEER_SORT + " on its own scores", found, pessimistic, optimistic,
                     own_scores_tolerance(pessimistic.n_mated))
    note = "%s on cuBLAS's scores, %.1g outside rank.evaluate's" % (
        _metrics(found["mean_ap"], found["cmc"]), off)
    if sample is not None:
        ms *= n_query / sample
        note = "on %d of the %d queries, time x %g; %s" % (sample, n_query, n_query / sample,
                                                           note)
    table.add(PEER_SORT, ms, "flop", note + _peak_note(peak))

    if torchreid:
        host = _host(data)
        found, ms, peak = host_run(lambda: torchreid_way(
            host.feat_q, host.feat_g, host.labels_q, host.labels_g, host.cams_q, host.cams_g))
        off = check_peer(PEER_TORCHREID + " on its own scores", found, pessimistic, optimistic,
                         own_scores_tolerance(pessimistic.n_mated))
        table.add(PEER_TORCHREID, ms, "-", "one run, %d CPU cores; %s, %.1g outside "
                  "rank.evaluate's; peak host memory %.2f GB (tracemalloc: NumPy's "
                  "allocations), %.1f bytes a pair" % (
                      os.cpu_count(), _metrics(found["mean_ap"], found["cmc"]), off,
                      peak / 1e9, peak / pairs))
        del host
    elif torchreid_bytes > torchreid_limit:
        table.add(PEER_TORCHREID, None, "-", "not run: it would hold about %.3g GB of host "
                  "memory (%d bytes a pair), over the %.3g GB allowed it here" % (
                      torchreid_bytes / 1e9, TORCHREID_BYTES_PER_PAIR, torchreid_limit / 1e9))
    else:
        table.add(PEER_TORCHREID, None, "-", "not run where the peers run on a sample")

    report = {}
    ms = timer(lambda: report.update(r=evaluate(data)))
    targets[key + " evaluate"] = table.add(THIS, ms, "flop", "%s; evaluator's device memory "
                                           "peak %.0f MiB beyond the inputs" % (
        _metrics(report["r"].mean_ap, report["r"].cmc), report["r"].device_bytes_peak / 2**20))
    table.work = ("%.1f TFLOP (2 Q G D); a score matrix would take %.1f GB, torchreid's way "
                  "about %d bytes a pair on the host (%.1f GB). rank.evaluate holds O(P + Q) "
                  "beyond the inputs and a normalized copy of them: P = %d mated pairs, Q = %d "
                  "queries." % (2 * pairs * dim / 1e12, 4 * pairs / 1e9,
                                TORCHREID_BYTES_PER_PAIR, torchreid_bytes / 1e9,
                                report["r"].n_mated_pairs, n_query))
    return table


def _free_device_memory(device):
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def workload_reid(timer, key, name, n_query, n_gallery, n_ids, n_cams, targets,
                  n_distractors=0, n_junk=0, dim=2048, seed=0, device="cuda",
                  torchreid_limit=TORCHREID_LIMIT_BYTES):
    """Re-ID features at a dataset's size (rank_inputs.reid_features), the
    Market-1501 protocol (cameras, junk -1, distractors 0)."""
    data = reid_features(n_query, n_gallery, n_ids, n_cams, n_distractors, n_junk, dim, seed,
                         device)
    title = ("%s size: %d queries x %d gallery entries (%.2g pairs), D = %d, %d identities in "
             "%d cameras, %d distractors (id 0), %d junk (id -1)" % (
                 name, n_query, n_gallery, n_query * n_gallery, dim, n_ids, n_cams,
                 n_distractors, n_junk))
    table = ranking_table(timer, title, data, targets, key, torchreid_limit=torchreid_limit)
    del data
    _free_device_memory(device)
    return table


def workload_ijb(timer, targets, n_probes=19_593, n_g1=1_772, n_g2=1_759, dim=512,
                 device="cuda"):
    """IJB-C 1:N from template features: the probes against G1 and against
    G2 (rank_inputs.ijb_c_1n), one table each; targets "ijb G1 ..." and
    "ijb G2 ..."."""
    tables = []
    for name, data in zip(("G1", "G2"), ijb_c_1n(n_probes, n_g1, n_g2, dim, device=device)):
        n_mated = int(torch.isin(data.labels_q, data.labels_g).sum())
        title = ("IJB-C 1:N size, %s: %d probe templates x %d gallery templates, D = %d "
                 "(%d probes mated, one template each; %d non-mated searches)" % (
                     name, n_probes, data.feat_g.shape[0], dim, n_mated, n_probes - n_mated))
        tables.append(ranking_table(timer, title, data, targets, "ijb " + name))
    _free_device_memory(device)
    return tables


def workload_face(timer, n_probes, n_gallery, targets, sample, dim=512, device="cuda"):
    """A face gallery of n_gallery people seen once and n_probes probes, 9 in
    10 mated (rank_inputs.face_gallery); the checks and the sort peer on a
    sample of `sample` probes. Target key "face"."""
    data = face_gallery(n_probes, n_gallery, dim, device=device)
    title = ("face 1:N: %d probes x a gallery of %d (%.2g pairs), D = %d, one image a person, "
             "9 in 10 probes mated" % (n_probes, n_gallery, n_probes * n_gallery, dim))
    table = ranking_table(timer, title, data, targets, "face", sample=sample, slow_repeat=1)
    del data
    _free_device_memory(device)
    return table
