"""The 1:N ranking peers rank.evaluate is timed beside, each as its users
write it, and the check that each computes what rank.evaluate reports:

    gemm_blocks, blocked_gemm   torch.matmul of the whole Q x G product in blocks
                                that fit, alone: the floor of any evaluation from
                                features
    matmul_scores               the scores a user computes: rows of the unit
                                features' product (cuBLAS)
    torch_sort_ranking          what a user writes on the GPU: scores a chunk of
                                queries at a time, masks the excluded entries,
                                sorts each row (torch.sort) and reads torchreid's
                                mAP and CMC off the sorted match flags
    cosine_distance, eval_market1501, torchreid_way
                                torchreid's and fast-reid's way on the CPU: the
                                whole distance matrix, np.argsort of every row,
                                match flags for the whole matrix, then
                                eval_market1501's loop over the queries
    check_peer                  a peer's mAP, CMC and valid queries against
                                rank.evaluate's

The peers' formulas are torchreid's eval_market1501 (also fast-reid's): per
query, the gallery entries with its identity and its camera removed;
CMC(k) = [a mate within the first k]; AP = the mean over the mates of
(mates so far / position); queries without a mate skipped. The datasets'
loaders drop junk images (label -1) before any of this; the peers drop or
mask them where they enter. Everything is in float64 here (torchreid
averages its CMC in float32). Ties among scores fall in whatever order the
sort gives them: check_peer allows for that.

None imports _ext (rank_workloads passes rank.evaluate's own scores in).
"""

import numpy as np
import torch

# the block of the product blocked_gemm holds at a time
GEMM_BLOCK_BYTES = 1 << 30
# score-matrix entries a chunk of torch_sort_ranking holds (about 33 bytes
# each: the scores, masked scores, sorted values, int64 order, flags, an
# int32 cumsum): about 4.4 GB
SORT_CHUNK_PAIRS = 1 << 27
# torchreid_way's host memory at its peak, a pair: the distance matrix and
# its intermediate product (4 + 4, the latter freed), argsort's int64 order
# (8), the gathered int64 gallery labels (8), their bool comparison (1) and
# the int32 match flags (4): 4 + 8 + 8 + 1 + 4 = 25 at the flags' making
TORCHREID_BYTES_PER_PAIR = 25


# ---------------------------------------------------------------------------
# the GEMM alone

