"""_ext.gelu: GELU, forward and backward, on the GPU or the CPU.

    from _ext import gelu
    y = gelu.gelu(x)                          # = torch.nn.functional.gelu(x)
    y = gelu.gelu(x, approximate="tanh")      # = F.gelu(x, approximate="tanh")
    y = gelu.gelu(x, approximate="sigmoid")   # the seed's x * sigmoid(1.702 x)
    layer = gelu.GELU(approximate="none")     # the same as an nn.Module

x is a contiguous float32 or float64 tensor of any shape, on the CPU or a
CUDA device (the kernels run on the caller's current stream). gelu() is
differentiable (GeluFunction); gelu_forward() and gelu_backward() are the raw
entry points without autograd. Formulas: src/gelu_math.h.
"""

import torch
from torch.autograd.function import once_differentiable

from .. import _ffi

try:
    from ._gelu import ffi, lib
except ImportError as error:  # pragma: no cover - only before `make`
    raise ImportError("_ext.gelu is not built: run `make` in the project root (%s)"
                      % error) from error

built_with_cuda = bool(lib.ext_built_with_cuda())

APPROXIMATIONS = {"none": lib.GELU_NONE, "tanh": lib.GELU_TANH, "sigmoid": lib.GELU_SIGMOID}


def _approximation_code(fn, approximate):
    if not isinstance(approximate, str) or approximate not in APPROXIMATIONS:
        raise ValueError("%s: approximate must be 'none', 'tanh' or 'sigmoid', got %r"
                         % (fn, approximate))
    return APPROXIMATIONS[approximate]


def _require_tensor(fn, name, x):
    if not isinstance(x, torch.Tensor):
        raise TypeError("%s: %s must be a torch.Tensor, got %s" % (fn, name, type(x).__name__))


def gelu_forward(x, approximate="none"):
    """GELU(x) as a new tensor, without autograd."""
    fn = "gelu"
    _require_tensor(fn, "input", x)
    code = _approximation_code(fn, approximate)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    args = (_ffi.describe(ffi, fn, "input", x), _ffi.describe(ffi, fn, "output", out), code)
    if x.is_cuda:
        status = lib.gelu_forward_cuda(*args, _ffi.cuda_stream(ffi, x))
    else:
        status = lib.gelu_forward_cpu(*args)
    _ffi.check(ffi, lib, status)
    return out


def gelu_backward(grad_output, x, approximate="none"):
    """grad_output * GELU'(x) as a new tensor, without autograd."""
    fn = "gelu_backward"
    _require_tensor(fn, "grad_output", grad_output)
    _require_tensor(fn, "input", x)
    code = _approximation_code(fn, approximate)
    grad_input = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    args = (_ffi.describe(ffi, fn, "grad_output", grad_output),
            _ffi.describe(ffi, fn, "input", x),
            _ffi.describe(ffi, fn, "grad_input", grad_input), code)
    if x.is_cuda:
        status = lib.gelu_backward_cuda(*args, _ffi.cuda_stream(ffi, x))
    else:
        status = lib.gelu_backward_cpu(*args)
    _ffi.check(ffi, lib, status)
    return grad_input


class GeluFunction(torch.autograd.Function):
    """GELU with its gradient: GeluFunction.apply(x, approximate)."""

    @staticmethod
    def forward(ctx, x, approximate="none"):
        ctx.approximate = approximate
        ctx.save_for_backward(x)
        return gelu_forward(x, approximate)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return gelu_backward(grad_output.contiguous(), x, ctx.approximate), None


def gelu(x, approximate="none"):
    """GELU of a contiguous float32/float64 tensor, differentiable.

    approximate: "none" (erf form) and "tanh" equal torch.nn.functional.gelu;
    "sigmoid" is x * sigmoid(1.702 x).
    """
    _approximation_code("gelu", approximate)
    return GeluFunction.apply(x, approximate)


class GELU(torch.nn.Module):
    """nn.Module form of gelu()."""

    def __init__(self, approximate="none"):
        super().__init__()
        _approximation_code("GELU", approximate)
        self.approximate = approximate

    def forward(self, x):
        return gelu(x, self.approximate)

    def extra_repr(self):
        return "approximate=%r" % self.approximate
