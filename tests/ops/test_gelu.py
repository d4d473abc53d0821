"""_ext.gelu against torch.nn.functional.gelu ("none", "tanh") and the seed's
x * sigmoid(1.702 x) ("sigmoid"), forward, backward and double backward;
gradcheck and gradgradcheck; every error of the shim; CUDA against the CPU
on a GPU machine."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from _ext import _ffi, gelu
from cpu_only_build import build_cpu_only, run_python
from torch_op_checks import (check_compiled, check_compiled_double_backward,
                             hessian_vector_product, leaves, opcheck, ops_called)

MODES = ["none", "tanh", "sigmoid"]
SHAPES = [(0,), (1,), (7,), (4, 5), (3, 0, 2), (2, 3, 5, 7), (1000003,)]


def reference_gelu(x, approximate):
    """What each mode must equal, through torch's own autograd."""
    if approximate == "sigmoid":  # the seed's formula
        return x * torch.sigmoid(1.702 * x)
    return F.gelu(x, approximate=approximate)


def sample(rng, shape, dtype=torch.float64, device="cpu", spread=True):
    """Normal values; with `spread`, at three scales so both tails are exercised."""
    x = rng.standard_normal(shape)
    if spread:
        x = x * rng.choice([0.1, 1.0, 4.0], size=shape)
    return torch.from_numpy(x).to(dtype=dtype, device=device)


def tolerances(dtype):
    """float64: a few ulps. float32: float32 accuracy near the steep parts, where
    erf, tanh and exp of two libraries (or of the GPU) differ by an ulp or two
    and 1 + tanh(..) cancels."""
    return dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)


def reference_in_float64(fn, *tensors):
    """fn evaluated in float64 on the (possibly float32) inputs, cast back."""
    return fn(*(t.double() for t in tensors)).to(tensors[0].dtype)


# ---------------------------------------------------------------------------
# forward and backward against the references (CPU)

@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_reference(rng, approximate, dtype, shape):
    x = sample(rng, shape, dtype)
    y = gelu.gelu(x, approximate)
    assert y.shape == x.shape and y.dtype == dtype
    expected = reference_in_float64(lambda t: reference_gelu(t, approximate), x)
    torch.testing.assert_close(y, expected, **tolerances(dtype))
    torch.testing.assert_close(y, reference_gelu(x, approximate), **tolerances(dtype))


@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_backward_matches_reference(rng, approximate, dtype, shape):
    x = sample(rng, shape, dtype).requires_grad_()
    grad = sample(rng, shape, dtype, spread=False)
    (ours,) = torch.autograd.grad(gelu.gelu(x, approximate), x, grad)
    x64 = x.detach().double().requires_grad_()
    (theirs,) = torch.autograd.grad(reference_gelu(x64, approximate), x64, grad.double())
    torch.testing.assert_close(ours, theirs.to(dtype), **tolerances(dtype))


@pytest.mark.parametrize("approximate", MODES)
def test_special_values(approximate):
    """Zeros, large magnitudes, infinities and NaN behave as the reference."""
    x = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 1e4, -1e4, float("inf"),
                      float("-inf"), float("nan")], dtype=torch.float64)
    torch.testing.assert_close(gelu.gelu(x, approximate), reference_gelu(x, approximate),
                               equal_nan=True, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("approximate", MODES)
def test_gradcheck_cpu(rng, approximate):
    x = sample(rng, (3, 17)).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: gelu.gelu(t, approximate), (x,))


# ---------------------------------------------------------------------------
# second derivatives against the references (CPU)

def reference_double_backward(grad_grad_input, grad_output, x, approximate):
    """(d/d grad_output, d/d x) of <grad_output * GELU'(x), grad_grad_input>,
    by torch's autograd of the reference in float64."""
    x64 = x.double().requires_grad_()
    grad64 = grad_output.double().requires_grad_()
    (slope_term,) = torch.autograd.grad(reference_gelu(x64, approximate), x64, grad64,
                                        create_graph=True)
    return torch.autograd.grad(slope_term, (grad64, x64), grad_grad_input.double())


def hessian_product(fn, x, rng):
    """hessian_vector_product of fn in x, random weights and direction."""
    weights = sample(rng, x.shape, x.dtype, x.device, spread=False)
    direction = sample(rng, x.shape, x.dtype, x.device, spread=False)
    (product,) = hessian_vector_product(fn, leaves([x]), weights, [direction])
    return product


