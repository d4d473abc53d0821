"""Reference implementations of the 1:N metrics, written for the tests from
each peer's published formula, over a whole (Q, G) score matrix in float64:
what rank.evaluate must equal. Each peer sorts a query's gallery and reads
the metric off the ranked list; here the ranked list is made explicitly
(ranked_lists), so a test chooses how ties are ordered.

Peers (their formulas, not their code):
  torchreid / fast-reid eval_market1501: per query, drop the gallery entries
    with its id and its camera; CMC = [first hit within k]; AP = mean over the
    hits of (hits so far / position); fast-reid's INP = hits / position of the
    last hit; queries without a hit skipped
  layumi Person_reID_baseline compute_mAP: junk = same id and same camera, and
    id -1; AP = sum over hits i (0-based) of (old + new precision) / 2 / ngood,
    new = (i + 1) / (row + 1), old = i / row (1 at row 0)
  pytorch-metric-learning: R = the query's same-label references; MAP@R =
    sum over the first R positions of precision@i at hits / R; R-precision =
    hits in the first R / R; precision@1; lone queries skipped
  InsightFace ijb_evals.py evaluation_1N, ijb_1n.py, the 1.0 evaluation
    studio's identification, NIST FRVT's FNIR at FPIR: see each function
"""

import itertools
import math

import numpy as np


# ---------------------------------------------------------------------------
# ranked lists

def excluded(i, j, labels_q, labels_g, cams_q, cams_g, junk, same_set):
    if same_set and i == j:
        return True
    if junk is not None and labels_g[j] == junk:
        return True
    return cams_q is not None and labels_g[j] == labels_q[i] and cams_g[j] == cams_q[i]


def candidates(score, labels_q, labels_g, cams_q=None, cams_g=None, junk=-1, same_set=False):
    """Per query, the (gallery index, score, is_mate) of its entries that count:
    exclusions applied, NaN scores dropped."""
    out = []
    for i in range(score.shape[0]):
        row = []
        for j in range(score.shape[1]):
            s = float(score[i, j])
            if excluded(i, j, labels_q, labels_g, cams_q, cams_g, junk, same_set) or s != s:
                continue
            is_mate = labels_g[j] == labels_q[i] and not (junk is not None and labels_q[i] == junk)
            row.append((j, s, bool(is_mate)))
        out.append(row)
    return out


def ranked(row, ties):
    """A query's entries (candidates' rows) in ranked order: score descending;
    ties: "none" (there must be none among scores), "pessimistic" (non-mates
    first), "optimistic" (mates first); then by gallery index."""
    if ties == "none":
        scores = [s for _, s, _ in row]
        assert len(set(scores)) == len(scores), "the data has tied scores"
    mates_first = ties == "optimistic"
    return sorted(row, key=lambda e: (-e[1], (not e[2]) if mates_first else e[2], e[0]))


def tie_orders(row):
    """Every ranked order of a query's entries that the scores allow: the
    entries tied on a score in every order (tiny rows only)."""
    groups = [list(g) for _, g in itertools.groupby(sorted(row, key=lambda e: -e[1]),
                                                    key=lambda e: e[1])]
    for parts in itertools.product(*(itertools.permutations(g) for g in groups)):
        yield [e for part in parts for e in part]


# ---------------------------------------------------------------------------
# closed set: metrics of one ranked list (relevance: is_mate by position)

def torchreid(relevance, max_rank):
    """(CMC (max_rank,), AP) of eval_market1501; None without a hit."""
    rel = np.asarray(relevance, dtype=np.int64)
    if not rel.any():
        return None
    cumulative = rel.cumsum()
    cmc = np.minimum(cumulative, 1).astype(np.float64)
    cmc = np.concatenate([cmc, np.ones(max(0, max_rank - len(cmc)))])[:max_rank]
    precision = cumulative / np.arange(1.0, len(rel) + 1)
    return cmc, float((precision * rel).sum() / rel.sum())


def fastreid_inp(relevance):
    rel = np.asarray(relevance, dtype=np.int64)
    last = int(np.flatnonzero(rel).max())
    return float(rel.cumsum()[last] / (last + 1.0))


