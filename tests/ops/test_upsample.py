"""_ext.upsample against torch.nn.functional.interpolate (half_pixel and
align_corners, forward, backward and double backward), onnxruntime's Resize
(asymmetric), and a float64 NumPy reference of all three modes built from
their definitions; gradcheck and gradgradcheck; edge shapes; every error of
the shim; CUDA against the CPU and against torch's CUDA kernels on a GPU
machine."""

import math
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from _ext import _ffi, upsample
from cpu_only_build import build_cpu_only, run_python
from torch_op_checks import (check_compiled, check_compiled_double_backward,
                             hessian_vector_product, leaves, opcheck, ops_called)

try:
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper
except ImportError:  # requirements.txt lists both; the tests that need them say so
    onnx = onnxruntime = None

needs_onnxruntime = pytest.mark.skipif(onnxruntime is None, reason="onnxruntime is not "
                                       "installed (pip install -r requirements.txt)")

TORCH_MODES = ["half_pixel", "align_corners"]
MODES = TORCH_MODES + ["asymmetric"]
# (H, W, scale_factor): 1x1, a row, a column, non-square, odd sizes, integer,
# non-integer, per-axis and downsampling scales, scale 1, and 1.1 on a size 5
# (the size does not change: copied)
SCALE_CASES = [(1, 1, 2), (1, 5, 3), (6, 1, 1.5), (3, 4, 2), (5, 7, 2.5), (8, 8, 1),
               (7, 3, (1.7, 0.6)), (9, 6, 0.5), (6, 10, 0.7), (5, 5, 1.1), (4, 9, (3, 1)),
               (13, 11, 4.3)]
# (H, W, size): explicit output sizes, up and down, 1x1 out, one axis unchanged
SIZE_CASES = [(4, 4, (7, 9)), (7, 3, (2, 11)), (1, 1, (3, 3)), (5, 5, (1, 1)), (6, 9, (6, 4)),
              (2, 3, (2, 3)), (10, 12, (3, 5))]


def sample(rng, shape, dtype=torch.float64, device="cpu"):
    return torch.from_numpy(rng.standard_normal(shape)).to(dtype=dtype, device=device)


def tolerances(dtype):
    return dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)


def torch_interpolate(x, mode, **kwargs):
    return F.interpolate(x, mode="bilinear", align_corners=mode == "align_corners", **kwargs)


# ---------------------------------------------------------------------------
# an independent float64 reference: the interpolation matrix of each axis

def interpolation_matrix(n_in, n_out, mode, scale=None):
    """(n_out, n_in) float64: row o holds the weights output o gives the inputs,
    from the definitions in _ext.upsample's docstring."""
    matrix = np.zeros((n_out, n_in))
    if n_in == n_out:
        return np.eye(n_in)
    for o in range(n_out):
        if mode == "align_corners":
            src = o * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            ratio = 1.0 / scale if scale else n_in / n_out
            src = max(0.0, (o + 0.5) * ratio - 0.5) if mode == "half_pixel" else o * ratio
        i0 = min(int(math.floor(src)), n_in - 1)
        i1 = min(i0 + 1, n_in - 1)
        lam = min(max(src - i0, 0.0), 1.0)
        matrix[o, i0] += 1.0 - lam
        matrix[o, i1] += lam
    return matrix


def reference_resize(x, size, mode, scales=(None, None)):
    """x (N, C, H, W) resized to size (OH, OW) with NumPy in float64, and the
    two matrices (so a gradient is their transpose)."""
    a_h = interpolation_matrix(x.shape[2], size[0], mode, scales[0])
    a_w = interpolation_matrix(x.shape[3], size[1], mode, scales[1])
    return np.einsum("oh,nchw,pw->ncop", a_h, np.asarray(x, np.float64), a_w), a_h, a_w


def reference_resize_backward(grad, a_h, a_w):
    return np.einsum("oh,ncop,pw->nchw", a_h, np.asarray(grad, np.float64), a_w)


def pair(value):
    return tuple(value) if isinstance(value, tuple) else (value, value)


# ---------------------------------------------------------------------------
# forward and backward against torch (CPU)

@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("height,width,scale_factor", SCALE_CASES)
def test_scale_factor_matches_torch(rng, mode, dtype, height, width, scale_factor):
    x = sample(rng, (2, 3, height, width), dtype).requires_grad_()
    expected = torch_interpolate(x, mode, scale_factor=scale_factor)
    out = upsample.upsample_bilinear(x, scale_factor=scale_factor, coordinate_mode=mode)
    assert out.shape == expected.shape and out.dtype == dtype
    torch.testing.assert_close(out, expected, **tolerances(dtype))
    grad = sample(rng, tuple(out.shape), dtype)
    (ours,) = torch.autograd.grad(out, x, grad)
    (theirs,) = torch.autograd.grad(expected, x, grad)
    torch.testing.assert_close(ours, theirs, **tolerances(dtype))


@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("height,width,size", SIZE_CASES)
def test_size_matches_torch(rng, mode, dtype, height, width, size):
    x = sample(rng, (1, 2, height, width), dtype).requires_grad_()
    expected = torch_interpolate(x, mode, size=size)
    out = upsample.upsample_bilinear(x, size=size, align_corners=mode == "align_corners")
    torch.testing.assert_close(out, expected, **tolerances(dtype))
    grad = sample(rng, tuple(out.shape), dtype)
    (ours,) = torch.autograd.grad(out, x, grad)
    (theirs,) = torch.autograd.grad(expected, x, grad)
    torch.testing.assert_close(ours, theirs, **tolerances(dtype))


