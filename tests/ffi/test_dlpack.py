"""The descriptor layer (_ext/_ffi.py, src/ext_dlpack.c, ext_check_dtype):
every array reaches the shims through DLPack. Arrays of NumPy, of a minimal
producer that has only __dlpack__/__dlpack_device__ (versioned and legacy),
of a producer written by hand (byte_offset, no strides, vector lanes, other
devices and versions, flags), raw capsules, MXNet, CuPy and JAX must give the
descriptor and the results that the same data as a torch tensor gives, bit
for bit and count for count; whatever cannot be read right is a named error.
"""

import ctypes
import sys

import numpy as np
import pytest
import torch

from _ext import _ffi, gelu, roc

# ---------------------------------------------------------------------------
# producers


class Producer:
    """Only the DLPack protocol, around a NumPy array: versioned (takes
    max_version and copy) or legacy (takes stream alone, as before DLPack 1.0).
    `device` is what __dlpack_device__ reports; the keywords of every export
    are recorded."""

    def __init__(self, array, versioned=True, device=(1, 0)):
        self.array, self.versioned, self.device = array, versioned, device
        self.exports = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, **keywords):
        if not self.versioned and keywords:
            raise TypeError("__dlpack__() got an unexpected keyword argument %r" % next(iter(keywords)))
        self.exports.append(dict(keywords, stream=stream))
        return self.array.__dlpack__(**keywords)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
CAPSULE_NAMES = {True: b"dltensor_versioned", False: b"dltensor"}
DL_INT, DL_UINT, DL_FLOAT, DL_COMPLEX = 0, 1, 2, 5
READ_ONLY, IS_COPIED = 1, 2


class Handmade:
    """A DLPack export written by hand over NumPy memory, for what NumPy never
    exports. The tensor starts `byte_offset` bytes into `base` (at `address`
    when base is not a NumPy array) and has `shape` and `strides` (elements;
    None: no strides, compact row-major). `released` counts the deleter's
    calls."""

    def __init__(self, base, shape, strides=None, byte_offset=0, versioned=True, dtype=None,
                 device=(1, 0), version=(1, 0), flags=0, address=None):
        self.base, self.versioned, self.released = base, versioned, 0
        code, bits, lanes = dtype or (DL_FLOAT, 32, 1)
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * len(shape))(*strides)
        self.deleter = DELETER(self._release)
        address = base.ctypes.data if address is None else address
        tensor = DLTensor(address, DLDevice(*device), len(shape),
                          DLDataType(code, bits, lanes), self.shape, self.strides, byte_offset)
        if versioned:
            self.managed = DLManagedTensorVersioned(DLPackVersion(*version), None, self.deleter,
                                                    flags, tensor)
        else:
            self.managed = DLManagedTensor(tensor, None, self.deleter)

    def _release(self, address):
        assert address == ctypes.addressof(self.managed)
        self.released += 1

    def capsule(self):
        return _new_capsule(ctypes.addressof(self.managed), CAPSULE_NAMES[self.versioned], None)


# ---------------------------------------------------------------------------
# helpers


def fields(desc):
    """A descriptor as plain values."""
    ndim = desc.ndim
    return (int(gelu.ffi.cast("uintptr_t", desc.data)), desc.dtype, desc.device_type,
            desc.device_index, ndim, list(desc.sizes)[:ndim], list(desc.strides)[:ndim])


def describe(x, writable=False, name="input"):
    return _ffi.describe(gelu.ffi, "gelu", name, x, writable)


def gelu_raw(x, out):
    """The raw CPU entry point, on any pair of describable arrays."""
    _ffi.check(gelu.ffi, gelu.lib, gelu.lib.gelu_forward_cpu(
        describe(x), describe(out, writable=True, name="output"), gelu.lib.GELU_NONE))


def producers(array):
    """The same NumPy memory as each kind of producer."""
    return {"numpy": array, "versioned": Producer(array), "legacy": Producer(array, False),
            "capsule": array.__dlpack__(), "torch": torch.from_numpy(array)}


