"""Property-based tests (Hypothesis) of every public entry point of the five
further op families (gelu, trilinear, upsample, conv, pcl): the functions,
the raw forward/backward (and double backward) entry points, the
autograd.Functions, the nn.Modules and the torch.library custom ops.

Inputs are drawn across dtypes, shapes (empty and size-1 dimensions too),
layouts (contiguous, with a storage offset, transposed, strided, expanded),
values (NaN, infinities, subnormals, signed zeros, huge magnitudes) and
option values, valid or not. Every call must either equal its float64
reference (PyTorch's own op, or the seed's formula in _ext/*/reference.py)
within the dtype's tolerance, or raise TypeError, ValueError, RuntimeError or
MemoryError with a message that starts with the function's name. Where the
validity of a call is easy to state (dtype, contiguity, shapes) it is also
checked that exactly the valid calls succeed.

`make fuzz` runs this file with the "fuzz" profile (tests/conftest.py).
"""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import event, given
from hypothesis import strategies as st

from _ext import conv, gelu, pcl, trilinear, upsample
from _ext.pcl.reference import pcl_grad_reference, pcl_loss_reference
from _ext.trilinear.reference import trilinear_reference
from test_pcl import sample_inputs

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
ERRORS = (TypeError, ValueError, RuntimeError, MemoryError)
FLOAT_DTYPES = [torch.float32, torch.float64]
OTHER_DTYPES = [torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8,
                torch.bool, torch.complex64]
SPECIAL_VALUES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-310, -1e-310, 1e-40, -1e-40,
                  1e-45, 5e-324]
# not a tensor: what a caller may pass by mistake
NOT_TENSORS = [None, 1.5, [1.0, 2.0], "x", np.zeros((2, 2), np.float32)]


# ---------------------------------------------------------------------------
# strategies and checks shared by the families

def mostly(valid, invalid, share=0.85):
    """One of `valid` about `share` of the time, else one of `invalid`; an
    entry that is a strategy is drawn from."""
    repeat = max(1, round(share / (1 - share) * len(invalid) / len(valid)))
    return st.sampled_from(list(valid) * repeat + list(invalid)).flatmap(
        lambda choice: choice if isinstance(choice, st.SearchStrategy) else st.just(choice))


def dtypes():
    """Mostly float32/float64, sometimes a dtype the ops refuse."""
    return mostly(FLOAT_DTYPES, OTHER_DTYPES, 0.93)


def layouts():
    """Mostly contiguous (with or without a storage offset), else a
    transposed, strided or expanded view (contiguous all the same where the
    dimensions it touches have size 1)."""
    return mostly(["contiguous", "offset"], ["transposed", "strided", "expanded"], 0.85)


@st.composite
def arrays(draw, shape, magnitude=1.0, specials=True):
    """A float64 NumPy array of `shape`: normal values times `magnitude`, and a
    few special values at drawn positions."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    array = np.asarray(rng.standard_normal(shape) * magnitude)
    if array.size and specials:
        flat = array.reshape(-1)
        for index, value in draw(st.lists(st.tuples(st.integers(0, array.size - 1),
                                                    st.sampled_from(SPECIAL_VALUES)),
                                          max_size=3)):
            flat[index] = value
    return array


def laid_out(array, dtype, device, layout):
    """A tensor of array's shape and dtype on `device`, in `layout`. Its
    values are array's, except "expanded", which repeats the first entry of
    dimension 0; references read the tensor, never the array."""
    base = torch.from_numpy(array.copy()).to(device=device, dtype=dtype)
    shape = base.shape
    if layout == "offset":  # contiguous, 3 elements into its storage
        storage = torch.zeros(base.numel() + 3, dtype=dtype, device=device)
        storage[3:] = base.reshape(-1)
        return storage[3:].view(shape)
    if layout == "transposed" and base.dim() >= 2:
        return base.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "strided" and base.dim() >= 1:
        wide = torch.zeros(*shape[:-1], 2 * shape[-1], dtype=dtype, device=device)
        wide[..., ::2] = base
        return wide[..., ::2]
    if layout == "expanded" and base.dim() >= 1 and shape[0] > 0:
        return base[:1].expand(shape)
    return base


@st.composite
def tensors(draw, shape, device, dtype=None, layout=None, magnitude=1.0, specials=True):
    dtype = draw(dtypes()) if dtype is None else dtype
    layout = draw(layouts()) if layout is None else layout
    return laid_out(draw(arrays(shape, magnitude, specials)), dtype, device, layout)


def valid_tensor(x):
    return isinstance(x, torch.Tensor) and x.dtype in FLOAT_DTYPES and x.is_contiguous()


def check_error(error, *names):
    """error is one of the four exceptions and starts with one of the names."""
    event("refused: %s" % type(error).__name__)
    assert isinstance(error, ERRORS), repr(error)
    assert str(error).startswith(tuple(name + ": " for name in names)), str(error)


def tolerance(dtype, scale=1.0):
    """The dtype's rounding, relative and absolute, the latter in units of
    `scale` (the magnitude the result is made of)."""
    if dtype == torch.float64:
        return dict(rtol=1e-10, atol=1e-10 * scale)
    return dict(rtol=2e-5, atol=2e-5 * scale)


def assert_matches(actual, expected, scale=1.0, any_nonfinite=False):
    """actual equals the float64 `expected` rounded to actual's dtype (so an
    overflow to inf is one in both), NaN where it is NaN.

    any_nonfinite: NaN and +-inf count as one (both non-finite where either
    is), for ops whose reference meets an infinite input in another order
    (inf - inf = NaN in one, inf in the other)."""
    event("compared: %s" % ("empty" if actual.numel() == 0 else "non-empty"))
    dtype = actual.dtype
    actual = actual.detach().double().cpu()
    expected = expected.detach().to(dtype).double().cpu()
    if any_nonfinite:
        nonfinite = ~torch.isfinite(expected)
        assert torch.equal(~torch.isfinite(actual), nonfinite), (actual, expected)
        actual, expected = actual[~nonfinite], expected[~nonfinite]
    torch.testing.assert_close(actual, expected, equal_nan=True, **tolerance(dtype, scale))


def has_nonfinite(*tensors):
    return any(not bool(torch.isfinite(t.detach()).all()) for t in tensors)


def magnitude_of(*tensors):
    """The largest finite magnitude among the tensors (1 at least)."""
    largest = 1.0
    for t in tensors:
        finite = t.detach().double()[torch.isfinite(t.detach().double())]
        if finite.numel():
            largest = max(largest, float(finite.abs().max()))
    return largest


def maybe_not_a_tensor(draw, tensor):
    """Now and then a non-tensor in the tensor's place."""
    return draw(mostly([tensor], NOT_TENSORS, 0.95))