@pytest.mark.parametrize("mode", TORCH_MODES)
def test_recompute_scale_factor_matches_torch(rng, mode):
    """With recompute_scale_factor=True the ratio comes from the rounded sizes:
    a different result from the scale factor's own for 2.5 on 5 x 7."""
    x = sample(rng, (1, 2, 5, 7))
    kept = upsample.upsample_bilinear(x, scale_factor=2.3, coordinate_mode=mode)
    recomputed = upsample.upsample_bilinear(x, scale_factor=2.3, coordinate_mode=mode,
                                            recompute_scale_factor=True)
    torch.testing.assert_close(recomputed, torch_interpolate(x, mode, scale_factor=2.3,
                                                             recompute_scale_factor=True),
                               **tolerances(torch.float64))
    if mode == "half_pixel":
        assert (kept - recomputed).abs().max() > 1e-3


def test_float64_is_torch_to_the_last_bits(rng):
    """F.interpolate's own arithmetic, in float64: the source coordinates differ
    by an ulp at most (torch's CPU kernel may fuse (o + 0.5) r - 0.5 into one
    multiply-add; this one rounds the product), so outputs differ by an ulp
    of a coordinate (at most max(H, W)) times an input difference."""
    x = sample(rng, (2, 3, 17, 23))
    coordinate_ulp = np.finfo(np.float64).eps * 23
    for scale in (2, 1.37, 0.61, (3.3, 0.9)):
        for mode in TORCH_MODES:
            diff = upsample.upsample_bilinear(x, scale_factor=scale, coordinate_mode=mode) - \
                torch_interpolate(x, mode, scale_factor=scale)
            assert diff.abs().max() <= 2 * coordinate_ulp * 2 * x.abs().max()


# ---------------------------------------------------------------------------
# all modes against the float64 NumPy reference, and asymmetric against onnxruntime

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("height,width,scale_factor", SCALE_CASES)
def test_scale_factor_matches_numpy_reference(rng, mode, height, width, scale_factor):
    x = sample(rng, (2, 2, height, width)).requires_grad_()
    out = upsample.upsample_bilinear(x, scale_factor=scale_factor, coordinate_mode=mode)
    size = tuple(int(math.floor(n * s)) for n, s in zip((height, width), pair(scale_factor)))
    expected, a_h, a_w = reference_resize(x.detach(), size, mode, pair(scale_factor))
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-12, atol=1e-12)
    grad = sample(rng, tuple(out.shape))
    (ours,) = torch.autograd.grad(out, x, grad)
    np.testing.assert_allclose(ours.numpy(), reference_resize_backward(grad, a_h, a_w),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("height,width,size", SIZE_CASES)
def test_size_matches_numpy_reference(rng, mode, height, width, size):
    x = sample(rng, (1, 3, height, width)).requires_grad_()
    out = upsample.upsample_bilinear(x, size=size, coordinate_mode=mode)
    expected, a_h, a_w = reference_resize(x.detach(), size, mode)
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-12, atol=1e-12)
    grad = sample(rng, tuple(out.shape))
    (ours,) = torch.autograd.grad(out, x, grad)
    np.testing.assert_allclose(ours.numpy(), reference_resize_backward(grad, a_h, a_w),
                               rtol=1e-12, atol=1e-12)


def test_tensorflow1_formulas():
    """TF 1.x resize_bilinear on a 1-D ramp: align_corners=False is o * in / out
    (asymmetric), align_corners=True is o * (in - 1) / (out - 1); the input
    ramp 0..3 makes the output the source coordinate itself."""
    ramp = torch.arange(4, dtype=torch.float64).view(1, 1, 1, 4)
    out = upsample.upsample_bilinear(ramp, size=(1, 8), coordinate_mode="asymmetric")
    expected = [min(o * 4 / 8, 3.0) for o in range(8)]
    assert out.flatten().tolist() == expected
    out = upsample.upsample_bilinear(ramp, size=(1, 7), coordinate_mode="align_corners")
    assert out.flatten().tolist() == pytest.approx([o * 3 / 6 for o in range(7)], abs=1e-15)
    out = upsample.upsample_bilinear(ramp, size=(1, 8), coordinate_mode="half_pixel")
    assert out.flatten().tolist() == pytest.approx(
        [min(max(0.0, (o + 0.5) / 2 - 0.5), 3.0) for o in range(8)], abs=1e-15)


def onnxruntime_resize(x, scales=None, sizes=None, mode="asymmetric"):
    """ONNX Resize (linear, opset 13) of float32 NCHW x, run by onnxruntime."""
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape))]
    output = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", "c", "h", "w"])
    initializers = [helper.make_tensor("roi", TensorProto.FLOAT, [0], [])]
    if scales is not None:
        initializers.append(helper.make_tensor("scales", TensorProto.FLOAT, [4],
                                               [1.0, 1.0, *scales]))
        names = ["X", "roi", "scales"]
    else:
        initializers += [helper.make_tensor("scales", TensorProto.FLOAT, [0], []),
                         helper.make_tensor("sizes", TensorProto.INT64, [4],
                                            list(x.shape[:2]) + list(sizes))]
        names = ["X", "roi", "scales", "sizes"]
    node = helper.make_node("Resize", names, ["Y"], mode="linear",
                            coordinate_transformation_mode=mode)
    graph = helper.make_graph([node], "resize", inputs, [output], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    # IR version 8 (ONNX 1.10) is all opset 13 needs and every onnxruntime since
    # 1.10 reads it; onnx's newest default can be newer than the onnxruntime
    # installed beside it
    model.ir_version = 8
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})[0]


