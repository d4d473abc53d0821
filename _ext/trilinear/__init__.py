"""_ext.trilinear: trilinear interpolation of cube-corner features, forward
and backward, on the GPU or the CPU.

    from _ext import trilinear
    out = trilinear.trilinear_interpolation(feats, points)   # differentiable
    layer = trilinear.TrilinearInterpolation()                # as an nn.Module

feats (N, 8, F) holds the features of each cube's 8 corners and points (N, 3)
one point per cube in local coordinates [-1, 1]; out is (N, F). With u, v, w
= (points + 1) / 2, corners 0..3 sit at u = 0 and 4..7 at u = 1, weighted
within each four by a = (1-v)(1-w), b = (1-v)w, c = v(1-w), d = 1-a-b-c:

    out = (1-u) (a f0 + b f1 + c f2 + d f3) + u (a f4 + b f5 + c f6 + d f7)

Gradients flow to feats and to points (through u, v, w = (p + 1) / 2). All
tensors are contiguous, float32 or float64, on one device; CUDA work runs on
the caller's current stream. trilinear_interpolation() is the custom op
ext::trilinear_interpolation (torch.ops.ext), traceable by
torch.compile(fullgraph=True), with the op
ext::trilinear_interpolation_backward as its gradient, whose own gradient
(the double backward: gradient penalties, meta-learning) is the op
ext::trilinear_interpolation_double_backward, one fused pass with every
second-order term (src/trilinear.h). A third derivative is not implemented:
asking for one raises NotImplementedError. trilinear_forward(),
trilinear_backward() and trilinear_double_backward() are the raw entry points
without autograd (the ops' kernels). Formulas: src/trilinear_math.h.
"""

import torch

from .. import _ffi
from .._tensors import empty, empty_like, require_contiguous, require_tensor

try:
    from ._trilinear import ffi, lib
except ImportError as error:  # pragma: no cover - only before `make`
    raise ImportError("_ext.trilinear is not built: run `make` in the project root (%s)"
                      % error) from error

built_with_cuda = bool(lib.ext_built_with_cuda())


def _rows_shape(feats):
    """(N, F) of feats (N, 8, F). For a feats of another rank the shim reports
    feats' shape before it looks at the rows, so any shape will do there."""
    return (feats.shape[0], feats.shape[2]) if feats.dim() == 3 else (0,)


def _run(cpu_entry, cuda_entry, device_tensor, *args):
    if device_tensor.is_cuda:
        status = cuda_entry(*args, _ffi.cuda_stream(ffi, device_tensor))
    else:
        status = cpu_entry(*args)
    _ffi.check(ffi, lib, status)


def trilinear_forward(feats, points):
    """out (N, F) from feats (N, 8, F) and points (N, 3), without autograd."""
    fn = "trilinear_interpolation"
    require_tensor(fn, "feats", feats)
    require_tensor(fn, "points", points)
    require_contiguous(fn, "feats", feats)
    out = empty(fn, "out", _rows_shape(feats), feats)
    _run(lib.trilinear_forward_cpu, lib.trilinear_forward_cuda, feats,
         _ffi.describe(ffi, fn, "feats", feats), _ffi.describe(ffi, fn, "points", points),
         _ffi.describe(ffi, fn, "out", out))
    return out


def _backward_kernel(grad_out, feats, points, feats_grad=True, points_grad=True):
    """The kernel of ext::trilinear_interpolation_backward: (grad_feats,
    grad_points), a gradient not asked for as an empty tensor (ops return
    tensors, not None)."""
    fn = "trilinear_interpolation_backward"
    for name, x in (("grad_out", grad_out), ("feats", feats), ("points", points)):
        require_tensor(fn, name, x)
    if not (feats_grad or points_grad):
        return feats.new_empty(0), points.new_empty(0)
    require_contiguous(fn, "feats", feats)
    require_contiguous(fn, "points", points)
    grad_feats = empty_like(fn, "grad_feats", feats) if feats_grad else \
        feats.new_empty(0)
    grad_points = empty_like(fn, "grad_points", points) if points_grad else \
        points.new_empty(0)
    _run(lib.trilinear_backward_cpu, lib.trilinear_backward_cuda, feats,
         _ffi.describe(ffi, fn, "grad_out", grad_out), _ffi.describe(ffi, fn, "feats", feats),
         _ffi.describe(ffi, fn, "points", points),
         _ffi.describe(ffi, fn, "grad_feats", grad_feats) if feats_grad else ffi.NULL,
         _ffi.describe(ffi, fn, "grad_points", grad_points) if points_grad else ffi.NULL)
    return grad_feats, grad_points


