"""_ext.conv against torch.nn.functional.conv2d (padding R, groups C, the
kernel as (C, 1, K, K)), forward, backward and double backward, R from 0 to
7 (the tiled kernels) and beyond (the plain path); gradcheck and
gradgradcheck; every error of the shims; CUDA against the CPU (GPU machine)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from _ext import _ffi, conv
from torch_op_checks import (check_compiled, check_compiled_double_backward,
                             hessian_vector_product, leaves, opcheck, ops_called)

IMAGE_SHAPES = [(1, 1), (5, 7), (16, 16), (33, 64), (64, 31), (1, 1, 8, 8), (2, 3, 17, 20)]


def sample(rng, shape, radius, per_channel=False, dtype=torch.float64, device="cpu"):
    """A random image of `shape` and a (K, K) kernel, or a (C, K, K) one."""
    side = 2 * radius + 1
    channels = shape[1] if len(shape) == 4 else 1
    kernel_shape = (channels, side, side) if per_channel else (side, side)
    image = torch.from_numpy(rng.standard_normal(shape)).to(dtype=dtype, device=device)
    kernel = torch.from_numpy(rng.standard_normal(kernel_shape)).to(dtype=dtype, device=device)
    return image, kernel


def reference(image, kernel):
    """F.conv2d with padding R and groups C, in float64, image's shape."""
    radius = kernel.shape[-1] // 2
    batch = image.double() if image.dim() == 4 else image.double()[None, None]
    channels = batch.shape[1]
    weight = kernel.double() if kernel.dim() == 3 else kernel.double().expand(channels, -1, -1)
    out = F.conv2d(batch, weight[:, None].contiguous(), padding=radius, groups=channels)
    return out.reshape(image.shape)


def reference_grads(image, kernel, grad_out):
    image = image.double().detach().requires_grad_()
    kernel = kernel.double().detach().requires_grad_()
    return torch.autograd.grad(reference(image, kernel), (image, kernel), grad_out.double())


def assert_close(actual, expected, dtype):
    """float64: to rounding; float32: relative to the largest magnitude."""
    scale = float(expected.abs().max()) or 1.0
    tol = dict(rtol=1e-12, atol=1e-12 * scale) if dtype == torch.float64 else dict(
        rtol=1e-5, atol=2e-6 * scale)
    torch.testing.assert_close(actual.double().cpu(), expected.double().cpu(), **tol)


def forward_backward(image, kernel, grad_out):
    image = image.clone().requires_grad_()
    kernel = kernel.clone().requires_grad_()
    out = conv.conv2d(image, kernel)
    out.backward(grad_out)
    return out.detach(), image.grad, kernel.grad


# ---------------------------------------------------------------------------
# against torch.nn.functional.conv2d

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("radius", list(range(8)) + [9])
@pytest.mark.parametrize("shape", IMAGE_SHAPES)
def test_forward_and_backward_match_torch(rng, shape, radius, per_channel, dtype):
    image, kernel = sample(rng, shape, radius, per_channel, dtype)
    grad_out = torch.from_numpy(rng.standard_normal(shape)).to(dtype)
    out, grad_image, grad_kernel = forward_backward(image, kernel, grad_out)
    ref_image, ref_kernel = reference_grads(image, kernel, grad_out)
    assert out.dtype == dtype and out.shape == image.shape
    assert grad_image.shape == image.shape and grad_kernel.shape == kernel.shape
    assert_close(out, reference(image, kernel), dtype)
    assert_close(grad_image, ref_image, dtype)
    assert_close(grad_kernel, ref_kernel, dtype)


def test_forward_is_cross_correlation():
    """A single 1 at (y, x) lands at (y - i + R, x - j + R) for kernel tap (i,
    j): the output holds the kernel flipped, as for niv_conv and F.conv2d."""
    image = torch.zeros(7, 9, dtype=torch.float64)
    image[3, 4] = 1.0
    kernel = torch.arange(9, dtype=torch.float64).reshape(3, 3)
    out = conv.conv2d_forward(image, kernel)
    torch.testing.assert_close(out[2:5, 3:6], kernel.flip(0, 1), rtol=0, atol=0)
    assert out.sum() == kernel.sum()