@needs_onnxruntime
@pytest.mark.parametrize("height,width,scale_factor", SCALE_CASES)
def test_asymmetric_matches_onnxruntime_scales(rng, height, width, scale_factor):
    scales = pair(scale_factor)
    if any(n * s < 1 for n, s in zip((height, width), scales)):
        pytest.skip("an output axis of size 0")
    x = rng.standard_normal((2, 3, height, width)).astype(np.float32)
    expected = onnxruntime_resize(x, scales=[float(s) for s in scales])
    out = upsample.upsample_bilinear(torch.from_numpy(x), scale_factor=scale_factor,
                                     coordinate_mode="asymmetric")
    assert tuple(out.shape) == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


@needs_onnxruntime
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("height,width,size", SIZE_CASES)
def test_matches_onnxruntime_sizes(rng, mode, height, width, size):
    """With sizes, ONNX's half_pixel and align_corners agree with torch's too
    (onnxruntime clamps half_pixel's negative coordinates to 0 likewise)."""
    x = rng.standard_normal((1, 2, height, width)).astype(np.float32)
    expected = onnxruntime_resize(x, sizes=size, mode=mode)
    out = upsample.upsample_bilinear(torch.from_numpy(x), size=size, coordinate_mode=mode)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# gradients, module, edge cases (CPU)

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,kwargs", [((1, 1, 4, 5), dict(scale_factor=(1.7, 2.3))),
                                          ((2, 1, 3, 3), dict(size=(7, 2))),
                                          ((1, 2, 1, 1), dict(scale_factor=3)),
                                          ((1, 1, 6, 7), dict(scale_factor=0.6))])
def test_gradcheck_cpu(rng, mode, shape, kwargs):
    x = sample(rng, shape).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda t: upsample.upsample_bilinear(t, coordinate_mode=mode, **kwargs), (x,))


def hessian_product(fn, x, rng):
    """hessian_vector_product of fn in x, random weights and direction."""
    out_shape = fn(x).shape
    weights = sample(rng, tuple(out_shape), x.dtype, x.device)
    direction = sample(rng, tuple(x.shape), x.dtype, x.device)
    (product,) = hessian_vector_product(fn, leaves([x]), weights, [direction])
    return product


@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,kwargs", [((2, 3, 4, 5), dict(scale_factor=(1.7, 2.3))),
                                          ((1, 2, 7, 6), dict(size=(3, 11))),
                                          ((1, 1, 1, 1), dict(scale_factor=3))])
def test_double_backward_matches_torch(rng, mode, dtype, shape, kwargs):
    """The Hessian of a loss through the resampling, along a direction: the
    term through grad_output, as F.interpolate's."""
    x = sample(rng, shape, dtype)
    ours = hessian_product(lambda t: upsample.upsample_bilinear(t, coordinate_mode=mode,
                                                                **kwargs), x,
                           np.random.default_rng(1))
    theirs = hessian_product(lambda t: torch_interpolate(t, mode, **kwargs), x.double(),
                             np.random.default_rng(1))
    assert ours.dtype == dtype
    torch.testing.assert_close(ours, theirs.to(dtype), **tolerances(dtype))


def test_gradient_of_a_gradient_is_not_zero(rng):
    """The issue's reproduction: a gradient penalty through the resampling
    (it was zeros, with torch only warning)."""
    x = sample(rng, (1, 2, 3, 4)).requires_grad_()
    (grad,) = torch.autograd.grad(upsample.upsample_bilinear(x, scale_factor=2).square().sum(),
                                  x, create_graph=True)
    grad.sum().backward()
    ref = x.detach().clone().requires_grad_()
    (ref_grad,) = torch.autograd.grad(torch_interpolate(ref, "half_pixel", scale_factor=2)
                                      .square().sum(), ref, create_graph=True)
    ref_grad.sum().backward()
    assert ref.grad.abs().min() > 0.1
    torch.testing.assert_close(x.grad, ref.grad, **tolerances(torch.float64))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,kwargs", [((1, 1, 4, 5), dict(scale_factor=(1.7, 2.3))),
                                          ((2, 1, 3, 3), dict(size=(7, 2))),
                                          ((1, 1, 6, 7), dict(scale_factor=0.6))])
def test_gradgradcheck_cpu(rng, mode, shape, kwargs):
    x = sample(rng, shape).requires_grad_()
    size = upsample.output_size(shape[2:], **kwargs)
    scales = (0, 0) if "size" in kwargs else pair(kwargs["scale_factor"])
    assert torch.autograd.gradgradcheck(
        lambda t: upsample.upsample_bilinear(t, coordinate_mode=mode, **kwargs), (x,))
    assert torch.autograd.gradgradcheck(
        lambda t: upsample.UpsampleBilinearFunction.apply(t, size, mode, scales), (x,))


def test_third_derivatives(rng):
    """The double backward is the differentiable forward op: every order is exact."""
    x = sample(rng, (1, 2, 3, 4)).requires_grad_()

    def gradient(t):
        out = upsample.upsample_bilinear(t, scale_factor=(1.5, 2))
        return torch.autograd.grad(out.square().sum(), t, create_graph=True)[0]

    assert torch.autograd.gradcheck(gradient, (x,))  # second order
    assert torch.autograd.gradgradcheck(gradient, (x,))  # third order


def test_raw_backward_equals_autograd(rng):
    x = sample(rng, (2, 3, 5, 6)).requires_grad_()
    out = upsample.upsample_bilinear(x, scale_factor=1.6, coordinate_mode="asymmetric")
    grad = sample(rng, tuple(out.shape))
    (expected,) = torch.autograd.grad(out, x, grad)
    got = upsample.upsample_bilinear_backward(grad, (5, 6), scale_factor=1.6,
                                              coordinate_mode="asymmetric")
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_backward_is_deterministic(rng):
    x = sample(rng, (4, 8, 31, 17), torch.float32).requires_grad_()
    out = upsample.upsample_bilinear(x, scale_factor=2.7)
    grad = sample(rng, tuple(out.shape), torch.float32)
    first = torch.autograd.grad(out, x, grad, retain_graph=True)[0]
    assert all(torch.equal(first, torch.autograd.grad(out, x, grad, retain_graph=True)[0])
               for _ in range(3))