def grad_like(draw, out):
    """A finite upstream gradient for `out` (moderate values, signed zeros
    and subnormals included)."""
    array = draw(arrays(tuple(out.shape), 1.0, specials=False))
    flat = array.reshape(-1)
    for index, value in draw(st.lists(st.tuples(st.integers(0, max(flat.size - 1, 0)),
                                                st.sampled_from([0.0, -0.0, 1e-310, 1e-40])),
                                      max_size=2 if flat.size else 0)):
        flat[index] = value
    return torch.from_numpy(array).to(dtype=out.dtype, device=out.device)


def requiring_grad(x):
    """x as a leaf that requires grad, with x's strides and storage offset."""
    return x.detach().requires_grad_()


# ---------------------------------------------------------------------------
# gelu

GELU_MODES = ["none", "tanh", "sigmoid"]
JUNK_APPROXIMATIONS = ["erf", "", "Tanh", None, 1, ["tanh"]]


def gelu_reference(x, approximate):
    """GELU of x in float64, through torch's autograd-able ops."""
    x = x.double()
    if approximate == "sigmoid":
        return x * torch.sigmoid(1.702 * x)
    return F.gelu(x, approximate=approximate)


def gelu_slope_reference(x, approximate):
    """dGELU/dx in float64; beyond 1e10 in magnitude the slope is its limit
    (1 or 0) to the last bit, and there torch's own formula would overflow."""
    x = x.detach().double().clamp(-1e10, 1e10).requires_grad_()
    (slope,) = torch.autograd.grad(gelu_reference(x, approximate).sum(), x)
    return slope


def gelu_call(entry, x, approximate):
    if entry == "gelu":
        return gelu.gelu(x, approximate)
    if entry == "gelu_forward":
        return gelu.gelu_forward(x, approximate)
    if entry == "function":
        return gelu.GeluFunction.apply(x, approximate)
    if entry == "module":
        return gelu.GELU(approximate)(x)
    return torch.ops.ext.gelu(x, approximate)


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_gelu_forward_and_gradient(device, data):
    entry = data.draw(st.sampled_from(["gelu", "gelu_forward", "function", "module", "op"]))
    shape = tuple(data.draw(st.lists(st.integers(0, 5), max_size=4)))
    magnitude = data.draw(st.sampled_from([1.0, 30.0, 1e20, 1e300]))
    x = data.draw(tensors(shape, device, magnitude=magnitude))
    approximate = data.draw(mostly(GELU_MODES, JUNK_APPROXIMATIONS))
    if entry == "op":  # the dispatcher itself refuses what the schema does not allow
        approximate = approximate if isinstance(approximate, str) else "erf"
    else:
        x = maybe_not_a_tensor(data.draw, x)
    valid = valid_tensor(x) and approximate in GELU_MODES
    differentiable = entry != "gelu_forward" and valid
    if differentiable:
        x = requiring_grad(x)
    try:
        out = gelu_call(entry, x, approximate)
    except ERRORS as error:
        assert not valid, error
        check_error(error, "gelu", "GELU")
        return
    assert valid and out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
    assert_matches(out, gelu_reference(x.detach(), approximate))
    if differentiable and out.numel():
        grad_out = grad_like(data.draw, out)
        (grad,) = torch.autograd.grad(out, x, grad_out)
        expected = grad_out.double() * gelu_slope_reference(x, approximate)
        assert_matches(grad, expected, magnitude_of(grad_out))


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_gelu_backward_entry_points(device, data):
    entry = data.draw(st.sampled_from(["gelu_backward", "op"]))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), max_size=3)))
    x = data.draw(tensors(shape, device, magnitude=data.draw(st.sampled_from([1.0, 1e30]))))
    grad_shape = data.draw(mostly([shape], [tuple(s + 1 for s in shape)[::-1]]))
    grad_out = data.draw(tensors(grad_shape, device, data.draw(mostly([x.dtype], [None])),
                                 magnitude=1.0, specials=False))
    approximate = data.draw(mostly(GELU_MODES, ["erf"]))
    if entry == "gelu_backward":
        grad_out = maybe_not_a_tensor(data.draw, grad_out)
        approximate = data.draw(mostly([approximate], JUNK_APPROXIMATIONS))
    valid = (valid_tensor(x) and valid_tensor(grad_out) and grad_out.dtype == x.dtype
             and grad_out.shape == x.shape and approximate in GELU_MODES)
    call = gelu.gelu_backward if entry == "gelu_backward" else torch.ops.ext.gelu_backward
    try:
        grad = call(grad_out, x, approximate)
    except ERRORS as error:
        assert not valid, error
        check_error(error, "gelu_backward")
        return
    assert valid and grad.shape == x.shape
    assert_matches(grad, grad_out.double() * gelu_slope_reference(x, approximate),
                   magnitude_of(grad_out))


def gelu_curvature_reference(x, approximate):
    """d2GELU/dx2 in float64, clamped as gelu_slope_reference: beyond 1e10 in
    magnitude the curvature is its limit 0."""
    x = x.detach().double().clamp(-1e10, 1e10).requires_grad_()
    (slope,) = torch.autograd.grad(gelu_reference(x, approximate).sum(), x, create_graph=True)
    (curvature,) = torch.autograd.grad(slope.sum(), x)
    return curvature


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_gelu_double_backward_entry_points(device, data):
    entry = data.draw(st.sampled_from(["gelu_double_backward", "op"]))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), max_size=3)))
    x = data.draw(tensors(shape, device, magnitude=data.draw(st.sampled_from([1.0, 1e30]))))
    grad_grad_input, grad_output = (
        data.draw(tensors(data.draw(mostly([shape], [tuple(s + 1 for s in shape)[::-1]])),
                          device, data.draw(mostly([x.dtype], [None])), magnitude=1.0,
                          specials=False))
        for _ in range(2))
    approximate = data.draw(mostly(GELU_MODES, ["erf"]))
    wanted = (data.draw(st.booleans()), data.draw(st.booleans()))
    if entry == "gelu_double_backward":
        grad_output = maybe_not_a_tensor(data.draw, grad_output)
        approximate = data.draw(mostly([approximate], JUNK_APPROXIMATIONS))
    valid = (all(valid_tensor(t) and t.dtype == x.dtype and t.shape == x.shape
                 for t in (x, grad_grad_input, grad_output)) and approximate in GELU_MODES)
    call = (gelu.gelu_double_backward if entry == "gelu_double_backward"
            else torch.ops.ext.gelu_double_backward)
    try:
        grads = call(grad_grad_input, grad_output, x, approximate, *wanted)
    except ERRORS as error:
        assert not valid, error
        check_error(error, "gelu_double_backward")
        return
    assert valid or not any(wanted)
    if not any(wanted):
        return
    expected = (grad_grad_input.double() * gelu_slope_reference(x, approximate),
                grad_grad_input.double() * grad_output.double()
                * gelu_curvature_reference(x, approximate))
    scale = magnitude_of(grad_grad_input) * magnitude_of(grad_output)
    for asked, ours, theirs in zip(wanted, grads, expected):
        if asked:
            assert_matches(ours, theirs, scale)
        elif entry == "gelu_double_backward":
            assert ours is None
        else:  # the op's stand-in for a gradient not asked for
            assert ours.numel() == 0