def test_zero_padding_at_the_edges():
    """An all-ones image with an all-ones kernel counts the taps inside."""
    radius, height, width = 2, 6, 9
    out = conv.conv2d_forward(torch.ones(height, width), torch.ones(5, 5))
    rows = torch.tensor([min(y + radius, height - 1) - max(y - radius, 0) + 1
                         for y in range(height)])
    cols = torch.tensor([min(x + radius, width - 1) - max(x - radius, 0) + 1
                         for x in range(width)])
    torch.testing.assert_close(out, (rows[:, None] * cols[None, :]).float(), rtol=0, atol=0)


def test_shared_kernel_equals_the_per_channel_copy(rng):
    image, kernel = sample(rng, (2, 4, 11, 13), 2)
    shared = conv.conv2d_forward(image, kernel)
    per_channel = conv.conv2d_forward(image, kernel.expand(4, -1, -1).contiguous())
    torch.testing.assert_close(shared, per_channel, rtol=0, atol=0)
    grads = conv.conv2d_backward(image, kernel, torch.ones_like(image))
    grads_per_channel = conv.conv2d_backward(image, kernel.expand(4, -1, -1).contiguous(),
                                             torch.ones_like(image))
    torch.testing.assert_close(grads[0], grads_per_channel[0], rtol=0, atol=0)
    torch.testing.assert_close(grads[1], grads_per_channel[1].sum(0), rtol=1e-12, atol=1e-12)


def test_large_radius_on_a_small_image(rng):
    """R larger than the image: every tap but the ones inside reads zero."""
    image, kernel = sample(rng, (3, 4), 12)
    grad_out = torch.from_numpy(rng.standard_normal((3, 4)))
    out, grad_image, grad_kernel = forward_backward(image, kernel, grad_out)
    ref_image, ref_kernel = reference_grads(image, kernel, grad_out)
    assert_close(out, reference(image, kernel), torch.float64)
    assert_close(grad_image, ref_image, torch.float64)
    assert_close(grad_kernel, ref_kernel, torch.float64)
    assert not grad_kernel[:9].any() and not grad_kernel[:, :9].any()


@pytest.mark.parametrize("radius", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("shape,per_channel", [((5, 6), False), ((2, 2, 5, 4), True),
                                               ((1, 2, 4, 7), False)])
def test_gradcheck(rng, shape, radius, per_channel):
    image, kernel = sample(rng, shape, radius, per_channel)
    assert torch.autograd.gradcheck(conv.conv2d, (image.requires_grad_(),
                                                  kernel.requires_grad_()))


# ---------------------------------------------------------------------------
# second and higher derivatives

def hessian_products(fn, image, kernel, rng):
    """hessian_vector_product of fn in image and kernel, random weights and
    directions (float64 whatever the inputs' dtype)."""
    weights = torch.from_numpy(rng.standard_normal(image.shape)).to(image)
    directions = [torch.from_numpy(rng.standard_normal(t.shape)).to(t) for t in (image, kernel)]
    return hessian_vector_product(fn, leaves([image, kernel]), weights, directions)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,radius,per_channel", [((5, 7), 1, False), ((2, 3, 6, 5), 2, True),
                                                      ((1, 2, 9, 4), 3, False),
                                                      ((2, 1, 4, 4), 0, True),
                                                      ((3, 4), 9, False)])
def test_double_backward_matches_torch(rng, shape, radius, per_channel, dtype):
    """The Hessian of a loss through conv2d, along a direction: the terms
    through grad_out and the image-kernel cross terms, as F.conv2d's."""
    image, kernel = sample(rng, shape, radius, per_channel, dtype)
    ours = hessian_products(conv.conv2d, image, kernel, np.random.default_rng(1))
    theirs = hessian_products(reference, image.double(), kernel.double(),
                              np.random.default_rng(1))
    for got, expected in zip(ours, theirs):
        assert got.dtype == dtype
        assert_close(got, expected, dtype)