def gemm_blocks(n_query, n_gallery, block_bytes=GEMM_BLOCK_BYTES):
    """(rows, cols) slices tiling the Q x G product, each block's float32
    output within block_bytes: all the queries against columns of the
    gallery where a wide enough block fits (one pass over the gallery, the
    queries read again a block), else rows of queries against the whole
    gallery."""
    cols = min(n_gallery, max(1, block_bytes // (4 * max(n_query, 1))))
    if cols >= min(n_gallery, 1024):
        return [(slice(0, n_query), slice(c, min(c + cols, n_gallery)))
                for c in range(0, n_gallery, cols)]
    rows = max(1, block_bytes // (4 * n_gallery))
    return [(slice(r, min(r + rows, n_query)), slice(0, n_gallery))
            for r in range(0, n_query, rows)]


def blocked_gemm(feat_q, feat_g, block_bytes=GEMM_BLOCK_BYTES):
    """run(): torch.matmul of every block of gemm_blocks into one reused
    buffer (TF32 as torch.backends has it: the benchmark turns it off). The
    gallery is read through a transposed view: a 20 GB gallery leaves no
    room for a transposed copy."""
    blocks = gemm_blocks(feat_q.shape[0], feat_g.shape[0], block_bytes)
    rows, cols = blocks[0]
    buffer = torch.empty((rows.stop - rows.start) * (cols.stop - cols.start),
                         device=feat_q.device)

    def run():
        for rows, cols in blocks:
            n, m = rows.stop - rows.start, cols.stop - cols.start
            torch.matmul(feat_q[rows], feat_g[cols].T, out=buffer[:n * m].view(n, m))
    return run


# ---------------------------------------------------------------------------
# what a user writes on the GPU

def matmul_scores(feat_q, feat_g):
    """scores(a, b): queries a..b against the gallery by torch.matmul (the
    features are unit rows: their products are the cosines)."""
    gallery_t = feat_g.T
    return lambda a, b: torch.matmul(feat_q[a:b], gallery_t)


def torch_sort_ranking(scores, labels_q, labels_g, cams_q=None, cams_g=None, junk=-1,
                       max_rank=50, chunk_pairs=SORT_CHUNK_PAIRS):
    """run() -> {"mean_ap", "cmc" (max_rank,), "n_valid"} (tensors, float64
    and int64): torchreid's mAP and CMC computed with torch on the labels'
    device, a chunk of queries at a time. scores(a, b) gives queries a..b's
    (b - a, G) scores. Per chunk: the excluded entries (the query's identity
    in its camera, junk) get -inf and no match, so that torch.sort puts them
    after every kept entry; the match flags in sorted order give each mate's
    position; AP = sum over the mates of (mates so far / position) / mates;
    CMC(k) = [first mate within k]."""
    n_query, n_gallery = labels_q.numel(), labels_g.numel()
    rows = max(1, chunk_pairs // max(n_gallery, 1))
    device = labels_q.device
    junk_g = labels_g == junk if junk is not None else None
    ranks = min(max_rank, n_gallery)

    def run():
        ap_sum = torch.zeros((), dtype=torch.float64, device=device)
        cmc_hits = torch.zeros(max_rank, dtype=torch.int64, device=device)
        n_valid = torch.zeros((), dtype=torch.int64, device=device)
        for a in range(0, n_query, rows):
            b = min(a + rows, n_query)
            mate = labels_q[a:b, None] == labels_g[None, :]
            excluded = torch.zeros_like(mate)
            if cams_q is not None:
                excluded |= mate & (cams_q[a:b, None] == cams_g[None, :])
            if junk_g is not None:
                excluded |= junk_g[None, :]
            s = scores(a, b).masked_fill(excluded, float("-inf"))
            order = torch.sort(s, dim=1, descending=True).indices
            del s
            hits = torch.gather(mate & ~excluded, 1, order)
            del order, mate, excluded
            n_mates = hits.sum(1)
            valid = n_mates > 0
            found = torch.cumsum(hits, 1, dtype=torch.int32)
            row, position = torch.nonzero(hits, as_tuple=True)
            precision = found[row, position].double() / (position + 1).double()
            ap = torch.zeros(b - a, dtype=torch.float64, device=device).index_add_(0, row,
                                                                                  precision)
            ap_sum += (ap[valid] / n_mates[valid]).sum()
            cmc_hits[:ranks] += (found[valid, :ranks] > 0).sum(0)
            cmc_hits[ranks:] += valid.sum()
            n_valid += valid.sum()
        return {"mean_ap": ap_sum / n_valid, "cmc": cmc_hits.double() / n_valid,
                "n_valid": n_valid}
    return run


# ---------------------------------------------------------------------------
# torchreid's way on the CPU

def cosine_distance(feat_q, feat_g):
    """torchreid's cosine_distance (1 - the products of the L2-normalized
    rows), in NumPy float32 so that tracemalloc sees it."""
    q = feat_q / np.linalg.norm(feat_q, axis=1, keepdims=True)
    g = feat_g / np.linalg.norm(feat_g, axis=1, keepdims=True)
    return 1 - q @ g.T


def eval_market1501(distmat, q_pids, g_pids, q_camids=None, g_camids=None, max_rank=50):
    """torchreid's eval_market1501 on a (Q, G) distance matrix (ascending is
    better): np.argsort of every row and the whole matrix's match flags,
    then per query the entries of its identity and camera removed (cameras
    None: none), CMC and AP of the rest. CMC(k) counts the queries whose
    first mate lies within k (torchreid: the cumulated matches clipped to 1);
    each query's AP divides its cumulated matches by np.arange (torchreid: a
    list comprehension; its Cython version: a C loop). Returns {"mean_ap", "cmc" (max_rank,),
    "n_valid"}."""
    n_query = distmat.shape[0]
    indices = np.argsort(distmat, axis=1)
    matches = (g_pids[indices] == q_pids[:, None]).astype(np.int32)
    cmc_sum = np.zeros(max_rank)
    ap_sum, n_valid = 0.0, 0
    for i in range(n_query):
        flags = matches[i]
        if q_camids is not None:
            order = indices[i]
            flags = flags[~((g_pids[order] == q_pids[i]) & (g_camids[order] == q_camids[i]))]
        if not flags.any():
            continue
        found = flags.cumsum()
        cmc_sum[np.argmax(flags):] += 1  # from the first mate's position on (empty past max_rank)
        ap_sum += (found / np.arange(1.0, len(flags) + 1) * flags).sum() / flags.sum()
        n_valid += 1
    return {"mean_ap": ap_sum / n_valid, "cmc": cmc_sum / n_valid, "n_valid": n_valid}


def torchreid_way(feat_q, feat_g, q_pids, g_pids, q_camids=None, g_camids=None, junk=-1,
                  max_rank=50):
    """torchreid / fast-reid from NumPy features: the gallery's junk dropped
    (their loaders' step), the cosine distance matrix, eval_market1501."""
    if junk is not None:
        keep = g_pids != junk
        feat_g, g_pids = feat_g[keep], g_pids[keep]
        g_camids = g_camids[keep] if g_camids is not None else None
    return eval_market1501(cosine_distance(feat_q, feat_g), q_pids, g_pids, q_camids, g_camids,
                           max_rank)


# ---------------------------------------------------------------------------
# the check

def _number(x):
    return x.item() if isinstance(x, torch.Tensor) else x


def check_peer(name, result, pessimistic, optimistic, tolerance=None):
    """The peer's result (torch_sort_ranking's or eval_market1501's) against
    rank.evaluate's reports with ties="pessimistic" and "optimistic" on the
    same queries: the same valid queries, and mAP and CMC at every rank
    within [pessimistic, optimistic] +- tolerance. Whatever order a sort
    gives tied entries, the metrics lie in that interval, which is one point
    where no mate ties a non-mate; on rank.evaluate's own scores, tolerance
    None is float64 rounding (4 n eps over a mean of n queries). Raises
    AssertionError naming the peer and the metric; returns how far outside
    the interval the peer lies at most (0 within it)."""
    n_valid = int(_number(result["n_valid"]))
    if n_valid != pessimistic.n_mated:
        raise AssertionError("%s: averages over %d queries, rank.evaluate over %d"
                             % (name, n_valid, pessimistic.n_mated))
    if tolerance is None:
        tolerance = 4 * max(n_valid, 1) * np.finfo(np.float64).eps
    cmc = np.asarray(result["cmc"].cpu() if isinstance(result["cmc"], torch.Tensor)
                     else result["cmc"], dtype=np.float64)
    values = [("mAP", _number(result["mean_ap"]), pessimistic.mean_ap, optimistic.mean_ap)]
    values += [("rank-%d" % (k + 1), cmc[k], pessimistic.cmc[k], optimistic.cmc[k])
               for k in range(len(pessimistic.cmc))]
    worst = 0.0
    for metric, value, low, high in values:
        off = max(low - value, value - high, 0.0)
        if off > tolerance:
            raise AssertionError(
                "%s: %s %.17g lies outside rank.evaluate's [%.17g, %.17g] (ties pessimistic, "
                "optimistic) by %.3g (tolerance %.3g)" % (name, metric, value, low, high, off,
                                                          tolerance))
        worst = max(worst, off)
    return worst