# ---------------------------------------------------------------------------
# trilinear

def trilinear_call(entry, feats, points):
    if entry == "function":
        return trilinear.TrilinearInterpolationFunction.apply(feats, points)
    if entry == "module":
        return trilinear.TrilinearInterpolation()(feats, points)
    if entry == "trilinear_forward":
        return trilinear.trilinear_forward(feats, points)
    if entry == "op":
        return torch.ops.ext.trilinear_interpolation(feats, points)
    return trilinear.trilinear_interpolation(feats, points)


@st.composite
def trilinear_inputs(draw, device):
    n_points, n_feats = draw(st.integers(0, 6)), draw(st.integers(0, 5))
    feats_shape, points_shape = (n_points, 8, n_feats), (n_points, 3)
    feats_shape = draw(mostly([feats_shape], [(n_points, 7, n_feats), (n_points, 8 * n_feats)],
                              0.9))
    points_shape = draw(mostly([points_shape], [(n_points + 1, 3), (n_points, 2), (3,)], 0.9))
    dtype = draw(dtypes())
    feats = draw(tensors(feats_shape, device, dtype, magnitude=100.0))
    points_dtype = draw(mostly([dtype], [None], 0.9))
    points = draw(tensors(points_shape, device, points_dtype, magnitude=2.0))
    return feats, points


def trilinear_scale(feats, points):
    """The size of the products the output sums: |feats| times the weights'
    magnitude, up to (1 + |u|)(1 + |v|)(1 + |w|) outside the cube."""
    return magnitude_of(feats) * (1 + magnitude_of(points)) ** 3


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_trilinear(device, data):
    entry = data.draw(st.sampled_from(["trilinear_interpolation", "trilinear_forward",
                                       "function", "module", "op"]))
    feats, points = data.draw(trilinear_inputs(device))
    if entry != "op":
        feats = maybe_not_a_tensor(data.draw, feats)
        points = maybe_not_a_tensor(data.draw, points)
    valid = (valid_tensor(feats) and valid_tensor(points) and points.dtype == feats.dtype
             and feats.dim() == 3 and feats.shape[1] == 8
             and tuple(points.shape) == (feats.shape[0], 3))
    differentiable = entry != "trilinear_forward" and valid
    if differentiable:
        feats, points = requiring_grad(feats), requiring_grad(points)
    try:
        out = trilinear_call(entry, feats, points)
    except ERRORS as error:
        assert not valid, error
        check_error(error, "trilinear_interpolation")
        return
    assert valid and tuple(out.shape) == (feats.shape[0], feats.shape[2])
    feats64 = feats.detach().double().requires_grad_()
    points64 = points.detach().double().requires_grad_()
    expected = trilinear_reference(feats64, points64)
    scale = trilinear_scale(feats, points)
    assert_matches(out, expected, scale, any_nonfinite=True)
    if differentiable and out.numel():
        grad_out = grad_like(data.draw, out)
        grads = torch.autograd.grad(out, (feats, points), grad_out)
        expected_grads = torch.autograd.grad(expected, (feats64, points64), grad_out.double())
        for ours, theirs in zip(grads, expected_grads):
            assert_matches(ours, theirs, scale * magnitude_of(grad_out) * (1 + out.shape[1]),
                           any_nonfinite=True)


def trilinear_grads_reference(grad_out, feats, points):
    """The seed formula's gradients by autograd in float64; with F = 0 the
    points' gradient is an empty sum, 0 (autograd there multiplies a zero
    by whatever the points hold, NaN included)."""
    feats64 = feats.detach().double().requires_grad_()
    points64 = points.detach().double().requires_grad_()
    grads = torch.autograd.grad(trilinear_reference(feats64, points64), (feats64, points64),
                                grad_out.double())
    return grads if feats.shape[2] else (grads[0], torch.zeros_like(grads[1]))


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_trilinear_backward_entry_points(device, data):
    entry = data.draw(st.sampled_from(["trilinear_backward", "op"]))
    feats, points = data.draw(trilinear_inputs(device))
    rows = (feats.shape[0], feats.shape[2]) if feats.dim() == 3 else (1, 1)
    grad_shape = data.draw(mostly([rows], [(rows[0], rows[1] + 1)], 0.9))
    grad_out = data.draw(tensors(grad_shape, device, data.draw(mostly([feats.dtype], [None])),
                                 magnitude=1.0, specials=False))
    feats_grad, points_grad = data.draw(st.booleans()), data.draw(st.booleans())
    valid = (valid_tensor(feats) and valid_tensor(points) and valid_tensor(grad_out)
             and points.dtype == feats.dtype == grad_out.dtype and feats.dim() == 3
             and feats.shape[1] == 8 and tuple(points.shape) == (feats.shape[0], 3)
             and tuple(grad_out.shape) == rows)
    call = (trilinear.trilinear_backward if entry == "trilinear_backward"
            else torch.ops.ext.trilinear_interpolation_backward)
    try:
        grads = call(grad_out, feats, points, feats_grad, points_grad)
    except ERRORS as error:
        assert not valid, error
        check_error(error, "trilinear_interpolation_backward")
        return
    assert valid or not (feats_grad or points_grad)
    if not (feats_grad or points_grad):
        return
    expected = trilinear_grads_reference(grad_out, feats, points)
    scale = trilinear_scale(feats, points) * magnitude_of(grad_out) * (1 + rows[1])
    for asked, ours, theirs in zip((feats_grad, points_grad), grads, expected):
        if asked:
            assert_matches(ours, theirs, scale, any_nonfinite=True)
        elif entry == "trilinear_backward":
            assert ours is None
        else:  # the op's stand-in for a gradient not asked for
            assert ours.numel() == 0


