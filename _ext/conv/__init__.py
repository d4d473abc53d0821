"""_ext.conv: 2-D image convolution with a (2R+1) x (2R+1) kernel and zero
padding, output the size of the input (the seed's niv_conv), forward and
backward, on the CPU or the GPU, through the legacy FFI (src/conv.h).

    from _ext import conv
    out = conv.conv2d(image, kernel)          # autograd: image and kernel
    out.sum().backward()

image is (H, W), or (N, C, H, W) convolved channel by channel; kernel is
(K, K) with K = 2R + 1, shared by every channel, or (C, K, K), one per
channel ((1, K, K) for an (H, W) image); float32 or float64, one dtype, one
device, contiguous. As niv_conv, and as torch.nn.functional.conv2d(image,
weight, padding=R, groups=C) with weight the kernel as (C, 1, K, K), it is
a cross-correlation:

    out[n, c, y, x] = sum over i, j in [0, K) of
                      kernel[c, i, j] * image[n, c, y + i - R, x + j - R]

with pixels outside the image taken as 0. Backward gives the gradient of
the image (the same correlation of grad_out with the kernel flipped) and of
the kernel (summed in double, without atomics: the same from run to run).
CUDA calls run on the current stream, tiled through shared memory for R <= 7
and on a plain path beyond. An empty image is an error.

conv2d() is the custom op ext::conv2d (torch.ops.ext.conv2d), traceable by
torch.compile(fullgraph=True), with the op ext::conv2d_backward as its
gradient; conv2d_forward() and conv2d_backward() are the raw entry points
without autograd (the ops' kernels). The correlation is bilinear in (image,
kernel), so the backward's own gradient is again made of the two ops (see
_double_backward): derivatives of every order are exact, with respect to
the image, the kernel and grad_out (gradient penalties, meta-learning).
"""

import numbers

import torch

from .. import _ffi
from .._tensors import empty, empty_like, require_contiguous, require_tensor

try:
    from ._conv import ffi, lib
except ImportError as error:  # pragma: no cover - only before `make`
    raise ImportError("_ext.conv is not built: run `make` in the project root (%s)"
                      % error) from error

built_with_cuda = bool(lib.ext_built_with_cuda())


def conv2d_forward(image, kernel):
    """out = image correlated with kernel (module docstring), no autograd."""
    fn = "conv2d"
    require_tensor(fn, "image", image)
    require_tensor(fn, "kernel", kernel)
    require_contiguous(fn, "image", image)
    out = empty_like(fn, "out", image)
    args = (_ffi.describe(ffi, fn, "image", image),
            _ffi.describe(ffi, fn, "kernel", kernel),
            _ffi.describe(ffi, fn, "out", out, writable=True))
    if image.is_cuda:
        status = lib.conv2d_forward_cuda(*args, _ffi.cuda_stream(ffi, image))
    else:
        status = lib.conv2d_forward_cpu(*args)
    _ffi.check(ffi, lib, status)
    return out


def _backward_kernel(image, kernel, grad_out, need_image=True, need_kernel=True):
    """The kernel of ext::conv2d_backward: (grad_image, grad_kernel), a
    gradient not asked for as an empty tensor (ops return tensors, not None)."""
    fn = "conv2d_backward"
    require_tensor(fn, "image", image)
    require_tensor(fn, "kernel", kernel)
    require_tensor(fn, "grad_out", grad_out)
    out_image = out_kernel = ffi.NULL
    if need_image:
        require_contiguous(fn, "image", image)
        grad_image = empty_like(fn, "grad_image", image)
        out_image = _ffi.describe(ffi, fn, "grad_image", grad_image, writable=True)
    else:
        grad_image = image.new_empty(0)
    if need_kernel:
        require_contiguous(fn, "kernel", kernel)
        grad_kernel = empty_like(fn, "grad_kernel", kernel)
        out_kernel = _ffi.describe(ffi, fn, "grad_kernel", grad_kernel, writable=True)
    else:
        grad_kernel = kernel.new_empty(0)
    args = (_ffi.describe(ffi, fn, "image", image),
            _ffi.describe(ffi, fn, "kernel", kernel),
            _ffi.describe(ffi, fn, "grad_out", grad_out),
            out_image, out_kernel)
    if image.is_cuda:
        status = lib.conv2d_backward_cuda(*args, _ffi.cuda_stream(ffi, image))
    else:
        status = lib.conv2d_backward_cpu(*args)
    _ffi.check(ffi, lib, status)
    return grad_image, grad_kernel


def conv2d_backward(image, kernel, grad_out, need_image=True, need_kernel=True):
    """(grad_image, grad_kernel) of the correlation for grad_out (image's
    shape); either is None when not asked for."""
    grad_image, grad_kernel = _backward_kernel(image, kernel, grad_out, need_image, need_kernel)
    return grad_image if need_image else None, grad_kernel if need_kernel else None


# ---------------------------------------------------------------------------
# the custom ops ext::conv2d and ext::conv2d_backward

_library = torch.library.Library("ext", "FRAGMENT")
_library.define("conv2d(Tensor image, Tensor kernel) -> Tensor")
_library.define("conv2d_backward(Tensor image, Tensor kernel, Tensor grad_out, "
                "bool need_image=True, bool need_kernel=True) -> (Tensor, Tensor)")
_library.impl("conv2d", conv2d_forward, "CompositeExplicitAutograd")
_library.impl("conv2d_backward", _backward_kernel, "CompositeExplicitAutograd")


@torch.library.register_fake("ext::conv2d", lib=_library)
def _forward_fake(image, kernel):
    return image.new_empty(image.shape)