def trilinear_backward(grad_out, feats, points, feats_grad=True, points_grad=True):
    """(grad_feats, grad_points) from grad_out (N, F), without autograd; a
    gradient not asked for is None."""
    grad_feats, grad_points = _backward_kernel(grad_out, feats, points, feats_grad, points_grad)
    return grad_feats if feats_grad else None, grad_points if points_grad else None


def _double_backward_kernel(grad_grad_feats, grad_grad_points, grad_out, feats, points,
                            grad_out_grad=True, feats_grad=True, points_grad=True):
    """The kernel of ext::trilinear_interpolation_double_backward:
    (grad_grad_out, grad_feats, grad_points); grad_grad_feats or
    grad_grad_points None (not both) when no gradient reaches that output,
    a gradient not asked for an empty tensor (ops return tensors, not None)."""
    fn = "trilinear_interpolation_double_backward"
    inputs = (("grad_grad_feats", grad_grad_feats), ("grad_grad_points", grad_grad_points),
              ("grad_out", grad_out), ("feats", feats), ("points", points))
    for name, x in inputs[2:] + tuple(item for item in inputs[:2] if item[1] is not None):
        require_tensor(fn, name, x)
    wanted = (grad_out_grad, feats_grad, points_grad)
    if not any(wanted):
        return grad_out.new_empty(0), feats.new_empty(0), points.new_empty(0)
    require_contiguous(fn, "feats", feats)
    require_contiguous(fn, "points", points)
    outputs = [empty(fn, name, shape, like) if want else None
               for name, shape, like, want in (
                   ("grad_grad_out", _rows_shape(feats), feats, grad_out_grad),
                   ("grad_feats", feats.shape, feats, feats_grad),
                   ("grad_points", points.shape, points, points_grad))]
    _run(lib.trilinear_double_backward_cpu, lib.trilinear_double_backward_cuda, feats,
         *(ffi.NULL if x is None else _ffi.describe(ffi, fn, name, x) for name, x in inputs),
         *(ffi.NULL if out is None else _ffi.describe(ffi, fn, name, out)
           for name, out in zip(("grad_grad_out", "grad_feats", "grad_points"), outputs)))
    return tuple(like.new_empty(0) if out is None else out
                 for out, like in zip(outputs, (grad_out, feats, points)))


def trilinear_double_backward(grad_grad_feats, grad_grad_points, grad_out, feats, points,
                              grad_out_grad=True, feats_grad=True, points_grad=True):
    """(grad_grad_out, grad_feats, grad_points): the gradients of
    trilinear_backward(grad_out, feats, points)'s two results with respect
    to grad_out, feats and points, for the gradients grad_grad_feats (N, 8,
    F) and grad_grad_points (N, 3) that reach them (either None, not both,
    when none reaches it: its terms are left out), without autograd; a
    gradient not asked for is None."""
    wanted = (grad_out_grad, feats_grad, points_grad)
    results = _double_backward_kernel(grad_grad_feats, grad_grad_points, grad_out, feats, points,
                                      *wanted)
    return tuple(result if want else None for result, want in zip(results, wanted))


# ---------------------------------------------------------------------------
# the custom ops ext::trilinear_interpolation, its backward and double backward

_library = torch.library.Library("ext", "FRAGMENT")
_library.define("trilinear_interpolation(Tensor feats, Tensor points) -> Tensor")
_library.define("trilinear_interpolation_backward(Tensor grad_out, Tensor feats, Tensor points, "
                "bool feats_grad=True, bool points_grad=True) -> (Tensor, Tensor)")
_library.define("trilinear_interpolation_double_backward(Tensor? grad_grad_feats, "
                "Tensor? grad_grad_points, Tensor grad_out, Tensor feats, Tensor points, "
                "bool grad_out_grad=True, bool feats_grad=True, bool points_grad=True) "
                "-> (Tensor, Tensor, Tensor)")
_library.impl("trilinear_interpolation", trilinear_forward, "CompositeExplicitAutograd")
_library.impl("trilinear_interpolation_backward", _backward_kernel, "CompositeExplicitAutograd")
_library.impl("trilinear_interpolation_double_backward", _double_backward_kernel,
              "CompositeExplicitAutograd")


