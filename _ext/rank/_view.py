"""The rank count's view (roc_rank.h's roc_rank_view) as NumPy arrays, and
back: the layout the summary, the shards' exchanges (_shards.py) and the
report read."""

import numpy as np

from ..roc._evaluate import _numpy
from ..roc._roc import ffi

# its arrays: (name, dtype, length: "query", "query+1", "pair", "top", "kept", 2)
VIEW_ARRAYS = (("first", np.int64, "query+1"), ("mate_key", np.uint32, "pair"),
               ("mate_index", np.int64, "pair"), ("above", np.uint64, "pair"),
               ("tied", np.uint64, "pair"), ("best_key", np.uint32, "query"),
               ("best_index", np.int64, "query"), ("n_nonmates", np.uint64, "query"),
               ("nan_mates", np.uint64, "query"), ("topk_index", np.int64, "top"),
               ("topk_score", np.float32, "top"), ("kept_keys", np.uint32, "kept"),
               ("totals", np.uint64, 2))
DTYPES = {name: dtype for name, dtype, _ in VIEW_ARRAYS}
C_TYPES = {np.int64: "int64_t[]", np.uint32: "uint32_t[]", np.uint64: "uint64_t[]",
           np.float32: "float[]"}


def _length(view, kind):
    return {"query": view.n_query, "query+1": view.n_query + 1, "pair": view.n_mated,
            "top": view.n_query * view.topk, "kept": view.n_kept}.get(kind, kind)


def view_arrays(view):
    """The counts of a C roc_rank_view as NumPy views of its arrays (no copy),
    with topk."""
    out = {name: _numpy(getattr(view, name), _length(view, kind), dtype)
           for name, dtype, kind in VIEW_ARRAYS}
    out["topk"] = int(view.topk)
    return out


def view_of(arrays):
    """A C roc_rank_view over `arrays` (view_arrays' layout), and what keeps
    its buffers alive."""
    view = ffi.new("roc_rank_view *")
    keep = []
    for name, dtype, _ in VIEW_ARRAYS:
        array = np.ascontiguousarray(arrays[name], dtype)
        keep.append(array)
        setattr(view, name, ffi.from_buffer(C_TYPES[dtype], array) if array.size else ffi.NULL)
    view.n_query = len(arrays["first"]) - 1
    view.n_mated = len(arrays["mate_key"])
    view.topk = arrays["topk"]
    view.n_kept = len(arrays["kept_keys"])
    return view, keep