def test_gradient_of_a_gradient_is_not_zero(rng):
    """The issue's reproduction: the gradient of an image gradient reaches the
    kernel (it was zeros, with torch only warning)."""
    image, kernel = leaves(sample(rng, (1, 2, 6, 6), 1, per_channel=True))
    (grad_image,) = torch.autograd.grad(conv.conv2d(image, kernel).sum(), image,
                                        create_graph=True)
    grad_image.square().sum().backward()
    ref_image, ref_kernel = leaves([image, kernel])
    (ref_grad,) = torch.autograd.grad(reference(ref_image, ref_kernel).sum(), ref_image,
                                      create_graph=True)
    ref_grad.square().sum().backward()
    assert ref_kernel.grad.abs().max() > 1
    assert_close(kernel.grad, ref_kernel.grad, torch.float64)


@pytest.mark.parametrize("radius", [0, 1, 3])
@pytest.mark.parametrize("shape,per_channel", [((5, 6), False), ((2, 2, 5, 4), True),
                                               ((1, 2, 4, 7), False)])
def test_gradgradcheck(rng, shape, radius, per_channel):
    image, kernel = leaves(sample(rng, shape, radius, per_channel))
    assert torch.autograd.gradgradcheck(conv.conv2d, (image, kernel))
    assert torch.autograd.gradgradcheck(conv.Conv2dFunction.apply, (image, kernel))


def test_gradgradcheck_one_input(rng):
    """Only the image, or only the kernel, differentiable: the backward
    computed one gradient, whose own gradient must still be right."""
    image, kernel = sample(rng, (2, 3, 5, 4), 1, per_channel=True)
    assert torch.autograd.gradgradcheck(lambda t: conv.conv2d(t, kernel),
                                        (image.clone().requires_grad_(),))
    assert torch.autograd.gradgradcheck(lambda k: conv.conv2d(image, k),
                                        (kernel.clone().requires_grad_(),))


def test_third_derivatives(rng):
    """The double backward is made of the differentiable ops: every order is exact."""
    image, kernel = leaves(sample(rng, (1, 2, 4, 5), 1))

    def gradients(image, kernel):
        return torch.autograd.grad(conv.conv2d(image, kernel).square().sum(), (image, kernel),
                                   create_graph=True)

    assert torch.autograd.gradcheck(gradients, (image, kernel))  # second order
    assert torch.autograd.gradgradcheck(gradients, (image, kernel))  # third order


def test_only_the_wanted_gradients(rng):
    image, kernel = sample(rng, (2, 3, 6, 5), 1)
    image.requires_grad_()
    conv.conv2d(image, kernel).sum().backward()
    assert image.grad is not None and kernel.grad is None
    grad_image, grad_kernel = conv.conv2d_backward(image.detach(), kernel,
                                                   torch.ones(2, 3, 6, 5, dtype=torch.float64),
                                                   need_image=False)
    assert grad_image is None and grad_kernel.shape == (3, 3)


def test_non_contiguous_grad_out_from_autograd(rng):
    """sum() hands backward an expanded (stride 0) gradient: it is copied."""
    image, kernel = sample(rng, (2, 3, 9, 8), 2, per_channel=True)
    image.requires_grad_(), kernel.requires_grad_()
    conv.conv2d(image, kernel).sum().backward()
    ref_image, ref_kernel = reference_grads(image, kernel, torch.ones_like(image))
    assert_close(image.grad, ref_image, torch.float64)
    assert_close(kernel.grad, ref_kernel, torch.float64)


def test_module(rng):
    torch.manual_seed(0)
    module = conv.Conv2d(2, channels=3)
    assert module.kernel.shape == (3, 5, 5) and module.kernel.abs().max() <= 0.2
    image = torch.from_numpy(rng.standard_normal((2, 3, 10, 12))).float()
    out = module(image)
    torch.testing.assert_close(out, conv.conv2d_forward(image, module.kernel.detach()))
    out.square().sum().backward()
    assert module.kernel.grad.shape == (3, 5, 5) and module.kernel.grad.abs().sum() > 0
    shared = conv.Conv2d(1, dtype=torch.float64)
    assert shared.kernel.shape == (3, 3) and shared.kernel.dtype == torch.float64
    assert "radius=1, channels=None" in repr(shared)
    with pytest.raises(ValueError, match="Conv2d: radius must be an int >= 0, got -1"):
        conv.Conv2d(-1)


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(radius=True), ValueError, "radius must be an int >= 0, got True"),
    (dict(radius=1.0), ValueError, "radius must be an int >= 0, got 1.0"),
    (dict(radius=16384), ValueError, r"radius must be an int >= 0, got 16384 \(at most 16383\)"),
    (dict(radius=1, channels=0), ValueError, "channels must be None or an int >= 1, got 0"),
    (dict(radius=1, channels=2.5), ValueError, "channels must be None or an int >= 1"),
    (dict(radius=1, dtype=torch.int64), TypeError,
     "dtype must be None, torch.float32 or torch.float64, got torch.int64"),
    (dict(radius=1, dtype="float64"), TypeError, "dtype must be None, torch.float32"),
    (dict(radius=1, device="gpu0"), ValueError,
     "device must be a torch.device or a device string, got 'gpu0'"),
    (dict(radius=16383, channels=2**20), MemoryError,
     r"cannot allocate kernel \(1048576, 32767, 32767\) on cpu"),
])
def test_module_option_errors(kwargs, error, message):
    with pytest.raises(error, match="^Conv2d: " + message):
        conv.Conv2d(**kwargs)


