"""_ext.gelu: GELU, forward and backward, on the GPU or the CPU.

    from _ext import gelu
    y = gelu.gelu(x)                          # = torch.nn.functional.gelu(x)
    y = gelu.gelu(x, approximate="tanh")      # = F.gelu(x, approximate="tanh")
    y = gelu.gelu(x, approximate="sigmoid")   # the seed's x * sigmoid(1.702 x)
    layer = gelu.GELU(approximate="none")     # the same as an nn.Module

x is a contiguous float32 or float64 tensor of any shape, on the CPU or a
CUDA device (the kernels run on the caller's current stream). gelu() is the
custom op ext::gelu (torch.ops.ext.gelu), differentiable and traceable by
torch.compile(fullgraph=True); its gradient is the op ext::gelu_backward,
whose own gradient (the double backward: gradient penalties, meta-learning)
is the op ext::gelu_double_backward, one fused pass with GELU's second
derivative. A third derivative is not implemented: asking for one raises
NotImplementedError. gelu_forward(), gelu_backward() and
gelu_double_backward() are the raw entry points without autograd, and the
ops' kernels; GeluFunction is the same as an autograd.Function. Formulas:
src/gelu_math.h.
"""

import torch

from .. import _ffi
from .._tensors import empty_like, require_contiguous, require_tensor

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


def gelu_forward(x, approximate="none"):
    """GELU(x) as a new tensor, without autograd."""
    require_tensor("gelu", "input", x)
    return _forward(x, _approximation_code("gelu", approximate))


def _forward(x, code):
    """gelu_forward once x is known to be a tensor and code is valid."""
    fn = "gelu"
    require_contiguous(fn, "input", x)
    out = empty_like(fn, "the output", x)
    x_desc = _ffi.describe(ffi, fn, "input", x)
    args = (x_desc, _ffi.describe_like(ffi, x_desc, out), code)
    if x.is_cuda:
        status = lib.gelu_forward_cuda(*args, _ffi.cuda_stream(ffi, x))
    else:
        status = lib.gelu_forward_cpu(*args)
    _ffi.check(ffi, lib, status)
    return out


def gelu_backward(grad_output, x, approximate="none"):
    """grad_output * GELU'(x) as a new tensor, without autograd."""
    fn = "gelu_backward"
    require_tensor(fn, "grad_output", grad_output)
    require_tensor(fn, "input", x)
    code = _approximation_code(fn, approximate)
    require_contiguous(fn, "input", x)
    grad_input = empty_like(fn, "grad_input", x)
    grad_output_desc = _ffi.describe(ffi, fn, "grad_output", grad_output)
    x_desc = _ffi.describe(ffi, fn, "input", x)
    args = (grad_output_desc, x_desc, _ffi.describe_like(ffi, x_desc, grad_input), code)
    if x.is_cuda:
        status = lib.gelu_backward_cuda(*args, _ffi.cuda_stream(ffi, x))
    else:
        status = lib.gelu_backward_cpu(*args)
    _ffi.check(ffi, lib, status)
    return grad_input


def _double_backward_kernel(grad_grad_input, grad_output, x, approximate="none",
                            grad_output_grad=True, input_grad=True):
    """The kernel of ext::gelu_double_backward: (grad_grad_output,
    grad_input), a gradient not asked for as an empty tensor (ops return
    tensors, not None)."""
    fn = "gelu_double_backward"
    for name, t in (("grad_grad_input", grad_grad_input), ("grad_output", grad_output),
                    ("input", x)):
        require_tensor(fn, name, t)
    code = _approximation_code(fn, approximate)
    if not (grad_output_grad or input_grad):
        return x.new_empty(0), x.new_empty(0)
    require_contiguous(fn, "input", x)
    outputs = [empty_like(fn, name, x) if wanted else None
               for name, wanted in (("grad_grad_output", grad_output_grad),
                                    ("grad_input", input_grad))]
    x_desc = _ffi.describe(ffi, fn, "input", x)
    args = (_ffi.describe(ffi, fn, "grad_grad_input", grad_grad_input),
            _ffi.describe(ffi, fn, "grad_output", grad_output), x_desc,
            *(ffi.NULL if out is None else _ffi.describe_like(ffi, x_desc, out)
              for out in outputs), code)
    if x.is_cuda:
        status = lib.gelu_double_backward_cuda(*args, _ffi.cuda_stream(ffi, x))
    else:
        status = lib.gelu_double_backward_cpu(*args)
    _ffi.check(ffi, lib, status)
    return tuple(x.new_empty(0) if out is None else out for out in outputs)


def gelu_double_backward(grad_grad_input, grad_output, x, approximate="none",
                         grad_output_grad=True, input_grad=True):
    """The gradients of gelu_backward(grad_output, x)'s result with respect
    to grad_output and to x, for the gradient grad_grad_input that reaches
    it, without autograd: (grad_grad_input * GELU'(x), grad_grad_input *
    grad_output * GELU''(x)); either is None when not asked for."""
    grad_grad_output, grad_input = _double_backward_kernel(
        grad_grad_input, grad_output, x, approximate, grad_output_grad, input_grad)
    return (grad_grad_output if grad_output_grad else None,
            grad_input if input_grad else None)