# ---------------------------------------------------------------------------
# the descriptor: the same from every producer


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int16", "int32",
                                   "int64", "uint8", "bool"])
@pytest.mark.parametrize("view", ["whole", "offset", "step", "transpose", "scalar", "empty"])
def test_every_producer_describes_alike(dtype, view):
    base = np.arange(60).reshape(6, 10).astype(dtype)
    array = {"whole": base, "offset": base[2:, 3:], "step": base[::2, 1::3], "transpose": base.T,
             "scalar": base[1, 1, ...], "empty": base[3:3]}[view]
    expected = fields(describe(torch.from_numpy(array)))
    assert expected[5] == list(array.shape)
    if array.size == 0:  # no element to point at: the producers differ in data and strides
        for kind, x in producers(array).items():
            assert fields(describe(x))[1:6] == expected[1:6], kind
        return
    assert expected[0] == array.ctypes.data
    assert expected[6] == [s // array.itemsize for s in array.strides]
    for kind, x in producers(array).items():
        assert fields(describe(x)) == expected, kind


def test_bfloat16_and_negative_strides():
    t = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    assert fields(describe(t))[1] == _ffi.BFLOAT16
    flipped = np.arange(12, dtype=np.float32)[::-1]
    data, _, _, _, _, sizes, strides = fields(describe(flipped))
    assert (data, sizes, strides) == (flipped.ctypes.data, [12], [-1])


def test_versioned_and_legacy_keywords():
    """DLPack 1.0 asked for first, without a copy; legacy producers get stream alone."""
    array = np.ones(3, np.float32)
    versioned, legacy = Producer(array), Producer(array, versioned=False)
    describe(versioned)
    describe(legacy)
    assert versioned.exports == [{"max_version": (1, 0), "copy": False, "stream": None}]
    assert legacy.exports == [{"stream": None}]


# ---------------------------------------------------------------------------
# results through real entry points: equal to the torch path


@pytest.mark.parametrize("kind", ["numpy", "versioned", "legacy", "capsule"])
def test_gelu_forward_equals_torch_path(rng, kind):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    expected = torch.empty(5, 7)
    gelu_raw(torch.from_numpy(x), expected)
    out = np.full((5, 7), np.nan, np.float32)
    out_producer = {"numpy": out, "versioned": Producer(out), "legacy": Producer(out, False),
                    "capsule": out.__dlpack__()}[kind]
    gelu_raw(producers(x)[kind], out_producer)
    assert out.tobytes() == expected.numpy().tobytes()


@pytest.mark.parametrize("kind", ["numpy", "versioned", "legacy", "capsule"])
def test_cpu_roc_equals_torch_path(rng, kind):
    score = rng.uniform(-1.1, 1.1, (9, 13)).astype(np.float32)
    score[0, 0] = np.nan
    labels_q = rng.integers(0, 4, 9).astype(np.int64)
    labels_g = rng.integers(0, 4, 13).astype(np.int64)
    expected = [torch.zeros(64, dtype=torch.int64) for _ in range(2)]
    n_nan = roc.cpu_roc(torch.from_numpy(score), *expected, torch.from_numpy(labels_q),
                        torch.from_numpy(labels_g))
    histos = [np.zeros(64, np.int64) for _ in range(2)]
    wrap = {"numpy": lambda a: a, "versioned": Producer, "legacy": lambda a: Producer(a, False),
            "capsule": lambda a: a.__dlpack__()}[kind]
    got = roc.cpu_roc(wrap(score), wrap(histos[0]), wrap(histos[1]), wrap(labels_q),
                      wrap(labels_g))
    assert got == n_nan == 1
    for histo, reference in zip(histos, expected):
        assert np.array_equal(histo, reference.numpy())
    assert histos[0].sum() == 9 * 13 - 1


def test_byte_offset_and_missing_strides(rng):
    """byte_offset moves the data pointer; no strides means compact row-major."""
    base = rng.standard_normal(40).astype(np.float32)
    handmade = Handmade(base, (3, 4), strides=None, byte_offset=8 * 4)
    desc = describe(handmade.capsule())
    assert fields(desc) == (base.ctypes.data + 32, _ffi.FLOAT32, _ffi.CPU, 0, 2, [3, 4], [4, 1])
    out = np.empty((3, 4), np.float32)
    gelu_raw(Handmade(base, (3, 4), byte_offset=32, versioned=False).capsule(), out)
    expected = torch.empty(3, 4)
    gelu_raw(torch.from_numpy(base[8:20].reshape(3, 4)), expected)
    assert out.tobytes() == expected.numpy().tobytes()
    strided = Handmade(base, (2, 3), strides=[10, 2], byte_offset=4)
    assert fields(describe(strided.capsule()))[5:] == ([2, 3], [10, 2])


def test_non_contiguous_is_refused_alike(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)[:, ::2]
    for kind, producer in producers(x).items():
        with pytest.raises(ValueError, match=r"^gelu: input must be contiguous"):
            gelu_raw(producer, np.empty((4, 3), np.float32))


# ---------------------------------------------------------------------------
# lifetime: the export is held while the descriptor lives, then released once


def test_export_released_with_the_descriptor():
    array = np.ones(4, np.float32)
    before = sys.getrefcount(array)
    desc = describe(array)
    assert sys.getrefcount(array) == before + 1  # NumPy's export holds the array
    del desc
    assert sys.getrefcount(array) == before


@pytest.mark.parametrize("versioned", [True, False])
def test_deleter_called_once(versioned):
    handmade = Handmade(np.ones(4, np.float32), (4,), versioned=versioned)
    capsule = handmade.capsule()
    desc = describe(capsule)
    assert handmade.released == 0
    assert fields(desc)[5] == [4]
    del desc
    assert handmade.released == 1
    with pytest.raises(ValueError, match="already consumed"):
        describe(capsule)
    assert handmade.released == 1


def test_deleter_called_on_a_refused_export():
    handmade = Handmade(np.ones(4, np.float32), (4,), dtype=(DL_COMPLEX, 64, 1))
    with pytest.raises(TypeError):
        describe(handmade.capsule())
    assert handmade.released == 1


def test_consumed_capsule():
    capsule = np.ones(3, np.float32).__dlpack__(max_version=(1, 0))
    describe(capsule)
    with pytest.raises(ValueError, match=r"^gelu: input is a DLPack capsule that was already "
                                         r"consumed \(named used_dltensor_versioned\)"):
        describe(capsule)
    legacy = np.ones(3, np.float32).__dlpack__()
    describe(legacy)
    with pytest.raises(ValueError, match=r"already consumed \(named used_dltensor\)"):
        describe(legacy)


def test_export_that_is_not_a_capsule():
    class Liar(Producer):
        def __dlpack__(self, stream=None, **keywords):
            return self.array

    with pytest.raises(TypeError, match=r"^gelu: input's DLPack export is a ndarray, not a "
                                        r"capsule$"):
        describe(Liar(np.ones(2, np.float32)))


def test_foreign_capsule():
    import datetime
    with pytest.raises(TypeError, match=r"^gelu: input is a capsule but not a DLPack one"):
        describe(datetime.datetime_CAPI)


# ---------------------------------------------------------------------------
# read-only


def test_read_only_output():
    frozen = np.zeros(3, np.float32)
    frozen.flags.writeable = False
    x = np.ones(3, np.float32)
    for output in (frozen, Producer(frozen)):
        with pytest.raises(ValueError, match=r"^gelu: output is read-only$"):
            gelu_raw(x, output)
    gelu_raw(frozen, np.empty(3, np.float32))  # a read-only input is fine
    flagged = Handmade(np.zeros(3, np.float32), (3,), flags=READ_ONLY)
    with pytest.raises(ValueError, match=r"^gelu: output is read-only$"):
        gelu_raw(x, flagged.capsule())
    assert flagged.released == 1
    copied = Handmade(np.zeros(3, np.float32), (3,), flags=IS_COPIED)
    with pytest.raises(ValueError, match=r"^gelu: output is a copy that its producer made"):
        gelu_raw(x, copied.capsule())


def test_read_only_output_of_roc():
    histo1 = np.zeros(8, np.int64)
    histo1.flags.writeable = False
    with pytest.raises(ValueError, match=r"^cpu_roc: histo1 is read-only"):
        roc.cpu_roc(np.zeros((2, 2), np.float32), histo1, np.zeros(8, np.int64),
                    np.zeros(2, np.int64), np.zeros(2, np.int64))


# ---------------------------------------------------------------------------
# what cannot be read right: named errors


SUPPORTED = ("float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8 and bool "
             "arrays")


@pytest.mark.parametrize("make, name", [
    (lambda: np.zeros(2, np.complex64), "complex64"),
    (lambda: np.zeros(2, np.complex128), "complex128"),
    (lambda: np.zeros(2, np.uint16), "uint16"),
    (lambda: np.zeros(2, np.uint64), "uint64"),
    (lambda: torch.zeros(2, dtype=torch.complex64), "complex64"),
    (lambda: torch.zeros(2, dtype=torch.uint32), "uint32"),
    (lambda: Handmade(np.zeros(8, np.float32), (2,), dtype=(DL_FLOAT, 32, 4)),
     "float32 in 4 lanes"),
    (lambda: Handmade(np.zeros(8, np.float32), (2,), dtype=(9, 8, 1)),
     r"DLPack type code 9 \(8 bits\)"),
])
def test_unsupported_dtype(make, name):
    array = make()
    with pytest.raises(TypeError, match=r"^gelu: input is %s; _ext takes %s$" % (name, SUPPORTED)):
        describe(array.capsule() if isinstance(array, Handmade) else array)


def test_dtype_the_entry_point_does_not_take():
    with pytest.raises(TypeError, match=r"^gelu: input must be float32 or float64, got int32$"):
        gelu_raw(np.zeros(3, np.int32), np.zeros(3, np.float32))


def test_non_native_byte_order():
    with pytest.raises(TypeError, match=r"^gelu: input cannot be exported through DLPack: "):
        describe(np.zeros(3, ">f4"))


@pytest.mark.parametrize("device, message", [
    ((10, 0), r"is on DLPack device type 10 \(ROCm\)"),
    ((13, 0), r"is on DLPack device type 13 \(CUDA managed memory\)"),
    ((99, 0), r"is on DLPack device type 99 \(not CPU or CUDA\)"),
])
def test_unsupported_device(device, message):
    handmade = Handmade(np.zeros(2, np.float32), (2,), device=device)
    with pytest.raises(RuntimeError, match=r"^gelu: input %s; _ext takes CPU and CUDA" % message):
        describe(handmade.capsule())
    producer = Producer(np.zeros(2, np.float32), device=device)
    with pytest.raises(RuntimeError, match=r"^gelu: input is on DLPack device type %d" % device[0]):
        describe(producer)
    assert producer.exports == []  # refused before anything was exported


def test_meta_tensor():
    with pytest.raises(RuntimeError, match=r"^gelu: input is on meta; _ext takes CPU and CUDA"):
        describe(torch.zeros(3, device="meta"))


def test_pinned_host_memory_is_cpu():
    handmade = Handmade(np.arange(3, dtype=np.float32), (3,), device=(3, 0))
    assert fields(describe(handmade.capsule()))[2:4] == (_ffi.CPU, 0)


def test_dlpack_major_version():
    handmade = Handmade(np.zeros(2, np.float32), (2,), version=(2, 0))
    with pytest.raises(TypeError, match=r"^gelu: input is a DLPack 2.0 tensor; _ext reads "
                                        r"DLPack 1.x"):
        describe(handmade.capsule())
    assert handmade.released == 1
    minor = Handmade(np.zeros(2, np.float32), (2,), version=(1, 3))
    assert fields(describe(minor.capsule()))[5] == [2]


def test_too_many_dimensions():
    array = np.zeros((1,) * 9, np.float32)
    with pytest.raises(ValueError, match=r"^gelu: input has 9 dimensions; at most 8"):
        describe(array)


def test_count_overflow():
    """Zero strides make any shape cheap; a count past int64 is refused, not wrapped."""
    huge = Handmade(np.zeros(1, np.float32), (2 ** 32, 2 ** 32), strides=(0, 0))
    with pytest.raises(ValueError, match=r"^gelu: input is \(4294967296, 4294967296\): more "
                                         r"elements than a 64-bit count holds"):
        gelu_raw(huge.capsule(), np.zeros(1, np.float32))
    compact = Handmade(np.zeros(1, np.float32), (2 ** 21,) * 3)  # strides from the sizes
    with pytest.raises(ValueError, match=r"^gelu: input is \(2097152, 2097152, 2097152\): more"):
        gelu_raw(compact.capsule(), np.zeros(1, np.float32))


@pytest.mark.parametrize("value, type_name", [([1.0, 2.0], "list"), (None, "NoneType"),
                                              (1.5, "float"), (3, "int"), (object(), "object"),
                                              ("abc", "str")])
def test_not_an_array(value, type_name):
    with pytest.raises(TypeError, match=r"^gelu: input must be an array with __dlpack__ \(torch, "
                                        r"NumPy, CuPy, JAX\.\.\.\), got %s$" % type_name):
        describe(value)


def test_misaligned_view_refused_by_every_kind():
    misaligned = np.zeros(49, np.uint8)[1:].view(np.float32)
    assert not misaligned.flags.aligned
    handmade = Handmade(np.zeros(13, np.float32), (12,), byte_offset=2)
    for kind in ("numpy", "versioned", "legacy", "capsule", "torch", "handmade"):
        for role in ("input", "output"):
            x = handmade.capsule() if kind == "handmade" else producers(misaligned)[kind]
            args = (x, np.zeros(12, np.float32)) if role == "input" else (np.zeros(12, np.float32), x)
            with pytest.raises(ValueError, match=r"^gelu: %s is not aligned to its 4-byte "
                                                 r"elements \(its address is [123] mod 4\)" % role):
                gelu_raw(*args)
    assert handmade.released == 2


def test_misaligned_refused_by_every_family():
    """Alignment is checked by ext_check_dtype, which every shim calls."""
    odd = np.zeros(8 * 12 + 1, np.uint8)[1:].view(np.float64)
    f32 = np.zeros(4 * 12 + 1, np.uint8)[1:].view(np.float32)
    with pytest.raises(ValueError, match="^cpu_roc: labels_q is not aligned to its 8-byte"):
        roc.cpu_roc(np.zeros((12, 2), np.float32), np.zeros(4, np.int64), np.zeros(4, np.int64),
                    odd.view(np.int64), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="^cpu_roc: score is not aligned to its 4-byte"):
        roc.cpu_roc(f32.reshape(3, 4), np.zeros(4, np.int64), np.zeros(4, np.int64),
                    np.zeros(3, np.int64), np.zeros(4, np.int64))
    from _ext import conv, trilinear, upsample
    with pytest.raises(ValueError, match="^conv2d: image is not aligned to its 4-byte"):
        _ffi.check(conv.ffi, conv.lib, conv.lib.conv2d_forward_cpu(
            _ffi.describe(conv.ffi, "conv2d", "image", f32.reshape(3, 4)),
            _ffi.describe(conv.ffi, "conv2d", "kernel", np.ones((1, 1), np.float32)),
            _ffi.describe(conv.ffi, "conv2d", "out", np.zeros((3, 4), np.float32), True)))
    with pytest.raises(ValueError, match="^upsample_bilinear: input is not aligned to its 8-byte"):
        upsample.upsample_bilinear(torch.from_numpy(odd.reshape(1, 1, 3, 4)), scale_factor=2)
    with pytest.raises(ValueError, match="^trilinear_interpolation: feats is not aligned to its "
                                         "4-byte"):
        trilinear.trilinear_interpolation(torch.from_numpy(f32[:8].reshape(1, 8, 1)),
                                          torch.zeros(1, 3))


@pytest.mark.parametrize("make, bit", [
    (lambda: torch.tensor([0.25 + 0.5j]).conj().imag, "negative"),
    (lambda: torch._neg_view(torch.tensor([0.25, -1.0])), "negative"),
    (lambda: torch.tensor([0.25 + 0.5j]).conj(), "conjugate"),
])
def test_lazy_sign_bits_refused(make, bit):
    x = make()
    fix = {"negative": "resolve_neg", "conjugate": "resolve_conj"}[bit]
    with pytest.raises(ValueError, match=r"^gelu: input has its %s bit set .*call \.%s\(\) on it"
                                         % (bit, fix)):
        describe(x)


def test_resolved_sign_bits_read_right():
    x = torch.tensor([0.25 + 0.5j, -1.0 - 2.0j]).conj().imag.resolve_neg()
    out = torch.empty(2)
    gelu_raw(x, out)
    expected = torch.empty(2)
    gelu_raw(torch.tensor([-0.5, 2.0]), expected)
    assert torch.equal(out, expected)


def test_sparse_tensor():
    with pytest.raises(TypeError, match=r"^gelu: input must be a dense \(strided\) tensor"):
        describe(torch.zeros(3).to_sparse())


def test_requires_grad_tensor_is_described():
    """Tensor.__dlpack__ refuses these; the wrappers' autograd Functions pass them."""
    x = torch.ones(3, requires_grad=True)
    assert fields(describe(x))[0] == x.data_ptr()


# ---------------------------------------------------------------------------
# streams (CPU side; the CUDA side is in the gpu tests below)


def test_streams_named_to_producers():
    array = np.ones(3, np.float32)
    cpu, cuda = Producer(array), Producer(array, device=(2, 0))
    describe(cpu)
    describe(cuda)
    assert cpu.exports[0]["stream"] is None
    assert cuda.exports[0]["stream"] == 1  # CUDA's legacy default stream
    ffi = gelu.ffi
    assert _ffi.cuda_stream(ffi, cpu) == ffi.NULL
    assert _ffi.cuda_stream(ffi, array) == ffi.NULL
    assert _ffi.cuda_stream(ffi, torch.ones(2)) == ffi.NULL
    assert _ffi.cuda_stream(ffi, array.__dlpack__()) == ffi.NULL
    assert int(ffi.cast("uintptr_t", _ffi.cuda_stream(ffi, cuda))) == 1


# ---------------------------------------------------------------------------
# empty_like


def test_empty_like_keeps_the_kind():
    t = torch.zeros(2, 3, dtype=torch.bfloat16)
    out = _ffi.empty_like(t)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3) and out.dtype == torch.bfloat16
    out = _ffi.empty_like(t, (4,), "int64")
    assert out.shape == (4,) and out.dtype == torch.int64 and out.device == t.device
    a = np.zeros((2, 3), np.int16)
    out = _ffi.empty_like(a)
    assert isinstance(out, np.ndarray) and out.shape == (2, 3) and out.dtype == np.int16
    assert _ffi.empty_like(a, (5,), "float64").dtype == np.float64