def test_gradient_of_the_gradient_is_the_second_derivative(rng):
    """The issue's reproduction: x.grad after g.sum().backward(), g the
    gradient of gelu(x).sum() (it was None, with torch only warning), is
    GELU''(x) = phi(x) (2 - x^2)."""
    x = sample(rng, (50,)).requires_grad_()
    (g,) = torch.autograd.grad(gelu.gelu(x).sum(), x, create_graph=True)
    g.sum().backward()
    t = x.detach()
    phi = torch.exp(-t * t / 2) / math.sqrt(2 * math.pi)
    torch.testing.assert_close(x.grad, phi * (2 - t * t), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (4, 5), (2, 3, 5, 7), (40009,)])
def test_double_backward_matches_reference(rng, approximate, dtype, shape):
    """The Hessian of a loss through gelu, along a direction: the curvature
    term and the term through grad_output, as the reference's."""
    x = sample(rng, shape, dtype)
    ours = hessian_product(lambda t: gelu.gelu(t, approximate), x, np.random.default_rng(1))
    theirs = hessian_product(lambda t: reference_gelu(t, approximate), x.double(),
                             np.random.default_rng(1))
    assert ours.dtype == dtype
    torch.testing.assert_close(ours, theirs.to(dtype), **tolerances(dtype))


@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_double_backward_entry_point(rng, approximate, dtype):
    """Both gradients, or either alone, as the reference's."""
    x, grad, grad_grad = (sample(rng, (6, 7), dtype, spread=spread)
                          for spread in (True, False, False))
    expected = [g.to(dtype) for g in reference_double_backward(grad_grad, grad, x, approximate)]
    both = gelu.gelu_double_backward(grad_grad, grad, x, approximate)
    alone = (gelu.gelu_double_backward(grad_grad, grad, x, approximate, input_grad=False)[0],
             gelu.gelu_double_backward(grad_grad, grad, x, approximate,
                                       grad_output_grad=False)[1])
    for ours in (both, alone):
        for got, want in zip(ours, expected):
            torch.testing.assert_close(got, want, **tolerances(dtype))
    assert gelu.gelu_double_backward(grad_grad, grad, x, approximate, False, False) == (None,
                                                                                      None)


@pytest.mark.parametrize("approximate", MODES)
def test_gradgradcheck_cpu(rng, approximate):
    x = sample(rng, (3, 17)).requires_grad_()
    assert torch.autograd.gradgradcheck(lambda t: gelu.gelu(t, approximate), (x,))
    assert torch.autograd.gradgradcheck(lambda t: gelu.GeluFunction.apply(t, approximate), (x,))


@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("dtype,extremes", [
    (torch.float32, [3e38, -3e38, 3.4028235e38, -3.4028235e38, 2e19, -2e19, 1e4, -1e4]),
    (torch.float64, [1e308, -1e308, 1.7976931348623157e308, 1e160, -1e160, 1e4, -1e4])])
def test_curvature_at_extreme_magnitudes(approximate, dtype, extremes):
    """Where x^2 or 1.702 x overflows, and at +-inf, the curvature is its
    limit 0 (not inf * 0 = NaN), as torch's float64 autograd of the formula
    says at 1e10, past saturation but before overflow."""
    x = torch.tensor(extremes + [float("inf"), float("-inf")], dtype=dtype)
    ones = torch.ones_like(x)
    grad_grad_output, grad_input = gelu.gelu_double_backward(ones, ones, x, approximate)
    assert torch.equal(grad_input, torch.zeros_like(x)), grad_input
    assert torch.equal(grad_grad_output, (x > 0).to(dtype))
    finite = x[:-2].double().clamp(-1e10, 1e10)
    reference = reference_double_backward(finite.new_ones(finite.shape),
                                          finite.new_ones(finite.shape), finite, approximate)[1]
    assert torch.equal(reference, torch.zeros_like(finite))


def test_third_derivative_is_refused(rng):
    """Not implemented: a clear error, never zeros or a silent None."""
    x = sample(rng, (5,)).requires_grad_()
    (g,) = torch.autograd.grad(gelu.gelu(x).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x, create_graph=True)
    with pytest.raises(NotImplementedError, match="gelu: derivatives of third and higher order "
                                                  "are not implemented"):
        h.sum().backward()