@torch.library.register_fake("ext::trilinear_interpolation", lib=_library)
def _forward_fake(feats, points):
    return feats.new_empty(_rows_shape(feats))


@torch.library.register_fake("ext::trilinear_interpolation_backward", lib=_library)
def _backward_fake(grad_out, feats, points, feats_grad=True, points_grad=True):
    return (feats.new_empty(feats.shape if feats_grad else 0),
            points.new_empty(points.shape if points_grad else 0))


@torch.library.register_fake("ext::trilinear_interpolation_double_backward", lib=_library)
def _double_backward_fake(grad_grad_feats, grad_grad_points, grad_out, feats, points,
                          grad_out_grad=True, feats_grad=True, points_grad=True):
    return (grad_out.new_empty(_rows_shape(feats) if grad_out_grad else 0),
            feats.new_empty(feats.shape if feats_grad else 0),
            points.new_empty(points.shape if points_grad else 0))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad_out):
    feats, points = ctx.saved_tensors
    feats_grad, points_grad = ctx.needs_input_grad[:2]
    if not (feats_grad or points_grad):
        return None, None
    grad_feats, grad_points = _backward_op(grad_out.contiguous(), feats, points, feats_grad,
                                           points_grad)
    return grad_feats if feats_grad else None, grad_points if points_grad else None


def _backward_setup_context(ctx, inputs, output):
    grad_out, feats, points, feats_grad, points_grad = inputs
    ctx.save_for_backward(grad_out, feats, points)
    ctx.computed = (feats_grad, points_grad)


def _double_backward(ctx, grad_grad_feats, grad_grad_points):
    """The gradients of ext::trilinear_interpolation_backward's outputs, one
    pass of ext::trilinear_interpolation_double_backward. An output the
    backward did not compute (an empty tensor) brings no gradient, and feats
    reach only grad_points: without grad_grad_points their term is zero."""
    grad_out, feats, points = ctx.saved_tensors
    computed_feats, computed_points = ctx.computed
    grad_grad_feats = grad_grad_feats.contiguous() if computed_feats else None
    grad_grad_points = grad_grad_points.contiguous() if computed_points else None
    grad_out_grad, feats_grad, points_grad = ctx.needs_input_grad[:3]
    feats_grad = feats_grad and grad_grad_points is not None
    wanted = (grad_out_grad, feats_grad, points_grad)
    if not any(wanted) or (grad_grad_feats is None and grad_grad_points is None):
        return None, None, None, None, None
    results = _double_backward_op(grad_grad_feats, grad_grad_points, grad_out.contiguous(),
                                  feats, points, *wanted)
    return (*(result if want else None for result, want in zip(results, wanted)), None, None)


def _third_derivative(ctx, *grads):
    raise NotImplementedError("trilinear_interpolation: derivatives of third and higher order "
                              "are not implemented (trilinear_interpolation_double_backward "
                              "has no gradient)")


torch.library.register_autograd("ext::trilinear_interpolation", _backward,
                                setup_context=_setup_context, lib=_library)
torch.library.register_autograd("ext::trilinear_interpolation_backward", _double_backward,
                                setup_context=_backward_setup_context, lib=_library)
torch.library.register_autograd("ext::trilinear_interpolation_double_backward",
                                _third_derivative, lib=_library)
_forward_op = torch.ops.ext.trilinear_interpolation.default
_backward_op = torch.ops.ext.trilinear_interpolation_backward.default
_double_backward_op = torch.ops.ext.trilinear_interpolation_double_backward.default


class TrilinearInterpolationFunction(torch.autograd.Function):
    """TrilinearInterpolationFunction.apply(feats, points): gradients to both;
    the autograd.Function form of ext::trilinear_interpolation."""

    @staticmethod
    def forward(ctx, feats, points):
        out = trilinear_forward(feats, points)
        _setup_context(ctx, (feats, points), out)
        return out

    backward = staticmethod(_backward)


def trilinear_interpolation(feats, points):
    """Trilinear interpolation, differentiable with respect to feats and
    points: ext::trilinear_interpolation."""
    fn = "trilinear_interpolation"
    require_tensor(fn, "feats", feats)
    require_tensor(fn, "points", points)
    return _forward_op(feats, points)


class TrilinearInterpolation(torch.nn.Module):
    """nn.Module form of trilinear_interpolation(feats, points)."""

    def forward(self, feats, points):
        return trilinear_interpolation(feats, points)
