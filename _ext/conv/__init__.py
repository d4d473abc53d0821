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
"""

import torch

from .. import _ffi

try:
    from ._conv import ffi, lib
except ImportError as error:  # pragma: no cover - only before `make`
    raise ImportError("_ext.conv is not built: run `make` in the project root (%s)"
                      % error) from error

built_with_cuda = bool(lib.ext_built_with_cuda())


def _check_tensors(fn, **tensors):
    for name, tensor in tensors.items():
        if not _ffi.is_tensor(tensor):
            raise TypeError("%s: %s must be a torch.Tensor, got %s"
                            % (fn, name, type(tensor).__name__))


def conv2d_forward(image, kernel):
    """out = image correlated with kernel (module docstring), no autograd."""
    fn = "conv2d"
    _check_tensors(fn, image=image, kernel=kernel)
    out = torch.empty(image.shape, dtype=image.dtype, device=image.device)
    args = (_ffi.describe(ffi, fn, "image", image),
            _ffi.describe(ffi, fn, "kernel", kernel),
            _ffi.describe(ffi, fn, "out", out, writable=True))
    if image.is_cuda:
        status = lib.conv2d_forward_cuda(*args, _ffi.cuda_stream(ffi, image))
    else:
        status = lib.conv2d_forward_cpu(*args)
    _ffi.check(ffi, lib, status)
    return out


def conv2d_backward(image, kernel, grad_out, need_image=True, need_kernel=True):
    """(grad_image, grad_kernel) of the correlation for grad_out (image's
    shape); either is None when not asked for."""
    fn = "conv2d_backward"
    _check_tensors(fn, image=image, kernel=kernel, grad_out=grad_out)
    grad_image = grad_kernel = None
    out_image = out_kernel = ffi.NULL
    if need_image:
        grad_image = torch.empty(image.shape, dtype=image.dtype, device=image.device)
        out_image = _ffi.describe(ffi, fn, "grad_image", grad_image, writable=True)
    if need_kernel:
        grad_kernel = torch.empty(kernel.shape, dtype=kernel.dtype, device=kernel.device)
        out_kernel = _ffi.describe(ffi, fn, "grad_kernel", grad_kernel, writable=True)
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


class Conv2dFunction(torch.autograd.Function):
    """The correlation as an autograd Function: apply(image, kernel)."""

    @staticmethod
    def forward(ctx, image, kernel):
        out = conv2d_forward(image, kernel)
        ctx.save_for_backward(image, kernel)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        image, kernel = ctx.saved_tensors
        need_image, need_kernel = ctx.needs_input_grad
        if not (need_image or need_kernel):
            return None, None
        return conv2d_backward(image, kernel, grad_out.contiguous(), need_image, need_kernel)


def conv2d(image, kernel):
    """image correlated with kernel, zero padded, same size (module
    docstring); differentiable in image and kernel."""
    return Conv2dFunction.apply(image, kernel)


class Conv2d(torch.nn.Module):
    """A learnable (2R+1) x (2R+1) kernel: Conv2d(radius) shares it across
    channels; Conv2d(radius, channels=C) has one per channel."""

    def __init__(self, radius, channels=None, dtype=None, device=None):
        super().__init__()
        if not isinstance(radius, int) or radius < 0:
            raise ValueError("Conv2d: radius must be an int >= 0, got %r" % (radius,))
        side = 2 * radius + 1
        shape = (side, side) if channels is None else (channels, side, side)
        bound = 1.0 / side  # nn.Conv2d's default: 1 / sqrt(fan_in), fan_in = side * side
        self.radius, self.channels = radius, channels
        self.kernel = torch.nn.Parameter(
            torch.empty(shape, dtype=dtype, device=device).uniform_(-bound, bound))

    def forward(self, image):
        return conv2d(image, self.kernel)

    def extra_repr(self):
        return "radius=%d, channels=%s" % (self.radius, self.channels)