# ---------------------------------------------------------------------------
# the custom ops ext::conv2d and ext::conv2d_backward, and torch.compile

def test_public_entry_points_go_through_the_ops(rng):
    image, kernel = sample(rng, (1, 2, 5, 6), 1)
    image.requires_grad_()
    module = conv.Conv2d(1, dtype=torch.float64)
    for call in (lambda t: conv.conv2d(t, kernel.requires_grad_()), module):
        _, names = ops_called(lambda t: call(t).sum().backward(), image)
        assert "ext.conv2d.default" in names and "ext.conv2d_backward.default" in names


@pytest.mark.parametrize("shape,radius,per_channel", [((5, 7), 1, False), ((2, 3, 6, 5), 2, True),
                                                      ((1, 2, 4, 4), 0, False),
                                                      ((3, 4), 3, True)])
def test_opcheck(rng, shape, radius, per_channel):
    image, kernel = sample(rng, shape, radius, per_channel)
    opcheck(torch.ops.ext.conv2d.default,
            (image.clone().requires_grad_(), kernel.clone().requires_grad_()))
    opcheck(torch.ops.ext.conv2d.default, (image, kernel.clone().requires_grad_()))
    grad_out = torch.from_numpy(rng.standard_normal(shape))
    for flags in ((True, True), (True, False), (False, True), (False, False)):
        opcheck(torch.ops.ext.conv2d_backward.default, (image, kernel, grad_out, *flags))


class ConvModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = conv.Conv2d(1, channels=3, dtype=torch.float64)

    def forward(self, image):
        return self.conv(torch.relu(image) + image).square()


def test_compile_fullgraph(rng):
    torch.manual_seed(0)
    check_compiled(ConvModel(), [sample(rng, (2, 3, 6, 7), 1)[0]])


def test_compile_double_backward(rng):
    torch.manual_seed(0)
    check_compiled_double_backward(ConvModel(), [sample(rng, (2, 3, 6, 7), 1)[0]])


def test_opcheck_backward_is_differentiable(rng):
    """opcheck of ext::conv2d_backward with inputs that require grad: its own
    autograd formula (the double backward) is registered and traces."""
    image, kernel = sample(rng, (2, 3, 6, 5), 2, per_channel=True)
    grad_out = torch.from_numpy(rng.standard_normal(image.shape))
    for flags in ((True, True), (True, False), (False, True)):
        opcheck(torch.ops.ext.conv2d_backward.default, (*leaves([image, kernel, grad_out]),
                                                        *flags))


# ---------------------------------------------------------------------------
# errors