def layumi_ap(relevance):
    rows_good = np.flatnonzero(np.asarray(relevance, dtype=bool))
    ngood = len(rows_good)
    ap = 0.0
    for i, row in enumerate(rows_good):
        d_recall = 1.0 / ngood
        precision = (i + 1) * 1.0 / (row + 1)
        old_precision = i * 1.0 / row if row != 0 else 1.0
        ap = ap + d_recall * (old_precision + precision) / 2
    return ap


def pml(relevance):
    """(MAP@R, R-precision, precision@1) with R = the list's mates."""
    rel = np.asarray(relevance, dtype=np.float64)
    R = int(rel.sum())
    top = rel[:R]
    precision_at = np.cumsum(top) / np.arange(1, R + 1)
    return float((precision_at * top).sum() / R), float(top.sum() / R), float(rel[0])


def list_metrics(lists, max_rank):
    """Each ranked list's (relevance vector's) metrics: a dict of cmc, ap,
    trapezoid, inp, map_at_r, r_precision and p1; None without a mate."""
    per_list = []
    for rel in lists:
        found = torchreid(rel, max_rank)
        if found is None:
            per_list.append(None)
            continue
        map_r, r_prec, p1 = pml(rel)
        per_list.append({"cmc": found[0], "ap": found[1], "trapezoid": layumi_ap(rel),
                         "inp": fastreid_inp(rel), "map_at_r": map_r, "r_precision": r_prec,
                         "p1": p1})
    return per_list


def mean_metrics(per_list):
    """list_metrics' means over the lists with a mate, by the report's names."""
    mated = [m for m in per_list if m is not None]
    if not mated:
        return {"n_mated": 0}
    return {"n_mated": len(mated),
            "cmc": np.mean([m["cmc"] for m in mated], axis=0),
            "mean_ap": np.mean([m["ap"] for m in mated]),
            "trapezoid_ap": np.mean([m["trapezoid"] for m in mated]),
            "mean_inp": np.mean([m["inp"] for m in mated]),
            "map_at_r": np.mean([m["map_at_r"] for m in mated]),
            "r_precision": np.mean([m["r_precision"] for m in mated]),
            "precision_at_1": np.mean([m["p1"] for m in mated])}


def expected_per_list(row, max_rank):
    """A query's metrics averaged over every order of its ties (tiny rows), and
    each mate's mean rank by gallery index; None without a mate."""
    outcomes, ranks = [], {}
    for order in tie_orders(row):
        outcomes.append(list_metrics([[e[2] for e in order]], max_rank)[0])
        for position, e in enumerate(order, 1):
            if e[2]:
                ranks.setdefault(e[0], []).append(position)
    if outcomes[0] is None:
        return None, {}
    mean = {key: np.mean([o[key] for o in outcomes], axis=0) for key in outcomes[0]}
    return mean, {j: float(np.mean(r)) for j, r in ranks.items()}


# ---------------------------------------------------------------------------
# open set: TPIR at FPIR

def mated_queries(rows):
    return [i for i, row in enumerate(rows) if any(e[2] for e in row)]


def best_mate(row):
    return max(s for _, s, m in row if m)


def best_nonmate(row):
    scores = [s for _, s, m in row if not m]
    return max(scores) if scores else -math.inf


def nist(rows, unmated, fpirs, rank1):
    """NIST FRVT, FNIR at FPIR with TPIR = 1 - FNIR at rank 1: by brute force over
    every float32 threshold just above a non-mated search's best score (and
    -inf): the lowest T with #{best >= T} <= fpir N; TPIR(T) = sum over the mated
    queries of rank1(i) [best mate >= T] / mated. rank1(i): the probability
    that query i's first mate is at rank 1."""
    best = [best_nonmate(rows[i]) for i in unmated]
    N = len(best)
    mated = mated_queries(rows)
    out = []
    for f in fpirs:
        if N == 0 or not mated:
            out.append((math.nan, math.nan))
            continue
        candidates_ = sorted({-math.inf} | {float(np.nextafter(np.float32(b), np.float32(np.inf)))
                                            for b in best if b != -math.inf})
        T = next(t for t in candidates_ if sum(b >= t for b in best) <= f * N)
        tpir = sum(rank1(i) for i in mated if best_mate(rows[i]) >= T) / len(mated)
        out.append((tpir, T))
    return out