def test_module(rng):
    layer = upsample.UpsampleBilinear(scale_factor=2, align_corners=True)
    assert "scale_factor=2, coordinate_mode='align_corners'" in repr(layer)
    x = sample(rng, (1, 3, 4, 5)).requires_grad_()
    torch.testing.assert_close(layer(x), torch_interpolate(x, "align_corners", scale_factor=2))
    layer(x).sum().backward()  # sum() hands backward an expanded gradient
    xr = x.detach().clone().requires_grad_()
    torch_interpolate(xr, "align_corners", scale_factor=2).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    assert "size=(3, 8)" in repr(upsample.UpsampleBilinear(size=(3, 8)))


@pytest.mark.parametrize("shape", [(0, 3, 4, 4), (2, 0, 4, 4), (0, 0, 1, 1)])
def test_empty_batch_or_channels(shape):
    """N or C of 0: an empty result of the right shape, and an empty gradient."""
    x = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    out = upsample.upsample_bilinear(x, scale_factor=2)
    assert out.shape == shape[:2] + (2 * shape[2], 2 * shape[3])
    out.sum().backward()
    assert x.grad.shape == shape


@pytest.mark.parametrize("dtype,scale", [(torch.float64, 1e-310), (torch.float64, 5e-324),
                                         (torch.float32, 1e-39), (torch.float32, 1e-300)])
@pytest.mark.parametrize("mode", ["half_pixel", "asymmetric"])
def test_backward_with_a_subnormal_scale(rng, dtype, scale, mode):
    """1 / scale overflows the type: every output reads the last input, but
    asymmetric's output 0 (position 0 * r), which reads the first. No NaN."""
    grad = sample(rng, (1, 2, 3, 5), dtype)
    grad_input = upsample.upsample_bilinear_backward(grad, (4, 6), scale_factor=scale,
                                                     coordinate_mode=mode)
    reads_first = 1 if mode == "asymmetric" else 0
    expected = torch.zeros(1, 2, 4, 6, dtype=torch.float64)
    g = grad.double()
    for rows, h in ((slice(0, reads_first), 0), (slice(reads_first, None), 3)):
        for cols, w in ((slice(0, reads_first), 0), (slice(reads_first, None), 5)):
            expected[:, :, h, w] += g[:, :, rows, cols].sum(dim=(2, 3))
    torch.testing.assert_close(grad_input, expected.to(dtype), **tolerances(dtype))


def test_empty_batch_to_a_huge_size_does_no_work():
    """N = 0: nothing to write, so no tables for 2^27 outputs per axis (4 GiB)."""
    x = torch.zeros(0, 3, 4, 4)
    start = time.perf_counter()
    out = upsample.upsample_bilinear(x, size=(2**27, 2**27))
    grad = upsample.upsample_bilinear_backward(torch.zeros(0, 3, 4, 4), (2**27, 2**27),
                                               scale_factor=2**-25)
    assert time.perf_counter() - start < 0.5
    assert out.shape == (0, 3, 2**27, 2**27) and grad.shape == (0, 3, 2**27, 2**27)


