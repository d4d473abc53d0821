"""The legacy histogram entry points, gpu_roc and cpu_roc, and the custom ops
ext::gpu_roc and ext::cpu_roc they go through when torch.compile traces them.

    n_nan = roc.gpu_roc(score, histo1, histo2, labels_q, labels_g)        # an int
    n_nan = torch.ops.ext.gpu_roc(score, histo1, histo2, labels_q, labels_g)  # a tensor

The ops add into histo1 and histo2 (declared mutated, so torch.compile
traces them with fullgraph=True) and return the NaN count as a 0-d int64
CPU tensor; the legacy functions return it as an int, as they always did.
NumPy arrays (cpu_roc) do not go through the op, and torch is not needed for
them. The counts have no gradient: the ops have no autograd formula.
"""

from .. import _ffi
from ._roc import ffi, lib

torch = _ffi.torch


def _count(fn, entry, score, histo1, histo2, labels_q, labels_g, *stream_and_n_nan):
    """Run roc_hist_cpu/roc_hist_cuda; the NaN count goes to the int64_t the
    last argument points to."""
    args = (_ffi.describe(ffi, fn, "score", score),
            _ffi.describe(ffi, fn, "histo1", histo1, writable=True),
            _ffi.describe(ffi, fn, "histo2", histo2, writable=True),
            _ffi.describe(ffi, fn, "labels_q", labels_q),
            _ffi.describe(ffi, fn, "labels_g", labels_g))
    _ffi.check(ffi, lib, entry(*args, *stream_and_n_nan))


def _cpu_kernel(score, histo1, histo2, labels_q, labels_g):
    n_nan = torch.empty((), dtype=torch.int64)
    _count("cpu_roc", lib.roc_hist_cpu, score, histo1, histo2, labels_q, labels_g,
           ffi.cast("int64_t *", n_nan.data_ptr()))
    return n_nan


def _gpu_kernel(score, histo1, histo2, labels_q, labels_g):
    n_nan = torch.empty((), dtype=torch.int64)
    _count("gpu_roc", lib.roc_hist_cuda, score, histo1, histo2, labels_q, labels_g,
           _ffi.cuda_stream(ffi, score), ffi.cast("int64_t *", n_nan.data_ptr()))
    return n_nan


def _all_tensors(score, histo1, histo2, labels_q, labels_g):
    tensor = torch.Tensor
    return (isinstance(score, tensor) and isinstance(histo1, tensor)
            and isinstance(histo2, tensor) and isinstance(labels_q, tensor)
            and isinstance(labels_g, tensor))


def _count_fake(score, histo1, histo2, labels_q, labels_g):
    return torch.empty((), dtype=torch.int64)


if torch is not None:
    _library = torch.library.Library("ext", "FRAGMENT")
    _SIGNATURE = ("(Tensor score, Tensor(a!) histo1, Tensor(b!) histo2, Tensor labels_q, "
                  "Tensor labels_g) -> Tensor")
    _library.define("cpu_roc" + _SIGNATURE)
    _library.define("gpu_roc" + _SIGNATURE)
    # one kernel for every device: the shim names the device it needs
    _library.impl("cpu_roc", _cpu_kernel, "CompositeExplicitAutograd")
    _library.impl("gpu_roc", _gpu_kernel, "CompositeExplicitAutograd")
    torch.library.register_fake("ext::cpu_roc", _count_fake, lib=_library)
    torch.library.register_fake("ext::gpu_roc", _count_fake, lib=_library)
    _cpu_op = torch.ops.ext.cpu_roc.default
    _gpu_op = torch.ops.ext.gpu_roc.default


def _tracing():
    """Whether torch.compile is tracing the caller: then the op, which it can
    trace; eagerly, its kernel without the dispatcher (the same code, tens of
    microseconds less a call: the call waits for its count, so that time is
    the caller's)."""
    return torch is not None and torch.compiler.is_compiling()


def cpu_roc(score, histo1, histo2, labels_q, labels_g):
    """Legacy histogram of CPU tensors or NumPy arrays; returns the NaN count."""
    if _tracing() and _all_tensors(score, histo1, histo2, labels_q, labels_g):
        return int(_cpu_op(score, histo1, histo2, labels_q, labels_g))
    n_nan = ffi.new("int64_t *")
    _count("cpu_roc", lib.roc_hist_cpu, score, histo1, histo2, labels_q, labels_g, n_nan)
    return int(n_nan[0])


def gpu_roc(score, histo1, histo2, labels_q, labels_g):
    """Legacy histogram of CUDA tensors, on their device and the current
    stream; returns the NaN count once the stream has finished."""
    if _tracing() and _all_tensors(score, histo1, histo2, labels_q, labels_g):
        return int(_gpu_op(score, histo1, histo2, labels_q, labels_g))
    n_nan = ffi.new("int64_t *")
    _count("gpu_roc", lib.roc_hist_cuda, score, histo1, histo2, labels_q, labels_g,
           _ffi.cuda_stream(ffi, score), n_nan)
    return int(n_nan[0])
