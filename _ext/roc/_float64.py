"""float64 scores, ordered and tied exactly as float64, through the float32
evaluator: an order-preserving float32 surrogate.

The evaluator compares scores only by their order and equality, so a float32
stand-in for each float64 score whose keys (roc_math.h's roc_score_key, the
order of float32 as 32 bits) keep what it compares counts exactly what it
would count on the float64 scores themselves, however close they lie (1 +
1e-12 and 1 + 2e-12 stay apart, equal scores tie); every score it reports is
a surrogate, mapped back to its float64 value (ScoreScale.scores). NaN stays
NaN. The surrogates are the normal float32s, -FLT_MAX upward, skipping zeros
and subnormals (a build that flushes subnormals to zero would merge them): at
most 2^32 - 2^25 of them. Two scales:

- Every distinct score (curve mode, nearest_sklearn, and across ranks): the
  distinct non-NaN scores D (ascending; of every rank with a group) number
  the scores, surrogate k for the k-th of D. Memory: a float32 copy of the
  scores plus, while it is made, D, an int64 index per score and int64
  temporaries of the key arithmetic: O(N) for N scores (up to about 40 bytes
  a score at the peak, 4 kept), one sort of the scores. With a group, every
  rank's distinct scores cross the network (all_gather of 8 bytes per
  distinct score and rank), then each rank numbers its own scores by a binary
  search in D. At most 2^32 - 2^25 distinct scores (a ValueError beyond).
- The genuine levels (exact mode in one process, every far rule but
  nearest_sklearn): exact mode reports nothing of the scores between two
  genuine scores but how many there are, the lowest, and above the top
  genuine score the highest with its count. So only the distinct genuine
  scores G are sorted (a superset serves: every pair whose labels match, for
  a score matrix), each score is placed among them by a binary search, and
  the scores between two of G (or beyond them) take three surrogates, in
  order: their lowest value, every value between, their highest value. The
  evaluator's levels, gaps, each gap's lowest score and the top score's
  count are then those of the float64 scores; no surrogate of the middle
  values is ever reported. Memory: int64 temporaries per score, no sort of
  the scores; 4 |G| + 3 surrogates.

float64 scores that float32 holds exactly (every one) need none of this: they
are cast. Binned mode never uses a surrogate: its bins are float32 edges
(roc_math.h), so it counts float64 scores rounded to float32 (round to
nearest), as it states.
"""

import numpy as np

from .. import _ffi
from ._inputs import float32_scores

FIRST_KEY = 0x00800000    # the key of -FLT_MAX, the lowest finite float32
SKIPPED_FROM = 0x7F800000  # the keys of the negative subnormals, -0, +0 and the
SKIPPED_KEYS = 0x01000000  # positive subnormals: [SKIPPED_FROM, + SKIPPED_KEYS)
CAPACITY = 0x100000000 - 2 * SKIPPED_KEYS  # the normal float32s: 2^32 - 2^25
SIGN = 0x80000000

# what prepare records of a rank's scores (info["float64_scores"])
CAST, SCALED = "held by float32", "float64"


def _is_torch(x):
    return _ffi.is_tensor(x)


def kind_of(x):
    """CAST where float64 scores x are all float32 values (NaN included):
    casting them merges nothing; else SCALED (a surrogate is needed)."""
    if _is_torch(x):
        torch = _ffi.torch
        rounded = x.to(torch.float32).to(torch.float64)
        held = bool(((rounded == x) | torch.isnan(x)).all())
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = x.astype(np.float32).astype(np.float64)
        held = bool(((rounded == x) | np.isnan(x)).all())
    return CAST if held else SCALED


def as_float32(x):
    """Scores as float32 (a new array: round to nearest)."""
    if _is_torch(x):
        return x.to(_ffi.torch.float32, memory_format=_ffi.torch.contiguous_format)
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(x, dtype=np.float32)


def _wide(x):
    """Scores as float64 (float32 and half scores widened exactly)."""
    if _is_torch(x):
        return x.to(_ffi.torch.float64)
    return np.asarray(x, dtype=np.float64)


