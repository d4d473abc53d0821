"""_ext.trilinear against the seed's pure-PyTorch formula (forward, and
backward and double backward through torch's autograd, for feats and for
points); gradcheck and gradgradcheck; edge shapes; every error of the shim;
CUDA against the CPU on a GPU machine."""

import numpy as np
import pytest
import torch

from _ext import _ffi, trilinear
from _ext.trilinear.reference import trilinear_reference
from cpu_only_build import build_cpu_only, run_python
from torch_op_checks import (check_compiled, check_compiled_double_backward,
                             hessian_vector_product, leaves, opcheck, ops_called)

# (N, F): one point, odd F, F not a multiple of a 16-byte vector, large F
SHAPES = [(1, 1), (1, 4), (7, 3), (5, 5), (33, 8), (300, 37), (64, 256), (3, 4099)]


def sample(rng, n_points, n_feats, dtype=torch.float64, device="cpu", spread=1.0):
    feats = torch.from_numpy(rng.standard_normal((n_points, 8, n_feats)))
    points = torch.from_numpy(rng.uniform(-spread, spread, (n_points, 3)))
    return feats.to(dtype=dtype, device=device), points.to(dtype=dtype, device=device)


def reference_grads(feats, points, grad_out):
    """(grad_feats, grad_points) of the seed's formula, by autograd in float64."""
    feats64 = feats.detach().double().requires_grad_()
    points64 = points.detach().double().requires_grad_()
    out = trilinear_reference(feats64, points64)
    return torch.autograd.grad(out, (feats64, points64), grad_out.double())


def tolerances(dtype, n_feats=1):
    """float32 sums over F (grad_points) lose about F ulps in the worst case."""
    if dtype == torch.float64:
        return dict(rtol=1e-12, atol=1e-12 * n_feats)
    return dict(rtol=2e-5, atol=2e-6 * n_feats)


