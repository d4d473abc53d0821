"""Property-based tests of the descriptor layer: arrays of every dtype, shape,
layout (offset, step, reversed, transposed), alignment, writability and
producer kind (NumPy, DLPack-only objects versioned and legacy, raw capsules,
torch) through three families' CPU entry points (gelu, cpu_roc, conv2d).
Each call either equals the same call on contiguous torch copies, bit for bit
and count for count, leaving the memory around an output untouched, or
raises the error that the argument's first problem calls for, naming the
function and the argument.

Run long with HYPOTHESIS_PROFILE=fuzz (`make fuzz`).
"""

import numpy as np
import pytest
import torch
from hypothesis import assume, event, given, strategies as st

from _ext import _ffi, conv, gelu, roc

from test_dlpack import Producer

# dtypes _ext takes, then some it does not
SUPPORTED = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool",
             "bfloat16"]
UNSUPPORTED = ["complex64", "uint16", "uint32"]
FLOATS = {"float32", "float64"}

# entry point -> its arguments: (role, allowed dtypes, written, dtype group)
ENTRY_POINTS = {
    "gelu": [("input", FLOATS, False, "x"), ("output", FLOATS, True, "x")],
    "cpu_roc": [("score", {"float32"}, False, None),
                ("histo1", {"float32", "float64", "int64"}, True, None),
                ("histo2", {"float32", "float64", "int64"}, True, None),
                ("labels_q", {"float32", "int32", "int64"}, False, "labels"),
                ("labels_g", {"float32", "int32", "int64"}, False, "labels")],
    "conv2d": [("image", FLOATS, False, "x"), ("kernel", FLOATS, False, "x"),
               ("out", FLOATS, True, "x")],
}
DEFAULT_DTYPES = {"histo1": "int64", "histo2": "int64", "labels_q": "int64",
                  "labels_g": "int64"}
PRODUCERS = ["numpy", "versioned", "legacy", "capsule_versioned", "capsule_legacy", "torch"]
LAYOUTS = ["contiguous", "offset", "step", "flip", "transpose"]


def shapes(fn, draw):
    """Each argument's shape for one call of fn."""
    if fn == "gelu":
        shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
        return {"input": shape, "output": shape}
    if fn == "cpu_roc":
        n_query, n_gallery, nbins = draw(st.integers(1, 4)), draw(st.integers(1, 4)), \
            draw(st.integers(1, 8))
        return {"score": (n_query, n_gallery), "histo1": (nbins,), "histo2": (nbins,),
                "labels_q": (n_query,), "labels_g": (n_gallery,)}
    height, width, side = draw(st.integers(1, 5)), draw(st.integers(1, 5)), \
        draw(st.sampled_from([1, 3]))
    return {"image": (height, width), "kernel": (side, side), "out": (height, width)}


class Argument:
    """One argument: `array` is a view, by `layout`, into storage that starts
    `shift` bytes past an aligned address (`buffer` holds those bytes)."""

    def __init__(self, role, shape, dtype, layout, shift, written, rng):
        self.role, self.dtype, self.layout = role, dtype, layout
        storage_dtype = np.dtype("uint16" if dtype == "bfloat16" else dtype)
        if layout == "offset":
            storage_shape = (shape[0] + 1,) + shape[1:]
        elif layout == "step":
            storage_shape = (2 * shape[0],) + shape[1:]
        elif layout == "transpose":
            storage_shape = shape[::-1]
        else:
            storage_shape = shape
        n_bytes = int(np.prod(storage_shape)) * storage_dtype.itemsize
        self.buffer = np.zeros(n_bytes + 8, np.uint8)[shift:shift + n_bytes]
        storage = self.typed(self.buffer, storage_dtype, storage_shape)
        if written:
            storage[...] = 0
        elif role == "score":
            storage[...] = rng.uniform(-1.2, 1.2, storage_shape)
        elif role.startswith("labels"):
            storage[...] = rng.integers(0, 3, storage_shape)
        elif storage_dtype.kind == "f":
            storage[...] = rng.standard_normal(storage_shape)
        else:
            storage[...] = rng.integers(0, 5, storage_shape)
        self.storage_dtype, self.storage_shape = storage_dtype, storage_shape
        self.array = self.view(storage)

    @staticmethod
    def typed(buffer, dtype, shape):
        return buffer.view(dtype).reshape(shape)

    def view(self, storage):
        if self.layout == "offset":
            return storage[1:]
        if self.layout == "step":
            return storage[::2]
        if self.layout == "flip":
            return storage[::-1]
        return storage.T if self.layout == "transpose" else storage

    def expected_buffer(self, values):
        """The bytes of the storage once `values` are written into the view alone."""
        expected = self.buffer.copy()
        self.view(self.typed(expected, self.storage_dtype, self.storage_shape))[...] = values
        return expected

    def contiguous(self):
        """Row-major contiguity as the shims define it (dims of size 1 skipped)."""
        if self.array.size == 0:
            return True
        expected = self.array.itemsize
        for size, stride in reversed(list(zip(self.array.shape, self.array.strides))):
            if size != 1:
                if stride != expected:
                    return False
                expected *= size
        return True

    def misaligned(self):
        return self.array.size > 0 and self.array.ctypes.data % self.array.itemsize != 0

    def torch_copy(self):
        copy = torch.from_numpy(np.array(self.array, order="C"))
        return copy.view(torch.bfloat16) if self.dtype == "bfloat16" else copy