class ScoreScale:
    """The float64 score of each surrogate, in the surrogates' order (a NumPy
    array or a torch tensor on the scores' device; zero as +0.0): the
    distinct scores D, or the genuine levels' scale, where NaN marks a
    surrogate that is never reported."""

    def __init__(self, fn, distinct):
        if distinct.shape[0] > CAPACITY:
            raise ValueError(
                "%s: score holds %d distinct float64 values, more than the %d that the "
                "evaluator can order exactly (the normal float32s it orders them as): round "
                "them to fewer distinct values" % (fn, distinct.shape[0], CAPACITY))
        self.fn = fn
        self.distinct = distinct
        self.n = int(distinct.shape[0])

    def surrogate(self, index, nan):
        """The float32 surrogates of the scores whose index in D is `index`
        (int64, of the scores' kind and shape), NaN where `nan`."""
        key = index + FIRST_KEY
        key = key + (key >= SKIPPED_FROM) * SKIPPED_KEYS
        bits = (key >= SIGN) * (key - SIGN) + (key < SIGN) * (-1 - key)  # the float32 bits
        if _is_torch(index):
            torch = _ffi.torch
            out = bits.to(torch.int32).view(torch.float32)
            return out.masked_fill_(nan, float("nan"))
        out = bits.astype(np.int32).view(np.float32)
        out[nan] = np.nan
        return out

    def scores(self, values):
        """The float64 scores of surrogates `values` (float64, any shape): a
        surrogate as its score; NaN and infinities (the curve's first
        threshold, +inf) as they are, which no surrogate is. A torch tensor
        stays one, on its device; anything else becomes a NumPy array."""
        if _is_torch(values):
            torch = _ffi.torch
            finite = torch.isfinite(values)
            bits = values[finite].to(torch.float32).view(torch.int32).to(torch.int64)
            index, valid = self._index(torch.where(bits >= 0, bits + SIGN, -1 - bits))
            distinct = self.distinct if _is_torch(self.distinct) else \
                torch.from_numpy(self.distinct)
            picked = distinct.to(values.device)[index.clamp(0, max(self.n - 1, 0))]
            valid &= ~torch.isnan(picked)
            if not bool(valid.all()):
                self._refuse(values[finite][~valid][0].item())
            out = values.clone()
            out[finite] = picked
            return out
        values = np.asarray(values, dtype=np.float64)
        out = values.copy()
        finite = np.isfinite(values)
        bits = values[finite].astype(np.float32).view(np.int32).astype(np.int64)
        index, valid = self._index(np.where(bits >= 0, bits + SIGN, -1 - bits))
        if valid.all():
            distinct = self.distinct
            if _is_torch(distinct):
                picked = distinct[_ffi.torch.from_numpy(index).to(distinct.device)].cpu().numpy()
            else:
                picked = distinct[index]
            valid = ~np.isnan(picked)
        if not valid.all():
            self._refuse(values[finite][~valid][0].item())
        out[finite] = picked
        return out

    def _index(self, key):
        """(each key's place on the scale, whether it is a surrogate's key)."""
        index = key - FIRST_KEY - (key >= SKIPPED_FROM + SKIPPED_KEYS) * SKIPPED_KEYS
        valid = ((index >= 0) & (index < self.n) &
                 ~((key >= SKIPPED_FROM) & (key < SKIPPED_FROM + SKIPPED_KEYS)))
        return index, valid

    def _refuse(self, wrong):
        raise RuntimeError("%s: the evaluator reported the score %r, which is none of the "
                           "float64 scores' surrogates" % (self.fn, wrong))


def _distinct_with_index(x):
    """(D, the index in D of each score (int64, x's shape), NaN mask) of the
    scores x, in one sort (NumPy and torch both sort NaN last; -0.0 and +0.0
    are one value, made +0.0)."""
    if _is_torch(x):
        torch = _ffi.torch
        values, index = torch.unique(x, sorted=True, return_inverse=True)
        n = int((~torch.isnan(values)).sum())
        return values[:n] + 0.0, index, torch.isnan(x)
    values, index = np.unique(x.reshape(-1), return_inverse=True)
    n = int((~np.isnan(values)).sum())
    return values[:n] + 0.0, index.reshape(x.shape), np.isnan(x)


def _distinct(x):
    """D of the scores x, as a host NumPy array."""
    if _is_torch(x):
        values = _ffi.torch.unique(x, sorted=True)
        return values[~_ffi.torch.isnan(values)].cpu().numpy() + 0.0
    values = np.unique(x)
    return values[~np.isnan(values)] + 0.0


def _genuine(held):
    """Which pairs of held["score"] may be genuine: the pair list's flags, or
    every pair of a score matrix whose labels match (a superset of the pairs
    counted where same_set leaves some out)."""
    if held.get("genuine") is not None:
        mask = held["genuine"] != 0
    else:
        mask = held["labels_q"].reshape(-1, 1) == held["labels_g"].reshape(1, -1)
    return _ffi.torch.as_tensor(mask, device=held["score"].device)


def _order_keys(x):
    """float64 scores (torch, no NaN, zero as +0.0) as int64 in the same
    order: negative values' magnitude bits flipped. torch reduces int64 with
    the hardware's atomics, float64 with compare-and-swap loops."""
    bits = x.view(_ffi.torch.int64)
    return _ffi.torch.where(bits < 0, bits ^ 0x7FFFFFFFFFFFFFFF, bits)


