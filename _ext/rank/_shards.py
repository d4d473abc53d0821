"""rank.evaluate across processes (torch.distributed): what the ranks
exchange, by how the work is shared.

    shard="queries"  each rank counts its own queries against the whole
                     gallery: the ranks' per-query counts concatenate, in
                     rank order (gathered_arrays)
    shard="gallery"  each rank counts every query against its own consecutive
                     part of the gallery: the ranks' mates are shared first
                     (shared_mates), so that every rank counts its non-mates
                     against all of a query's mates; then the counts add up
                     and the best entries are the best of the ranks'
                     (combined_gallery_shards)
"""

import numpy as np

from ._view import DTYPES


def _as_int64(array):
    if array.dtype == np.uint64:
        return array.view(np.int64)
    if array.dtype == np.float32:
        return array.view(np.uint32).astype(np.int64)
    return array.astype(np.int64)


def _from_int64(array, dtype):
    if dtype == np.uint64:
        return array.view(np.uint64)
    if dtype == np.float32:
        return array.astype(np.uint32).view(np.float32)
    return array.astype(dtype)


def _gathered(session, arrays, names):
    """Each of `names` (arrays of one length on this rank): every rank's, in
    rank order, in its own dtype."""
    parts = session.gather([_as_int64(arrays[name]) for name in names])
    return {name: [_from_int64(part, DTYPES.get(name, np.int64)) for part in ranks]
            for name, ranks in zip(names, parts)}


# ---------------------------------------------------------------------------
# the queries in shards

def gathered_arrays(session, arrays):
    """Every rank's counts (view_arrays' layout), concatenated in rank order:
    those of one process over all the ranks' queries. Collective."""
    if session.world_size == 1:
        return arrays
    local = dict(arrays, mates=np.diff(arrays["first"]))
    groups = (("mates", "best_key", "best_index", "n_nonmates", "nan_mates"),
              ("mate_key", "mate_index", "above", "tied"), ("topk_index", "topk_score"),
              ("kept_keys",), ("totals",))
    out = {"topk": arrays["topk"]}
    for names in groups:
        for name, ranks in _gathered(session, local, names).items():
            out[name] = np.concatenate(ranks).astype(DTYPES.get(name, np.int64), copy=False)
    out["first"] = np.concatenate([[0], np.cumsum(out.pop("mates"))]).astype(np.int64)
    out["totals"] = out["totals"].reshape(-1, 2).sum(axis=0, dtype=np.uint64)
    return out


# ---------------------------------------------------------------------------
# the gallery in shards

def gallery_offsets(infos):
    """Where each rank's part of the gallery begins in the whole, and its size."""
    sizes = [info["n_gallery"] for info in infos]
    return [int(x) for x in np.concatenate([[0], np.cumsum(sizes)])]


def shared_mates(session, arrays, offset):
    """Every query's mates over all the ranks' parts of the gallery, as one
    process finds them (first, mate_key ascending within a query, then by
    mate_index, the index in the whole gallery): the same on every rank.
    Collective."""
    mates = _gathered(session, dict(arrays, mates=np.diff(arrays["first"])), ("mates",))["mates"]
    local = dict(arrays, mate_index=arrays["mate_index"] + offset)
    lists = _gathered(session, local, ("mate_key", "mate_index"))
    n_query = len(arrays["first"]) - 1
    query = np.concatenate([np.repeat(np.arange(n_query, dtype=np.int64), counts)
                            for counts in mates])
    keys = np.concatenate(lists["mate_key"])
    index = np.concatenate(lists["mate_index"])
    order = np.lexsort((index, keys, query))
    first = np.zeros(n_query + 1, np.int64)
    np.cumsum(np.sum(mates, axis=0), out=first[1:])
    return first, keys[order], index[order]


def _best_of(keys, indices):
    """(W, Q) candidates' keys and whole-gallery indices (-1: none): each
    query's highest key, the lowest index of equals."""
    best = keys.max(axis=0)
    index = np.where((keys == best) & (indices >= 0), indices, np.iinfo(np.int64).max).min(axis=0)
    return best, np.where(best > 0, index, -1).astype(np.int64)


def _top_of(indices, scores, k):
    """(Q, n) candidates (-1 / NaN: none): each query's k best, score
    descending, then index ascending (-1 / NaN past those there are)."""
    n_query, n = indices.shape
    none = indices < 0
    row = np.repeat(np.arange(n_query), n)
    order = np.lexsort((indices.ravel(), -np.nan_to_num(scores.ravel()), none.ravel(), row))
    order = order.reshape(n_query, n)[:, :k] % n  # row-major: each row's own columns
    return (np.take_along_axis(indices, order, axis=1),
            np.take_along_axis(scores, order, axis=1))


def combined_gallery_shards(session, arrays, offset, keep):
    """The counts of all the ranks' parts of the gallery (each counted against
    shared_mates' lists), as one process counts the whole gallery: above,
    tied, the non-mates and the totals added up; the best non-mate, the top k
    and the `keep` highest non-mated keys the best of the ranks'. Collective."""
    local = dict(arrays)
    local["best_index"] = np.where(arrays["best_index"] >= 0, arrays["best_index"] + offset, -1)
    local["topk_index"] = np.where(arrays["topk_index"] >= 0, arrays["topk_index"] + offset, -1)
    out = dict(arrays)
    ranks = _gathered(session, local, ("above", "tied"))
    ranks.update(_gathered(session, local, ("best_key", "best_index", "n_nonmates",
                                            "nan_mates")))
    ranks.update(_gathered(session, local, ("totals",)))
    for name in ("above", "tied", "n_nonmates", "nan_mates", "totals"):
        out[name] = np.sum(ranks[name], axis=0, dtype=np.uint64)
    out["best_key"], out["best_index"] = _best_of(np.stack(ranks["best_key"]),
                                                  np.stack(ranks["best_index"]))
    k, n_query = arrays["topk"], len(arrays["first"]) - 1
    if k:
        top = _gathered(session, local, ("topk_index", "topk_score"))
        indices = np.concatenate([a.reshape(n_query, k) for a in top["topk_index"]], axis=1)
        scores = np.concatenate([a.reshape(n_query, k) for a in top["topk_score"]], axis=1)
        indices, scores = _top_of(indices, scores, k)
        out["topk_index"], out["topk_score"] = indices.ravel(), scores.ravel()
    if keep:
        kept = np.concatenate(_gathered(session, local, ("kept_keys",))["kept_keys"])
        out["kept_keys"] = np.sort(kept)[::-1][:keep].copy()
    return out