@pytest.mark.parametrize("image,kernel,error,message", [
    (torch.zeros(4, 4, dtype=torch.int64), torch.zeros(3, 3), TypeError,
     "image must be float32 or float64, got int64"),
    (torch.zeros(4, 4, dtype=torch.float16), torch.zeros(3, 3), TypeError,
     "image must be float32 or float64, got float16"),
    (torch.zeros(4, 4), torch.zeros(3, 3, dtype=torch.float64), TypeError,
     r"kernel must have the dtype of image \(float32\), got float64"),
    (torch.zeros(4, 4).numpy(), torch.zeros(3, 3), TypeError,
     "image must be a torch.Tensor, got ndarray"),
    (torch.zeros(3, 4, 4), torch.zeros(3, 3), ValueError,
     r"image must be \(H, W\) or \(N, C, H, W\), got 3-D \(3, 4, 4\)"),
    (torch.zeros(16), torch.zeros(3, 3), ValueError,
     r"image must be \(H, W\) or \(N, C, H, W\), got 1-D \(16,\)"),
    (torch.zeros(1, 1, 1, 4, 4), torch.zeros(3, 3), ValueError, "got 5-D"),
    (torch.zeros(8, 8), torch.zeros(4, 4), ValueError,
     r"kernel must be \(2R\+1, 2R\+1\) \(or \(1, 2R\+1, 2R\+1\) for an \(H, W\) image\), got "
     r"\(4, 4\)"),
    (torch.zeros(8, 8), torch.zeros(3, 5), ValueError, r"got \(3, 5\)"),
    (torch.zeros(8, 8), torch.zeros(2, 3, 3), ValueError, r"got \(2, 3, 3\)"),
    (torch.zeros(8, 8), torch.zeros(3), ValueError, r"got \(3,\)"),
    (torch.zeros(2, 3, 8, 8), torch.zeros(4, 4), ValueError,
     r"kernel must be \(2R\+1, 2R\+1\) or \(C, 2R\+1, 2R\+1\) with C = 3, the channels of "
     r"image, got \(4, 4\)"),
    (torch.zeros(2, 3, 8, 8), torch.zeros(2, 3, 3), ValueError,
     r"with C = 3, the channels of image, got \(2, 3, 3\)"),
    (torch.zeros(2, 3, 8, 8), torch.zeros(3, 1, 3, 3), ValueError, r"got \(3, 1, 3, 3\)"),
    (torch.zeros(2, 3, 8, 8), torch.zeros(3, 0, 0), ValueError, r"got \(3, 0, 0\)"),
    (torch.zeros(0, 5), torch.zeros(3, 3), ValueError, r"image is empty, \(0, 5\)"),
    (torch.zeros(2, 0, 4, 4), torch.zeros(3, 3), ValueError, r"image is empty, \(2, 0, 4, 4\)"),
    (torch.zeros(2, 3, 4, 0), torch.zeros(3, 3), ValueError, r"image is empty, \(2, 3, 4, 0\)"),
])
def test_bad_arguments(image, kernel, error, message):
    with pytest.raises(error, match="^conv2d: .*" + message):
        conv.conv2d(image, kernel)


def test_kernel_side_limit():
    """Checked on the descriptor before any data is read, so a small tensor
    described as 32769 x 32769 stands in for 4 GB of kernel."""
    kernel = _ffi.describe(conv.ffi, "test", "kernel", torch.zeros(3, 3))
    kernel.sizes[0] = kernel.sizes[1] = 32769
    kernel.strides[0] = 32769
    image, out = torch.zeros(2, 2), torch.zeros(2, 2)
    descs = (_ffi.describe(conv.ffi, "test", "image", image), kernel,
             _ffi.describe(conv.ffi, "test", "out", out))
    with pytest.raises(ValueError, match="conv2d: kernel is 32769 x 32769; at most 32767 x 32767"):
        _ffi.check(conv.ffi, conv.lib, conv.lib.conv2d_forward_cpu(*descs))


def test_huge_expanded_image_is_refused_before_allocating():
    image = torch.zeros(1, 1, 1, 1).expand(1, 1, 2**20, 2**20)
    kernel = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="^conv2d: image must be contiguous"):
        conv.conv2d(image, kernel)
    with pytest.raises(ValueError, match="^conv2d_backward: image must be contiguous"):
        conv.conv2d_backward(image, kernel, image)
    with pytest.raises(ValueError, match="^conv2d_backward: kernel must be contiguous"):
        conv.conv2d_backward(torch.zeros(4, 4), torch.zeros(1, 1).expand(2**15 - 1, 2**15 - 1),
                             torch.zeros(4, 4))