def test_raw_entry_points_match_autograd(rng):
    x, grad = sample(rng, (5, 6)), sample(rng, (5, 6))
    torch.testing.assert_close(gelu.gelu_forward(x, "tanh"), F.gelu(x, approximate="tanh"),
                               rtol=1e-12, atol=1e-12)
    xr = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(F.gelu(xr), xr, grad)
    torch.testing.assert_close(gelu.gelu_backward(grad, x), expected, rtol=1e-12, atol=1e-12)


def test_module(rng):
    layer = gelu.GELU(approximate="tanh")
    assert "approximate='tanh'" in repr(layer)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6).double(), layer)
    x = sample(rng, (3, 4))
    torch.testing.assert_close(model(x), F.gelu(model[0](x), approximate="tanh"))
    model(x).sum().backward()
    assert model[0].weight.grad is not None and torch.isfinite(model[0].weight.grad).all()


def test_non_contiguous_grad_output_is_made_contiguous(rng):
    """Autograd may hand backward an expanded gradient (e.g. from sum())."""
    x = sample(rng, (4, 5)).requires_grad_()
    gelu.gelu(x).sum().backward()
    xr = x.detach().clone().requires_grad_()
    F.gelu(xr).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("dtype,extremes", [
    (torch.float32, [3e38, -3e38, 1.7e38, -1.7e38, 3.4028235e38, -3.4028235e38, 2e19, -2e19]),
    (torch.float64, [1e308, -1e308, 1.7976931348623157e308, -1.7976931348623157e308, 1e160,
                     -1e160])])
def test_backward_at_extreme_magnitudes(approximate, dtype, extremes):
    """Where 1.702 x or x^2 overflows, the slope is its limit: 1 for x > 0
    and 0 for x < 0 (not inf * 0 = NaN), as torch's float64 autograd of the
    same formula says there; and so at +-inf."""
    x = torch.tensor(extremes + [float("inf"), float("-inf")], dtype=dtype, requires_grad=True)
    (slope,) = torch.autograd.grad(gelu.gelu(x, approximate).sum(), x)
    expected = (x.detach() > 0).to(dtype)
    assert torch.equal(slope, expected), slope
    finite = x.detach()[:-2].double().clamp(-1e10, 1e10).requires_grad_()
    (reference,) = torch.autograd.grad(reference_gelu(finite, approximate).sum(), finite)
    assert torch.equal(reference, expected[:-2].double())
    backward = gelu.gelu_backward(torch.full_like(x, 0.5), x.detach(), approximate)
    assert torch.equal(backward, 0.5 * expected)


# ---------------------------------------------------------------------------
# the custom ops ext::gelu and ext::gelu_backward, and torch.compile

def test_public_entry_points_go_through_the_ops(rng):
    x = sample(rng, (3, 4)).requires_grad_()
    for call in (lambda t: gelu.gelu(t, "tanh"), gelu.GELU("tanh")):
        _, names = ops_called(lambda t: call(t).sum().backward(), x)
        assert "ext.gelu.default" in names and "ext.gelu_backward.default" in names
    _, names = ops_called(lambda t: gelu.GeluFunction.apply(t, "tanh").sum().backward(), x)
    assert "ext.gelu_backward.default" in names


@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("shape", [(3, 5), (0,), (1,), (2, 0, 3)])
def test_opcheck(rng, approximate, shape):
    x = sample(rng, shape)
    opcheck(torch.ops.ext.gelu.default, (x.requires_grad_(), approximate))
    opcheck(torch.ops.ext.gelu_backward.default, (sample(rng, shape), x.detach(), approximate))
    opcheck(torch.ops.ext.gelu.default, (sample(rng, shape, torch.float32),))


class GeluModel(torch.nn.Module):
    def __init__(self, approximate):
        super().__init__()
        self.linear = torch.nn.Linear(5, 6, dtype=torch.float64)
        self.act = gelu.GELU(approximate)

    def forward(self, x):
        return self.act(self.linear(x)) * 2


@pytest.mark.parametrize("approximate", MODES)
def test_compile_fullgraph(rng, approximate):
    torch.manual_seed(0)
    check_compiled(GeluModel(approximate), [sample(rng, (4, 5))])


def test_compile_double_backward(rng):
    """One formula: the traced graph is the same for the three (a string
    argument of the ops), and each compile costs seconds."""
    torch.manual_seed(0)
    check_compiled_double_backward(GeluModel("tanh"), [sample(rng, (4, 5))])