def trilinear_double_backward_reference(grad_grad_feats, grad_grad_points, grad_out, feats,
                                        points):
    """(d/d grad_out, d/d feats, d/d points) of <grad_feats, grad_grad_feats>
    + <grad_points, grad_grad_points> (None: no such term), by autograd of the
    seed's formula in float64 (finite inputs)."""
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


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_trilinear_double_backward_entry_points(device, data):
    entry = data.draw(st.sampled_from(["trilinear_double_backward", "op"]))
    feats, points = data.draw(trilinear_inputs(device))
    rows = (feats.shape[0], feats.shape[2]) if feats.dim() == 3 else (1, 1)

    def drawn(shape):
        """A tensor mostly of `shape` and feats' dtype, without special values."""
        shape = data.draw(mostly([shape], [tuple(s + 1 for s in shape)], 0.9))
        return data.draw(tensors(shape, device, data.draw(mostly([feats.dtype], [None])),
                                 magnitude=1.0, specials=False))

    grad_out = drawn(rows)
    grad_grad_feats, grad_grad_points = (data.draw(mostly([drawn(tuple(t.shape))], [None], 0.8))
                                         for t in (feats, points))
    wanted = tuple(data.draw(st.booleans()) for _ in range(3))
    valid = (valid_tensor(feats) and valid_tensor(points) and valid_tensor(grad_out)
             and points.dtype == feats.dtype == grad_out.dtype and feats.dim() == 3
             and feats.shape[1] == 8 and tuple(points.shape) == (feats.shape[0], 3)
             and tuple(grad_out.shape) == rows
             and (grad_grad_feats is not None or grad_grad_points is not None)
             and all(t is None or (valid_tensor(t) and t.dtype == feats.dtype
                                   and t.shape == like.shape)
                     for t, like in ((grad_grad_feats, feats), (grad_grad_points, points))))
    call = (trilinear.trilinear_double_backward if entry == "trilinear_double_backward"
            else torch.ops.ext.trilinear_interpolation_double_backward)
    try:
        results = call(grad_grad_feats, grad_grad_points, grad_out, feats, points, *wanted)
    except ERRORS as error:
        assert not valid, error
        check_error(error, "trilinear_interpolation_double_backward")
        return
    assert valid or not any(wanted)
    if not any(wanted):
        return
    for asked, ours, like in zip(wanted, results, (grad_out, feats, points)):
        if asked:
            assert ours.shape == like.shape and ours.dtype == like.dtype
        elif entry == "trilinear_double_backward":
            assert ours is None
        else:  # the op's stand-in for a gradient not asked for
            assert ours.numel() == 0
    if has_nonfinite(feats, points):
        return  # which terms meet inf * 0 is the formula's order: values compared where finite
    expected = trilinear_double_backward_reference(grad_grad_feats, grad_grad_points, grad_out,
                                                   feats, points)
    incoming = [t for t in (grad_grad_feats, grad_grad_points) if t is not None]
    scale = (trilinear_scale(feats, points) * magnitude_of(grad_out) * magnitude_of(*incoming)
             * (1 + rows[1]))
    for asked, ours, theirs in zip(wanted, results, expected):
        if asked:
            assert_matches(ours, theirs, scale)


# ---------------------------------------------------------------------------
# upsample

UPSAMPLE_MODES = ["half_pixel", "align_corners", "asymmetric"]
JUNK_SCALES = [0, -1.5, math.nan, math.inf, "2", True, None, (2.0,), (1, 2, 3), 1e300, 10**400]
JUNK_SIZES = [0, -3, 2.5, (4,), (2, 3, 4), 2**31, "3", True, [None, 2]]
JUNK_MODES = ["bilinear", "tf_half_pixel", "", 3, ["asymmetric"]]
JUNK_FLAGS = [1, "yes", 0.0]


def sizes(low=1, high=5):
    """Mostly in [low, high], sometimes 0."""
    return mostly(range(low, high + 1), [0], 0.9)


@st.composite
def images(draw, device, magnitude=10.0):
    """(N, C, H, W) tensors, now and then of another rank."""
    shape = (draw(sizes(1, 3)), draw(sizes(1, 3)), draw(sizes(1, 6)), draw(sizes(1, 6)))
    shape = draw(mostly([shape], [shape[1:], shape + (2,)], 0.9))
    return draw(tensors(shape, device, magnitude=magnitude))


def reference_scales(scale_h, scale_w):
    """The scales as the references take them: None for none, and a scale
    whose reciprocal overflows (subnormal) as 1e-300, which reads the same
    inputs (every output past the first reads the last one); the references
    would compute inf * 0 = NaN there, as _ext.upsample did before."""
    return tuple(max(s, 1e-300) if s else None for s in (scale_h, scale_w))


def numpy_reference(mode, scale_h, scale_w):
    """Whether the NumPy reference stands in for torch's: for asymmetric,
    which torch lacks, and for scales below 1e-6, whose source positions
    torch's kernel casts to int64 out of range."""
    return mode == "asymmetric" or any(s is not None and s < 1e-6 for s in (scale_h, scale_w))


def taps(n_in, n_out, mode, scale, real=np.float64):
    """(i0, i1, lambda) of each output index along one axis, computed in
    `real`, from the definitions in _ext.upsample's docstring."""
    o = np.arange(n_out).astype(real)
    if n_in == n_out:  # copied
        return np.arange(n_out), np.arange(n_out), np.zeros(n_out, real)
    if mode == "align_corners":
        src = o * (real(n_in - 1) / real(n_out - 1)) if n_out > 1 else np.zeros(n_out, real)
    else:
        # a ratio that overflows `real` is its largest value, as in upsample_math.h
        largest = np.finfo(real).max
        ratio = real(n_in) / real(n_out)
        if scale:
            ratio = real(1.0 / scale) if 1.0 / scale < float(largest) else largest
        half = real(0.5)
        with np.errstate(over="ignore"):  # positions past the largest value: inf
            src = np.maximum(real(0), ratio * (o + half) - half) if mode == "half_pixel" \
                else ratio * o
    i0 = np.minimum(np.floor(src), real(n_in - 1))
    i1 = np.minimum(i0 + 1, real(n_in - 1))
    return (i0.astype(np.int64), i1.astype(np.int64),
            np.clip(src - i0, real(0), real(1)).astype(real))


def tap_resize(x, size, mode, scale_h, scale_w):
    """x (NumPy float64) resized by blending each output's two taps along
    each axis, (1 - l) a + l b, the arithmetic torch and _ext.upsample do (a
    weight of 0 times an infinite input is NaN in all three), where the
    interpolation matrices of tests/ops/test_upsample.py would spread one
    infinite input over a whole row."""
    h0, h1, lh = taps(x.shape[2], size[0], mode, scale_h, x.dtype.type)
    w0, w1, lw = taps(x.shape[3], size[1], mode, scale_w, x.dtype.type)

    def row(h):
        return (1 - lw) * x[:, :, h][..., w0] + lw * x[:, :, h][..., w1]

    with np.errstate(invalid="ignore", over="ignore"):
        return (1 - lh)[:, None] * row(h0) + lh[:, None] * row(h1)


