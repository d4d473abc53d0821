"""What every _ext wrapper does around a cffi call: describe each array in an
ext_tensor struct (src/ext_tensor.h), pass the stream the call runs on, and
turn a non-zero status into the matching Python exception with the shim's
message.

There is one way to describe an array: ask its producer for a DLPack capsule
(DLPack 1.x, "dltensor_versioned", falling back to the legacy "dltensor"),
mark the capsule consumed, and let ext_tensor_from_dlpack (src/ext_dlpack.c)
fill the descriptor from the managed tensor in it. The descriptor keeps the
managed tensor until it is garbage, then hands it back to its producer (its
deleter). Torch tensors, NumPy, CuPy and JAX arrays, anything else with
__dlpack__/__dlpack_device__, MXNet NDArrays (to_dlpack_for_read/_write) and
raw DLPack capsules all take this path.

Streams (DLPack's rule: the consumer names the stream its kernels will run
on, and the producer makes the data ready on it): a torch CUDA tensor runs
on torch's current stream on its device, a CuPy array on CuPy's current
stream, any other CUDA array on CUDA's legacy default stream (1); a raw
capsule was made before any stream was named and runs on the default stream
(NULL). cuda_stream() returns the stream describe() named.
"""

import ctypes
import datetime
import sys

import numpy as np

try:
    import torch
except ImportError:  # NumPy arrays alone work without torch
    torch = None

# ext_dtype codes of src/ext_tensor.h
FLOAT32, FLOAT64, INT32, INT64, UINT8, BOOL, FLOAT16, BFLOAT16, INT16, INT8 = range(10)
OTHER_DTYPE = 99
CPU, CUDA = 1, 2

# ext_status codes -> exception classes
_EXCEPTIONS = {1: TypeError, 2: ValueError, 3: RuntimeError, 4: RuntimeError,
               5: RuntimeError, 6: MemoryError}

# DLPack's device types (DLDeviceType) that _ext takes; kDLCUDAHost is pinned
# host memory, read by the CPU code like any other.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3
# CUDA's legacy default stream, in DLPack's numbering and as a cudaStream_t
_LEGACY_DEFAULT_STREAM = 1

# The capsule names of the DLPack spec; a consumer renames a capsule it took.
_VERSIONED, _LEGACY = b"dltensor_versioned", b"dltensor"
_USED = {1: b"used_dltensor_versioned", 0: b"used_dltensor"}
_CAPSULE = type(datetime.datetime_CAPI)

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_rename = ctypes.pythonapi.PyCapsule_SetName
_capsule_rename.restype = ctypes.c_int
_capsule_rename.argtypes = [ctypes.py_object, ctypes.c_char_p]

# __dlpack__ keywords, newest first: DLPack 1.0 without a copy (a copy of an
# output would lose what is written to it), then producers that predate copy=,
# then those that predate max_version= (legacy capsules).
_EXPORT_KEYWORDS = ({"max_version": (1, 0), "copy": False}, {"max_version": (1, 0)}, {})

if torch is not None:
    # What Tensor.__dlpack__ returns once its Python-level checks have passed;
    # describe() makes its own checks (below) and names the stream itself.
    _torch_export = getattr(torch._C, "_to_dlpack_versioned", torch._C._to_dlpack)
    # torch.cuda.current_stream(device).cuda_stream without making a Stream
    # object (a CUDA build of torch has it)
    _torch_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

# cffi module ffi -> its lib (describe() and cuda_stream() are given the ffi)
_LIBS = {}


# torch dtypes the descriptor names (src/ext_tensor.h); others take the DLPack
# path, which names them or refuses them
_TORCH_CODES = {} if torch is None else {
    torch.float32: FLOAT32, torch.float64: FLOAT64, torch.int32: INT32, torch.int64: INT64,
    torch.uint8: UINT8, torch.bool: BOOL, torch.float16: FLOAT16, torch.bfloat16: BFLOAT16,
    torch.int16: INT16, torch.int8: INT8}
