"""The evaluator's inputs, checked and converted before any C call: option
values, arrays and where they live, scores made float32 (float64 scores
checked here, ordered exactly by _float64.py), labels made
integers the C side compares, and y_true made the genuine flags it counts.

Every error is a TypeError or ValueError (RuntimeError for devices,
MemoryError for memory) whose message starts with the public function's name
and names the argument.
"""

import math
import numbers
import warnings

import numpy as np

from .. import _ffi

MODES = ("exact", "binned")
FAR_RULES = ("max_tpr", "nearest", "first_above", "interpolate", "nearest_sklearn")
EER_RULES = ("crossing", "nearest_mean")
SIMILARITIES = ("cosine", "dot")
# same_set: False (two sets), True or "unordered" (each unordered pair once),
# "ordered" (each unordered pair twice, as IFRT counts)
SAME_SET_CODES = {False: 0, True: 1, "unordered": 1, "ordered": 2}
DEFAULT_FARS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)


def choice(fn, name, value, options):
    if not isinstance(value, str) or value not in options:
        raise ValueError("%s: %s must be one of %s, got %r" % (
            fn, name, ", ".join(repr(o) for o in options), value))
    return value


def boolean(fn, name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError("%s: %s must be True or False, got %r" % (fn, name, value))
    return bool(value)


def same_set_code(fn, value):
    if isinstance(value, (bool, np.bool_)):
        return int(bool(value))
    if isinstance(value, str) and value in SAME_SET_CODES:
        return SAME_SET_CODES[value]
    raise ValueError("%s: same_set must be False, True, 'unordered' or 'ordered', got %r"
                     % (fn, value))


def positive_int(fn, name, value, upper=None):
    """value as an int >= 1 (and <= upper, a power of two)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError("%s: %s must be an integer, got %r" % (fn, name, value))
    value = int(value)
    if upper is not None and not 1 <= value <= upper:
        raise ValueError("%s: %s must lie in [1, 2^%d], got %d"
                         % (fn, name, upper.bit_length() - 1, value))
    if value < 1:
        raise ValueError("%s: %s must be a positive integer, got %d" % (fn, name, value))
    return value


def bin_range(fn, value):
    try:
        lo, hi = value
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        raise TypeError("%s: range must be two numbers (lo, hi), got %r" % (fn, value)) from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError("%s: range must be finite with lo < hi, got (%r, %r)" % (fn, lo, hi))
    return lo, hi


def far_targets(fn, fars, name="fars"):
    """The FAR (or FPIR) targets as a tuple of floats in [0, 1]; a scalar is
    one target; `name` is the argument's."""
    if isinstance(fars, numbers.Real) and not isinstance(fars, (bool, np.bool_)):
        fars = (fars,)
    try:
        values = tuple(float(f) for f in fars)
    except (TypeError, ValueError):
        raise TypeError("%s: %s must be a number or a sequence of numbers in [0, 1], got %r"
                        % (fn, name, fars)) from None
    for far in values:
        if not 0.0 <= far <= 1.0:
            raise ValueError("%s: %s must lie in [0, 1], got %r" % (fn, name, far))
    return values


def partial_auc_bound(fn, max_fpr):
    """max_fpr as a float in (0, 1], or None (no partial AUC)."""
    if max_fpr is None:
        return None
    if isinstance(max_fpr, (bool, np.bool_)) or not isinstance(max_fpr, numbers.Real):
        raise TypeError("%s: max_fpr must be a number in (0, 1] or None, got %r" % (fn, max_fpr))
    if not 0.0 < float(max_fpr) <= 1.0:
        raise ValueError("%s: max_fpr must lie in (0, 1], got %r" % (fn, max_fpr))
    return float(max_fpr)


def progress_callback(fn, progress):
    if progress is not None and not callable(progress):
        raise TypeError("%s: progress must be callable as progress(done, total), or None, got %r"
                        % (fn, type(progress).__name__))
    return progress


# ---------------------------------------------------------------------------
# arrays and devices

def is_array(x):
    return isinstance(x, np.ndarray) or hasattr(x, "__dlpack__")


def require_array(fn, name, x):
    """x, an array (torch, NumPy, anything with __dlpack__) on the CPU or a
    CUDA device."""
    if not is_array(x):
        raise TypeError("%s: %s must be an array (torch, NumPy, or any with __dlpack__), got %s"
                        % (fn, name, type(x).__name__))
    require_supported_device(fn, name, x)
    return x


def require_supported_device(fn, name, x):
    """The message of the DLPack path (_ffi) for an array that is neither on
    the CPU nor on a CUDA device (a meta tensor, say), before anything tries
    to read or move it."""
    where = device_of(x)
    if where is not None and where != "cpu" and not where.startswith("cuda:"):
        raise _ffi.unsupported_device(fn, name, where)


def device_of(x):
    """'cpu', 'cuda:N', or another device's name, of an array (None: not an array)."""
    if _ffi.is_tensor(x):
        return str(x.device) if x.device.type != "cuda" else "cuda:%d" % (x.device.index or 0)
    if isinstance(x, np.ndarray):
        return "cpu"
    if hasattr(x, "__dlpack_device__"):
        try:
            kind, index = x.__dlpack_device__()
        except (ValueError, BufferError) as error:
            return "a device DLPack cannot name (%s)" % error
        return {1: "cpu", 2: "cuda:%d" % index, 3: "cpu"}.get(int(kind), "dlpack device %d"
                                                               % int(kind))
    return None


def parse_device(fn, device, *arrays):
    """The device to compute on: `device` ('cpu', 'cuda', 'cuda:N', or a
    torch.device), else where the first array is; as 'cpu' or 'cuda:N'."""
    if device is None:
        for x in arrays:
            where = device_of(x)
            if where is not None:
                device = where
                break
        else:
            device = "cpu"
    text = str(device)
    if text == "cpu":
        return text
    if text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
        torch = _ffi.torch
        if torch is None or not torch.cuda.is_available():
            raise RuntimeError("%s: device %r asked for, but torch sees no CUDA device"
                               % (fn, text))
        index = torch.cuda.current_device() if text == "cuda" else int(text[5:])
        if index >= torch.cuda.device_count():
            raise RuntimeError("%s: device %r asked for, but torch sees %d CUDA device(s)"
                               % (fn, text, torch.cuda.device_count()))
        return "cuda:%d" % index
    raise ValueError("%s: device must be 'cpu', 'cuda' or 'cuda:N', got %r" % (fn, device))


def from_dlpack(fn, name, x):
    """A DLPack producer's array, zero-copy: a torch tensor (a NumPy array
    where torch is not installed); a producer's refusal (byte-swapped data,
    say) named as the DLPack path (_ffi) names it."""
    try:
        return _ffi.torch.from_dlpack(x) if _ffi.torch is not None else np.from_dlpack(x)
    except (BufferError, RuntimeError, TypeError, ValueError) as error:
        raise TypeError("%s: %s cannot be exported through DLPack: %s"
                        % (fn, name, error)) from error


def as_torch(fn, name, x, device=None):
    """x as a torch tensor (zero-copy where it can be), on `device` if given."""
    torch = _ffi.torch
    if torch is None:
        raise RuntimeError("%s: %s: computing on %s needs torch" % (fn, name, device))
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "iu":  # NumPy's other names of a width (longlong) as torch knows it
            x = x.view(np.dtype(x.dtype.str))
        try:
            with warnings.catch_warnings():
                # a read-only array: the tensor is only read (or copied)
                warnings.filterwarnings("ignore", "The given NumPy array is not writable")
                x = torch.from_numpy(x)
        except (TypeError, ValueError) as error:  # byte-swapped, or a dtype torch lacks
            raise TypeError("%s: %s cannot be made a torch tensor: %s"
                            % (fn, name, error)) from error
    elif not _ffi.is_tensor(x):
        x = from_dlpack(fn, name, x)
    if device is None:
        return x
    try:
        return x.to(device)
    except (RuntimeError, AssertionError) as error:
        raise _ffi.allocation_error(fn, name, x.shape, device, error) from error


def to_device(fn, name, x, device):
    """x on `device`: NumPy arrays stay NumPy for 'cpu'; anything else becomes
    a torch tensor there (zero-copy where it already is)."""
    if x is None:
        return None
    require_supported_device(fn, name, x)
    if device == "cpu" and isinstance(x, np.ndarray):
        return x
    return as_torch(fn, name, x, device)


def _host(x):
    return x.detach().cpu().numpy() if _ffi.is_tensor(x) else np.asarray(x)


def _numpy_dtype(x):
    """x's dtype as a NumPy dtype (torch's named by NumPy's names)."""
    return np.dtype(_ffi.dtype_name(x))


def _representable(values, dtype):
    """Which of `values` (a NumPy array of bool, integers or floats) `dtype`
    holds exactly: integers by range, floats by a round trip (NaN is held by
    every float dtype), integers in a float dtype where the float rounds back
    to the integer itself."""
    source = values.dtype
    if source.kind == "b":
        values, source = values.astype(np.uint8), np.dtype(np.uint8)
    with np.errstate(all="ignore"):
        if dtype.kind == "b":
            return (values == 0) | (values == 1)
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            if source.kind in "iu":
                return (values >= info.min) & (values <= info.max)
            # the bounds as floats are powers of two (exact): [min, max + 1)
            return (np.isfinite(values) & (values == np.trunc(values)) &
                    (values >= float(info.min)) & (values < float(info.max + 1)))
        rounded = values.astype(dtype)
        if source.kind == "f":
            return (rounded.astype(source) == values) | np.isnan(values)
        info = np.iinfo(source)
        wide = rounded.astype(np.float64)  # exact: every float16/32/64 is a float64
        inside = (wide >= float(info.min)) & (wide < float(info.max + 1))
        return inside & (np.where(inside, wide, 0).astype(source) == values)


def cast_exactly(fn, name, x, dtype, whose):
    """x (a torch tensor or NumPy array) in `dtype` (a NumPy dtype) where
    dtype holds every value of x exactly, checked on the host; else a
    ValueError naming the first value it does not hold and `whose` dtype it
    is. Never a promotion: the caller's dtype stays."""
    if _numpy_dtype(x) == dtype:
        return x
    values = _host(x)
    held = _representable(values, dtype)
    if not held.all():
        value = values[np.flatnonzero(~held)[0]].item()
        raise ValueError("%s: %s is %s and holds %r, which %s (%s) cannot hold exactly"
                         % (fn, name, values.dtype.name, value, whose, dtype.name))
    if _ffi.is_tensor(x):
        return x.to(getattr(_ffi.torch, dtype.name))
    return x.astype(dtype)


# ---------------------------------------------------------------------------
# scores

HALF_DTYPES = ("float16", "bfloat16")


def require_one_source(fn, score, feat_q, feat_g):
    """All pairs' one source, arrays: a score matrix, or features (feat_g may be
    left out where the queries are the gallery)."""
    if (score is None) == (feat_q is None):
        raise ValueError("%s: give either score=, or feat_q= (and feat_g=)" % fn)
    if score is not None and feat_g is not None:
        raise ValueError("%s: give either score=, or feat_q= and feat_g=, not both" % fn)
    for name, x in (("score", score), ("feat_q", feat_q), ("feat_g", feat_g)):
        if x is not None:
            require_array(fn, name, x)


def require_score_dtype(fn, name, x, float64=False):
    """Scores of a dtype the evaluator takes: float32, half precision (that
    float32_scores widens), and float64 where `float64` (the ROC evaluator,
    which orders float64 scores exactly: _float64.py); float64 refused
    elsewhere, saying how to cast. Called before the scores are moved
    anywhere, and by float32_scores after (a producer may show its dtype only
    once converted)."""
    try:
        dtype = _ffi.dtype_name(x)
    except (AttributeError, TypeError):  # a DLPack producer without a dtype NumPy reads
        return x
    if dtype == "float32" or dtype in HALF_DTYPES or (float64 and dtype == "float64"):
        return x
    if dtype == "float64":
        raise TypeError("%s: %s is float64, which this evaluator does not take (the ROC "
                        "evaluator does); cast it with %s.astype(numpy.float32) or %s.float() "
                        "if float32 is enough: scores that float32 cannot tell apart then tie"
                        % (fn, name, name, name))
    raise TypeError("%s: %s must be float64, float32, float16 or bfloat16 (half precision is "
                    "widened to float32 exactly), got %s" % (fn, name, dtype) if float64 else
                    "%s: %s must be float32, float16 or bfloat16 (half precision is widened "
                    "to float32 exactly), got %s" % (fn, name, dtype))


def float32_scores(fn, name, x):
    """Scores (a NumPy array or torch tensor) as the evaluator reads them:
    float32 as they are; float16 and bfloat16 widened into a new contiguous
    float32 array (exactly: every half value is a float32 value); other
    dtypes refused by require_score_dtype."""
    if x is None or _ffi.dtype_name(require_score_dtype(fn, name, x)) not in HALF_DTYPES:
        return x
    if _ffi.is_tensor(x):
        return x.to(_ffi.torch.float32, memory_format=_ffi.torch.contiguous_format)
    return np.ascontiguousarray(x, dtype=np.float32)


def require_float32(fn, name, x):
    """Features: float32 (the evaluator scores them as fp32 FMA chains, as
    pair_scores); float64 refused, saying how to cast and why."""
    dtype = _ffi.dtype_name(x)
    if dtype == "float64":
        raise TypeError("%s: %s is float64, but features are scored in float32 (each score an "
                        "fp32 FMA chain, as pair_scores computes it, the same on the CPU and the "
                        "GPU): cast them with %s.astype(numpy.float32) or %s.float(); or score "
                        "them in float64 yourself and pass score= (float64 scores are ordered "
                        "exactly)" % (fn, name, name, name))
    if dtype != "float32":
        raise TypeError("%s: %s must be float32, got %s" % (fn, name, dtype))
    return x


# ---------------------------------------------------------------------------
# labels

def label_array(fn, name, labels, expected=None, counted="queries", flat=True):
    """labels as a flat NumPy array or torch tensor of bool, integers, or
    floats holding integers, on the device it is on (a list or tuple as a
    NumPy array; torch floats NumPy lacks, such as bfloat16, widened exactly
    to float32; unsigned integers torch cannot reduce, to int64). A float
    that is not an integer (NaN and infinities included) is refused;
    `expected` is the number of elements there must be, `counted` what
    they are; flat=False refuses labels that are not 1-D instead of
    flattening them."""
    if isinstance(labels, (list, tuple)):
        labels = _sequence_labels(fn, name, labels)
    elif labels is None or not is_array(labels):
        raise TypeError("%s: %s must be an array of integer or float labels, got %s"
                        % (fn, name, type(labels).__name__))
    else:
        require_supported_device(fn, name, labels)
        if not (isinstance(labels, np.ndarray) or _ffi.is_tensor(labels)):
            labels = from_dlpack(fn, name, labels)
    if _ffi.is_tensor(labels):
        torch = _ffi.torch
        kind = ("c" if labels.is_complex() else "f" if labels.dtype.is_floating_point
                else "b" if labels.dtype == torch.bool else "i")
        if kind == "f" and labels.dtype not in (torch.float16, torch.float32, torch.float64):
            labels = labels.to(torch.float32)
        elif labels.dtype in (getattr(torch, "uint16", None), getattr(torch, "uint32", None)):
            labels = labels.to(torch.int64)
    else:
        kind = labels.dtype.kind
    if kind not in "biuf":
        raise TypeError("%s: %s must hold bool, integers, or floats holding integers, got %s"
                        % (fn, name, labels.dtype))
    if not flat and len(labels.shape) != 1:
        raise ValueError("%s: %s must be 1-D (N,), got shape %s"
                         % (fn, name, tuple(labels.shape)))
    labels = labels.reshape(-1)
    if expected is not None and labels.shape[0] != expected:
        raise ValueError("%s: %s has %d elements but there are %d %s" % (
            fn, name, labels.shape[0], expected, counted))
    if kind == "f":
        _require_integers(fn, name, labels)
    return labels


def _sequence_labels(fn, name, values):
    """A list or tuple of labels as a NumPy array; Python integers that int64
    cannot hold all of as uint64 (NumPy would make them float64, merging
    neighbours beyond 2^53)."""
    try:
        labels = np.asarray(values)
    except ValueError as error:  # ragged
        raise TypeError("%s: %s must be a flat sequence of labels: %s"
                        % (fn, name, error)) from error
    if labels.dtype.kind in "fO" and labels.ndim == 1 and \
            all(isinstance(v, numbers.Integral) for v in values):
        for dtype in (np.int64, np.uint64):
            try:
                return np.array(values, dtype=dtype)
            except OverflowError:
                pass
        raise ValueError("%s: %s holds integers that neither int64 nor uint64 holds all of"
                         % (fn, name))
    return labels


def _require_integers(fn, name, labels):
    """Float labels must hold integers: one pass (x - trunc(x) is nonzero
    for a fraction, and NaN for NaN and infinities)."""
    if _ffi.is_tensor(labels):
        bad = bool(((labels - labels.trunc()) != 0).any())
    else:
        with np.errstate(invalid="ignore"):
            bad = bool(((labels - np.trunc(labels)) != 0).any())
    if not bad:
        return
    values = _host(labels)
    with np.errstate(invalid="ignore"):
        first = values[np.flatnonzero((values - np.trunc(values)) != 0)[0]].item()
    if math.isnan(first):
        raise ValueError("%s: %s contains NaN; a NaN label matches nothing" % (fn, name))
    raise ValueError("%s: %s holds %r, which is not an integer: labels are bool, integers, "
                     "or floats holding integers" % (fn, name, first))


def _exact_keys(values):
    """Labels of any of label_array's dtypes as (high, low) int64 rows, equal
    exactly where the labels are: an integer v in [-2^63, 2^64) (of an
    integer dtype, or a float holding it) as (-1 if v < 0 else 0, v's 64 bits);
    a float beyond that range, which no integer label equals, as (+-2, its
    float64 bits)."""
    rows = np.zeros((values.shape[0], 2), np.int64)
    if values.dtype.kind == "f":
        wide = values.astype(np.float64) + 0.0  # -0 as +0
        rows[:, 0] = np.where(wide < 0, -1, 0)
        signed = (wide >= -2.0 ** 63) & (wide < 2.0 ** 63)
        unsigned = (wide >= 2.0 ** 63) & (wide < 2.0 ** 64)
        beyond = ~(signed | unsigned)
        rows[signed, 1] = wide[signed].astype(np.int64)
        rows[unsigned, 1] = wide[unsigned].astype(np.uint64).view(np.int64)
        rows[beyond, 0] = np.where(wide[beyond] < 0, -2, 2)
        rows[beyond, 1] = wide[beyond].view(np.int64)
    elif values.dtype == np.uint64:
        rows[:, 1] = values.view(np.int64)
    else:
        rows[:, 1] = values.astype(np.int64)
        rows[:, 0] = np.where(rows[:, 1] < 0, -1, 0)
    return rows


def _mixed_codes(labels_q, labels_g):
    """Codes of labels of two dtypes, made on the host: the labels' exact
    keys numbered by their distinct values."""
    q, g = _host(labels_q), _host(labels_g)
    rows = np.concatenate([_exact_keys(q), _exact_keys(g)])
    _, codes = np.unique(rows, axis=0, return_inverse=True)
    codes = codes.reshape(-1).astype(np.int32)
    return codes[:q.shape[0]], codes[q.shape[0]:]


def _widened(labels):
    """Integer (or bool) labels as int64."""
    if _ffi.is_tensor(labels):
        return labels.to(_ffi.torch.int64)
    return labels.astype(np.int64)


def _comparable(labels):
    """Labels of one dtype as int32 or int64, equal exactly where they are:
    int32 and int64 as they are (no copy), other integers widened (uint64
    reinterpreted: equality is all that matters), floats as the bits of their
    float64 value with -0 made +0 (NaN was refused)."""
    if _ffi.is_tensor(labels):
        torch = _ffi.torch
        if labels.dtype in (torch.int32, torch.int64):
            return labels.contiguous()
        if labels.dtype == getattr(torch, "uint64", None):
            return labels.contiguous().view(torch.int64)
        if labels.dtype.is_floating_point:
            wide = labels.to(torch.float64)
            return torch.where(wide == 0, 0.0, wide).view(torch.int64)
        return _widened(labels)
    if labels.dtype in (np.int32, np.int64):
        return np.ascontiguousarray(labels)
    if labels.dtype == np.uint64:
        return np.ascontiguousarray(labels).view(np.int64)
    if labels.dtype.kind == "f":
        wide = labels.astype(np.float64)
        return np.where(wide == 0, 0.0, wide).view(np.int64)
    return _widened(labels)


def _int64_exact(labels):
    """Whether every value of the labels' dtype is an int64 (bool and integers
    but uint64)."""
    if _ffi.is_tensor(labels):
        torch = _ffi.torch
        return not (labels.dtype.is_floating_point or labels.is_complex() or
                    labels.dtype == getattr(torch, "uint64", None))
    return labels.dtype.kind in "biu" and labels.dtype != np.uint64


def comparable_labels(fn, labels_q, labels_g, n_query, n_gallery, device,
                      names=("labels_q", "labels_g")):
    """The labels as int32 or int64 arrays of one dtype on `device`, equal
    exactly where the labels are (what the C side compares): labels of one
    dtype converted elementwise (_comparable: no reduction and no
    synchronization; torch int32 and int64 labels pass untouched), integers
    of two dtypes that int64 holds widened to it; other labels of two dtypes
    as codes of their distinct values, made on the host. `names`: the two
    arguments' names (cameras are compared the same way)."""
    name_q, name_g = names
    labels_q = label_array(fn, name_q, labels_q, n_query, "queries")
    labels_g = label_array(fn, name_g, labels_g, n_gallery, "gallery entries")
    same_kind = _ffi.is_tensor(labels_q) == _ffi.is_tensor(labels_g)
    if same_kind and labels_q.dtype == labels_g.dtype:
        labels_q, labels_g = _comparable(labels_q), _comparable(labels_g)
    elif same_kind and _int64_exact(labels_q) and _int64_exact(labels_g):
        labels_q, labels_g = _widened(labels_q), _widened(labels_g)
    else:
        labels_q, labels_g = _mixed_codes(labels_q, labels_g)
    return (to_device(fn, name_q, labels_q, device),
            to_device(fn, name_g, labels_g, device))


def host_labels(fn, name, labels):
    """Labels as a flat NumPy array on the host, checked as label_array checks them."""
    return _host(label_array(fn, name, labels))


# ---------------------------------------------------------------------------
# y_true of a list of pairs: the genuine flags

# what the C side counts as genuine flags (0 and 1 of these dtypes)
FLAG_DTYPES = ("bool", "int8", "uint8", "int32", "int64")


def genuine_flags(fn, name, y_true, pos_label=None, classes=None, takes_pos_label=True):
    """(flags, classes): y_true (bool, integers, or floats holding integers)
    as the genuine flags the C side counts, as scikit-learn's roc_curve makes
    them: the pairs whose y_true equals pos_label; pos_label=None means 1,
    where y_true's values are within {0, 1} or within {-1, 1}, and is an
    error otherwise.

    classes: where this y_true is one part of the pairs (a batch of a stream,
    a rank's share), the values of the parts so far (a set, empty for the
    first), which the default rule then covers with this part's; the
    returned classes are all of them. None: y_true is all of the pairs (the
    returned classes are then None where nothing needed them).
    takes_pos_label: whether fn has a pos_label to suggest in an error."""
    y = label_array(fn, name, y_true, flat=False)
    if pos_label is not None:
        return _equal_flags(y, _positive_class(fn, pos_label)), classes
    if classes is None and _ffi.dtype_name(y) == "bool":
        return y, None  # within {0, 1}: nothing to check
    seen = set(classes or ())
    found = _binary_classes(y)
    if found is None:
        found = set(np.unique(_host(y)).tolist())
    classes = require_default_classes(fn, name, seen | found,
                                      " (this batch and the earlier ones)" if seen else "",
                                      takes_pos_label)
    if -1 in classes or _ffi.dtype_name(y) not in FLAG_DTYPES:
        return _equal_flags(y, 1), classes
    return y, classes


def require_default_classes(fn, name, classes, where="", takes_pos_label=True):
    """classes (y_true's values, a set), where scikit-learn's default
    pos_label (1) applies to them: within {0, 1} or within {-1, 1}; else its
    ValueError, saying `where` the values were found (and, where fn takes
    one, that pos_label would do)."""
    if classes <= {0, 1} or classes <= {-1, 1}:
        return classes
    shown = sorted(classes)
    listed = ", ".join(repr(v) for v in shown[:10]) + (", ..." if len(shown) > 10 else "")
    raise ValueError("%s: %s takes values in {%s}%s%s: give %s as bool, or with values in "
                     "{0, 1} or {-1, 1}%s" % (
                         fn, name, listed, where,
                         " and pos_label is not given" if takes_pos_label else "", name,
                         ", or pass pos_label (the value of the genuine pairs)"
                         if takes_pos_label else ""))


def _binary_classes(y):
    """The set of y's values where they lie within {-1, 0, 1}, else None; from
    y's extremes (one pass; the zero count only where -1 and 1 both are)."""
    if y.shape[0] == 0:
        return set()
    if _ffi.dtype_name(y) == "bool":
        lo, hi = bool(y.all()), bool(y.any())
    elif _ffi.is_tensor(y) and y.dtype != getattr(_ffi.torch, "uint64", None):
        lo, hi = (v.item() for v in _ffi.torch.aminmax(y))
    else:  # NumPy, and torch's uint64 (which it cannot reduce)
        host = _host(y)
        lo, hi = host.min().item(), host.max().item()
    lo, hi = int(lo), int(hi)
    if 0 <= lo and hi <= 1:
        return {lo, hi}
    if lo != -1 or hi > 1:
        return None
    return {-1, hi} | ({0} if hi == 1 and bool((y == 0).any()) else set())


def _positive_class(fn, pos_label):
    """pos_label as a Python int (bool, integers, floats holding integers)."""
    if isinstance(pos_label, (bool, np.bool_, numbers.Integral)):
        return int(pos_label)
    if isinstance(pos_label, numbers.Real):
        if math.isfinite(pos_label) and float(pos_label).is_integer():
            return int(pos_label)
        raise ValueError("%s: pos_label must be an integer (labels are bool, integers, or floats "
                         "holding integers), got %r" % (fn, pos_label))
    raise TypeError("%s: pos_label must be a number (the value that marks the genuine pairs), "
                    "or None, got %r" % (fn, pos_label))


def _equal_flags(y, value):
    """y == value (an int), exactly: a value y's dtype cannot hold equals
    nothing (NumPy and torch would round it to one the dtype holds)."""
    if not _holds(_numpy_dtype(y), value):
        if _ffi.is_tensor(y):
            return _ffi.torch.zeros(y.shape, dtype=_ffi.torch.bool, device=y.device)
        return np.zeros(y.shape, np.bool_)
    if _ffi.is_tensor(y):
        return y == _ffi.torch.tensor(value, dtype=y.dtype, device=y.device)
    return y == _numpy_dtype(y).type(value)


def _holds(dtype, value):
    """Whether NumPy dtype `dtype` holds the integer `value` exactly."""
    if dtype.kind == "b":
        return value in (0, 1)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min <= value <= info.max
    try:
        with np.errstate(over="ignore"):
            nearest = dtype.type(value)
    except OverflowError:  # beyond float64
        return False
    return bool(np.isfinite(nearest)) and int(nearest) == value