@torch.library.register_fake("ext::conv2d_backward", lib=_library)
def _backward_fake(image, kernel, grad_out, need_image=True, need_kernel=True):
    return (image.new_empty(image.shape if need_image else 0),
            kernel.new_empty(kernel.shape if need_kernel else 0))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad_out):
    image, kernel = ctx.saved_tensors
    need_image, need_kernel = ctx.needs_input_grad[:2]
    if not (need_image or need_kernel):
        return None, None
    grad_image, grad_kernel = _backward_op(image, kernel, grad_out.contiguous(), need_image,
                                           need_kernel)
    return grad_image if need_image else None, grad_kernel if need_kernel else None


def _backward_setup_context(ctx, inputs, output):
    image, kernel, grad_out, need_image, need_kernel = inputs
    ctx.save_for_backward(image, kernel, grad_out)
    ctx.computed = (need_image, need_kernel)


def _double_backward(ctx, grad_grad_image, grad_grad_kernel):
    """The gradients of ext::conv2d_backward's outputs, from the ops themselves.

    With out = conv2d(image, kernel) = A(kernel) image = B(image) kernel, the
    backward is grad_image = A(kernel)^T grad_out and grad_kernel =
    B(image)^T grad_out. So <grad_grad_image, grad_image> + <grad_grad_kernel,
    grad_kernel> = <conv2d(grad_grad_image, kernel) + conv2d(image,
    grad_grad_kernel), grad_out>, whose gradients are
        grad_out: conv2d(grad_grad_image, kernel) + conv2d(image, grad_grad_kernel)
        kernel:   the kernel gradient of conv2d(grad_grad_image, kernel) for grad_out
        image:    the image gradient of conv2d(image, grad_grad_kernel) for grad_out
    An output the backward did not compute (an empty tensor) adds nothing.
    """
    image, kernel, grad_out = ctx.saved_tensors
    computed_image, computed_kernel = ctx.computed
    want_image, want_kernel, want_grad_out = ctx.needs_input_grad[:3]
    grad_image = grad_kernel = grad_grad_out = None
    if computed_image:
        grad_grad_image = grad_grad_image.contiguous()
        if want_grad_out:
            grad_grad_out = _forward_op(grad_grad_image, kernel)
        if want_kernel:
            grad_kernel = _backward_op(grad_grad_image, kernel, grad_out, False, True)[1]
    if computed_kernel:
        grad_grad_kernel = grad_grad_kernel.contiguous()
        if want_grad_out:
            through_kernel = _forward_op(image, grad_grad_kernel)
            grad_grad_out = through_kernel if grad_grad_out is None else \
                grad_grad_out + through_kernel
        if want_image:
            grad_image = _backward_op(image, grad_grad_kernel, grad_out, True, False)[0]
    return grad_image, grad_kernel, grad_grad_out, None, None


torch.library.register_autograd("ext::conv2d", _backward, setup_context=_setup_context,
                                lib=_library)
torch.library.register_autograd("ext::conv2d_backward", _double_backward,
                                setup_context=_backward_setup_context, lib=_library)
_forward_op = torch.ops.ext.conv2d.default
_backward_op = torch.ops.ext.conv2d_backward.default


class Conv2dFunction(torch.autograd.Function):
    """The correlation as an autograd Function: apply(image, kernel), the
    autograd.Function form of ext::conv2d."""

    @staticmethod
    def forward(ctx, image, kernel):
        out = conv2d_forward(image, kernel)
        _setup_context(ctx, (image, kernel), out)
        return out

    backward = staticmethod(_backward)


def conv2d(image, kernel):
    """image correlated with kernel, zero padded, same size (module
    docstring); differentiable in image and kernel: ext::conv2d."""
    require_tensor("conv2d", "image", image)
    require_tensor("conv2d", "kernel", kernel)
    return _forward_op(image, kernel)


# The shim's largest kernel side is 32767 (2R + 1).
MAX_RADIUS = 16383


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class Conv2d(torch.nn.Module):
    """A learnable (2R+1) x (2R+1) kernel: Conv2d(radius) shares it across
    channels; Conv2d(radius, channels=C) has one per channel."""

    def __init__(self, radius, channels=None, dtype=None, device=None):
        super().__init__()
        fn = "Conv2d"
        if not _is_int(radius) or not 0 <= radius <= MAX_RADIUS:
            raise ValueError("%s: radius must be an int >= 0, got %r (at most %d)"
                             % (fn, radius, MAX_RADIUS))
        if channels is not None and (not _is_int(channels) or channels < 1):
            raise ValueError("%s: channels must be None or an int >= 1, got %r" % (fn, channels))
        if dtype not in (None, torch.float32, torch.float64):
            raise TypeError("%s: dtype must be None, torch.float32 or torch.float64, got %r"
                            % (fn, dtype))
        try:
            device = torch.device("cpu" if device is None else device)
        except (TypeError, RuntimeError) as error:
            raise ValueError("%s: device must be a torch.device or a device string, got %r"
                             % (fn, device)) from error
        side = 2 * radius + 1
        shape = (side, side) if channels is None else (channels, side, side)
        bound = 1.0 / side  # nn.Conv2d's default: 1 / sqrt(fan_in), fan_in = side * side
        self.radius, self.channels = radius, channels
        kernel = empty(fn, "kernel", shape, dtype=dtype, device=device)
        self.kernel = torch.nn.Parameter(kernel.uniform_(-bound, bound))

    def forward(self, image):
        return conv2d(image, self.kernel)

    def extra_repr(self):
        return "radius=%d, channels=%s" % (self.radius, self.channels)