# ---------------------------------------------------------------------------
# the custom ops ext::gelu, ext::gelu_backward and ext::gelu_double_backward:
# the raw entry points as kernels for every device, shapes for tracing, and
# the gradient formulas

_library = torch.library.Library("ext", "FRAGMENT")
_library.define("gelu(Tensor input, str approximate='none') -> Tensor")
_library.define("gelu_backward(Tensor grad_output, Tensor input, str approximate='none') "
                "-> Tensor")
_library.define("gelu_double_backward(Tensor grad_grad_input, Tensor grad_output, Tensor input, "
                "str approximate='none', bool grad_output_grad=True, bool input_grad=True) "
                "-> (Tensor, Tensor)")
_library.impl("gelu", gelu_forward, "CompositeExplicitAutograd")
_library.impl("gelu_backward", gelu_backward, "CompositeExplicitAutograd")
_library.impl("gelu_double_backward", _double_backward_kernel, "CompositeExplicitAutograd")


@torch.library.register_fake("ext::gelu", lib=_library)
def _gelu_fake(x, approximate="none"):
    _approximation_code("gelu", approximate)
    return x.new_empty(x.shape)


@torch.library.register_fake("ext::gelu_backward", lib=_library)
def _gelu_backward_fake(grad_output, x, approximate="none"):
    _approximation_code("gelu_backward", approximate)
    return x.new_empty(x.shape)


@torch.library.register_fake("ext::gelu_double_backward", lib=_library)
def _gelu_double_backward_fake(grad_grad_input, grad_output, x, approximate="none",
                               grad_output_grad=True, input_grad=True):
    _approximation_code("gelu_double_backward", approximate)
    return (x.new_empty(x.shape if grad_output_grad else 0),
            x.new_empty(x.shape if input_grad else 0))


def _setup_context(ctx, inputs, output):
    x, approximate = inputs
    ctx.approximate = approximate
    ctx.save_for_backward(x)


def _backward(ctx, grad_output):
    (x,) = ctx.saved_tensors
    return _gelu_backward_op(grad_output.contiguous(), x, ctx.approximate), None


def _backward_setup_context(ctx, inputs, output):
    grad_output, x, approximate = inputs
    ctx.approximate = approximate
    ctx.save_for_backward(grad_output, x)


def _double_backward(ctx, grad_grad_input):
    """gelu_backward is grad_output * GELU'(x): its gradients are
    grad_grad_input * GELU'(x) for grad_output and grad_grad_input *
    grad_output * GELU''(x) for x, one pass of ext::gelu_double_backward."""
    grad_output, x = ctx.saved_tensors
    grad_output_grad, input_grad = ctx.needs_input_grad[:2]
    if not (grad_output_grad or input_grad):
        return None, None, None
    grad_grad_output, grad_input = _gelu_double_backward_op(
        grad_grad_input.contiguous(), grad_output.contiguous(), x, ctx.approximate,
        grad_output_grad, input_grad)
    return (grad_grad_output if grad_output_grad else None,
            grad_input if input_grad else None, None)


def _third_derivative(ctx, *grads):
    raise NotImplementedError("gelu: derivatives of third and higher order are not "
                              "implemented (gelu_double_backward has no gradient)")


torch.library.register_autograd("ext::gelu", _backward, setup_context=_setup_context,
                                lib=_library)
torch.library.register_autograd("ext::gelu_backward", _double_backward,
                                setup_context=_backward_setup_context, lib=_library)
torch.library.register_autograd("ext::gelu_double_backward", _third_derivative, lib=_library)
_gelu_op = torch.ops.ext.gelu.default
_gelu_backward_op = torch.ops.ext.gelu_backward.default
_gelu_double_backward_op = torch.ops.ext.gelu_double_backward.default


class GeluFunction(torch.autograd.Function):
    """GELU with its gradient: GeluFunction.apply(x, approximate), the
    autograd.Function form of ext::gelu (the same kernel and formula)."""

    @staticmethod
    def forward(ctx, x, approximate="none"):
        out = gelu_forward(x, approximate)
        _setup_context(ctx, (x, approximate), out)
        return out

    backward = staticmethod(_backward)


def gelu(x, approximate="none"):
    """GELU of a contiguous float32/float64 tensor, differentiable: ext::gelu.

    approximate: "none" (erf form) and "tanh" equal torch.nn.functional.gelu;
    "sigmoid" is x * sigmoid(1.702 x).
    """
    require_tensor("gelu", "input", x)
    code = _approximation_code("gelu", approximate)
    if not (torch.compiler.is_compiling() or (x.requires_grad and torch.is_grad_enabled())):
        return _forward(x, code)  # the op's kernel, without the dispatcher
    return _gelu_op(x, approximate)


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