def wrap(arg, producer, read_only):
    """arg's array as `producer` hands it over."""
    array = arg.array
    if read_only:
        array.flags.writeable = False
    if producer == "numpy":
        return array
    if producer == "versioned":
        return Producer(array)
    if producer == "legacy":
        return Producer(array, versioned=False)
    if producer == "capsule_versioned":
        return array.__dlpack__(max_version=(1, 0))
    if producer == "capsule_legacy":
        return array.__dlpack__()
    tensor = torch.from_numpy(array)
    return tensor.view(torch.bfloat16) if arg.dtype == "bfloat16" else tensor


def call(fn, args):
    """fn's CPU entry point on {role: array}, raw: every argument through describe()."""
    if fn == "cpu_roc":
        return roc.cpu_roc(args["score"], args["histo1"], args["histo2"], args["labels_q"],
                           args["labels_g"])
    module = {"gelu": gelu, "conv2d": conv}[fn]
    described = [_ffi.describe(module.ffi, fn, role, args[role], written)
                 for role, _, written, _ in ENTRY_POINTS[fn]]
    if fn == "gelu":
        status = gelu.lib.gelu_forward_cpu(*described, gelu.lib.GELU_NONE)
    else:
        status = conv.lib.conv2d_forward_cpu(*described)
    _ffi.check(module.ffi, module.lib, status)
    return None


def first_problem(fn, arg, allowed, written, producer, read_only):
    """(exception, message regex) for arg's first problem, in the order the
    layers find them; None if it has none."""
    role = arg.role
    if read_only and producer == "legacy":
        return TypeError, "%s: %s cannot be exported through DLPack" % (fn, role)
    if read_only and written:
        return ValueError, "%s: %s is read-only$" % (fn, role)
    if arg.dtype in UNSUPPORTED:
        return TypeError, "%s: %s is %s; _ext takes" % (fn, role, arg.dtype)
    if arg.dtype not in allowed:
        return TypeError, "%s: %s must be .*, got %s$" % (fn, role, arg.dtype)
    if arg.misaligned():
        return ValueError, "%s: %s is not aligned to its %d-byte elements" % (
            fn, role, arg.array.itemsize)
    if not arg.contiguous():
        return ValueError, r"%s: %s must be contiguous \(call .contiguous\(\) on it\)" % (fn, role)
    return None


@st.composite
def cases(draw):
    fn = draw(st.sampled_from(sorted(ENTRY_POINTS)))
    roles = ENTRY_POINTS[fn]
    role, allowed, written, group = draw(st.sampled_from(roles))
    # half the time a dtype the argument takes, so that layouts and producers are reached
    dtype = draw(st.sampled_from(sorted(allowed)) | st.sampled_from(SUPPORTED + UNSUPPORTED))
    all_shapes = shapes(fn, draw)
    layout = draw(st.sampled_from(LAYOUTS))
    if not all_shapes[role]:
        layout = "contiguous"
    itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    shift = draw(st.integers(0, itemsize - 1)) if draw(st.booleans()) else 0
    producer = draw(st.sampled_from(PRODUCERS if dtype != "bfloat16" else ["torch"]))
    read_only = producer != "torch" and draw(st.integers(0, 3)) == 0
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return fn, role, dtype, all_shapes, layout, shift, producer, read_only, seed


@given(cases())
def test_describe_then_call(case):
    fn, role, dtype, all_shapes, layout, shift, producer, read_only, seed = case
    rng = np.random.default_rng(seed)
    perturbed_allowed = written_role = None
    good_dtypes = {}
    for name, allowed, written, group in ENTRY_POINTS[fn]:
        if name == role:
            perturbed_allowed, written_role = allowed, written
            if group is not None and dtype in allowed:
                good_dtypes[group] = dtype  # its partners share a dtype it may take
    args = {}
    for name, allowed, written, group in ENTRY_POINTS[fn]:
        if name == role:
            args[name] = Argument(name, all_shapes[name], dtype, layout, shift, written, rng)
        else:
            good = good_dtypes.get(group, DEFAULT_DTYPES.get(name, "float32"))
            args[name] = Argument(name, all_shapes[name], good, "contiguous", 0, written, rng)
    perturbed = args[role]
    if producer == "capsule_legacy":
        assume(not read_only)  # NumPy cannot export those without DLPack 1.0
    if producer == "torch":
        try:
            torch.from_numpy(perturbed.array)
        except (TypeError, ValueError):
            assume(False)  # a NumPy dtype torch lacks, or negative strides
    handed = {name: (wrap(arg, producer, read_only) if name == role else arg.array)
              for name, arg in args.items()}

    problem = first_problem(fn, perturbed, perturbed_allowed, written_role, producer, read_only)
    if problem is not None:
        error, message = problem
        event("%s: %s" % (error.__name__, message.split(": ", 1)[1][len(role) + 1:][:24]))
        with pytest.raises(error, match="^" + message):
            call(fn, handed)
        return

    event("equal to the torch path")
    reference = {name: arg.torch_copy() for name, arg in args.items()}
    expected_result = call(fn, reference)
    assert call(fn, handed) == expected_result
    for name, _, written, _ in ENTRY_POINTS[fn]:
        if written:
            arg = args[name]
            expected = arg.expected_buffer(reference[name].numpy())
            assert arg.buffer.tobytes() == expected.tobytes(), name
