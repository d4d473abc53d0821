"""What every _ext wrapper does around a cffi call: describe each tensor in an
ext_tensor struct (src/ext_tensor.h), pass the caller's CUDA stream, and turn
a non-zero status into the matching Python exception with the shim's message.
"""

import numpy as np

try:
    import torch
except ImportError:  # NumPy arrays alone work without torch
    torch = None

# ext_dtype codes of src/ext_tensor.h
FLOAT32, FLOAT64, INT32, INT64, UINT8, BOOL, FLOAT16, BFLOAT16, INT16, INT8 = range(10)
OTHER_DTYPE = 99
CPU, CUDA = 1, 2

_NUMPY_CODES = {np.dtype(np.float32): FLOAT32, np.dtype(np.float64): FLOAT64,
                np.dtype(np.int32): INT32, np.dtype(np.int64): INT64,
                np.dtype(np.uint8): UINT8, np.dtype(np.bool_): BOOL,
                np.dtype(np.float16): FLOAT16, np.dtype(np.int16): INT16,
                np.dtype(np.int8): INT8}
_TORCH_CODES = {} if torch is None else {
    torch.float32: FLOAT32, torch.float64: FLOAT64, torch.int32: INT32, torch.int64: INT64,
    torch.uint8: UINT8, torch.bool: BOOL, torch.float16: FLOAT16, torch.bfloat16: BFLOAT16,
    torch.int16: INT16, torch.int8: INT8}

# ext_status codes -> exception classes
_EXCEPTIONS = {1: TypeError, 2: ValueError, 3: RuntimeError, 4: RuntimeError,
               5: RuntimeError, 6: MemoryError}


def is_tensor(x):
    return torch is not None and isinstance(x, torch.Tensor)


def describe(ffi, fn, name, x, writable=False):
    """An ext_tensor* describing torch tensor or NumPy array `x`.

    The struct holds x's data pointer: keep x alive until the call returns.
    """
    desc = ffi.new("ext_tensor *")
    if is_tensor(x):
        if x.layout != torch.strided:
            raise TypeError("%s: %s must be a dense (strided) tensor, got %s"
                            % (fn, name, x.layout))
        if x.device.type not in ("cpu", "cuda"):
            raise RuntimeError("%s: %s is on %s; only CPU and CUDA tensors are supported"
                               % (fn, name, x.device))
        desc.dtype = _TORCH_CODES.get(x.dtype, OTHER_DTYPE)
        desc.device_type = CUDA if x.device.type == "cuda" else CPU
        desc.device_index = x.device.index or 0
        shape, strides = tuple(x.shape), x.stride()
        desc.data = ffi.cast("void *", x.data_ptr())
    elif isinstance(x, np.ndarray):
        if writable and not x.flags.writeable:
            raise ValueError("%s: %s is read-only" % (fn, name))
        dtype = x.dtype
        desc.dtype = _NUMPY_CODES.get(dtype, OTHER_DTYPE) if dtype.isnative else OTHER_DTYPE
        desc.device_type, desc.device_index = CPU, 0
        shape = x.shape
        if any(s % x.itemsize for s in x.strides):
            raise ValueError("%s: %s has strides that are not whole elements" % (fn, name))
        strides = tuple(s // x.itemsize for s in x.strides)
        desc.data = ffi.cast("void *", x.ctypes.data)
    else:
        raise TypeError("%s: %s must be a torch.Tensor or a numpy.ndarray, got %s"
                        % (fn, name, type(x).__name__))
    if len(shape) > 8:
        raise ValueError("%s: %s has %d dimensions; at most 8 are supported"
                         % (fn, name, len(shape)))
    desc.ndim = len(shape)
    for d, (size, stride) in enumerate(zip(shape, strides)):
        desc.sizes[d] = size
        desc.strides[d] = stride
    return desc


def cuda_stream(ffi, x):
    """The caller's current stream on x's device, or NULL for a CPU input."""
    if is_tensor(x) and x.is_cuda:
        return ffi.cast("void *", torch.cuda.current_stream(x.device).cuda_stream)
    return ffi.NULL


def check(ffi, lib, status):
    """Raise the exception that a non-zero ext_status stands for."""
    if status:
        message = ffi.string(lib.ext_last_error()).decode("utf-8", "replace")
        raise _EXCEPTIONS.get(status, RuntimeError)(message)