@pytest.mark.parametrize("call,error,message", [
    (lambda: upsample.upsample_bilinear(torch.zeros(1, 1, 4, 4), scale_factor=1e300),
     ValueError, r"^upsample_bilinear: scale_factor 1e\+300 makes the output 4e\+300 x "
                 r"4e\+300; its height and width must be below 2\^31"),
    (lambda: upsample.upsample_bilinear(torch.zeros(1, 1, 4, 4), scale_factor=10**400),
     ValueError, "^upsample_bilinear: scale_factor must be positive and finite"),
    (lambda: upsample.upsample_bilinear(torch.zeros(1, 1, 4, 4), size=(2**31, 2)),
     ValueError, r"^upsample_bilinear: size must be below 2\^31, got \(2147483648, 2\)"),
    (lambda: upsample.upsample_bilinear(torch.zeros(1, 1, 4, 4), size=(2**30, 2**30)),
     MemoryError, r"^upsample_bilinear: cannot allocate the output \(1, 1, 1073741824, "
                  r"1073741824\) on cpu"),
    (lambda: upsample.upsample_bilinear(torch.zeros(1, 1, 1, 1).expand(2**20, 2**20, 1, 1),
                                        scale_factor=2),
     ValueError, "^upsample_bilinear: input must be contiguous"),
    (lambda: upsample.upsample_bilinear_backward(torch.zeros(1, 1, 1, 1).expand(
        2**20, 2**20, 1, 1), (2, 2)), ValueError,
     "^upsample_bilinear_backward: grad_output must be contiguous"),
    (lambda: upsample.upsample_bilinear_backward(torch.zeros(1, 1, 4, 4), (-1, 2)),
     ValueError, r"^upsample_bilinear_backward: input_size must be in \[0, 2\^31\), got "
                 r"\(-1, 2\)"),
    (lambda: upsample.upsample_bilinear(torch.zeros(1, 1, 4, 4), scale_factor=2,
                                        recompute_scale_factor="yes"),
     TypeError, "^upsample_bilinear: recompute_scale_factor must be True, False or None, "
                "got 'yes'"),
    (lambda: upsample.upsample_bilinear(torch.zeros(1, 1, 4, 4), scale_factor=2,
                                        coordinate_mode=["half_pixel"]),
     ValueError, "^upsample_bilinear: coordinate_mode must be"),
    (lambda: upsample.upsample_bilinear_backward(torch.zeros(1, 1, 4, 4), (2, 2),
                                                 scale_factor=float("inf")),
     ValueError, "^upsample_bilinear_backward: scale_factor must be positive and finite"),
    (lambda: upsample.output_size(None, scale_factor=2), TypeError,
     "^upsample_bilinear: input_size must be an int or a pair of ints, got None"),
    (lambda: upsample.UpsampleBilinearFunction.apply(torch.zeros(1, 1, 2, 2), (4, 4), "bilinear",
                                                     (0.0, 0.0)),
     ValueError, "^upsample_bilinear: coordinate_mode must be"),
    (lambda: upsample.UpsampleBilinearFunction.apply(torch.zeros(1, 1, 2, 2), (4, 4),
                                                     "half_pixel", None),
     TypeError, "^upsample_bilinear: scales must be a number or a pair of numbers, got None"),
    (lambda: upsample.UpsampleBilinearFunction.apply(torch.zeros(1, 1, 2, 2), (4, "4"),
                                                     "half_pixel", (0, 0)),
     TypeError, "^upsample_bilinear: output_size must be an int or a pair of ints"),
    (lambda: upsample.UpsampleBilinear(size=2**31), ValueError,
     r"^UpsampleBilinear: size must be below 2\^31"),
    (lambda: upsample.UpsampleBilinear(scale_factor=2, recompute_scale_factor=1), TypeError,
     "^UpsampleBilinear: recompute_scale_factor must be True, False or None"),
])
def test_option_and_size_errors_name_the_function(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_mode_names():
    x = torch.arange(6.0).view(1, 1, 2, 3)
    default = upsample.upsample_bilinear(x, scale_factor=2)
    assert torch.equal(default, upsample.upsample_bilinear(x, scale_factor=2, align_corners=False))
    assert torch.equal(default, upsample.upsample_bilinear(x, scale_factor=2,
                                                           coordinate_mode="half_pixel"))
    corners = upsample.upsample_bilinear(x, scale_factor=2, align_corners=True)
    assert torch.equal(corners, upsample.upsample_bilinear(
        x, scale_factor=2, coordinate_mode="align_corners", align_corners=True))
    assert not torch.equal(default, corners)


# ---------------------------------------------------------------------------
# the custom ops ext::upsample_bilinear and its backward, and torch.compile

def test_public_entry_points_go_through_the_ops(rng):
    x = sample(rng, (1, 2, 3, 4)).requires_grad_()
    for call in (lambda t: upsample.upsample_bilinear(t, scale_factor=2),
                 upsample.UpsampleBilinear(size=(5, 7), align_corners=True)):
        _, names = ops_called(lambda t: call(t).sum().backward(), x)
        assert "ext.upsample_bilinear.default" in names
        assert "ext.upsample_bilinear_backward.default" in names


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,size,scales", [((2, 3, 4, 5), (7, 9), (0.0, 0.0)),
                                               ((1, 2, 5, 3), (12, 4), (2.5, 1.5)),
                                               ((1, 1, 1, 1), (3, 1), (3.0, 1.0)),
                                               ((0, 2, 3, 3), (6, 6), (0.0, 0.0))])
def test_opcheck(rng, mode, shape, size, scales):
    x = sample(rng, shape)
    opcheck(torch.ops.ext.upsample_bilinear.default,
            (x.requires_grad_(), size, mode, *scales))
    grad = sample(rng, shape[:2] + size)
    opcheck(torch.ops.ext.upsample_bilinear_backward.default, (grad, shape[2:], mode, *scales))


class UpsampleModel(torch.nn.Module):
    def __init__(self, **options):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 1, 1, dtype=torch.float64))
        self.up = upsample.UpsampleBilinear(**options)

    def forward(self, x):
        return self.up(x * self.weight).square()


@pytest.mark.parametrize("options", [dict(scale_factor=2), dict(scale_factor=(1.7, 0.6)),
                                     dict(size=(5, 11), coordinate_mode="asymmetric"),
                                     dict(size=(9, 4), align_corners=True)])
def test_compile_fullgraph(rng, options):
    torch.manual_seed(0)
    check_compiled(UpsampleModel(**options), [sample(rng, (2, 3, 4, 6))])


def test_compile_double_backward(rng):
    torch.manual_seed(0)
    check_compiled_double_backward(UpsampleModel(scale_factor=(1.7, 0.6)),
                                   [sample(rng, (2, 3, 4, 6))])


@pytest.mark.parametrize("mode", MODES)
def test_opcheck_backward_is_differentiable(rng, mode):
    """opcheck of ext::upsample_bilinear_backward with a grad_output that
    requires grad: its autograd formula (the double backward) is registered."""
    grad = sample(rng, (1, 2, 12, 4)).requires_grad_()
    opcheck(torch.ops.ext.upsample_bilinear_backward.default, (grad, (5, 3), mode, 2.5, 1.5))


# ---------------------------------------------------------------------------
# errors

