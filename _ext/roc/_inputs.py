"""The evaluator's inputs, checked and converted before any C call: option
values, arrays and where they live, and labels made integers the C side
compares.

Every error is a TypeError or ValueError (RuntimeError for devices) whose
message starts with the public function's name.
"""

import math
import numbers

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


def far_targets(fn, fars):
    """The FAR targets as a tuple of floats in [0, 1]; a scalar is one target."""
    if isinstance(fars, numbers.Real) and not isinstance(fars, (bool, np.bool_)):
        fars = (fars,)
    try:
        values = tuple(float(f) for f in fars)
    except (TypeError, ValueError):
        raise TypeError("%s: fars must be a number or a sequence of numbers in [0, 1], got %r"
                        % (fn, fars)) from None
    for far in values:
        if not 0.0 <= far <= 1.0:
            raise ValueError("%s: fars must lie in [0, 1], got %r" % (fn, far))
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
    if not is_array(x):
        raise TypeError("%s: %s must be an array (torch, NumPy, or any with __dlpack__), got %s"
                        % (fn, name, type(x).__name__))
    return x


def device_of(x):
    """'cpu', 'cuda:N', or another device's name, of an array (None: not an array)."""
    if _ffi.is_tensor(x):
        return str(x.device) if x.device.type != "cuda" else "cuda:%d" % (x.device.index or 0)
    if isinstance(x, np.ndarray):
        return "cpu"
    if hasattr(x, "__dlpack_device__"):
        kind, index = x.__dlpack_device__()
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


def as_torch(x):
    torch = _ffi.torch
    if _ffi.is_tensor(x):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return torch.from_dlpack(x)


def to_device(x, device):
    """x on `device`: NumPy arrays stay NumPy for 'cpu'; anything else becomes
    a torch tensor there (zero-copy where it already is)."""
    if x is None:
        return None
    if device == "cpu" and isinstance(x, np.ndarray):
        return x
    if _ffi.torch is None:
        raise RuntimeError("computing on %s needs torch" % device)
    return as_torch(x).to(device)


# ---------------------------------------------------------------------------
# labels

def _flat_labels(fn, name, labels, expected):
    if labels is None or not (is_array(labels) or isinstance(labels, (list, tuple))):
        raise TypeError("%s: %s must be an array of integer or float labels, got %s"
                        % (fn, name, type(labels).__name__))
    if isinstance(labels, (list, tuple)):
        labels = np.asarray(labels)
    elif not (isinstance(labels, np.ndarray) or _ffi.is_tensor(labels)):
        labels = as_torch(labels) if _ffi.torch is not None else np.from_dlpack(labels)
    if _ffi.is_tensor(labels):
        kind = ("c" if labels.is_complex() else "f" if labels.dtype.is_floating_point
                else "b" if labels.dtype == _ffi.torch.bool else "i")
    else:
        kind = labels.dtype.kind
    if kind not in "biuf":
        raise TypeError("%s: %s must hold integers or floats, got %s" % (fn, name, labels.dtype))
    labels = labels.reshape(-1)
    if expected is not None and labels.shape[0] != expected:
        raise ValueError("%s: %s has %d elements but there are %d %s" % (
            fn, name, labels.shape[0], expected,
            "queries" if name == "labels_q" else "gallery entries"))
    if kind == "f" and bool(labels.isnan().any() if _ffi.is_tensor(labels)
                            else np.isnan(labels).any()):
        raise ValueError("%s: %s contains NaN; a NaN label matches nothing" % (fn, name))
    return labels


def _host(x):
    return x.detach().cpu().numpy() if _ffi.is_tensor(x) else np.asarray(x)


def _exact_int128(values):
    """Integer labels as (high, low) int64 pairs: equal exactly when the
    integers are (int64 and uint64 alike)."""
    if values.dtype == np.uint64:
        return np.stack([np.zeros(values.shape, np.int64), values.view(np.int64)], axis=1)
    values = values.astype(np.int64)
    return np.stack([np.where(values < 0, -1, 0).astype(np.int64), values], axis=1)


def _mixed_codes(fn, labels_q, labels_g):
    """Codes of labels of two dtypes, on the host, exact: integers (of any
    width and sign) compared as integers, floats against integers only where
    the float is that integer."""
    q, g = _host(labels_q), _host(labels_g)
    if q.dtype.kind == "b":
        q = q.astype(np.int64)
    if g.dtype.kind == "b":
        g = g.astype(np.int64)
    floats = [x for x in (q, g) if x.dtype.kind == "f"]
    if floats:
        # a float label can equal an integer label only if it is integral
        # and the integer is exactly representable; otherwise compare as float64
        ints = [x for x in (q, g) if x.dtype.kind in "iu"]
        big = any(x.size and np.abs(x.astype(np.float64)).max() >= 2.0 ** 53 for x in ints)
        if big:
            if not all(np.all(np.isfinite(x)) and np.all(x == np.trunc(x)) and
                       (not x.size or np.abs(x).max() < 2.0 ** 63) for x in floats):
                raise ValueError("%s: labels_q is %s and labels_g is %s: integer labels beyond "
                                 "2^53 cannot be matched exactly against fractional float "
                                 "labels; give both as one dtype" % (fn, q.dtype, g.dtype))
            q, g = (x.astype(np.int64) if x.dtype.kind == "f" else x for x in (q, g))
        else:
            q, g = q.astype(np.float64), g.astype(np.float64)
    if q.dtype.kind == "f":
        values, codes = np.unique(np.concatenate([q, g]), return_inverse=True)
    else:
        rows = np.concatenate([_exact_int128(q), _exact_int128(g)])
        values, codes = np.unique(rows, axis=0, return_inverse=True)
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


def comparable_labels(fn, labels_q, labels_g, n_query, n_gallery, device):
    """The labels as int32 or int64 arrays of one dtype on `device`, equal
    exactly where the labels are (what the C side compares): labels of one
    dtype converted elementwise (_comparable: no reduction and no
    synchronization; torch int32 and int64 labels pass untouched), integers
    of two dtypes that int64 holds widened to it; other labels of two dtypes
    as codes of their distinct values, made on the host."""
    labels_q = _flat_labels(fn, "labels_q", labels_q, n_query)
    labels_g = _flat_labels(fn, "labels_g", labels_g, n_gallery)
    same_kind = _ffi.is_tensor(labels_q) == _ffi.is_tensor(labels_g)
    if same_kind and labels_q.dtype == labels_g.dtype:
        labels_q, labels_g = _comparable(labels_q), _comparable(labels_g)
    elif same_kind and _int64_exact(labels_q) and _int64_exact(labels_g):
        labels_q, labels_g = _widened(labels_q), _widened(labels_g)
    else:
        labels_q, labels_g = _mixed_codes(fn, labels_q, labels_g)
    return to_device(labels_q, device), to_device(labels_g, device)