_STRIDED = None if torch is None else torch.strided


def is_tensor(x):
    return torch is not None and isinstance(x, torch.Tensor)


def _is_cupy(x):
    return type(x).__module__.startswith("cupy")


def _lib_of(ffi):
    """The lib of the generated cffi module whose ffi this is, found once."""
    lib = _LIBS.get(ffi)
    if lib is None:
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", {})
            if namespace.get("ffi") is ffi and "lib" in namespace:
                lib = _LIBS[ffi] = namespace["lib"]
                break
        else:
            raise RuntimeError("_ext: no loaded cffi module owns this ffi")
    return lib


def unsupported_device(fn, name, where):
    return RuntimeError("%s: %s is on %s; _ext takes CPU and CUDA arrays" % (fn, name, where))


def _producer_stream(x, device_type, device_id):
    """The stream, in DLPack's numbering, that a call on x runs on (None off CUDA)."""
    if device_type != _DL_CUDA:
        return None
    if _is_cupy(x):
        import cupy
        try:
            stream = cupy.cuda.get_current_stream(device_id)
        except TypeError:  # CuPy < 10: the current device's stream
            stream = cupy.cuda.get_current_stream()
        # 0 is CUDA's legacy default stream, which DLPack numbers 1
        return stream.ptr or _LEGACY_DEFAULT_STREAM
    return _LEGACY_DEFAULT_STREAM


def _export_torch(fn, name, x):
    if not (x.is_cuda or x.is_cpu):
        raise unsupported_device(fn, name, x.device)
    # A lazy negation or conjugation is a bit on the tensor, not in its data:
    # read raw, every element would have the wrong sign.
    if x.is_neg():
        raise ValueError("%s: %s has its negative bit set (a lazy negation, e.g. the imaginary "
                         "part of a conjugated tensor); call .resolve_neg() on it" % (fn, name))
    if x.is_conj():
        raise ValueError("%s: %s has its conjugate bit set (a lazy conjugation); call "
                         ".resolve_conj() on it" % (fn, name))
    try:
        return _torch_export(x)
    except (RuntimeError, BufferError) as error:
        if x.layout != torch.strided:
            raise TypeError("%s: %s must be a dense (strided) tensor, got %s"
                            % (fn, name, x.layout)) from error
        raise TypeError("%s: %s cannot be exported through DLPack: %s"
                        % (fn, name, error)) from error


def _export(fn, name, x, writable):
    """A DLPack capsule of x: torch's exporter, x itself, MXNet's or __dlpack__."""
    if is_tensor(x):
        return _export_torch(fn, name, x)
    if type(x) is _CAPSULE:
        return x
    if not (hasattr(type(x), "__dlpack__") and hasattr(type(x), "__dlpack_device__")):
        mxnet_export = getattr(x, "to_dlpack_for_write" if writable else "to_dlpack_for_read",
                               None)
        if mxnet_export is not None:
            return mxnet_export()
        raise TypeError("%s: %s must be an array with __dlpack__ (torch, NumPy, CuPy, JAX...), "
                        "got %s" % (fn, name, type(x).__name__))
    try:
        device_type, device_id = x.__dlpack_device__()
    except (ValueError, BufferError) as error:
        raise unsupported_device(fn, name, "a device DLPack cannot name (%s)" % error) from error
    if device_type not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST):
        raise unsupported_device(fn, name, "DLPack device type %d" % device_type)
    stream = _producer_stream(x, device_type, device_id)
    for keywords in _EXPORT_KEYWORDS:
        try:
            return x.__dlpack__(stream=stream, **keywords)
        except TypeError as error:  # a keyword this producer does not know
            refusal = error
        except BufferError as error:
            refusal = error
            break
    raise TypeError("%s: %s cannot be exported through DLPack: %s"
                    % (fn, name, refusal)) from refusal