@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("shape", [(3, 5), (0,)])
def test_opcheck_double_backward(rng, approximate, shape):
    """ext::gelu_backward with inputs that require grad (its autograd formula
    is registered and traces), and ext::gelu_double_backward with each choice
    of gradients (without grad: its own gradient is the refused third)."""
    x, grad, grad_grad = (sample(rng, shape) for _ in range(3))
    opcheck(torch.ops.ext.gelu_backward.default,
            (grad.clone().requires_grad_(), x.clone().requires_grad_(), approximate))
    for flags in ((True, True), (True, False), (False, True), (False, False)):
        opcheck(torch.ops.ext.gelu_double_backward.default,
                (grad_grad, grad, x, approximate, *flags))


# ---------------------------------------------------------------------------
# errors

@pytest.mark.parametrize("dtype", [torch.int64, torch.float16, torch.bool])
def test_wrong_dtype(dtype):
    names = {torch.int64: "int64", torch.float16: "float16", torch.bool: "bool"}
    with pytest.raises(TypeError, match="gelu: input must be float32 or float64, got %s"
                       % names[dtype]):
        gelu.gelu(torch.zeros(3, dtype=dtype))


def test_non_contiguous_input():
    with pytest.raises(ValueError, match=r"gelu: input must be contiguous \(call .contiguous"):
        gelu.gelu(torch.zeros(4, 6)[:, ::2])


@pytest.mark.parametrize("approximate", ["tanh_", "erf", None, 1])
def test_unknown_approximation(approximate):
    with pytest.raises(ValueError, match="gelu: approximate must be 'none', 'tanh' or "
                                         "'sigmoid', got %r" % (approximate,)):
        gelu.gelu(torch.zeros(3), approximate)
    with pytest.raises(ValueError, match="GELU: approximate must be"):
        gelu.GELU(approximate)


def test_non_contiguous_input_is_refused_before_allocating():
    """A stride-0 view of 2^40 elements: the message, not torch's allocator."""
    huge = torch.zeros(1).expand(2**40)
    with pytest.raises(ValueError, match=r"^gelu: input must be contiguous"):
        gelu.gelu(huge)
    with pytest.raises(ValueError, match=r"^gelu_backward: input must be contiguous"):
        gelu.gelu_backward(huge, huge)


def test_not_a_tensor():
    with pytest.raises(TypeError, match="gelu: input must be a torch.Tensor, got list"):
        gelu.gelu_forward([1.0, 2.0])
    with pytest.raises(TypeError, match="gelu: input must be a torch.Tensor, got ndarray"):
        gelu.gelu_forward(np.zeros(3))


@pytest.mark.parametrize("grad,message,error", [
    (torch.zeros(3, 2), r"gelu_backward: grad_output is \(3, 2\) but input is \(2, 3\); they "
                        "must match", ValueError),
    (torch.zeros(6), r"gelu_backward: grad_output is \(6,\) but input is \(2, 3\)", ValueError),
    (torch.zeros(2, 3, dtype=torch.float64), "gelu_backward: grad_output must be float32 like "
                                             "input, got float64", TypeError),
    (torch.zeros(2, 6)[:, ::2], "gelu_backward: grad_output must be contiguous", ValueError),
])
def test_backward_argument_errors(grad, message, error):
    with pytest.raises(error, match=message):
        gelu.gelu_backward(grad, torch.zeros(2, 3))


@pytest.mark.parametrize("name,position", [("grad_grad_input", 0), ("grad_output", 1)])
def test_double_backward_argument_errors(name, position):
    x = torch.zeros(2, 3)

    def call(replaced):
        args = [torch.zeros(2, 3), torch.zeros(2, 3), x]
        args[position] = replaced
        return gelu.gelu_double_backward(*args)

    with pytest.raises(ValueError, match=r"gelu_double_backward: %s is \(3, 2\) but input is "
                                         r"\(2, 3\); they must match" % name):
        call(torch.zeros(3, 2))
    with pytest.raises(TypeError, match="gelu_double_backward: %s must be float32 like input, "
                                        "got float64" % name):
        call(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="gelu_double_backward: %s must be contiguous" % name):
        call(torch.zeros(2, 6)[:, ::2])
    with pytest.raises(TypeError, match="gelu_double_backward: %s must be a torch.Tensor, got "
                                        "list" % name):
        call([0.0])
    with pytest.raises(ValueError, match="gelu_double_backward: approximate must be"):
        gelu.gelu_double_backward(x, x, x, "erf")