# ---------------------------------------------------------------------------
# forward and backward against the seed's formula (CPU)

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_points,n_feats", SHAPES)
def test_forward_matches_seed_formula(rng, dtype, n_points, n_feats):
    feats, points = sample(rng, n_points, n_feats, dtype)
    out = trilinear.trilinear_interpolation(feats, points)
    assert out.shape == (n_points, n_feats) and out.dtype == dtype
    torch.testing.assert_close(out, trilinear_reference(feats, points), **tolerances(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_points,n_feats", SHAPES)
def test_backward_matches_autograd_of_seed_formula(rng, dtype, n_points, n_feats):
    feats, points = sample(rng, n_points, n_feats, dtype)
    grad_out = torch.from_numpy(rng.standard_normal((n_points, n_feats))).to(dtype)
    feats.requires_grad_()
    points.requires_grad_()
    out = trilinear.trilinear_interpolation(feats, points)
    grad_feats, grad_points = torch.autograd.grad(out, (feats, points), grad_out)
    expected_feats, expected_points = reference_grads(feats, points, grad_out)
    torch.testing.assert_close(grad_feats, expected_feats.to(dtype), **tolerances(dtype))
    torch.testing.assert_close(grad_points, expected_points.to(dtype),
                               **tolerances(dtype, n_feats))


def test_points_outside_the_cube_extrapolate(rng):
    """Nothing clamps: a point outside [-1, 1] follows the same formula."""
    feats, points = sample(rng, 50, 6, spread=3.0)
    torch.testing.assert_close(trilinear.trilinear_interpolation(feats, points),
                               trilinear_reference(feats, points), rtol=1e-12, atol=1e-12)


def test_corners_return_corner_features(rng):
    """At the 8 corners of the cube the output is that corner's feature row."""
    corners = torch.tensor([[-1, -1, -1], [-1, -1, 1], [-1, 1, -1], [-1, 1, 1],
                            [1, -1, -1], [1, -1, 1], [1, 1, -1], [1, 1, 1]], dtype=torch.float64)
    feats = torch.from_numpy(rng.standard_normal((1, 8, 5))).expand(8, 8, 5).contiguous()
    out = trilinear.trilinear_interpolation(feats, corners)
    torch.testing.assert_close(out, feats[0], rtol=0, atol=1e-15)


def test_gradcheck_cpu(rng):
    feats, points = sample(rng, 6, 5)
    assert torch.autograd.gradcheck(trilinear.trilinear_interpolation,
                                    (feats.requires_grad_(), points.requires_grad_()))


@pytest.mark.parametrize("feats_grad,points_grad", [(True, False), (False, True)])
def test_one_gradient_only(rng, feats_grad, points_grad):
    feats, points = sample(rng, 9, 7)
    grad_out = torch.from_numpy(rng.standard_normal((9, 7)))
    feats.requires_grad_(feats_grad)
    points.requires_grad_(points_grad)
    trilinear.trilinear_interpolation(feats, points).backward(grad_out)
    expected_feats, expected_points = reference_grads(feats, points, grad_out)
    if feats_grad:
        torch.testing.assert_close(feats.grad, expected_feats)
        assert points.grad is None
    else:
        torch.testing.assert_close(points.grad, expected_points)
        assert feats.grad is None
    grad_feats, grad_points = trilinear.trilinear_backward(grad_out, feats.detach(),
                                                           points.detach(), feats_grad,
                                                           points_grad)
    assert (grad_feats is None) != feats_grad and (grad_points is None) != points_grad


def test_module_and_non_contiguous_grad(rng):
    """sum() hands backward an expanded (non-contiguous) gradient."""
    layer = trilinear.TrilinearInterpolation()
    feats, points = sample(rng, 4, 3)
    feats.requires_grad_()
    points.requires_grad_()
    layer(feats, points).sum().backward()
    expected_feats, expected_points = reference_grads(feats, points, torch.ones(4, 3))
    torch.testing.assert_close(feats.grad, expected_feats)
    torch.testing.assert_close(points.grad, expected_points)


@pytest.mark.parametrize("n_points,n_feats", [(0, 5), (4, 0), (0, 0)])
def test_empty(rng, n_points, n_feats):
    """Empty in, empty out; with F = 0 the points' gradient is zero."""
    feats, points = sample(rng, n_points, n_feats)
    feats.requires_grad_()
    points.requires_grad_()
    out = trilinear.trilinear_interpolation(feats, points)
    assert out.shape == (n_points, n_feats)
    out.sum().backward()
    assert feats.grad.shape == feats.shape
    assert torch.equal(points.grad, torch.zeros(n_points, 3, dtype=torch.float64))


# ---------------------------------------------------------------------------
# second derivatives against the seed's formula (CPU)

def hessian_products(fn, feats, points, rng):
    """hessian_vector_product of fn in feats and points, random weights and
    directions."""
    weights = torch.from_numpy(rng.standard_normal((feats.shape[0], feats.shape[2])))
    directions = [torch.from_numpy(rng.standard_normal(t.shape)).to(t) for t in (feats, points)]
    return hessian_vector_product(fn, leaves([feats, points]), weights.to(feats), directions)


def reference_double_backward(grad_grad_feats, grad_grad_points, grad_out, feats, points):
    """(d/d grad_out, d/d feats, d/d points) of <grad_feats, grad_grad_feats>
    + <grad_points, grad_grad_points> (None: no such term), the backward's
    outputs by autograd of the seed's formula in float64."""
    grad64, feats64, points64 = (t.detach().double().requires_grad_()
                                 for t in (grad_out, feats, points))
    grads = torch.autograd.grad(trilinear_reference(feats64, points64), (feats64, points64),
                                grad64, create_graph=True)
    inner = sum((g * gg.double()).sum() for g, gg in zip(grads, (grad_grad_feats,
                                                                 grad_grad_points))
                if gg is not None)
    wrt = (grad64, feats64, points64)
    return tuple(torch.zeros_like(t) if g is None else g
                 for t, g in zip(wrt, torch.autograd.grad(inner, wrt, allow_unused=True)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_points,n_feats", SHAPES)
def test_double_backward_matches_seed_formula(rng, dtype, n_points, n_feats):
    """The Hessian of a loss through the interpolation along a direction: the
    point-point, point-feature and grad_out terms, as the seed formula's."""
    feats, points = sample(rng, n_points, n_feats, dtype)
    ours = hessian_products(trilinear.trilinear_interpolation, feats, points,
                            np.random.default_rng(1))
    theirs = hessian_products(trilinear_reference, feats.double(), points.double(),
                              np.random.default_rng(1))
    for got, expected, size in zip(ours, theirs, (1, n_feats)):
        assert got.dtype == dtype
        torch.testing.assert_close(got, expected.to(dtype), **tolerances(dtype, size))


def test_gradient_of_a_gradient_is_not_zero(rng):
    """The issue's reproduction: a penalty on the points' gradient reaches the
    points and the features (it was zeros, with torch only warning)."""
    feats, points = sample(rng, 6, 5)
    ours, theirs = leaves([feats, points]), leaves([feats, points])
    for fn, (f, p) in ((trilinear.trilinear_interpolation, ours), (trilinear_reference, theirs)):
        (grad_points,) = torch.autograd.grad(fn(f, p).sum(), p, create_graph=True)
        grad_points.square().sum().backward()
    for got, expected in zip(ours, theirs):
        assert expected.grad.abs().max() > 0.1
        torch.testing.assert_close(got.grad, expected.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spread", [1.0, 3.0])
def test_gradgradcheck_cpu(rng, spread):
    feats, points = (t.requires_grad_() for t in sample(rng, 6, 5, spread=spread))
    assert torch.autograd.gradgradcheck(trilinear.trilinear_interpolation, (feats, points))
    assert torch.autograd.gradgradcheck(trilinear.TrilinearInterpolationFunction.apply,
                                        (feats, points))


def test_gradgradcheck_one_input(rng):
    """Only feats, or only points, differentiable: the backward computed one
    gradient, whose own gradient must still be right."""
    feats, points = sample(rng, 5, 3)
    assert torch.autograd.gradgradcheck(lambda f: trilinear.trilinear_interpolation(f, points),
                                        (feats.clone().requires_grad_(),))
    assert torch.autograd.gradgradcheck(lambda p: trilinear.trilinear_interpolation(feats, p),
                                        (points.clone().requires_grad_(),))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("given", ["both", "feats", "points"])
def test_double_backward_entry_point(rng, dtype, given):
    """Every gradient, alone or together, from either incoming gradient or
    both (None for zeros), as the seed formula's."""
    n_points, n_feats = 7, 5
    feats, points = sample(rng, n_points, n_feats, dtype)
    grad_out = torch.from_numpy(rng.standard_normal((n_points, n_feats))).to(dtype)
    grad_grad_feats = (torch.from_numpy(rng.standard_normal(feats.shape)).to(dtype)
                       if given != "points" else None)
    grad_grad_points = (torch.from_numpy(rng.standard_normal(points.shape)).to(dtype)
                        if given != "feats" else None)
    expected = reference_double_backward(grad_grad_feats, grad_grad_points, grad_out, feats,
                                         points)
    for wanted in ((True, True, True), (True, False, False), (False, True, False),
                   (False, False, True), (False, False, False)):
        results = trilinear.trilinear_double_backward(grad_grad_feats, grad_grad_points,
                                                      grad_out, feats, points, *wanted)
        for got, want, want_it, size in zip(results, expected, wanted, (1, 1, n_feats)):
            assert (got is None) != want_it
            if want_it:
                torch.testing.assert_close(got, want.to(dtype), **tolerances(dtype, size))


def test_absent_incoming_gradient_leaves_its_terms_out(rng):
    """Without grad_grad_points its terms are left out, not multiplied by 0:
    an infinite feature does not turn the others' gradients into NaN."""
    feats, points = sample(rng, 3, 4)
    feats[1, 2, 3] = float("inf")
    grad_out = torch.from_numpy(rng.standard_normal((3, 4)))
    grad_grad_feats = torch.from_numpy(rng.standard_normal(feats.shape))
    grad_grad_out, grad_feats, grad_points = trilinear.trilinear_double_backward(
        grad_grad_feats, None, grad_out, feats, points)
    torch.testing.assert_close(grad_grad_out,
                               trilinear.trilinear_forward(grad_grad_feats, points))
    torch.testing.assert_close(grad_points,
                               trilinear.trilinear_backward(grad_out, grad_grad_feats, points)[1])
    assert torch.equal(grad_feats, torch.zeros_like(feats))


def test_third_derivative_is_refused(rng):
    """Not implemented: a clear error, never zeros or a silent None."""
    feats, points = (t.requires_grad_() for t in sample(rng, 3, 2))
    (grad_points,) = torch.autograd.grad(trilinear.trilinear_interpolation(feats, points).sum(),
                                         points, create_graph=True)
    (second,) = torch.autograd.grad(grad_points.square().sum(), points, create_graph=True)
    with pytest.raises(NotImplementedError, match="trilinear_interpolation: derivatives of "
                                                  "third and higher order are not implemented"):
        second.sum().backward()


# ---------------------------------------------------------------------------
# the custom ops ext::trilinear_interpolation and its backward, and torch.compile

def test_public_entry_points_go_through_the_ops(rng):
    feats, points = sample(rng, 5, 4)
    feats.requires_grad_()
    points.requires_grad_()
    for call in (trilinear.trilinear_interpolation, trilinear.TrilinearInterpolation()):
        _, names = ops_called(lambda f, p: call(f, p).sum().backward(), feats, points)
        assert "ext.trilinear_interpolation.default" in names
        assert "ext.trilinear_interpolation_backward.default" in names


@pytest.mark.parametrize("n_points,n_feats", [(5, 4), (1, 1), (0, 3), (3, 0)])
def test_opcheck(rng, n_points, n_feats):
    feats, points = sample(rng, n_points, n_feats)
    opcheck(torch.ops.ext.trilinear_interpolation.default,
            (feats.clone().requires_grad_(), points.clone().requires_grad_()))
    opcheck(torch.ops.ext.trilinear_interpolation.default,
            (feats.clone().requires_grad_(), points))
    grad_out = torch.from_numpy(rng.standard_normal((n_points, n_feats)))
    for flags in ((True, True), (True, False), (False, True), (False, False)):
        opcheck(torch.ops.ext.trilinear_interpolation_backward.default,
                (grad_out, feats, points, *flags))


class TrilinearModel(torch.nn.Module):
    """Learnable corner features, interpolated at points squashed into the cube."""

    def __init__(self, n_points, n_feats):
        super().__init__()
        self.feats = torch.nn.Parameter(torch.randn(n_points, 8, n_feats, dtype=torch.float64))
        self.layer = trilinear.TrilinearInterpolation()

    def forward(self, points):
        return self.layer(self.feats * 2, torch.tanh(points)).square()


def test_compile_fullgraph(rng):
    torch.manual_seed(0)
    check_compiled(TrilinearModel(6, 5), [sample(rng, 6, 5)[1]])


def test_compile_double_backward(rng):
    torch.manual_seed(0)
    check_compiled_double_backward(TrilinearModel(6, 5), [sample(rng, 6, 5)[1]])


@pytest.mark.parametrize("n_points,n_feats", [(5, 4), (3, 0)])
def test_opcheck_double_backward(rng, n_points, n_feats):
    """ext::trilinear_interpolation_backward with inputs that require grad
    (its autograd formula is registered and traces), and
    ext::trilinear_interpolation_double_backward with each choice of inputs
    and gradients (without grad: its own gradient is the refused third)."""
    feats, points = sample(rng, n_points, n_feats)
    grad_out = torch.from_numpy(rng.standard_normal((n_points, n_feats)))
    grad_grad_feats = torch.from_numpy(rng.standard_normal(feats.shape))
    grad_grad_points = torch.from_numpy(rng.standard_normal(points.shape))
    for flags in ((True, True), (True, False), (False, True)):
        opcheck(torch.ops.ext.trilinear_interpolation_backward.default,
                (*(t.clone().requires_grad_() for t in (grad_out, feats, points)), *flags))
    for given, flags in (((grad_grad_feats, grad_grad_points), (True, True, True)),
                         ((None, grad_grad_points), (False, True, True)),
                         ((grad_grad_feats, None), (True, False, True)),
                         ((grad_grad_feats, grad_grad_points), (False, False, False))):
        opcheck(torch.ops.ext.trilinear_interpolation_double_backward.default,
                (*given, grad_out, feats, points, *flags))


def test_huge_expanded_feats_are_refused_before_allocating():
    feats = torch.zeros(1, 8, 1).expand(2**30, 8, 2**12)
    with pytest.raises(ValueError, match="^trilinear_interpolation: feats must be contiguous"):
        trilinear.trilinear_interpolation(feats, torch.zeros(1, 3).expand(2**30, 3))
    with pytest.raises(ValueError, match="^trilinear_interpolation_backward: feats must be "
                                         "contiguous"):
        trilinear.trilinear_backward(torch.zeros(1, 1), feats, torch.zeros(1, 3))


# ---------------------------------------------------------------------------
# errors

def inputs(n_points=4, n_feats=6, device="cpu"):
    return (torch.zeros(n_points, 8, n_feats, device=device),
            torch.zeros(n_points, 3, device=device))


@pytest.mark.parametrize("feats,points,error,message", [
    (torch.zeros(4, 8, 6, dtype=torch.int64), torch.zeros(4, 3), TypeError,
     "feats must be float32 or float64, got int64"),
    (torch.zeros(4, 8, 6, dtype=torch.float16), torch.zeros(4, 3), TypeError,
     "feats must be float32 or float64, got float16"),
    (torch.zeros(4, 8, 6), torch.zeros(4, 3, dtype=torch.float64), TypeError,
     "points must be float32, got float64"),
    (torch.zeros(4, 7, 6), torch.zeros(4, 3), ValueError,
     r"feats must be \(N, 8, F\), got \(4, 7, 6\)"),
    (torch.zeros(4, 48), torch.zeros(4, 3), ValueError,
     r"feats must be \(N, 8, F\), got \(4, 48\)"),
    (torch.zeros(4, 8, 6), torch.zeros(5, 3), ValueError,
     r"points is \(5, 3\) but feats is \(4, 8, 6\); points must be \(N, 3\) = \(4, 3\)"),
    (torch.zeros(4, 8, 6), torch.zeros(4, 2), ValueError,
     r"points is \(4, 2\) but feats is \(4, 8, 6\)"),
    (torch.zeros(4, 8, 6), torch.zeros(12), ValueError, r"points is \(12,\) but feats is"),
    (torch.zeros(4, 8, 12)[:, :, ::2], torch.zeros(4, 3), ValueError,
     r"feats must be contiguous \(call .contiguous\(\) on it\)"),
    (torch.zeros(4, 8, 6), torch.zeros(3, 4).t(), ValueError, "points must be contiguous"),
    ([0.0], torch.zeros(4, 3), TypeError, "feats must be a torch.Tensor, got list"),
])
def test_forward_argument_errors(feats, points, error, message):
    with pytest.raises(error, match="trilinear_interpolation: " + message):
        trilinear.trilinear_interpolation(feats, points)


@pytest.mark.parametrize("grad_out,message,error", [
    (torch.zeros(4, 5), r"grad_out is \(4, 5\) but feats is \(4, 8, 6\); grad_out must be "
                        r"\(N, F\) = \(4, 6\)", ValueError),
    (torch.zeros(4, 6, dtype=torch.float64), "grad_out must be float32, got float64", TypeError),
    (torch.zeros(6, 4).t(), "grad_out must be contiguous", ValueError),
])
def test_backward_argument_errors(grad_out, message, error):
    feats, points = inputs()
    with pytest.raises(error, match="trilinear_interpolation_backward: " + message):
        trilinear.trilinear_backward(grad_out, feats, points)


def raw_backward(grad_feats, grad_points, fn=trilinear.lib.trilinear_backward_cpu):
    """Calls the C entry point directly, with the given output tensors (or NULL)."""
    feats, points = inputs()
    name = "trilinear_interpolation_backward"
    describe = lambda arg, t: (trilinear.ffi.NULL if t is None
                               else _ffi.describe(trilinear.ffi, name, arg, t))
    status = fn(describe("grad_out", torch.zeros(4, 6)), describe("feats", feats),
                describe("points", points), describe("grad_feats", grad_feats),
                describe("grad_points", grad_points))
    _ffi.check(trilinear.ffi, trilinear.lib, status)


@pytest.mark.parametrize("grad_feats,grad_points,error,message", [
    (None, None, ValueError, "grad_feats and grad_points are both NULL"),
    (torch.zeros(4, 8, 5), None, ValueError,
     r"grad_feats is \(4, 8, 5\) but feats is \(4, 8, 6\); they must match"),
    (None, torch.zeros(4, 3, dtype=torch.float64), TypeError,
     "grad_points must be float32 like points, got float64"),
    (torch.zeros(4, 8, 12)[:, :, ::2], None, ValueError, "grad_feats must be contiguous"),
])
def test_shim_checks_the_outputs_it_is_given(grad_feats, grad_points, error, message):
    with pytest.raises(error, match="trilinear_interpolation_backward: " + message):
        raw_backward(grad_feats, grad_points)


def test_shim_checks_out():
    feats, points = inputs()
    fn = "trilinear_interpolation"
    status = trilinear.lib.trilinear_forward_cpu(
        _ffi.describe(trilinear.ffi, fn, "feats", feats),
        _ffi.describe(trilinear.ffi, fn, "points", points),
        _ffi.describe(trilinear.ffi, fn, "out", torch.zeros(6, 4)))
    with pytest.raises(ValueError, match=r"out is \(6, 4\) but feats is \(4, 8, 6\); out must "
                                         r"be \(N, F\) = \(4, 6\)"):
        _ffi.check(trilinear.ffi, trilinear.lib, status)


def raw_double_backward(**given):
    """Calls the C entry point directly: every tensor of (N, F) = (4, 6) unless
    given (None for NULL)."""
    feats, points = inputs()
    tensors = dict(grad_grad_feats=torch.zeros(4, 8, 6), grad_grad_points=torch.zeros(4, 3),
                   grad_out=torch.zeros(4, 6), feats=feats, points=points,
                   grad_grad_out=torch.zeros(4, 6), grad_feats=torch.zeros(4, 8, 6),
                   grad_points=torch.zeros(4, 3))
    tensors.update(given)
    name = "trilinear_interpolation_double_backward"
    descs = [trilinear.ffi.NULL if t is None else _ffi.describe(trilinear.ffi, name, arg, t)
             for arg, t in tensors.items()]
    _ffi.check(trilinear.ffi, trilinear.lib, trilinear.lib.trilinear_double_backward_cpu(*descs))


@pytest.mark.parametrize("given,error,message", [
    (dict(grad_grad_out=None, grad_feats=None, grad_points=None), ValueError,
     "grad_grad_out, grad_feats and grad_points are all NULL"),
    (dict(grad_grad_feats=None, grad_grad_points=None), ValueError,
     "grad_grad_feats and grad_grad_points are both NULL; give at least one"),
    (dict(grad_grad_feats=torch.zeros(4, 8, 5)), ValueError,
     r"grad_grad_feats is \(4, 8, 5\) but feats is \(4, 8, 6\); they must match"),
    (dict(grad_grad_points=torch.zeros(4, 3, dtype=torch.float64)), TypeError,
     "grad_grad_points must be float32 like points, got float64"),
    (dict(grad_grad_points=torch.zeros(3, 4).t()), ValueError,
     "grad_grad_points must be contiguous"),
    (dict(grad_out=torch.zeros(4, 5)), ValueError,
     r"grad_out is \(4, 5\) but feats is \(4, 8, 6\)"),
    (dict(grad_grad_out=torch.zeros(6, 4)), ValueError,
     r"grad_grad_out is \(6, 4\) but feats is \(4, 8, 6\); grad_grad_out must be \(N, F\)"),
    (dict(grad_feats=torch.zeros(4, 8, 12)[:, :, ::2]), ValueError,
     "grad_feats must be contiguous"),
    (dict(grad_points=torch.zeros(4, 2)), ValueError,
     r"grad_points is \(4, 2\) but points is \(4, 3\); they must match"),
])
def test_shim_checks_the_double_backward_arguments(given, error, message):
    with pytest.raises(error, match="trilinear_interpolation_double_backward: " + message):
        raw_double_backward(**given)


def test_double_backward_argument_errors():
    feats, points = inputs()
    fn = "trilinear_interpolation_double_backward: "
    with pytest.raises(TypeError, match=fn + "grad_grad_points must be a torch.Tensor, got list"):
        trilinear.trilinear_double_backward(None, [0.0], torch.zeros(4, 6), feats, points)
    with pytest.raises(TypeError, match=fn + "grad_out must be a torch.Tensor, got NoneType"):
        trilinear.trilinear_double_backward(None, None, None, feats, points)
    with pytest.raises(ValueError, match=fn + "feats must be contiguous"):
        trilinear.trilinear_double_backward(None, None, torch.zeros(1, 1),
                                            torch.zeros(1, 8, 1).expand(2**30, 8, 2**12),
                                            torch.zeros(1, 3).expand(2**30, 3))


def test_cuda_entry_point_refuses_cpu_tensors():
    expected = ("feats is on cpu; trilinear_interpolation_backward needs CUDA tensors"
                if trilinear.built_with_cuda else "_ext.trilinear was built without CUDA")
    with pytest.raises(RuntimeError, match="trilinear_interpolation_backward: " + expected):
        raw_backward(torch.zeros(4, 8, 6), None,
                     lambda *args: trilinear.lib.trilinear_backward_cuda(*args,
                                                                        trilinear.ffi.NULL))


def test_cpu_only_build_says_so(tmp_path):
    build_cpu_only(tmp_path, "trilinear")
    probe = ("import torch\nfrom _ext import trilinear as t, _ffi\n"
             "assert not t.built_with_cuda\n"
             "f, p, o = torch.zeros(2, 8, 3), torch.zeros(2, 3), torch.zeros(2, 3)\n"
             "d = [_ffi.describe(t.ffi, 'x', n, x) for n, x in (('f', f), ('p', p), ('o', o))]\n"
             "try:\n    _ffi.check(t.ffi, t.lib, t.lib.trilinear_forward_cuda(*d, t.ffi.NULL))\n"
             "except RuntimeError as e:\n    print(e)\n"
             "print(t.trilinear_interpolation(torch.ones(1, 8, 2), p[:1]).tolist())\n")
    out = run_python(tmp_path, probe)
    assert "trilinear_interpolation: _ext.trilinear was built without CUDA" in out
    assert "[[1.0, 1.0]]" in out


# ---------------------------------------------------------------------------
# CUDA (GPU machine)

GPU_SHAPES = SHAPES + [(1000, 1), (1000, 2), (257, 6), (2048, 64), (129, 1000)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_points,n_feats", GPU_SHAPES)
def test_cuda_equals_cpu(rng, dtype, n_points, n_feats):
    feats, points = sample(rng, n_points, n_feats, dtype)
    grad_out = torch.from_numpy(rng.standard_normal((n_points, n_feats))).to(dtype)
    out_cpu = trilinear.trilinear_forward(feats, points)
    out_gpu = trilinear.trilinear_forward(feats.cuda(), points.cuda())
    torch.testing.assert_close(out_gpu.cpu(), out_cpu, **tolerances(dtype))
    for feats_grad, points_grad in ((True, True), (True, False), (False, True)):
        cpu = trilinear.trilinear_backward(grad_out, feats, points, feats_grad, points_grad)
        gpu = trilinear.trilinear_backward(grad_out.cuda(), feats.cuda(), points.cuda(),
                                           feats_grad, points_grad)
        if feats_grad:
            torch.testing.assert_close(gpu[0].cpu(), cpu[0], **tolerances(dtype))
        if points_grad:
            torch.testing.assert_close(gpu[1].cpu(), cpu[1], **tolerances(dtype, n_feats))


@pytest.mark.gpu
def test_cuda_misaligned_views(rng):
    """feats and grad_out starting 4 bytes into their storage: scalar kernels."""
    feats, points = sample(rng, 40, 12, torch.float32)
    grad_out = torch.from_numpy(rng.standard_normal((40, 12))).float()
    storage = torch.empty(feats.numel() + 1, device="cuda")
    feats_view = storage[1:].view(40, 8, 12)
    feats_view.copy_(feats)
    grad_storage = torch.empty(grad_out.numel() + 1, device="cuda")
    grad_view = grad_storage[1:].view(40, 12)
    grad_view.copy_(grad_out)
    torch.testing.assert_close(trilinear.trilinear_forward(feats_view, points.cuda()).cpu(),
                               trilinear.trilinear_forward(feats, points))
    gpu = trilinear.trilinear_backward(grad_view, feats_view, points.cuda())
    cpu = trilinear.trilinear_backward(grad_out, feats, points)
    torch.testing.assert_close(gpu[0].cpu(), cpu[0])
    torch.testing.assert_close(gpu[1].cpu(), cpu[1], **tolerances(torch.float32, 12))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_points,n_feats", GPU_SHAPES)
def test_cuda_double_backward_equals_cpu(rng, dtype, n_points, n_feats):
    """Every choice of incoming gradients and of outputs, vector and scalar
    rows, one lane to a full warp per point."""
    feats, points = sample(rng, n_points, n_feats, dtype)
    grad_out = torch.from_numpy(rng.standard_normal((n_points, n_feats))).to(dtype)
    grad_grad_feats = torch.from_numpy(rng.standard_normal(feats.shape)).to(dtype)
    grad_grad_points = torch.from_numpy(rng.standard_normal(points.shape)).to(dtype)
    for given in ((grad_grad_feats, grad_grad_points), (None, grad_grad_points),
                  (grad_grad_feats, None)):
        for wanted in ((True, True, True), (True, False, False), (False, True, False),
                       (False, False, True)):
            cpu = trilinear.trilinear_double_backward(*given, grad_out, feats, points, *wanted)
            gpu = trilinear.trilinear_double_backward(
                *(None if t is None else t.cuda() for t in given), grad_out.cuda(),
                feats.cuda(), points.cuda(), *wanted)
            for got, want, size in zip(gpu, cpu, (1, 1, n_feats)):
                assert (got is None) == (want is None)
                if want is not None:
                    assert got.is_cuda
                    torch.testing.assert_close(got.cpu(), want, **tolerances(dtype, size))


@pytest.mark.gpu
def test_cuda_double_backward_misaligned_views(rng):
    """feats, grad_out and grad_grad_feats starting 4 bytes into their
    storage: the scalar kernel."""
    feats, points = sample(rng, 40, 12, torch.float32)
    grad_out = torch.from_numpy(rng.standard_normal((40, 12))).float()
    grad_grad_feats = torch.from_numpy(rng.standard_normal(feats.shape)).float()
    grad_grad_points = torch.from_numpy(rng.standard_normal(points.shape)).float()

    def misaligned(t):
        view = torch.empty(t.numel() + 1, device="cuda")[1:].view(t.shape)
        return view.copy_(t)

    gpu = trilinear.trilinear_double_backward(misaligned(grad_grad_feats),
                                              grad_grad_points.cuda(), misaligned(grad_out),
                                              misaligned(feats), points.cuda())
    cpu = trilinear.trilinear_double_backward(grad_grad_feats, grad_grad_points, grad_out,
                                              feats, points)
    for got, want, size in zip(gpu, cpu, (1, 1, 12)):
        torch.testing.assert_close(got.cpu(), want, **tolerances(torch.float32, size))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_double_backward_matches_seed_formula(rng, dtype):
    feats, points = sample(rng, 129, 37, dtype, device="cuda")
    ours = hessian_products(trilinear.trilinear_interpolation, feats, points,
                            np.random.default_rng(1))
    theirs = hessian_products(trilinear_reference, feats.double().cpu(), points.double().cpu(),
                              np.random.default_rng(1))
    for got, expected, size in zip(ours, theirs, (1, 37)):
        assert got.is_cuda
        torch.testing.assert_close(got.cpu(), expected.to(dtype), **tolerances(dtype, size))


@pytest.mark.gpu
def test_gradgradcheck_cuda(rng):
    feats, points = sample(rng, 37, 9, device="cuda")
    assert torch.autograd.gradgradcheck(trilinear.trilinear_interpolation,
                                        (feats.requires_grad_(), points.requires_grad_()))


@pytest.mark.gpu
def test_cuda_compile_double_backward(rng):
    torch.manual_seed(0)
    check_compiled_double_backward(TrilinearModel(6, 5).cuda(),
                                   [sample(rng, 6, 5, device="cuda")[1]])


@pytest.mark.gpu
@pytest.mark.parametrize("n_points,n_feats", [(0, 5), (4, 0), (0, 0)])
def test_cuda_double_backward_empty(rng, n_points, n_feats):
    """Empty rows: grad_points is still written (zeros)."""
    feats, points = sample(rng, n_points, n_feats, device="cuda")
    grad_out = torch.zeros(n_points, n_feats, dtype=torch.float64, device="cuda")
    results = trilinear.trilinear_double_backward(torch.zeros_like(feats),
                                                  torch.ones_like(points), grad_out, feats,
                                                  points)
    assert [r.shape for r in results] == [grad_out.shape, feats.shape, points.shape]
    assert torch.equal(results[2].cpu(), torch.zeros(n_points, 3, dtype=torch.float64))


@pytest.mark.gpu
def test_gradcheck_cuda(rng):
    feats, points = sample(rng, 37, 9, device="cuda")
    assert torch.autograd.gradcheck(trilinear.trilinear_interpolation,
                                    (feats.requires_grad_(), points.requires_grad_()))


@pytest.mark.gpu
def test_cuda_runs_on_the_current_stream(rng):
    feats, points = sample(rng, 2000, 64, torch.float32)
    host = feats.pin_memory()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        device_feats = torch.zeros(2000, 8, 64, device="cuda")
        device_points = points.cuda()
        torch.cuda._sleep(200_000_000)
        device_feats.copy_(host, non_blocking=True)
        out = trilinear.trilinear_forward(device_feats, device_points)
    side.synchronize()
    torch.testing.assert_close(out.cpu(), trilinear.trilinear_forward(feats, points))


@pytest.mark.gpu
def test_cuda_opcheck(rng):
    feats, points = sample(rng, 5, 4, device="cuda")
    opcheck(torch.ops.ext.trilinear_interpolation.default,
            (feats.clone().requires_grad_(), points.clone().requires_grad_()))
    grad_out = torch.randn(5, 4, dtype=torch.float64, device="cuda")
    for flags in ((True, True), (True, False), (False, True)):
        opcheck(torch.ops.ext.trilinear_interpolation_backward.default,
                (grad_out, feats, points, *flags))
        opcheck(torch.ops.ext.trilinear_interpolation_backward.default,
                (grad_out.clone().requires_grad_(), feats.clone().requires_grad_(),
                 points.clone().requires_grad_(), *flags))
    opcheck(torch.ops.ext.trilinear_interpolation_double_backward.default,
            (torch.randn_like(feats), torch.randn_like(points), grad_out, feats, points))
    opcheck(torch.ops.ext.trilinear_interpolation_double_backward.default,
            (None, torch.randn_like(points), grad_out, feats, points, False, True, True))


@pytest.mark.gpu
def test_cuda_compile_fullgraph(rng):
    torch.manual_seed(0)
    check_compiled(TrilinearModel(6, 5).cuda(), [sample(rng, 6, 5, device="cuda")[1]])


@pytest.mark.gpu
def test_cuda_device_errors():
    feats, points = inputs(device="cuda")
    with pytest.raises(RuntimeError, match="trilinear_interpolation: points is on cpu; "
                                           "trilinear_interpolation needs CUDA tensors"):
        trilinear.trilinear_interpolation(feats, points.cpu())
    with pytest.raises(RuntimeError, match="trilinear_interpolation: points is on cuda:0; "
                                           "trilinear_interpolation needs CPU tensors"):
        trilinear.trilinear_interpolation(feats.cpu(), points)
    with pytest.raises(TypeError, match="trilinear_interpolation: feats must be float32 or "
                                        "float64, got int32"):
        trilinear.trilinear_interpolation(feats.int(), points)


@pytest.mark.gpu
def test_cuda_error_is_an_exception():
    feats, points = inputs(device="cuda")
    out = torch.empty(4, 6, device="cuda")
    fn = "trilinear_interpolation"
    descs = [_ffi.describe(trilinear.ffi, fn, n, t)
             for n, t in (("feats", feats), ("points", points), ("out", out))]
    for desc in descs:
        desc.device_index = 99
    with pytest.raises(RuntimeError, match=fn + ": CUDA error: invalid device ordinal"):
        _ffi.check(trilinear.ffi, trilinear.lib,
                   trilinear.lib.trilinear_forward_cuda(*descs, trilinear.ffi.NULL))
    assert trilinear.trilinear_interpolation(feats, points).shape == (4, 6)


@pytest.mark.gpu
@pytest.mark.parametrize("n_points,n_feats", [(0, 5), (4, 0), (0, 0)])
def test_cuda_empty(rng, n_points, n_feats):
    feats, points = sample(rng, n_points, n_feats, device="cuda")
    points.requires_grad_()
    trilinear.trilinear_interpolation(feats, points).sum().backward()
    assert torch.equal(points.grad.cpu(), torch.zeros(n_points, 3, dtype=torch.float64))