@pytest.mark.parametrize("x,kwargs,error,message", [
    (torch.zeros(1, 1, 4, 4, dtype=torch.int64), dict(scale_factor=2), TypeError,
     "input must be float32 or float64, got int64"),
    (torch.zeros(1, 1, 4, 4, dtype=torch.float16), dict(scale_factor=2), TypeError,
     "input must be float32 or float64, got float16"),
    (torch.zeros(1, 1, 4, 8)[..., ::2], dict(scale_factor=2), ValueError,
     r"input must be contiguous \(call .contiguous\(\) on it\)"),
    (torch.zeros(1, 4, 4, 3).permute(0, 3, 1, 2), dict(scale_factor=2), None, None),
    (torch.zeros(2, 4, 4), dict(scale_factor=2), ValueError, "input must be 4-D, got 3-D"),
    (torch.zeros(1, 1, 0, 4), dict(size=(2, 2)), ValueError,
     r"input is \(1, 1, 0, 4\); its height and width must be at least 1"),
    (torch.zeros(1, 1, 4, 4), dict(scale_factor=0.1), ValueError,
     r"output is \(1, 1, 0, 0\); its height and width must be at least 1"),
    (torch.zeros(1, 1, 4, 4), dict(), ValueError, "give exactly one of size and scale_factor"),
    (torch.zeros(1, 1, 4, 4), dict(size=3, scale_factor=2), ValueError,
     "give exactly one of size and scale_factor"),
    (torch.zeros(1, 1, 4, 4), dict(size=(0, 3)), ValueError,
     r"size must be positive, got \(0, 3\)"),
    (torch.zeros(1, 1, 4, 4), dict(size=(2.5, 3)), TypeError,
     r"size must be an int or a pair of ints, got \(2.5, 3\)"),
    (torch.zeros(1, 1, 4, 4), dict(size=(2, 3, 4)), TypeError, "size must be an int or a pair"),
    (torch.zeros(1, 1, 4, 4), dict(scale_factor=-2), ValueError,
     "scale_factor must be positive and finite, got -2"),
    (torch.zeros(1, 1, 4, 4), dict(scale_factor=float("nan")), ValueError,
     "scale_factor must be positive and finite"),
    (torch.zeros(1, 1, 4, 4), dict(scale_factor="2"), TypeError,
     "scale_factor must be a number or a pair of numbers, got '2'"),
    (torch.zeros(1, 1, 4, 4), dict(size=8, recompute_scale_factor=True), ValueError,
     "recompute_scale_factor is not meaningful with an explicit size"),
    (torch.zeros(1, 1, 4, 4), dict(scale_factor=2, coordinate_mode="tf_half_pixel"), ValueError,
     "coordinate_mode must be 'half_pixel', 'align_corners' or 'asymmetric', got "
     "'tf_half_pixel'"),
    (torch.zeros(1, 1, 4, 4), dict(scale_factor=2, coordinate_mode="asymmetric",
                                   align_corners=True), ValueError,
     "align_corners=True contradicts coordinate_mode='asymmetric'"),
    (torch.zeros(1, 1, 4, 4), dict(scale_factor=2, align_corners=1), TypeError,
     "align_corners must be True, False or None, got 1"),
    (np.zeros((1, 1, 4, 4)), dict(scale_factor=2), TypeError,
     "input must be a torch.Tensor, got ndarray"),
])
def test_argument_errors(x, kwargs, error, message):
    if error is None:  # a channels-last view is not contiguous in NCHW order
        error, message = ValueError, "input must be contiguous"
    with pytest.raises(error, match="upsample_bilinear: " + message):
        upsample.upsample_bilinear(x, **kwargs)


def raw_call(entry, given, written, mode=0, scales=(0.0, 0.0), names=("input", "output")):
    fn = "upsample_bilinear"
    status = entry(_ffi.describe(upsample.ffi, fn, names[0], given),
                   _ffi.describe(upsample.ffi, fn, names[1], written), mode, *scales)
    _ffi.check(upsample.ffi, upsample.lib, status)


@pytest.mark.parametrize("written,mode,scales,error,message", [
    (torch.zeros(2, 3, 8, 8), 0, (0.0, 0.0), ValueError,
     r"output is \(2, 3, 8, 8\) but input is \(1, 3, 4, 4\); N and C must match"),
    (torch.zeros(1, 3, 8, 8, dtype=torch.float64), 0, (0.0, 0.0), TypeError,
     "output must be float32, got float64"),
    (torch.zeros(1, 3, 8), 0, (0.0, 0.0), ValueError, "output must be 4-D, got 3-D"),
    (torch.zeros(1, 3, 8, 8), 7, (0.0, 0.0), ValueError,
     r"mode must be UPSAMPLE_HALF_PIXEL \(0\), UPSAMPLE_ALIGN_CORNERS \(1\) or "
     r"UPSAMPLE_ASYMMETRIC \(2\), got 7"),
    (torch.zeros(1, 3, 8, 8), 0, (-1.0, 0.0), ValueError,
     "scale_h must be a positive number, or 0 for none, got -1"),
    (torch.zeros(1, 3, 8, 8), 0, (2.0, float("inf")), ValueError,
     "scale_w must be a positive number, or 0 for none, got inf"),
])
def test_shim_checks_the_output_and_parameters(written, mode, scales, error, message):
    with pytest.raises(error, match="upsample_bilinear: " + message):
        raw_call(upsample.lib.upsample_bilinear_forward_cpu, torch.zeros(1, 3, 4, 4), written,
                 mode, scales)


def test_backward_errors():
    with pytest.raises(TypeError, match="upsample_bilinear_backward: grad_output must be "
                                        "float32 or float64, got int32"):
        upsample.upsample_bilinear_backward(torch.zeros(1, 1, 8, 8, dtype=torch.int32), (4, 4),
                                            scale_factor=2)
    with pytest.raises(ValueError, match="upsample_bilinear_backward: grad_output must be "
                                         "contiguous"):
        upsample.upsample_bilinear_backward(torch.zeros(1, 1, 8, 16)[..., ::2], (4, 4),
                                            scale_factor=2)
    with pytest.raises(ValueError, match=r"upsample_bilinear_backward: grad_input is \(1, 1, "
                                         r"0, 4\); its height and width must be at least 1"):
        upsample.upsample_bilinear_backward(torch.zeros(1, 1, 8, 8), (0, 4), scale_factor=2)
    with pytest.raises(TypeError, match="upsample_bilinear_backward: input_size must be an int "
                                        "or a pair of ints"):
        upsample.upsample_bilinear_backward(torch.zeros(1, 1, 8, 8), (4.0, 4), scale_factor=2)