def tap_resize_backward(grad, input_size, mode, scale_h, scale_w):
    """The gradient of tap_resize: each output's gradient added into the
    inputs it read, times its weights (torch's scatter), axis by axis; an
    input nobody read gets exactly 0."""
    real = grad.dtype.type
    h0, h1, lh = taps(input_size[0], grad.shape[2], mode, scale_h, real)
    w0, w1, lw = taps(input_size[1], grad.shape[3], mode, scale_w, real)
    columns = np.zeros(grad.shape[:3] + (input_size[1],), real)
    out = np.zeros(grad.shape[:2] + tuple(input_size), real)
    with np.errstate(invalid="ignore", over="ignore"):
        np.add.at(columns, (slice(None), slice(None), slice(None), w0), (1 - lw) * grad)
        np.add.at(columns, (slice(None), slice(None), slice(None), w1), lw * grad)
        np.add.at(out, (slice(None), slice(None), h0), (1 - lh)[:, None] * columns)
        np.add.at(out, (slice(None), slice(None), h1), lh[:, None] * columns)
    return out


def resize_reference(x, size, mode, scale_h, scale_w):
    """x resized to `size` with scales (0 for none): PyTorch's own
    aten.upsample_bilinear2d for its two modes, tap_resize for asymmetric
    (and tiny scales). In float64; in x's own dtype where x holds NaN or
    infinities, so that which outputs meet them with a weight of exactly 0
    (and become NaN) is decided by the same rounding as the kernel's."""
    scale_h, scale_w = reference_scales(scale_h, scale_w)
    x = x.detach().cpu()
    x = x if has_nonfinite(x) else x.double()
    if x.numel() == 0:  # torch refuses empty tensors
        return x.new_zeros(tuple(x.shape[:2]) + tuple(size))
    if numpy_reference(mode, scale_h, scale_w):
        return torch.from_numpy(tap_resize(x.numpy(), size, mode, scale_h, scale_w))
    return torch.ops.aten.upsample_bilinear2d(x, list(size), mode == "align_corners",
                                              scale_h, scale_w)


def resize_backward_reference(grad, input_size, mode, scale_h, scale_w):
    scale_h, scale_w = reference_scales(scale_h, scale_w)
    grad = grad.detach().cpu()
    grad = grad if has_nonfinite(grad) else grad.double()
    if grad.numel() == 0:
        return grad.new_zeros(tuple(grad.shape[:2]) + tuple(input_size))
    if numpy_reference(mode, scale_h, scale_w):
        return torch.from_numpy(tap_resize_backward(grad.numpy(), input_size, mode, scale_h,
                                                    scale_w))
    return torch.ops.aten.upsample_bilinear2d_backward(
        grad, list(grad.shape[2:]), list(grad.shape[:2]) + list(input_size),
        mode == "align_corners", scale_h, scale_w)


def resize_scale(grad, input_size):
    """How many outputs an input's gradient sums, times their magnitude."""
    readers = [math.ceil(o / i) + 2 for o, i in zip(grad.shape[2:], input_size)]
    return magnitude_of(grad) * readers[0] * readers[1]


@st.composite
def upsample_options(draw):
    """The keyword arguments of upsample_bilinear(), valid or not."""
    by_scale = draw(st.booleans())
    scale = draw(mostly([st.floats(0.3, 4.0), st.tuples(st.floats(0.3, 4.0), st.floats(0.3, 4.0))],
                        JUNK_SCALES))
    size = draw(mostly([st.integers(1, 9), st.tuples(st.integers(1, 9), st.integers(1, 9))],
                       JUNK_SIZES))
    options = dict(scale_factor=scale) if by_scale else dict(size=size)
    if draw(mostly([False], [True], 0.95)):  # both, or neither
        options = dict(scale_factor=scale, size=size) if draw(st.booleans()) else {}
    mode = options["coordinate_mode"] = draw(mostly([None] + UPSAMPLE_MODES, JUNK_MODES))
    # torch's align_corners in place of a mode, or beside one (agreeing or not)
    options["align_corners"] = draw(mostly([None, True, False] if mode is None else [None],
                                           [True, False] + JUNK_FLAGS))
    recompute = [None, True, False] if by_scale else [None]
    options["recompute_scale_factor"] = draw(mostly(recompute, [True] + JUNK_FLAGS, 0.9))
    return options


def resolved_mode(coordinate_mode, align_corners):
    if coordinate_mode is None:
        return "align_corners" if align_corners else "half_pixel"
    return coordinate_mode