def test_shim_double_backward_needs_an_output():
    fn = "gelu_double_backward"
    x = torch.zeros(3)
    descs = [_ffi.describe(gelu.ffi, fn, name, x)
             for name in ("grad_grad_input", "grad_output", "input")]
    status = gelu.lib.gelu_double_backward_cpu(*descs, gelu.ffi.NULL, gelu.ffi.NULL, 0)
    with pytest.raises(ValueError, match="gelu_double_backward: grad_grad_output and grad_input "
                                         "are both NULL; ask for at least one gradient"):
        _ffi.check(gelu.ffi, gelu.lib, status)


def test_shim_checks_the_output_it_is_given():
    """The C entry points are public through cffi: a wrong output is refused."""
    fn = "gelu"
    x = torch.zeros(2, 3)
    for out, message in ((torch.zeros(3, 2), r"output is \(3, 2\) but input is \(2, 3\)"),
                         (torch.zeros(2, 3, dtype=torch.float64), "output must be float32 like "
                                                                  "input, got float64")):
        status = gelu.lib.gelu_forward_cpu(_ffi.describe(gelu.ffi, fn, "input", x),
                                           _ffi.describe(gelu.ffi, fn, "output", out), 0)
        with pytest.raises((TypeError, ValueError), match="gelu: " + message):
            _ffi.check(gelu.ffi, gelu.lib, status)
    status = gelu.lib.gelu_forward_cpu(_ffi.describe(gelu.ffi, fn, "input", x),
                                       _ffi.describe(gelu.ffi, fn, "output", torch.zeros(2, 3)),
                                       7)
    with pytest.raises(ValueError, match=r"gelu: approximate must be GELU_NONE \(0\), GELU_TANH "
                                         r"\(1\) or GELU_SIGMOID \(2\), got 7"):
        _ffi.check(gelu.ffi, gelu.lib, status)


def test_cuda_entry_point_refuses_cpu_tensors():
    x = torch.zeros(2, 3)
    args = (_ffi.describe(gelu.ffi, "gelu", "input", x),
            _ffi.describe(gelu.ffi, "gelu", "output", torch.zeros(2, 3)), 0, gelu.ffi.NULL)
    expected = ("input is on cpu; gelu needs CUDA tensors" if gelu.built_with_cuda
                else "_ext.gelu was built without CUDA")
    with pytest.raises(RuntimeError, match="gelu: " + expected):
        _ffi.check(gelu.ffi, gelu.lib, gelu.lib.gelu_forward_cuda(*args))


def test_cpu_only_build_says_so(tmp_path):
    build_cpu_only(tmp_path, "gelu")
    probe = ("import torch\nfrom _ext import gelu, _ffi\nassert not gelu.built_with_cuda\n"
             "x = torch.zeros(3)\n"
             "args = [_ffi.describe(gelu.ffi, 'gelu', n, x) for n in ('input', 'output')]\n"
             "try:\n    _ffi.check(gelu.ffi, gelu.lib, gelu.lib.gelu_forward_cuda(*args, 0,"
             " gelu.ffi.NULL))\nexcept RuntimeError as e:\n    print(e)\n"
             "print(gelu.gelu(torch.ones(2)).tolist())\n")
    out = run_python(tmp_path, probe)
    assert "gelu: _ext.gelu was built without CUDA" in out
    assert "[0.841344" in out  # the CPU path of the same build works


# ---------------------------------------------------------------------------
# CUDA (GPU machine)