def _take(fn, name, capsule):
    """(address of the managed tensor, 1 if versioned), the capsule marked used."""
    if type(capsule) is not _CAPSULE:
        raise TypeError("%s: %s's DLPack export is a %s, not a capsule"
                        % (fn, name, type(capsule).__name__))
    try:
        managed, versioned = _capsule_pointer(capsule, _VERSIONED), 1
    except ValueError:
        try:
            managed, versioned = _capsule_pointer(capsule, _LEGACY), 0
        except ValueError:
            label = _capsule_name(capsule) or b"no name"
            if label.startswith(b"used_"):
                raise ValueError("%s: %s is a DLPack capsule that was already consumed (named "
                                 "%s); export the array again" % (fn, name, label.decode()))
            raise TypeError("%s: %s is a capsule but not a DLPack one (named %s)"
                            % (fn, name, label.decode())) from None
    _capsule_rename(capsule, _USED[versioned])
    return managed, versioned


def _describe_torch(ffi, fn, name, x):
    """The descriptor of a strided CPU or CUDA torch tensor, filled from its own
    fields: what the DLPack path gives (tests/ffi/test_dlpack.py compares them),
    without making and parsing an export, a few microseconds a call. The
    caller keeps x alive for the call, as it keeps any array."""
    if x.is_neg():
        _export_torch(fn, name, x)  # the DLPack path's error (conjugate views are complex)
    dtype = _TORCH_CODES.get(x.dtype)
    if dtype is None or x.layout is not _STRIDED:
        return None
    if x.is_cuda:
        device_type, device_index = CUDA, x.get_device()
    elif x.is_cpu:
        device_type, device_index = CPU, 0
    else:
        return None
    shape = x.shape
    if len(shape) > 8:
        return None
    # one initializer: a third cheaper than setting the fields one by one
    return ffi.new("ext_tensor *", (ffi.cast("void *", x.data_ptr()), dtype, device_type,
                                    device_index, len(shape), shape, x.stride()))


def describe(ffi, fn, name, x, writable=False):
    """An ext_tensor* describing array `x` (anything DLPack can export).

    The returned cdata holds x's DLPack export: x's memory stays valid while
    the cdata lives, and the export is released once it is garbage. (A plain
    torch tensor is described from its own fields, to the same descriptor.)
    """
    if is_tensor(x):
        desc = _describe_torch(ffi, fn, name, x)
        if desc is not None:
            return desc
    managed, versioned = _take(fn, name, _export(fn, name, x, writable))
    lib = _lib_of(ffi)
    desc = ffi.gc(ffi.new("ext_tensor *"), lambda _: lib.ext_dlpack_release(managed, versioned))
    status = lib.ext_tensor_from_dlpack(desc, managed, versioned, writable, fn.encode(),
                                        name.encode())
    if status:
        ffi.release(desc)  # hand the export back now, not when the traceback goes
        check(ffi, lib, status)
    return desc


def describe_like(ffi, desc, out):
    """The descriptor of torch tensor `out`, which torch.empty_like made from
    the contiguous tensor that `desc` (from describe()) describes: desc's
    fields with out's address. A third of describe()'s cost, which counts
    on a tiny input."""
    copy = ffi.new("ext_tensor *", desc[0])
    copy.data = ffi.cast("void *", out.data_ptr())
    return copy


def cuda_stream(ffi, x):
    """The stream a CUDA call on x runs on (the one describe() named to x's
    producer), or NULL for a CPU input or a raw capsule."""
    if is_tensor(x):
        if not x.is_cuda:
            return ffi.NULL
        if _torch_raw_stream is not None:
            return ffi.cast("void *", _torch_raw_stream(x.get_device()))
        return ffi.cast("void *", torch.cuda.current_stream(x.device).cuda_stream)
    if type(x) is _CAPSULE:
        return ffi.NULL
    stream = _producer_stream(x, *_device_of("cuda_stream", x))
    return ffi.NULL if stream is None else ffi.cast("void *", stream)


def dtype_name(x):
    """x's dtype as NumPy names it ("float32"), torch's and MXNet's too."""
    if is_tensor(x):
        return str(x.dtype).replace("torch.", "")
    return np.dtype(x.dtype).name