def test_empty_like_other_producers_get_torch():
    producer = Producer(np.zeros((2, 2), np.float32))
    producer.shape, producer.dtype = producer.array.shape, producer.array.dtype
    out = _ffi.empty_like(producer)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 2) and out.dtype == torch.float32
    assert out.device.type == "cpu"
    with pytest.raises(TypeError, match="^empty_like: cannot tell the device of list"):
        _ffi.empty_like([1.0])


# ---------------------------------------------------------------------------
# MXNet: NDArrays through to_dlpack_for_read / to_dlpack_for_write


def test_mxnet_ndarray(rng):
    try:
        import mxnet as mx
    except ImportError:
        pytest.skip("MXNet is not installed in this interpreter: MXNet 1.9.1 needs NumPy < 1.24 "
                    "and lives in its own environment (.venv-mxnet), which never imports _ext")
    x = rng.standard_normal((3, 5)).astype(np.float32)
    out = mx.nd.zeros((3, 5), dtype="float32")
    gelu_raw(mx.nd.array(x, dtype="float32"), out)
    expected = torch.empty(3, 5)
    gelu_raw(torch.from_numpy(x), expected)
    assert out.asnumpy().tobytes() == expected.numpy().tobytes()
    gelu_raw(mx.nd.array(x, dtype="float32").to_dlpack_for_read(), out.to_dlpack_for_write())
    assert out.asnumpy().tobytes() == expected.numpy().tobytes()