def test_cuda_entry_point_refuses_cpu_tensors():
    expected = ("input is on cpu; upsample_bilinear needs CUDA tensors"
                if upsample.built_with_cuda else "_ext.upsample was built without CUDA")
    with pytest.raises(RuntimeError, match="upsample_bilinear: " + expected):
        raw_call(lambda *args: upsample.lib.upsample_bilinear_forward_cuda(*args,
                                                                          upsample.ffi.NULL),
                 torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 4, 4))


def test_cpu_only_build_says_so(tmp_path):
    build_cpu_only(tmp_path, "upsample")
    probe = ("import torch\nfrom _ext import upsample as u, _ffi\n"
             "assert not u.built_with_cuda\n"
             "x, y = torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 4, 4)\n"
             "d = [_ffi.describe(u.ffi, 'f', n, t) for n, t in (('x', x), ('y', y))]\n"
             "try:\n    _ffi.check(u.ffi, u.lib, u.lib.upsample_bilinear_backward_cuda("
             "d[1], d[0], 0, 0.0, 0.0, u.ffi.NULL))\nexcept RuntimeError as e:\n    print(e)\n"
             "print(u.upsample_bilinear(torch.ones(1, 1, 1, 1), size=2).flatten().tolist())\n")
    out = run_python(tmp_path, probe)
    assert "upsample_bilinear_backward: _ext.upsample was built without CUDA" in out
    assert "[1.0, 1.0, 1.0, 1.0]" in out


# ---------------------------------------------------------------------------
# CUDA (GPU machine)

GPU_CASES = [((2, 3, 1, 1), dict(scale_factor=2)), ((1, 2, 5, 7), dict(scale_factor=2.5)),
             ((2, 2, 7, 3), dict(scale_factor=(1.7, 0.6))), ((1, 1, 9, 6), dict(size=(4, 13))),
             ((3, 5, 32, 48), dict(scale_factor=2)), ((1, 3, 33, 17), dict(scale_factor=3)),
             ((2, 4, 64, 64), dict(scale_factor=0.5)), ((1, 1, 5, 5), dict(scale_factor=1.1)),
             ((1, 2, 6, 6), dict(size=(6, 6))), ((1, 1, 3, 2), dict(scale_factor=21)),
             ((4, 16, 31, 29), dict(size=(64, 62))), ((1, 1, 300, 2), dict(size=(2, 300)))]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,kwargs", GPU_CASES)
def test_cuda_equals_cpu(rng, mode, dtype, shape, kwargs):
    """Every kernel path: output rows narrower and wider than a block's
    columns (and not multiples of them), register-held and table-read runs of
    readers (scale 21), 1x1 inputs, downsampling, unchanged axes."""
    x = sample(rng, shape, dtype)
    out_cpu = upsample.upsample_bilinear(x, coordinate_mode=mode, **kwargs)
    out_gpu = upsample.upsample_bilinear(x.cuda(), coordinate_mode=mode, **kwargs)
    torch.testing.assert_close(out_gpu.cpu(), out_cpu, **tolerances(dtype))
    grad = sample(rng, tuple(out_cpu.shape), dtype)
    scale = kwargs.get("scale_factor")
    grad_cpu = upsample.upsample_bilinear_backward(grad, shape[2:], scale, coordinate_mode=mode)
    grad_gpu = upsample.upsample_bilinear_backward(grad.cuda(), shape[2:], scale,
                                                   coordinate_mode=mode)
    torch.testing.assert_close(grad_gpu.cpu(), grad_cpu, **tolerances(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,kwargs", [((2, 3, 16, 16), dict(scale_factor=2)),
                                          ((1, 4, 37, 23), dict(scale_factor=1.7)),
                                          ((1, 2, 64, 48), dict(size=(20, 33)))])