@pytest.mark.parametrize("name", ["image", "kernel"])
def test_non_contiguous_is_a_value_error(name):
    args = {"image": torch.zeros(2, 3, 8, 8), "kernel": torch.zeros(3, 3)}
    strided = {"image": torch.zeros(2, 3, 8, 16)[..., ::2], "kernel": torch.zeros(3, 6)[:, ::2]}
    args[name] = strided[name]
    with pytest.raises(ValueError, match="conv2d: %s must be contiguous" % name):
        conv.conv2d(args["image"], args["kernel"])


def test_numpy_is_not_a_conv_input():
    with pytest.raises(TypeError, match="conv2d: kernel must be a torch.Tensor, got ndarray"):
        conv.conv2d_forward(torch.zeros(3, 3), np.zeros((3, 3), np.float32))


def test_backward_argument_errors():
    image, kernel = torch.zeros(2, 3, 8, 8), torch.zeros(3, 3, 3)
    with pytest.raises(ValueError, match=r"conv2d_backward: grad_out must have the shape of "
                       r"image, \(2, 3, 8, 8\), got \(2, 3, 8, 7\)"):
        conv.conv2d_backward(image, kernel, torch.zeros(2, 3, 8, 7))
    with pytest.raises(TypeError, match=r"conv2d_backward: grad_out must have the dtype of "
                       r"image \(float32\), got float64"):
        conv.conv2d_backward(image, kernel, torch.zeros(2, 3, 8, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="conv2d_backward: grad_out must be contiguous"):
        conv.conv2d_backward(image, kernel, torch.zeros(2, 3, 8, 16)[..., ::2])
    with pytest.raises(TypeError, match="conv2d_backward: grad_out must be a torch.Tensor"):
        conv.conv2d_backward(image, kernel, None)
    # the outputs are allocated by the wrapper; wrong ones can only come through the lib
    descs = [_ffi.describe(conv.ffi, "test", name, t) for name, t in (
        ("image", image), ("kernel", kernel), ("grad_out", torch.zeros_like(image)),
        ("grad_image", torch.zeros(2, 3, 8, 8)), ("grad_kernel", torch.zeros(3, 3)))]
    with pytest.raises(ValueError, match=r"conv2d_backward: grad_kernel must have the shape of "
                       r"kernel, \(3, 3, 3\), got \(3, 3\)"):
        _ffi.check(conv.ffi, conv.lib, conv.lib.conv2d_backward_cpu(*descs))


def test_output_shape_is_checked():
    descs = [_ffi.describe(conv.ffi, "test", name, t) for name, t in (
        ("image", torch.zeros(5, 6)), ("kernel", torch.zeros(3, 3)), ("out", torch.zeros(6, 5)))]
    with pytest.raises(ValueError, match=r"conv2d: out must have the shape of image, \(5, 6\), "
                       r"got \(6, 5\)"):
        _ffi.check(conv.ffi, conv.lib, conv.lib.conv2d_forward_cpu(*descs))


@pytest.mark.parametrize("name", ["kernel", "out"])
def test_tensor_on_another_device_is_refused(name):
    """Checked on the descriptors before any data is read, so a CPU tensor
    described as a CUDA one stands in for it on a machine without a GPU."""
    tensors = {"image": torch.zeros(5, 6), "kernel": torch.zeros(3, 3), "out": torch.zeros(5, 6)}
    descs = {n: _ffi.describe(conv.ffi, "test", n, t) for n, t in tensors.items()}
    descs[name].device_type, descs[name].device_index = _ffi.CUDA, 1
    with pytest.raises(RuntimeError, match="conv2d: %s is on cuda:1; conv2d needs CPU tensors"
                       % name):
        _ffi.check(conv.ffi, conv.lib, conv.lib.conv2d_forward_cpu(
            descs["image"], descs["kernel"], descs["out"]))


def test_cuda_entry_point_refuses_cpu_tensors():
    descs = [_ffi.describe(conv.ffi, "test", name, t) for name, t in (
        ("image", torch.zeros(5, 6)), ("kernel", torch.zeros(3, 3)), ("out", torch.zeros(5, 6)))]
    expected = "needs CUDA tensors" if conv.built_with_cuda else "built without CUDA"
    with pytest.raises(RuntimeError, match="conv2d: .*" + expected):
        _ffi.check(conv.ffi, conv.lib, conv.lib.conv2d_forward_cuda(*descs, conv.ffi.NULL))


# ---------------------------------------------------------------------------
# CUDA against the CPU (GPU machine)

@pytest.mark.gpu
def test_cuda_opcheck(rng):
    image, kernel = sample(rng, (2, 3, 6, 5), 2, True, device="cuda")
    opcheck(torch.ops.ext.conv2d.default,
            (image.clone().requires_grad_(), kernel.clone().requires_grad_()))
    grad_out = torch.randn(2, 3, 6, 5, dtype=torch.float64, device="cuda")
    for flags in ((True, True), (True, False), (False, True)):
        opcheck(torch.ops.ext.conv2d_backward.default, (image, kernel, grad_out, *flags))


@pytest.mark.gpu
def test_cuda_compile_fullgraph(rng):
    torch.manual_seed(0)
    check_compiled(ConvModel().cuda(), [sample(rng, (2, 3, 6, 7), 1, device="cuda")[0]])


@pytest.mark.gpu
def test_cuda_compile_double_backward(rng):
    torch.manual_seed(0)
    check_compiled_double_backward(ConvModel().cuda(),
                                   [sample(rng, (2, 3, 6, 7), 1, device="cuda")[0]])


@pytest.mark.gpu
def test_cuda_opcheck_backward_is_differentiable(rng):
    image, kernel = sample(rng, (2, 3, 6, 5), 2, True, device="cuda")
    grad_out = torch.randn(2, 3, 6, 5, dtype=torch.float64, device="cuda")
    opcheck(torch.ops.ext.conv2d_backward.default, (*leaves([image, kernel, grad_out]), True,
                                                    True))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("radius,per_channel", [(1, False), (3, True), (8, True)])
def test_gpu_double_backward_matches_torch(rng, radius, per_channel, dtype):
    image, kernel = sample(rng, (2, 3, 19, 33), radius, per_channel, dtype, device="cuda")
    ours = hessian_products(conv.conv2d, image, kernel, np.random.default_rng(1))
    theirs = hessian_products(reference, image.double().cpu(), kernel.double().cpu(),
                              np.random.default_rng(1))
    for got, expected in zip(ours, theirs):
        assert got.is_cuda
        assert_close(got, expected, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("radius", [0, 2, 8])
def test_gpu_gradgradcheck(rng, radius):
    image, kernel = leaves(sample(rng, (2, 2, 6, 5), radius, True, device="cuda"))
    assert torch.autograd.gradgradcheck(conv.conv2d, (image, kernel))


def gpu_vs_cpu(image, kernel, grad_out):
    """conv2d forward and backward on the GPU equal the CPU's: to rounding
    (FMA contraction and the order of the kernel sums differ)."""
    cpu = forward_backward(image, kernel, grad_out)
    gpu = forward_backward(image.cuda(), kernel.cuda(), grad_out.cuda())
    for got, expected in zip(gpu, cpu):
        assert got.is_cuda
        assert_close(got, expected, image.dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("radius", list(range(8)) + [8, 11])
@pytest.mark.parametrize("shape", IMAGE_SHAPES + [(129, 257), (3, 2, 100, 67)])
def test_gpu_equals_cpu(rng, shape, radius, per_channel, dtype):
    image, kernel = sample(rng, shape, radius, per_channel, dtype)
    gpu_vs_cpu(image, kernel, torch.from_numpy(rng.standard_normal(shape)).to(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("radius", [1, 3, 5, 7, 9])
def test_gpu_matches_torch_in_float64(rng, radius):
    image, kernel = sample(rng, (2, 3, 77, 130), radius, True, device="cuda")
    grad_out = torch.from_numpy(rng.standard_normal(image.shape)).cuda()
    out, grad_image, grad_kernel = forward_backward(image, kernel, grad_out)
    ref_image, ref_kernel = reference_grads(image, kernel, grad_out)
    assert_close(out, reference(image, kernel), torch.float64)
    assert_close(grad_image, ref_image, torch.float64)
    assert_close(grad_kernel, ref_kernel, torch.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("radius", [0, 2, 7, 8])
def test_gpu_gradcheck(rng, radius):
    image, kernel = sample(rng, (2, 2, 6, 5), radius, True, device="cuda")
    assert torch.autograd.gradcheck(conv.conv2d, (image.requires_grad_(),
                                                  kernel.requires_grad_()))


@pytest.mark.gpu
@pytest.mark.parametrize("shape,radius,per_channel", [
    ((4_200_000, 2), 1, False),        # more tile rows than a grid's y
    ((1, 70_000, 3, 5), 2, False),     # more planes than a grid's z
    ((1, 70_000, 3, 3), 1, True),      # more kernels than a grid's y (grad_kernel)
    ((2_200_000, 3), 5, False),        # R > 3: 32-row tiles
])
def test_gpu_grid_strides(rng, shape, radius, per_channel):
    image, kernel = sample(rng, shape, radius, per_channel, torch.float32)
    gpu_vs_cpu(image, kernel, torch.from_numpy(rng.standard_normal(shape)).float())


@pytest.mark.gpu
def test_gpu_deterministic_kernel_gradient(rng):
    image, kernel = sample(rng, (8, 3, 256, 256), 3, dtype=torch.float32, device="cuda")
    grad_out = torch.randn_like(image)
    first = conv.conv2d_backward(image, kernel, grad_out)[1]
    for _ in range(3):
        assert torch.equal(conv.conv2d_backward(image, kernel, grad_out)[1], first)


@pytest.mark.gpu
def test_gpu_errors():
    image, kernel = torch.zeros(2, 3, 8, 8, device="cuda"), torch.zeros(3, 3, device="cuda")
    with pytest.raises(RuntimeError, match="conv2d: kernel is on cpu; conv2d needs CUDA"):
        conv.conv2d(image, kernel.cpu())
    with pytest.raises(RuntimeError, match="conv2d: kernel is on cuda:0; conv2d needs CPU"):
        conv.conv2d(image.cpu(), kernel)
    with pytest.raises(ValueError, match="conv2d: image must be contiguous"):
        conv.conv2d(torch.zeros(2, 3, 8, 16, device="cuda")[..., ::2], kernel)
    with pytest.raises(ValueError, match=r"conv2d: kernel must be \(2R\+1, 2R\+1\)"):
        conv.conv2d(image, torch.zeros(4, 4, device="cuda"))
    with pytest.raises(RuntimeError, match="conv2d_backward: grad_out is on cpu"):
        conv.conv2d_backward(image, kernel, torch.zeros(2, 3, 8, 8))


@pytest.mark.gpu
def test_gpu_cuda_error_is_an_exception():
    """A failure inside the launcher (no device 99) is a RuntimeError with
    CUDA's own message, and the module goes on working."""
    image, kernel = torch.zeros(4, 4, device="cuda"), torch.zeros(3, 3, device="cuda")
    out = torch.empty_like(image)
    descs = [_ffi.describe(conv.ffi, "conv2d", name, t)
             for name, t in (("image", image), ("kernel", kernel), ("out", out))]
    for desc in descs:
        desc.device_index = 99
    with pytest.raises(RuntimeError, match="conv2d: CUDA error: invalid device ordinal"):
        _ffi.check(conv.ffi, conv.lib, conv.lib.conv2d_forward_cuda(*descs, conv.ffi.NULL))
    conv.conv2d(image, kernel)


@pytest.mark.gpu
def test_gpu_runs_on_the_current_stream(rng):
    """An image written on a side stream behind a long sleep must be waited for."""
    image, kernel = sample(rng, (2, 3, 300, 200), 3, dtype=torch.float32)
    expected = reference(image, kernel)
    host = image.pin_memory()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        device_image = torch.zeros_like(image, device="cuda")
        device_kernel = kernel.cuda()
        torch.cuda._sleep(200_000_000)
        device_image.copy_(host, non_blocking=True)
        out = conv.conv2d_forward(device_image, device_kernel)
    side.synchronize()
    assert_close(out, expected, torch.float32)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_gpu_second_device(rng):
    image, kernel = sample(rng, (2, 3, 40, 50), 2, dtype=torch.float64)
    out = conv.conv2d_forward(image.to("cuda:1"), kernel.to("cuda:1"))
    assert out.device == torch.device("cuda:1")
    assert_close(out, reference(image, kernel), torch.float64)
    with pytest.raises(RuntimeError, match="kernel is on cuda:0 but image is on cuda:1"):
        conv.conv2d(image.to("cuda:1"), kernel.to("cuda:0"))