# ---------------------------------------------------------------------------
# CUDA: torch, CuPy and JAX arrays on the GPU, count for count


def gpu_roc_inputs(rng):
    score = rng.uniform(-1.1, 1.1, (33, 47)).astype(np.float32)
    score[3, 4] = np.nan
    labels_q = rng.integers(0, 5, 33).astype(np.int32)
    labels_g = rng.integers(0, 5, 47).astype(np.int32)
    return score, labels_q, labels_g


def torch_gpu_reference(score, labels_q, labels_g):
    histos = [torch.zeros(128, dtype=torch.int64, device="cuda") for _ in range(2)]
    n_nan = roc.gpu_roc(torch.from_numpy(score).cuda(), *histos, torch.from_numpy(labels_q).cuda(),
                        torch.from_numpy(labels_g).cuda())
    return n_nan, [h.cpu().numpy() for h in histos]


def gelu_cuda_raw(x, out):
    _ffi.check(gelu.ffi, gelu.lib, gelu.lib.gelu_forward_cuda(
        describe(x), describe(out, writable=True, name="output"), gelu.lib.GELU_NONE,
        _ffi.cuda_stream(gelu.ffi, x)))


@pytest.mark.gpu
def test_cupy_matches_torch(rng):
    cupy = pytest.importorskip("cupy")
    score, labels_q, labels_g = gpu_roc_inputs(rng)
    n_nan, expected = torch_gpu_reference(score, labels_q, labels_g)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        histos = [cupy.zeros(128, dtype=cupy.int64) for _ in range(2)]
        assert int(gelu.ffi.cast("uintptr_t", _ffi.cuda_stream(gelu.ffi, histos[0]))) == stream.ptr
        got = roc.gpu_roc(cupy.asarray(score), *histos, cupy.asarray(labels_q),
                          cupy.asarray(labels_g))
        stream.synchronize()
    assert got == n_nan == 1
    for histo, reference in zip(histos, expected):
        assert np.array_equal(cupy.asnumpy(histo), reference)
    x = rng.standard_normal((4, 9)).astype(np.float32)
    out_torch = torch.empty(4, 9, device="cuda")
    gelu_cuda_raw(torch.from_numpy(x).cuda(), out_torch)
    with stream:
        out = cupy.empty((4, 9), dtype=cupy.float32)
        gelu_cuda_raw(cupy.asarray(x), out)
        stream.synchronize()
    assert cupy.asnumpy(out).tobytes() == out_torch.cpu().numpy().tobytes()