def _device_of(fn, x):
    """(DLPack device type, index) of an array that is not a torch tensor."""
    if hasattr(type(x), "__dlpack_device__"):
        device_type, device_id = x.__dlpack_device__()
        return int(device_type), int(device_id)
    context = getattr(x, "context", None)  # MXNet; its to_dlpack_* wait for pending writes
    if context is not None:
        return (_DL_CUDA if context.device_type == "gpu" else _DL_CPU), context.device_id
    raise TypeError("%s: cannot tell the device of %s; pass an array" % (fn, type(x).__name__))


def empty_like(x, shape=None, dtype=None, fn="empty_like", name="the output"):
    """A new, uninitialised output for a call on x, of x's kind where that is
    cheap: a torch tensor on x's device for a torch tensor, a NumPy array for
    a NumPy array, a CuPy array on x's device for a CuPy array; for anything
    else (JAX, MXNet...) a torch tensor on x's device, or a NumPy array for a
    CPU input where torch is not installed.

    shape: a tuple (default: x's shape); dtype: a name such as "float32" or
    "int64" (default: x's dtype). An allocation that fails is the error of
    allocation_error(), naming fn and the output `name`.
    """
    device_type, device_id = (None, None) if is_tensor(x) or isinstance(x, np.ndarray) \
        else _device_of(fn, x)
    if device_type is not None and device_type not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST):
        raise unsupported_device(fn, name, "DLPack device type %d" % device_type)
    shape = tuple(x.shape) if shape is None else tuple(shape)
    dtype = dtype_name(x) if dtype is None else dtype
    if device_type == _DL_CUDA and torch is None and not _is_cupy(x):
        raise RuntimeError("%s: %s on CUDA for %s needs torch or CuPy"
                           % (fn, name, type(x).__name__))
    try:
        if is_tensor(x):
            return torch.empty(shape, dtype=getattr(torch, dtype), device=x.device)
        if isinstance(x, np.ndarray):
            return np.empty(shape, dtype)
        if _is_cupy(x):
            import cupy
            with cupy.cuda.Device(x.device.id):
                return cupy.empty(shape, dtype)
        if torch is not None:
            device = "cuda:%d" % device_id if device_type == _DL_CUDA else "cpu"
            return torch.empty(shape, dtype=getattr(torch, dtype), device=device)
        return np.empty(shape, dtype)
    # NumPy: MemoryError, or ValueError for a size beyond its index type; torch:
    # RuntimeError (OutOfMemoryError, an invalid device ordinal), or an
    # AssertionError for a CUDA device asked of a torch built without CUDA
    except (MemoryError, RuntimeError, AssertionError, ValueError) as error:
        raise allocation_error(fn, name, shape, _device_name(x, device_type, device_id),
                               error) from error


def _device_name(x, device_type, device_id):
    """Where empty_like allocates for x, in words ("cpu", "cuda:1")."""
    if is_tensor(x):
        return str(x.device)
    if device_type == _DL_CUDA:
        return "cuda:%d" % device_id
    return "cpu"


def allocation_error(fn, name, shape, device, error):
    """The exception for output `name` of `shape` that could not be allocated
    on `device` (the allocator raised `error`): MemoryError where memory ran
    out or the size is beyond what an allocator can count, else RuntimeError
    (a device that cannot be used); the message names fn and the output."""
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    out_of_memory = (isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError"
                     or any(word in reason.lower() for word in ("memory", "overflow", "too big")))
    return (MemoryError if out_of_memory else RuntimeError)(
        "%s: cannot allocate %s %s on %s (%s)" % (fn, name, tuple(shape), device, reason))


def check(ffi, lib, status):
    """Raise the exception that a non-zero ext_status stands for."""
    if status:
        message = ffi.string(lib.ext_last_error()).decode("utf-8", "replace")
        raise _EXCEPTIONS.get(status, RuntimeError)(message)