def test_cuda_matches_torch_cuda(rng, mode, dtype, shape, kwargs):
    x = sample(rng, shape, dtype, "cuda").requires_grad_()
    expected = torch_interpolate(x, mode, **kwargs)
    out = upsample.upsample_bilinear(x, coordinate_mode=mode, **kwargs)
    torch.testing.assert_close(out, expected, **tolerances(dtype))
    grad = torch.randn_like(out)
    (ours,) = torch.autograd.grad(out, x, grad)
    (theirs,) = torch.autograd.grad(expected, x, grad)
    # torch's backward adds with atomics in any order: float32 sums differ slightly
    torch.testing.assert_close(ours, theirs, **tolerances(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_gradcheck_cuda(rng, mode):
    x = sample(rng, (1, 2, 5, 4), device="cuda").requires_grad_()
    assert torch.autograd.gradcheck(
        lambda t: upsample.upsample_bilinear(t, scale_factor=(1.6, 2.2), coordinate_mode=mode),
        (x,))


@pytest.mark.gpu
def test_cuda_backward_is_deterministic(rng):
    grad = sample(rng, (8, 16, 128, 128), torch.float32, "cuda")
    first = upsample.upsample_bilinear_backward(grad, (64, 64), 2)
    for _ in range(3):
        assert torch.equal(first, upsample.upsample_bilinear_backward(grad, (64, 64), 2))


@pytest.mark.gpu
def test_cuda_runs_on_the_current_stream(rng):
    x = sample(rng, (4, 8, 64, 64), torch.float32)
    host = x.pin_memory()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        device_x = torch.zeros(4, 8, 64, 64, device="cuda")
        torch.cuda._sleep(200_000_000)
        device_x.copy_(host, non_blocking=True)
        out = upsample.upsample_bilinear(device_x, scale_factor=2)
        grad = upsample.upsample_bilinear_backward(out, (64, 64), 2)
    side.synchronize()
    expected = upsample.upsample_bilinear(x, scale_factor=2)
    torch.testing.assert_close(out.cpu(), expected, **tolerances(torch.float32))
    torch.testing.assert_close(grad.cpu(), upsample.upsample_bilinear_backward(expected, (64, 64),
                                                                               2),
                               **tolerances(torch.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_cuda_opcheck(rng, mode):
    x = sample(rng, (1, 2, 5, 3), device="cuda")
    opcheck(torch.ops.ext.upsample_bilinear.default,
            (x.requires_grad_(), (12, 4), mode, 2.5, 1.5))
    opcheck(torch.ops.ext.upsample_bilinear_backward.default,
            (sample(rng, (1, 2, 12, 4), device="cuda"), (5, 3), mode, 2.5, 1.5))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_double_backward_matches_torch(rng, mode, dtype):
    x = sample(rng, (2, 3, 17, 9), dtype, "cuda")
    kwargs = dict(scale_factor=(1.7, 2.3))
    ours = hessian_product(lambda t: upsample.upsample_bilinear(t, coordinate_mode=mode,
                                                                **kwargs), x,
                           np.random.default_rng(1))
    theirs = hessian_product(lambda t: torch_interpolate(t, mode, **kwargs), x.double().cpu(),
                             np.random.default_rng(1))
    assert ours.is_cuda
    torch.testing.assert_close(ours.cpu(), theirs.to(dtype), **tolerances(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_gradgradcheck_cuda(rng, mode):
    x = sample(rng, (1, 2, 5, 4), device="cuda").requires_grad_()
    assert torch.autograd.gradgradcheck(
        lambda t: upsample.upsample_bilinear(t, scale_factor=(1.6, 2.2), coordinate_mode=mode),
        (x,))


@pytest.mark.gpu
def test_cuda_compile_double_backward(rng):
    torch.manual_seed(0)
    check_compiled_double_backward(UpsampleModel(scale_factor=(1.7, 2)).cuda(),
                                   [sample(rng, (2, 3, 4, 6), device="cuda")])


@pytest.mark.gpu
def test_cuda_compile_fullgraph(rng):
    torch.manual_seed(0)
    check_compiled(UpsampleModel(scale_factor=(1.7, 2)).cuda(),
                   [sample(rng, (2, 3, 4, 6), device="cuda")])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,scale", [(torch.float64, 1e-310), (torch.float32, 1e-39)])
def test_cuda_backward_with_a_subnormal_scale(rng, dtype, scale):
    grad = sample(rng, (1, 2, 3, 5), dtype)
    for mode in ("half_pixel", "asymmetric"):
        cpu = upsample.upsample_bilinear_backward(grad, (4, 6), scale, coordinate_mode=mode)
        gpu = upsample.upsample_bilinear_backward(grad.cuda(), (4, 6), scale,
                                                  coordinate_mode=mode)
        assert torch.isfinite(gpu).all()
        torch.testing.assert_close(gpu.cpu(), cpu, **tolerances(dtype))


@pytest.mark.gpu
def test_cuda_errors():
    with pytest.raises(RuntimeError, match="upsample_bilinear: output is on cpu; "
                                           "upsample_bilinear needs CUDA tensors"):
        raw_call(lambda *a: upsample.lib.upsample_bilinear_forward_cuda(*a, upsample.ffi.NULL),
                 torch.zeros(1, 1, 2, 2, device="cuda"), torch.zeros(1, 1, 4, 4))
    with pytest.raises(RuntimeError, match="upsample_bilinear: input is on cuda:0; "
                                           "upsample_bilinear needs CPU tensors"):
        raw_call(upsample.lib.upsample_bilinear_forward_cpu,
                 torch.zeros(1, 1, 2, 2, device="cuda"), torch.zeros(1, 1, 4, 4))
    with pytest.raises(TypeError, match="upsample_bilinear: input must be float32 or float64"):
        upsample.upsample_bilinear(torch.zeros(1, 1, 2, 2, dtype=torch.int8, device="cuda"),
                                   scale_factor=2)
    x = torch.zeros(1, 1, 2, 2, device="cuda")
    descs = [_ffi.describe(upsample.ffi, "f", n, t)
             for n, t in (("input", x), ("output", torch.zeros(1, 1, 4, 4, device="cuda")))]
    for desc in descs:
        desc.device_index = 99
    with pytest.raises(RuntimeError, match="upsample_bilinear: CUDA error: invalid device "
                                           "ordinal"):
        _ffi.check(upsample.ffi, upsample.lib, upsample.lib.upsample_bilinear_forward_cuda(
            *descs, 0, 0.0, 0.0, upsample.ffi.NULL))
    assert upsample.upsample_bilinear(x, scale_factor=2).shape == (1, 1, 4, 4)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(0, 3, 4, 4), (2, 0, 4, 4)])
def test_cuda_empty(shape):
    x = torch.zeros(shape, device="cuda", requires_grad=True)
    out = upsample.upsample_bilinear(x, scale_factor=2)
    out.sum().backward()
    assert out.shape == shape[:2] + (8, 8) and x.grad.shape == shape
