"""legacy_bins.py: the legacy gpu_roc binning in plain NumPy, for the scripts
that compare this project with other frameworks. It imports nothing but NumPy
(1.23 or 2.x), so the MXNet side of compare_mxnet.py can use it in its own
environment, where neither torch nor _ext exists.

legacy_bins(score, nbins)   the bin src/roc_math.h gives each float32 score
legacy_edges(nbins)         float32 edges e[0..nbins] such that a float32 score
                            s in [-1, 1] has legacy bin k exactly when
                            e[k] <= s < e[k + 1]: what a histogram with
                            [e_k, e_k+1) bins (MXNet's, NumPy's) needs to
                            reproduce the legacy bins
"""

import numpy as np

FLOAT32_UP = np.float32(np.inf)


def legacy_bins(score, nbins):
    """int64 bin of each score (cast to float32 first), as roc_legacy_bin()
    computes it: trunc((s + 1) / 2 * (nbins - 1)) in float64, one IEEE double
    operation per step in the C order; s <= -1 (and -inf) in bin 0, s >= 1
    (and +inf) in bin nbins - 1; NaN gets -1 (skipped by the legacy code)."""
    score = np.asarray(score, dtype=np.float32)
    inside = (score > -1) & (score < 1)
    position = (np.where(inside, score, 0).astype(np.float64) + 1.0) / 2.0 * float(nbins - 1)
    bins = np.minimum(position.astype(np.int64), nbins - 1)
    bins = np.where(inside, bins, np.where(score >= 1, nbins - 1, 0))
    return np.where(np.isnan(score), -1, bins)


def legacy_edges(nbins):
    """float32 (nbins + 1,) edges of the legacy bins.

    e[0] = -1; e[k] (0 < k < nbins) = the smallest float32 whose legacy bin is
    k or more; e[nbins] = the float32 just above 1, so that the score 1 (and
    everything clipped to it) lies strictly inside the last bin. The legacy
    bin is a non-decreasing function of the float32 score, so the float32
    scores of bin k are exactly [e[k], e[k + 1]); a bin no float32 falls in
    has e[k] == e[k + 1].

    Rounding the real edges 2k / (nbins - 1) - 1 to float32 is not the same:
    the legacy code rounds (s + 1) / 2 * (nbins - 1) in float64 and truncates,
    so for some k the nearest float32 to the real edge lies in bin k - 1 (see
    naive_edge_mismatches), and near 0 the smallest float32 of a bin can lie
    many binades below the real edge (s + 1 rounds to 1 in float64 for every
    |s| < 2^-54). So each edge is found by bisection over the float32 values,
    in their order, between -1 (bin 0) and 1 (bin nbins - 1).
    """
    if nbins < 1:
        raise ValueError("nbins must be at least 1, got %d" % nbins)
    edges = np.empty(nbins + 1, dtype=np.float32)
    edges[0] = -1.0
    edges[nbins] = np.nextafter(np.float32(1.0), FLOAT32_UP)
    if nbins > 1:
        k = np.arange(1, nbins)
        low = np.full(k.shape, float32_key(np.float32(-1.0)))  # legacy bin < k
        high = np.full(k.shape, float32_key(np.float32(1.0)))  # legacy bin >= k
        while np.any(high - low > 1):
            middle = (low + high) // 2
            reached = legacy_bins(key_float32(middle), nbins) >= k
            high = np.where(reached, middle, high)
            low = np.where(reached, low, middle)
        edges[1:nbins] = key_float32(high)
    return edges


def float32_key(value):
    """int64 keys ordered as the float32 values are, one apart for adjacent
    float32 values; -0.0 and +0.0 share key 0."""
    bits = np.asarray(value, dtype=np.float32).view(np.uint32).astype(np.int64)
    return np.where(bits >= 0x80000000, -(bits - 0x80000000), bits)


def key_float32(key):
    """The float32 value of a float32_key (for -0.0 and +0.0: +0.0)."""
    key = np.asarray(key, dtype=np.int64)
    bits = np.where(key < 0, -key + 0x80000000, key)
    return bits.astype(np.uint32).view(np.float32)


def naive_edges(nbins):
    """float32(2k / (nbins - 1) - 1) for k = 0..nbins: the real legacy bin
    edges rounded to float32 (k = nbins is the first edge past the last bin)."""
    k = np.arange(nbins + 1, dtype=np.float64)
    return (2.0 * k / max(nbins - 1, 1) - 1.0).astype(np.float32)


def naive_edge_mismatches(nbins):
    """How many of the nbins - 1 inner edges legacy_edges() moves off the
    float32 rounding of the real edge."""
    return int(np.count_nonzero(legacy_edges(nbins)[1:nbins] != naive_edges(nbins)[1:nbins]))