@pytest.mark.gpu
def test_jax_matches_torch(rng, monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave the GPU to torch too
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU")
    score, labels_q, labels_g = gpu_roc_inputs(rng)
    n_nan, expected = torch_gpu_reference(score, labels_q, labels_g)
    on_gpu = [jax.device_put(jnp.asarray(a), gpus[0]) for a in (score, labels_q, labels_g)]
    assert int(gelu.ffi.cast("uintptr_t", _ffi.cuda_stream(gelu.ffi, on_gpu[0]))) == 1
    histos = [_ffi.empty_like(on_gpu[0], (128,), "int64") for _ in range(2)]
    assert all(isinstance(h, torch.Tensor) and h.is_cuda for h in histos)
    for h in histos:
        h.zero_()
    assert roc.gpu_roc(on_gpu[0], *histos, on_gpu[1], on_gpu[2]) == n_nan == 1
    for histo, reference in zip(histos, expected):
        assert np.array_equal(histo.cpu().numpy(), reference)
    x = rng.standard_normal((4, 9)).astype(np.float32)
    out_torch, out = torch.empty(4, 9, device="cuda"), torch.empty(4, 9, device="cuda")
    gelu_cuda_raw(torch.from_numpy(x).cuda(), out_torch)
    gelu_cuda_raw(jax.device_put(jnp.asarray(x), gpus[0]), out)
    torch.cuda.synchronize()
    assert torch.equal(out, out_torch)


@pytest.mark.gpu
def test_torch_side_stream_named():
    x = torch.ones(8, device="cuda")
    default = int(gelu.ffi.cast("uintptr_t", _ffi.cuda_stream(gelu.ffi, x)))
    assert default == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        stream = _ffi.cuda_stream(gelu.ffi, x)
        assert int(gelu.ffi.cast("uintptr_t", stream)) == side.cuda_stream
        out = torch.empty_like(x)
        gelu_cuda_raw(x, out)
    side.synchronize()
    assert torch.equal(out, torch.nn.functional.gelu(x))


@pytest.mark.gpu
def test_cuda_misaligned_and_sign_bits():
    memory = torch.zeros(13, device="cuda")
    misaligned = Handmade(memory, (12,), byte_offset=2, device=(2, memory.device.index or 0),
                          address=memory.data_ptr())
    with pytest.raises(ValueError, match=r"^gelu: input is not aligned to its 4-byte elements"):
        gelu_cuda_raw(misaligned.capsule(), torch.empty(12, device="cuda"))
    assert misaligned.released == 1
    with pytest.raises(ValueError, match=r"^gelu: input has its negative bit set"):
        gelu_cuda_raw(torch._neg_view(memory), torch.empty(13, device="cuda"))


@pytest.mark.parametrize("make", [
    lambda: torch.randn(4, 3), lambda: torch.randn(4, 3).T, lambda: torch.arange(20)[3:15:2],
    lambda: torch.zeros(2, 0, 5), lambda: torch.tensor(7.0), lambda: torch.ones(3, 1, 2).expand(3, 4, 2),
    lambda: torch.randint(0, 9, (2, 3), dtype=torch.int16), lambda: torch.rand(5) > 0.5,
    lambda: torch.randn(2, 2, dtype=torch.bfloat16), lambda: torch.randn(6, 5)[1:, 2:]])
def test_torch_fast_path_gives_the_dlpack_descriptor(make):
    """A torch tensor is described from its own fields: the same descriptor as
    its DLPack export gives."""
    x = make()
    fast = _ffi.describe(gelu.ffi, "gelu", "input", x)
    managed, versioned = _ffi._take("gelu", "input", _ffi._export("gelu", "input", x, False))
    lib = _ffi._lib_of(gelu.ffi)
    slow = gelu.ffi.gc(gelu.ffi.new("ext_tensor *"),
                       lambda _: lib.ext_dlpack_release(managed, versioned))
    _ffi.check(gelu.ffi, lib, lib.ext_tensor_from_dlpack(slow, managed, versioned, 0, b"gelu",
                                                         b"input"))
    n = slow.ndim
    assert (fast.ndim, fast.dtype, fast.device_type, fast.device_index) == \
        (slow.ndim, slow.dtype, slow.device_type, slow.device_index)
    assert list(fast.sizes[0:n]) == list(slow.sizes[0:n])
    assert [s for s, d in zip(fast.strides[0:n], fast.sizes[0:n]) if d > 1] == \
        [s for s, d in zip(slow.strides[0:n], slow.sizes[0:n]) if d > 1]
    assert x.numel() == 0 or int(gelu.ffi.cast("uintptr_t", fast.data)) == \
        int(gelu.ffi.cast("uintptr_t", slow.data))
