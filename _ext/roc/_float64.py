"""float64 scores, ordered and tied exactly as float64, through the float32
evaluator: an order-preserving float32 surrogate.

The distinct non-NaN scores D (ascending; of every rank with a group) number
the scores: score s becomes the float32 whose key (roc_math.h's roc_score_key,
the order of float32 as 32 bits) is an increasing function of its index in D.
The evaluator, which compares scores only by their order and equality, then
counts exactly what it would count on the float64 scores themselves, however
close they lie (1 + 1e-12 and 1 + 2e-12 stay apart, equal scores tie); every
score it reports is a surrogate, mapped back to its float64 value through D
(ScoreScale.scores). NaN stays NaN.

The surrogates are the normal float32s, -FLT_MAX upward, skipping zeros and
subnormals (a build that flushes subnormals to zero would merge them): at most
2^32 - 2^25 distinct scores (a ValueError beyond). Memory: the surrogate is a
float32 copy of the scores plus, while it is made, their sorted distinct
values, an int64 index per score and int64 temporaries of the key
arithmetic: O(N) for N scores (up to about 40 bytes a score at the peak, 4
kept). With a group, every rank's distinct scores cross the
network (all_gather of 8 bytes per distinct score and rank): O(distinct
scores) of communication, then each rank numbers its own scores by a binary
search in D.

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
    """The distinct scores D (float64, ascending, no NaN, zero as +0.0; a
    NumPy array or a torch tensor on the scores' device) and the surrogates
    they number."""

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
        """The float64 scores of surrogates `values` (float64, any shape) as a
        NumPy array: a surrogate as its score in D; NaN and infinities (the
        curve's first threshold, +inf) as they are, which no surrogate is."""
        values = np.asarray(values, dtype=np.float64)
        out = values.copy()
        finite = np.isfinite(values)
        bits = values[finite].astype(np.float32).view(np.int32).astype(np.int64)
        key = np.where(bits >= 0, bits + SIGN, -1 - bits)
        index = key - FIRST_KEY - (key >= SKIPPED_FROM + SKIPPED_KEYS) * SKIPPED_KEYS
        valid = ((index >= 0) & (index < self.n) &
                 ~((key >= SKIPPED_FROM) & (key < SKIPPED_FROM + SKIPPED_KEYS)))
        if not valid.all():
            wrong = values[finite][~valid][0].item()
            raise RuntimeError("%s: the evaluator reported the score %r, which is none of the "
                               "float64 scores' surrogates" % (self.fn, wrong))
        distinct = self.distinct
        if _is_torch(distinct):
            picked = distinct[_ffi.torch.from_numpy(index).to(distinct.device)].cpu().numpy()
        else:
            picked = distinct[index]
        out[finite] = picked
        return out


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


def exact_scores(fn, session, held, infos):
    """held["score"] made what the float32 evaluator reads, where the scores
    of any rank (info["float64_scores"]) are float64: cast where every rank's
    float64 scores are float32 values, else every rank's replaced by its
    surrogate on the scale of all the ranks' distinct scores. Returns that
    ScoreScale (None where no surrogate is used). Collective with a group:
    every rank calls it."""
    kinds = [info.get("float64_scores") for info in infos]
    mine = kinds[session.rank]
    if SCALED not in kinds:
        if mine == CAST:
            session.step(lambda: held.update(score=as_float32(held["score"])))
        return None
    if session.world_size == 1:
        def local():
            score = held["score"]
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