@pytest.mark.gpu
@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES + [(1 << 22) + 3])
def test_cuda_equals_cpu(rng, approximate, dtype, shape):
    x = sample(rng, shape, dtype)
    grad = sample(rng, shape, dtype, spread=False)
    y_cpu = gelu.gelu_forward(x, approximate)
    y_gpu = gelu.gelu_forward(x.cuda(), approximate)
    torch.testing.assert_close(y_gpu.cpu(), y_cpu, **tolerances(dtype))
    torch.testing.assert_close(gelu.gelu_backward(grad.cuda(), x.cuda(), approximate).cpu(),
                               gelu.gelu_backward(grad, x, approximate), **tolerances(dtype))
    torch.testing.assert_close(y_gpu, reference_gelu(x.cuda(), approximate), **tolerances(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [1, 2, 3])
def test_cuda_misaligned_views(rng, offset):
    """Views that start off a 16-byte boundary take the scalar kernels."""
    n = 1031
    storage = sample(rng, (n + offset,), torch.float32, "cuda")
    x = storage[offset:]
    grad = sample(rng, (n + offset,), torch.float32, "cuda", spread=False)[offset:]
    torch.testing.assert_close(gelu.gelu_forward(x).cpu(), gelu.gelu_forward(x.cpu()),
                               **tolerances(torch.float32))
    torch.testing.assert_close(gelu.gelu_backward(grad, x).cpu(),
                               gelu.gelu_backward(grad.cpu(), x.cpu()),
                               **tolerances(torch.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES + [(1 << 22) + 3])
def test_cuda_double_backward_equals_cpu(rng, approximate, dtype, shape):
    """Both gradients (the fused pass) and each alone (its own pass)."""
    x = sample(rng, shape, dtype)
    grad, grad_grad = (sample(rng, shape, dtype, spread=False) for _ in range(2))
    for flags in ((True, True), (True, False), (False, True)):
        cpu = gelu.gelu_double_backward(grad_grad, grad, x, approximate, *flags)
        gpu = gelu.gelu_double_backward(grad_grad.cuda(), grad.cuda(), x.cuda(), approximate,
                                        *flags)
        for got, want in zip(gpu, cpu):
            assert (got is None) == (want is None)
            if want is not None:
                assert got.is_cuda
                torch.testing.assert_close(got.cpu(), want, **tolerances(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [1, 2, 3])
def test_cuda_double_backward_misaligned_views(rng, offset):
    """Views that start off a 16-byte boundary take the scalar kernels."""
    n = 1031
    x, grad, grad_grad = (sample(rng, (n + offset,), torch.float32, "cuda")[offset:]
                          for _ in range(3))
    for flags in ((True, True), (True, False), (False, True)):
        gpu = gelu.gelu_double_backward(grad_grad, grad, x, "none", *flags)
        cpu = gelu.gelu_double_backward(grad_grad.cpu(), grad.cpu(), x.cpu(), "none", *flags)
        for got, want in zip(gpu, cpu):
            if want is not None:
                torch.testing.assert_close(got.cpu(), want, **tolerances(torch.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("approximate", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_double_backward_matches_reference(rng, approximate, dtype):
    x = sample(rng, (3, 1001), dtype, "cuda")
    ours = hessian_product(lambda t: gelu.gelu(t, approximate), x, np.random.default_rng(1))
    theirs = hessian_product(lambda t: reference_gelu(t, approximate), x.double().cpu(),
                             np.random.default_rng(1))
    assert ours.is_cuda
    torch.testing.assert_close(ours.cpu(), theirs.to(dtype), **tolerances(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("approximate", MODES)
def test_cuda_curvature_at_extreme_magnitudes(approximate):
    for dtype, big in ((torch.float32, 3e38), (torch.float64, 1e308)):
        x = torch.tensor([big, -big, float("inf"), float("-inf")], dtype=dtype, device="cuda")
        ones = torch.ones_like(x)
        grad_grad_output, grad_input = gelu.gelu_double_backward(ones, ones, x, approximate)
        assert torch.equal(grad_input.cpu(), torch.zeros(4, dtype=dtype))
        assert torch.equal(grad_grad_output.cpu(), torch.tensor([1.0, 0.0, 1.0, 0.0],
                                                                dtype=dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("approximate", MODES)
def test_gradgradcheck_cuda(rng, approximate):
    x = sample(rng, (5, 13), device="cuda").requires_grad_()
    assert torch.autograd.gradgradcheck(lambda t: gelu.gelu(t, approximate), (x,))


@pytest.mark.gpu
def test_cuda_compile_double_backward(rng):
    torch.manual_seed(0)
    check_compiled_double_backward(GeluModel("tanh").cuda(), [sample(rng, (4, 5), device="cuda")])


@pytest.mark.gpu
def test_cuda_double_backward_device_errors():
    x = torch.zeros(3, device="cuda")
    with pytest.raises(RuntimeError, match="gelu_double_backward: grad_output is on cpu; "
                                           "gelu_double_backward needs CUDA tensors"):
        gelu.gelu_double_backward(x, torch.zeros(3), x)


@pytest.mark.gpu
@pytest.mark.parametrize("approximate", MODES)
def test_gradcheck_cuda(rng, approximate):
    x = sample(rng, (5, 13), device="cuda").requires_grad_()
    assert torch.autograd.gradcheck(lambda t: gelu.gelu(t, approximate), (x,))


@pytest.mark.gpu
def test_cuda_runs_on_the_current_stream(rng):
    """Input written on a side stream behind a long sleep must be waited for."""
    host = sample(rng, (1 << 20,), torch.float32).pin_memory()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.zeros(1 << 20, device="cuda")
        torch.cuda._sleep(200_000_000)
        x.copy_(host, non_blocking=True)
        y = gelu.gelu_forward(x)
    side.synchronize()
    torch.testing.assert_close(y.cpu(), F.gelu(host), **tolerances(torch.float32))


@pytest.mark.gpu
def test_cuda_device_errors():
    with pytest.raises(RuntimeError, match="gelu_backward: grad_output is on cpu; gelu_backward "
                                           "needs CUDA tensors"):
        gelu.gelu_backward(torch.zeros(3), torch.zeros(3, device="cuda"))
    with pytest.raises(RuntimeError, match="gelu_backward: grad_output is on cuda:0; "
                                           "gelu_backward needs CPU tensors"):
        gelu.gelu_backward(torch.zeros(3, device="cuda"), torch.zeros(3))
    with pytest.raises(TypeError, match="gelu: input must be float32 or float64, got int32"):
        gelu.gelu(torch.zeros(3, dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match="gelu: input must be contiguous"):
        gelu.gelu(torch.zeros(4, 4, device="cuda").t())


@pytest.mark.gpu
def test_cuda_error_is_an_exception():
    """A CUDA failure in the launcher (no device 99) is a RuntimeError, and the
    process goes on."""
    x = torch.zeros(8, device="cuda")
    descs = [_ffi.describe(gelu.ffi, "gelu", name, t) for name, t in
             (("input", x), ("output", torch.empty_like(x)))]
    for desc in descs:
        desc.device_index = 99
    with pytest.raises(RuntimeError, match="gelu: CUDA error: invalid device ordinal"):
        _ffi.check(gelu.ffi, gelu.lib, gelu.lib.gelu_forward_cuda(*descs, 0, gelu.ffi.NULL))
    assert torch.equal(gelu.gelu(x).cpu(), torch.zeros(8))


@pytest.mark.gpu
@pytest.mark.parametrize("approximate", MODES)
def test_cuda_backward_at_extreme_magnitudes(approximate):
    for dtype, big in ((torch.float32, 3e38), (torch.float64, 1e308)):
        x = torch.tensor([big, -big, float("inf"), float("-inf"), 2.0], dtype=dtype,
                         device="cuda", requires_grad=True)
        x_cpu = x.detach().cpu().requires_grad_()
        (slope,) = torch.autograd.grad(gelu.gelu(x, approximate).sum(), x)
        (cpu_slope,) = torch.autograd.grad(gelu.gelu(x_cpu, approximate).sum(), x_cpu)
        assert torch.equal(slope[:4].cpu(), torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=dtype))
        torch.testing.assert_close(slope.cpu(), cpu_slope, **tolerances(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("approximate", MODES)
def test_cuda_opcheck(rng, approximate):
    x = sample(rng, (3, 5), device="cuda")
    opcheck(torch.ops.ext.gelu.default, (x.requires_grad_(), approximate))
    opcheck(torch.ops.ext.gelu_backward.default,
            (sample(rng, (3, 5), device="cuda"), x.detach(), approximate))
    opcheck(torch.ops.ext.gelu_backward.default,
            (sample(rng, (3, 5), device="cuda").requires_grad_(), x, approximate))
    for flags in ((True, True), (True, False), (False, True)):
        opcheck(torch.ops.ext.gelu_double_backward.default,
                (sample(rng, (3, 5), device="cuda"), sample(rng, (3, 5), device="cuda"),
                 x.detach(), approximate, *flags))


@pytest.mark.gpu
@pytest.mark.parametrize("approximate", MODES)
def test_cuda_compile_fullgraph(rng, approximate):
    torch.manual_seed(0)
    check_compiled(GeluModel(approximate).cuda(), [sample(rng, (4, 5), device="cuda")])


@pytest.mark.gpu
def test_cuda_empty():
    for shape in ((0,), (3, 0)):
        x = torch.zeros(shape, device="cuda", requires_grad=True)
        y = gelu.gelu(x)
        y.sum().backward()
        assert y.shape == shape and x.grad.shape == shape