def pair_of(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_upsample_bilinear_and_module(device, data):
    entry = data.draw(st.sampled_from(["upsample_bilinear", "module"]))
    x = maybe_not_a_tensor(data.draw, data.draw(images(device)))
    options = data.draw(upsample_options())
    valid_x = valid_tensor(x) and x.dim() == 4 and min(x.shape[2:]) >= 1
    if valid_x:
        x = requiring_grad(x)
    try:
        out = (upsample.upsample_bilinear(x, **options) if entry == "upsample_bilinear"
               else upsample.UpsampleBilinear(**options)(x))
    except ERRORS as error:
        check_error(error, "upsample_bilinear", "UpsampleBilinear")
        return
    assert valid_x
    mode = resolved_mode(options["coordinate_mode"], options["align_corners"])
    torch_options = {key: value for key, value in options.items()
                     if key in ("scale_factor", "size", "recompute_scale_factor")}
    expected_size = F.interpolate(torch.zeros(1, 1, *x.shape[2:]), mode="bilinear",
                                  **torch_options).shape[2:]
    assert out.shape == x.shape[:2] + expected_size
    scales = (0.0, 0.0)
    if "scale_factor" in options and not options["recompute_scale_factor"]:
        scales = tuple(float(s) for s in pair_of(options["scale_factor"]))
    assert_matches(out, resize_reference(x, tuple(out.shape[2:]), mode, *scales),
                   magnitude_of(x), any_nonfinite=True)
    if out.numel():
        grad_out = grad_like(data.draw, out)
        (grad,) = torch.autograd.grad(out, x, grad_out)
        expected = resize_backward_reference(grad_out, tuple(x.shape[2:]), mode, *scales)
        assert_matches(grad, expected, resize_scale(grad_out, x.shape[2:]))


@st.composite
def explicit_geometry(draw, junk):
    """(size, coordinate_mode, (scale_h, scale_w)) as the op and the Function
    take them; with `junk`, values of the right types may still be wrong."""
    size = (draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    mode = draw(st.sampled_from(UPSAMPLE_MODES))
    scales = draw(st.tuples(mostly([0.0, st.floats(0.1, 5.0)], [st.floats(1e-310, 1e-300)]),
                            mostly([0.0, st.floats(0.1, 5.0)], [5e-324])))
    if junk:
        size = draw(mostly([size], [(0, 3), (-1, 2), (2**31, 1)]))
        mode = draw(mostly([mode], ["bilinear"]))
        scales = draw(mostly([scales], [(-1.0, 0.0), (math.nan, 1.0), (0.0, math.inf)]))
    return size, mode, scales


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_upsample_function_and_ops(device, data):
    """The explicit (size, mode, scales) entry points: the forward op and
    UpsampleBilinearFunction, the backward op and upsample_bilinear_backward."""
    entry = data.draw(st.sampled_from(["function", "op", "backward_op", "backward"]))
    size, mode, scales = data.draw(explicit_geometry(junk=True))
    if entry == "backward" and 0.0 in scales:  # its scale_factor is a pair or None
        scales = (0.0, 0.0)
    valid_geometry = (min(size) >= 1 and max(size) < 2**31 and mode in UPSAMPLE_MODES
                      and all(s >= 0 and math.isfinite(s) for s in scales))
    if entry.startswith("backward"):
        grad = data.draw(images(device, magnitude=1.0))
        valid = (valid_geometry and valid_tensor(grad) and grad.dim() == 4
                 and min(grad.shape[2:]) >= 1)
        name = "upsample_bilinear_backward"
    else:
        x = data.draw(images(device))
        valid = valid_geometry and valid_tensor(x) and x.dim() == 4 and min(x.shape[2:]) >= 1
        if valid:
            x = requiring_grad(x)
        name = "upsample_bilinear"
    try:
        if entry == "function":
            out = upsample.UpsampleBilinearFunction.apply(x, size, mode, scales)
        elif entry == "op":
            out = torch.ops.ext.upsample_bilinear(x, size, mode, *scales)
        elif entry == "backward_op":
            out = torch.ops.ext.upsample_bilinear_backward(grad, size, mode, *scales)
        else:  # the public backward takes the forward's scale_factor, not scales
            scale_factor = None if scales == (0.0, 0.0) else scales
            out = upsample.upsample_bilinear_backward(grad, size, scale_factor, mode)
    except ERRORS as error:
        assert not valid, error
        check_error(error, name)
        return
    assert valid
    if entry.startswith("backward"):
        expected = resize_backward_reference(grad, size, mode, *scales)
        assert_matches(out, expected, resize_scale(grad, size), any_nonfinite=True)
        return
    assert_matches(out, resize_reference(x, size, mode, *scales), magnitude_of(x),
                   any_nonfinite=True)
    if out.numel():
        grad_out = grad_like(data.draw, out)
        (grad,) = torch.autograd.grad(out, x, grad_out)
        expected = resize_backward_reference(grad_out, tuple(x.shape[2:]), mode, *scales)
        assert_matches(grad, expected, resize_scale(grad_out, x.shape[2:]))


@given(height=st.integers(1, 40), width=st.integers(1, 40),
       scale_factor=st.one_of(st.floats(0.05, 6.0),
                              st.tuples(st.floats(0.05, 6.0), st.floats(0.05, 6.0))),
       recompute=st.sampled_from([None, False, True]))
def test_output_size_is_torchs(height, width, scale_factor, recompute):
    try:
        expected = F.interpolate(torch.zeros(1, 1, height, width), scale_factor=scale_factor,
                                 mode="bilinear", recompute_scale_factor=recompute).shape[2:]
    except RuntimeError:  # torch refuses an output axis of size 0
        expected = None
    size = upsample.output_size((height, width), scale_factor,
                                recompute_scale_factor=recompute)
    assert expected is None and min(size) == 0 or size == tuple(expected)


# ---------------------------------------------------------------------------
# conv

def conv_reference(image, kernel):
    """F.conv2d with padding R and groups C in float64, image's shape."""
    image, kernel = image.double(), kernel.double()
    batch = image if image.dim() == 4 else image[None, None]
    channels = batch.shape[1]
    weight = kernel if kernel.dim() == 3 else kernel.expand(channels, -1, -1)
    out = F.conv2d(batch, weight[:, None], padding=kernel.shape[-1] // 2, groups=channels)
    return out.reshape(image.shape)


@st.composite
def conv_inputs(draw, device):
    """image (H, W) or (N, C, H, W) and kernel (K, K) or (C, K, K), now and
    then of a wrong shape. The kernel's values are finite: F.conv2d
    multiplies its zero padding by the kernel (inf * 0 = NaN at the border),
    where the shim, like the seed's niv_conv, leaves the outside out."""
    spatial = (draw(sizes(1, 7)), draw(sizes(1, 7)))
    channels = draw(sizes(1, 3))
    batched = draw(st.booleans())
    shape = (draw(sizes(1, 2)), channels) + spatial if batched else spatial
    shape = draw(mostly([shape], [shape[1:], (2,) + shape, (4,)], 0.9))
    side = 2 * draw(st.integers(0, 3)) + 1
    per_channel = draw(st.booleans())
    kernel_shape = ((channels if batched else 1), side, side) if per_channel else (side, side)
    kernel_shape = draw(mostly([kernel_shape], [(side + 1, side + 1), (side, side + 2),
                                                (channels + 1, side, side), (side,)], 0.9))
    image = draw(tensors(shape, device, magnitude=10.0))
    kernel_dtype = draw(mostly([image.dtype], [None], 0.9))
    kernel = draw(tensors(kernel_shape, device, kernel_dtype, specials=False))
    return image, kernel


def conv_valid(image, kernel):
    if not (valid_tensor(image) and valid_tensor(kernel) and kernel.dtype == image.dtype):
        return False
    if image.dim() not in (2, 4) or image.numel() == 0:
        return False
    side = kernel.shape[-1]
    channels = image.shape[1] if image.dim() == 4 else 1
    square = kernel.dim() >= 2 and kernel.shape[-2] == side and side % 2 == 1
    return square and (kernel.dim() == 2 or (kernel.dim() == 3 and kernel.shape[0] == channels))


def conv_scale(image, kernel):
    return magnitude_of(image) * magnitude_of(kernel) * kernel.shape[-1] ** 2


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_conv2d(device, data):
    entry = data.draw(st.sampled_from(["conv2d", "conv2d_forward", "function", "module", "op"]))
    image, kernel = data.draw(conv_inputs(device))
    if entry == "module":  # the module's own kernel, of the drawn kernel's values
        if not (kernel.dim() in (2, 3) and kernel.shape[-1] % 2 and kernel.numel()
                and valid_tensor(kernel)):
            return
        module = conv.Conv2d(kernel.shape[-1] // 2, kernel.shape[0] if kernel.dim() == 3
                             else None, dtype=kernel.dtype, device=device)
        if module.kernel.shape != kernel.shape:
            return
        with torch.no_grad():
            module.kernel.copy_(kernel)
        kernel = module.kernel
    elif entry != "op":
        image = maybe_not_a_tensor(data.draw, image)
        kernel = maybe_not_a_tensor(data.draw, kernel)
    valid = conv_valid(image, kernel)
    if valid:
        image = requiring_grad(image)
        kernel = kernel if entry == "module" else requiring_grad(kernel)
    try:
        if entry == "conv2d":
            out = conv.conv2d(image, kernel)
        elif entry == "conv2d_forward":
            out = conv.conv2d_forward(image, kernel)
        elif entry == "function":
            out = conv.Conv2dFunction.apply(image, kernel)
        elif entry == "module":
            out = module(image)
        else:
            out = torch.ops.ext.conv2d(image, kernel)
    except ERRORS as error:
        assert not valid, error
        check_error(error, "conv2d")
        return
    assert valid and out.shape == image.shape
    image64 = image.detach().double().requires_grad_()
    kernel64 = kernel.detach().double().requires_grad_()
    expected = conv_reference(image64, kernel64)
    assert_matches(out, expected, conv_scale(image, kernel), any_nonfinite=True)
    if entry != "conv2d_forward":
        grad_out = grad_like(data.draw, out)
        grads = torch.autograd.grad(out, (image, kernel), grad_out)
        expected_grads = torch.autograd.grad(expected, (image64, kernel64), grad_out.double())
        scales = (magnitude_of(grad_out) * conv_scale(image, kernel) / magnitude_of(image),
                  magnitude_of(grad_out) * magnitude_of(image) * image.numel())
        for ours, theirs, scale in zip(grads, expected_grads, scales):
            assert_matches(ours, theirs, scale, any_nonfinite=True)


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_conv2d_backward_entry_points(device, data):
    entry = data.draw(st.sampled_from(["conv2d_backward", "op"]))
    image, kernel = data.draw(conv_inputs(device))
    grad_shape = data.draw(mostly([tuple(image.shape)], [tuple(image.shape) + (1,), (3, 3)]))
    grad_out = data.draw(tensors(grad_shape, device, data.draw(mostly([image.dtype], [None])),
                                 specials=False))
    need_image, need_kernel = data.draw(st.booleans()), data.draw(st.booleans())
    if entry == "conv2d_backward":
        grad_out = maybe_not_a_tensor(data.draw, grad_out)
    valid = (conv_valid(image, kernel) and valid_tensor(grad_out)
             and grad_out.dtype == image.dtype and grad_out.shape == image.shape)
    call = conv.conv2d_backward if entry == "conv2d_backward" else torch.ops.ext.conv2d_backward
    try:
        grads = call(image, kernel, grad_out, need_image, need_kernel)
    except ERRORS as error:
        assert not valid, error
        check_error(error, "conv2d_backward")
        return
    assert valid
    image64 = image.detach().double().requires_grad_()
    kernel64 = kernel.detach().double().requires_grad_()
    expected = torch.autograd.grad(conv_reference(image64, kernel64), (image64, kernel64),
                                   grad_out.double())
    scales = (magnitude_of(grad_out) * magnitude_of(kernel) * kernel.shape[-1] ** 2,
              magnitude_of(grad_out) * magnitude_of(image) * image.numel())
    for asked, ours, theirs, scale in zip((need_image, need_kernel), grads, expected, scales):
        if asked:
            assert_matches(ours, theirs, scale, any_nonfinite=True)
        elif entry == "conv2d_backward":
            assert ours is None
        else:
            assert ours.numel() == 0


@given(radius=mostly([st.integers(0, 4)], [-1, True, 2.0, 16384]),
       channels=mostly([None, st.integers(1, 4)], [0, -2, 1.5]),
       dtype=mostly([None, torch.float32, torch.float64], [torch.int64, "float32"]),
       device=mostly(["cpu", None, torch.device("cpu")], ["gpu", 3.5]))
def test_conv2d_module_options(radius, channels, dtype, device):
    try:
        module = conv.Conv2d(radius, channels, dtype=dtype, device=device)
    except ERRORS as error:
        check_error(error, "Conv2d")
        return
    side = 2 * radius + 1
    assert module.kernel.shape == ((side, side) if channels is None else (channels, side, side))
    assert module.kernel.abs().max() <= 1.0 / side


# ---------------------------------------------------------------------------
# pcl

PCL_FAULTS = ["special values", "mismatch", "bad index", "dtype", "shape", "layout",
              "not a tensor"]
# pcl_probs and weights: log(0) = -inf, x / 0 = inf, NaN; no subnormals,
# whose reciprocals the float32 gradient rule overflows before the float64
# reference does
PCL_SPECIAL_VALUES = [0.0, -0.0, math.nan, math.inf, 1e-30, 1.0, 2.0]
MISMATCH_POLICIES = ["warn", "error", "ignore"]


def pcl_mismatches(args):
    """(count, first proposal) of the label mismatches, as src/pcl.c defines
    them, of a problem whose indices are valid."""
    labels, assignment = args[1].reshape(-1).long(), args[3].reshape(-1).long()
    pc_labels, im_labels = args[4].reshape(-1).long(), args[8].reshape(-1)
    found = [i for i in range(labels.numel()) if labels[i] > 0 and im_labels[labels[i]] != 0
             and pc_labels[assignment[i]] != labels[i]]
    return len(found), (found[0] if found else -1)


@st.composite
def pcl_problems(draw, device):
    """(args, fault): a PCL problem as test_pcl.sample_inputs builds it, with
    at most one fault injected; "special values" and "mismatch" keep it valid."""
    n_proposals, n_classes = draw(st.integers(1, 25)), draw(st.integers(2, 6))
    n_clusters = draw(mostly([st.integers(1, 6)], [0], 0.9))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    args = list(sample_inputs(rng, n_proposals, n_classes, n_clusters,
                              dtype=draw(st.sampled_from(FLOAT_DTYPES)),
                              index_dtype=draw(st.sampled_from([torch.float32, torch.float64,
                                                                torch.int32, torch.int64])),
                              rows=draw(st.booleans()), absent=draw(st.integers(0, 2))))
    fault = draw(mostly([None], PCL_FAULTS, 0.4))
    name = draw(st.sampled_from(pcl.INPUT_NAMES))
    position = pcl.INPUT_NAMES.index(name)
    if fault == "special values":
        for index in (0, 2, 5, 7):  # pcl_probs and the weights
            flat = args[index].reshape(-1)
            for i, value in draw(st.lists(st.tuples(st.integers(0, max(flat.numel() - 1, 0)),
                                                    st.sampled_from(PCL_SPECIAL_VALUES)),
                                          max_size=2 if flat.numel() else 0)):
                flat[i] = value
    elif fault == "mismatch":
        labels = args[1].reshape(-1)
        positive = [i for i in range(labels.numel()) if labels[i] > 0]
        if positive:  # a class other than the cluster's
            i = draw(st.sampled_from(positive))
            labels[i] = (int(labels[i]) % (n_classes - 1)) + 1
    elif fault == "bad index":
        index, bad = draw(st.sampled_from([(1, n_classes), (1, -1), (1, 0.5), (1, math.nan),
                                           (3, n_clusters), (4, n_classes), (4, -2)]))
        target = args[index].reshape(-1)
        if index == 3:  # only a proposal with a positive label needs its cluster
            positive = [i for i in range(target.numel()) if args[1].reshape(-1)[i] > 0]
            if positive:
                target[draw(st.sampled_from(positive))] = bad
            else:
                fault = None
        elif target.numel() and (target.is_floating_point() or float(bad).is_integer()):
            target[draw(st.integers(0, target.numel() - 1))] = bad
        else:
            fault = None
    elif fault == "dtype":
        args[position] = args[position].to(draw(st.sampled_from(
            [torch.float16, torch.int16, torch.bool, torch.complex64])))
    elif fault == "shape":
        args[position] = torch.cat([args[position].reshape(-1)] * 2)[None, None]
    elif fault == "layout":
        t = args[position]
        # made on the device: a copy to another one would be contiguous
        args[position] = laid_out(t.numpy(), t.dtype, device, "strided") if t.dim() == 2 and \
            t.shape[-1] > 1 else t
        if args[position].is_contiguous():
            fault = None
    elif fault == "not a tensor":
        args[position] = args[position].tolist()
    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in args], fault


def pcl_scale(args):
    """The magnitude of the loss' terms: weights times log-probabilities."""
    logs = [torch.log(t.detach().double().abs()) for t in (args[0], args[5])]
    return magnitude_of(args[2], args[7]) * magnitude_of(*logs)


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_pcl_loss(device, data):
    entry = data.draw(st.sampled_from(["pcl_loss", "module", "function", "pcl_forward", "op"]))
    args, fault = data.draw(pcl_problems(device))
    if entry == "op" and fault == "not a tensor":  # the dispatcher's own error
        return
    policy = data.draw(mostly(MISMATCH_POLICIES, ["loud", None, 1] if entry != "op" else
                              ["loud"]))
    takes_policy = entry in ("pcl_loss", "module", "op")
    valid_policy = policy in MISMATCH_POLICIES or not takes_policy
    valid = fault in (None, "special values", "mismatch") and valid_policy
    if valid:
        args[0] = requiring_grad(args[0])
    expected_mismatch = pcl_mismatches(args) if valid else None
    refuses_mismatch = takes_policy and policy == "error"
    report = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if entry == "pcl_loss":
                loss = pcl.pcl_loss(*args, mismatch=policy)
            elif entry == "module":
                loss = pcl.PCLLoss(policy)(*args)
            elif entry == "function":
                loss, *report = pcl.PCLLossFunction.apply(*args)
            elif entry == "pcl_forward":
                loss, *report = pcl.pcl_forward(*args)
            else:
                loss, counts = torch.ops.ext.pcl_loss(*args, policy)
                report = counts.tolist()
    except ERRORS as error:
        check_error(error, "pcl_loss", "PCLLoss")
        assert not valid or (refuses_mismatch and expected_mismatch[0] > 0), error
        return
    assert valid and not (refuses_mismatch and expected_mismatch[0] > 0)
    if report is not None:
        assert tuple(report) == expected_mismatch
    warned = [w for w in caught if issubclass(w.category, pcl.PCLLabelMismatchWarning)]
    expect_warning = takes_policy and policy == "warn" and expected_mismatch[0] > 0
    assert len(warned) == expect_warning
    if warned:
        assert warned[0].message.count == expected_mismatch[0]
    doubles = [t.detach().double() if t.is_floating_point() else t for t in args]
    assert loss.shape == () and loss.dtype == args[0].dtype
    assert_matches(loss, pcl_loss_reference(*doubles), pcl_scale(args))
    if entry != "pcl_forward":
        grad_loss = grad_like(data.draw, loss)
        (grad,) = torch.autograd.grad(loss, args[0], grad_loss)
        expected = pcl_grad_reference(*doubles, grad_loss=grad_loss.double())
        assert_matches(grad, expected, magnitude_of(expected))


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_pcl_backward_entry_points(device, data):
    entry = data.draw(st.sampled_from(["pcl_backward", "op"]))
    args, fault = data.draw(pcl_problems(device))
    if entry == "op" and fault == "not a tensor":  # the dispatcher's own error
        return
    dtype = args[0].dtype if isinstance(args[0], torch.Tensor) else torch.float32
    grad_loss = torch.tensor(data.draw(st.floats(-4, 4)), dtype=dtype, device=device)
    grad_loss = data.draw(mostly([grad_loss], [grad_loss.reshape(1, 1).expand(1, 2),
                                               grad_loss.to(torch.float16)]))
    valid = fault in (None, "special values", "mismatch") and grad_loss.numel() == 1 and \
        grad_loss.dtype == dtype
    call = pcl.pcl_backward if entry == "pcl_backward" else torch.ops.ext.pcl_loss_backward
    try:
        grad = call(*args, grad_loss)
    except ERRORS as error:
        assert not valid, error
        check_error(error, "pcl_loss_backward")
        return
    assert valid
    doubles = [t.double() if t.is_floating_point() else t for t in args]
    expected = pcl_grad_reference(*doubles, grad_loss=grad_loss.double())
    assert_matches(grad, expected, magnitude_of(expected))


@given(policy=mostly(MISMATCH_POLICIES, [None, "Warn", 0, ["warn"]]))
def test_pcl_module_options(policy):
    try:
        module = pcl.PCLLoss(policy)
    except ERRORS as error:
        check_error(error, "PCLLoss")
        assert policy not in MISMATCH_POLICIES
        return
    assert module.mismatch == policy