def insightface_ijb(similarity, query_ids, reg_ids, fars):
    """ijb_evals.py evaluation_1N as its code computes it (one gallery template
    per id): (thresholds, recalls)."""
    pos_sims, neg_sims, non_gallery_sims = [], [], []
    for index, query_id in enumerate(query_ids):
        if query_id in reg_ids:
            pos_sims.append(similarity[index][reg_ids == query_id][0])
            neg_sims.append(similarity[index][reg_ids != query_id])
        else:
            non_gallery_sims.append(similarity[index])
    pos_sims, neg_sims = np.array(pos_sims), np.array(neg_sims)
    non_gallery_sims = np.array(non_gallery_sims)
    correct_pos_cond = pos_sims > neg_sims.max(1)
    non_gallery_sims_sorted = np.sort(non_gallery_sims.max(1))[::-1]
    threshes, recalls = [], []
    for far in fars:
        thresh = non_gallery_sims_sorted[max(int((non_gallery_sims_sorted.shape[0]) * far) - 1, 0)]
        recall = np.logical_and(correct_pos_cond, pos_sims > thresh).sum() / pos_sims.shape[0]
        threshes.append(thresh)
        recalls.append(recall)
    return threshes, recalls


def insightface_1n_legacy(similarity, mask, fars):
    """ijb_1n.py's evaluation (every query has exactly one mate, mask[i]):
    (thresholds, recalls)."""
    query_num = similarity.shape[0]
    required_topk = [math.ceil(query_num * x) for x in fars]
    top_sims = similarity.astype(np.float64).copy()
    pos_sims = []
    for i in range(query_num):
        pos_sims.append(top_sims[i, mask[i]])
        top_sims[i, mask[i]] = -np.inf
    pos_sims = np.array(pos_sims)
    neg_sims = np.sort(top_sims[np.isfinite(top_sims)])[::-1][:max(required_topk)]
    out = []
    for far, pos in zip(fars, required_topk):
        th = neg_sims[pos - 1]
        out.append((th, np.sum(pos_sims > th) / query_num))
    return [t for t, _ in out], [r for _, r in out]


def insightface_studio(similarity, probe_ids, gallery_ids, known, fars):
    """The InsightFace 1.0 evaluation studio's 1:N identification: the gallery
    scored per identity (its best sample), probes known (known[i]) or unknown;
    positives are the correct top-1 known probes' top-1 scores, negatives every
    unknown probe's top-1 score and every known probe's best wrong identity;
    floor(far N) false accepts allowed (none: insufficient data, NaN here); the
    threshold is the lowest candidate (every score, and the double above the
    highest negative) within them. (thresholds, tars)."""
    positives, negatives, n_known = [], [], 0
    for i in range(similarity.shape[0]):
        best_by_identity = {}
        for j, identity in enumerate(gallery_ids):
            score = float(similarity[i, j])
            if identity not in best_by_identity or score > best_by_identity[identity]:
                best_by_identity[identity] = score
        ranked_ = sorted(best_by_identity.items(), key=lambda item: item[1], reverse=True)
        top1_identity, top1_score = ranked_[0]
        if known[i]:
            n_known += 1
            if top1_identity == probe_ids[i]:
                positives.append(top1_score)
            wrong = [s for identity, s in ranked_ if identity != probe_ids[i]]
            if wrong:
                negatives.append(max(wrong))
        else:
            negatives.append(top1_score)
    thresholds, tars = [], []
    for far in fars:
        allowed = int(math.floor(far * len(negatives)))
        if allowed <= 0 or n_known == 0 or not negatives:
            thresholds.append(math.nan)
            tars.append(math.nan)
            continue
        pos, neg = np.sort(positives), np.sort(negatives)
        cand = np.unique(np.concatenate(([np.nextafter(neg[-1], np.inf)], positives, negatives)))
        accepts = len(pos) - np.searchsorted(pos, cand, side="left")
        false_accepts = len(neg) - np.searchsorted(neg, cand, side="left")
        valid = false_accepts <= allowed
        best = int(np.max(accepts[valid]))
        thresholds.append(float(np.min(cand[valid & (accepts == best)])))
        tars.append(best / n_known)
    return thresholds, tars