def _levels_scale(fn, x, genuine):
    """(ScoreScale, surrogates) of the scores x (a torch tensor) on the genuine
    levels' scale (the module's docstring), or None where G is too large for
    it. The surrogates, in order: for each gap g = 0 .. |G| (the scores
    between G[g - 1] and G[g]) its lowest value 4 g, the values between 4 g +
    1, its highest 4 g + 2; G[u] itself 4 u + 3."""
    torch = _ffi.torch
    levels = torch.unique(x[genuine])
    levels = levels[~torch.isnan(levels)] + 0.0
    n = int(levels.shape[0])
    if 4 * n + 3 > CAPACITY:
        return None
    nan = torch.isnan(x)
    gap = torch.searchsorted(levels, x)  # the levels below x
    at = levels[gap.clamp(max=n - 1)] == x if n else torch.zeros_like(nan)
    inside = ~(at | nan)
    key = _order_keys(torch.where(nan, 0.0, x + 0.0))  # NaN: any key, never used
    empty = torch.iinfo(torch.int64)  # keys of NaN bit patterns: no score has them
    lowest = torch.full((n + 1,), empty.max, dtype=torch.int64, device=x.device)
    highest = torch.full((n + 1,), empty.min, dtype=torch.int64, device=x.device)
    lowest.scatter_reduce_(0, gap[inside], key[inside], "amin")
    highest.scatter_reduce_(0, gap[inside], key[inside], "amax")
    index = 4 * gap + torch.where(at, 3, torch.where(key == lowest[gap], 0, torch.where(
        key == highest[gap], 2, 1)))
    scores = torch.full((4 * n + 3,), float("nan"), dtype=torch.float64, device=x.device)
    for ends, offset in ((lowest, 0), (highest, 2)):
        held = (ends != empty.max) & (ends != empty.min)
        scores[offset::4] = torch.where(held, _order_keys_back(ends), float("nan"))
    scores[3::4] = levels
    scale = ScoreScale(fn, scores)
    return scale, scale.surrogate(index, nan)


def _order_keys_back(key):
    """The float64 scores of _order_keys' keys (its flip is its own inverse)."""
    torch = _ffi.torch
    return torch.where(key < 0, key ^ 0x7FFFFFFFFFFFFFFF, key).view(torch.float64)


def _guarded(fn, x, work):
    """work(), its failure to allocate named (a pair list beyond what a sort
    of its scores holds in memory)."""
    try:
        return work()
    except (MemoryError, RuntimeError) as error:
        if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError" or \
                "memory" in str(error).lower():
            raise _ffi.allocation_error(
                fn, "the float64 scores' surrogate (a sort of the scores, up to 40 bytes a score)",
                tuple(x.shape), str(getattr(x, "device", "cpu")), error) from error
        raise


def exact_scores(fn, session, held, infos, levels_scale=False):
    """held["score"] made what the float32 evaluator reads, where the scores
    of any rank (info["float64_scores"]) are float64: cast where every rank's
    float64 scores are float32 values, else every rank's replaced by its
    surrogate on the genuine levels' scale (levels_scale, in one process:
    held has "genuine" flags or "labels_q" and "labels_g"), or else on the
    scale of all the ranks' distinct scores. Returns that ScoreScale (None
    where no surrogate is used). Collective with a group: every rank calls
    it."""
    kinds = [info.get("float64_scores") for info in infos]
    mine = kinds[session.rank]
    if SCALED not in kinds:
        if mine == CAST:
            session.step(lambda: held.update(score=as_float32(held["score"])))
        return None
    if session.world_size == 1:
        def local():
            score = held["score"]
            if levels_scale and _is_torch(score):
                scaled = _guarded(fn, score, lambda: _levels_scale(fn, score, _genuine(held)))
                if scaled is not None:
                    scale, held["score"] = scaled
                    return scale
            distinct, index, nan = _guarded(fn, score, lambda: _distinct_with_index(score))
            scale = ScoreScale(fn, distinct)
            held["score"] = scale.surrogate(index, nan)
            return scale
        return session.step(local)

    own = session.step(lambda: _guarded(fn, held["score"], lambda: _distinct(
        _wide(held["score"]))).view(np.int64))
    gathered = session.gather([own])[0]

    def numbered():
        distinct = np.unique(np.concatenate(gathered).view(np.float64))
        score = _wide(held["score"])
        scale = ScoreScale(fn, distinct)
        if _is_torch(score):
            torch = _ffi.torch
            index = torch.searchsorted(torch.from_numpy(distinct).to(score.device), score)
            nan = torch.isnan(score)
            index = index.masked_fill_(nan, 0)
        else:
            index = np.searchsorted(distinct, score)
            nan = np.isnan(score)
            index[nan] = 0
        held["score"] = scale.surrogate(index, nan)
        return scale
    return session.step(lambda: _guarded(fn, held["score"], numbered))


def prepared(fn, name, x, mode):
    """(scores, kind) of scores x (on their device, dtype checked by
    require_score_dtype(float64=True)) as prepare keeps them: float64 as they
    are in exact and curve mode, kind CAST or SCALED (kind_of; exact_scores
    then converts them); rounded to float32 in binned mode; other dtypes as
    float32_scores makes them, kind None."""
    if x is None or _ffi.dtype_name(x) != "float64":
        return float32_scores(fn, name, x), None
    if mode == "binned":
        return as_float32(x), None
    return x, kind_of(x)
