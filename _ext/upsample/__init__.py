"""_ext.upsample: bilinear resampling of NCHW tensors, forward and backward,
on the GPU or the CPU, with PyTorch's and TensorFlow 1.x's coordinates.

    from _ext import upsample
    y = upsample.upsample_bilinear(x, scale_factor=2)                 # = F.interpolate(
                                                                      #   mode="bilinear")
    y = upsample.upsample_bilinear(x, size=(30, 41), align_corners=True)
    y = upsample.upsample_bilinear(x, scale_factor=2, coordinate_mode="asymmetric")  # TF1
    layer = upsample.UpsampleBilinear(scale_factor=2, coordinate_mode="half_pixel")

x is a contiguous (N, C, H, W) float32 or float64 tensor on the CPU or a CUDA
device (kernels run on the caller's current stream); the result is (N, C,
OH, OW). Give exactly one of scale_factor (a number or an (h, w) pair; OH =
floor(H * scale), as F.interpolate computes it) and size (an int or an (OH,
OW) pair). upsample_bilinear() is differentiable (UpsampleBilinearFunction);
the backward is a deterministic gather on the CPU and on the GPU (no atomics).

Coordinate modes (ONNX Resize's names). Output index o along an axis reads
input position src(o), blending floor(src) and the next index (clamped to the
last) linearly; in and out are the axis' input and output sizes:

    coordinate_mode   src(o)                      same as
    half_pixel        max(0, (o + 0.5) r - 0.5)   torch align_corners=False (default);
                                                  TF >= 1.14 / TF2 half_pixel_centers=True
    align_corners     o (in - 1) / (out - 1)      torch align_corners=True;
                                                  TF1 align_corners=True
    asymmetric        o r                         TF1 resize_bilinear default
                                                  (align_corners=False); ONNX asymmetric

r is 1 / scale_factor when scale_factor is given (and recompute_scale_factor
is not True), else in / out: torch's rule, so results equal F.interpolate's,
which uses the scale factor itself, not the rounded sizes' ratio. TF1 always
uses in / out; pass size= for TF1's numbers. align_corners ignores the scale
factor (and maps everything to input 0 when out = 1). In every mode an axis
whose size does not change is copied, even under a scale factor such as 1.1
on a size of 5: torch's CPU kernel does the same, and onnxruntime does when
no axis changes size (with one axis changing, it applies 1.1 to the other).
align_corners=True / False is accepted as torch takes it (it means
coordinate_mode "align_corners" / "half_pixel").

The seed write-up's table of TensorFlow behaviour differs from these
definitions: its "method 2" says TF's align_corners=True uses half-pixel
centres, (o + 0.5) in / out - 0.5, and that align_corners=False uses
o in / out. The second half is right (that is TF1's default, "asymmetric"
here); the first is wrong: TF1's align_corners=True maps the corners,
o (in - 1) / (out - 1), exactly as torch's align_corners=True does. Half-pixel
centres came to TF only with half_pixel_centers=True (TF 1.14 and later,
the TF2 default). So a TF 1.13 model exported with align_corners=False needs
coordinate_mode="asymmetric", and one with align_corners=True needs
"align_corners", not half_pixel.

upsample_bilinear() is the custom op ext::upsample_bilinear
(torch.ops.ext.upsample_bilinear(x, output_size, coordinate_mode, scale_h,
scale_w), scales 0 for none), traceable by torch.compile(fullgraph=True),
with the op ext::upsample_bilinear_backward as its gradient. The resampling
is linear, y = A x, and its backward A^T grad_output; the gradient of that
backward is A again: ext::upsample_bilinear. So derivatives of every order
are exact (double backward for gradient penalties, meta-learning).
"""

import math
import numbers

import torch

from .. import _ffi
from .._tensors import empty, require_contiguous, require_tensor

try:
    from ._upsample import ffi, lib
except ImportError as error:  # pragma: no cover - only before `make`
    raise ImportError("_ext.upsample is not built: run `make` in the project root (%s)"
                      % error) from error

built_with_cuda = bool(lib.ext_built_with_cuda())

COORDINATE_MODES = {"half_pixel": lib.UPSAMPLE_HALF_PIXEL,
                    "align_corners": lib.UPSAMPLE_ALIGN_CORNERS,
                    "asymmetric": lib.UPSAMPLE_ASYMMETRIC}


# The shim's largest height and width (int32 indices).
MAX_SIDE = 2**31 - 1


def _mode_name(fn, coordinate_mode, align_corners):
    """The coordinate mode that coordinate_mode and torch's align_corners ask for."""
    if align_corners is not None and not isinstance(align_corners, bool):
        raise TypeError("%s: align_corners must be True, False or None, got %r"
                        % (fn, align_corners))
    if coordinate_mode is None:
        return "align_corners" if align_corners else "half_pixel"
    _mode_code(fn, coordinate_mode)
    if align_corners is not None and align_corners != (coordinate_mode == "align_corners"):
        raise ValueError("%s: align_corners=%r contradicts coordinate_mode=%r; give one of them"
                         % (fn, align_corners, coordinate_mode))
    return coordinate_mode


def _mode_code(fn, coordinate_mode):
    code = COORDINATE_MODES.get(coordinate_mode) if isinstance(coordinate_mode, str) else None
    if code is None:
        raise ValueError("%s: coordinate_mode must be 'half_pixel', 'align_corners' or "
                         "'asymmetric', got %r" % (fn, coordinate_mode))
    return code


# the built-in types of each kind, checked before the (slower) abstract classes
_PLAIN_TYPES = {numbers.Integral: (int,), numbers.Real: (int, float)}


def _pair(fn, name, value, kind):
    """value as an (h, w) pair of `kind` (numbers.Integral or numbers.Real)."""
    values = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    plain = _PLAIN_TYPES[kind]
    if len(values) == 2 and type(values[0]) in plain and type(values[1]) in plain:
        return values
    if len(values) != 2 or not all(isinstance(v, kind) and not isinstance(v, bool)
                                   for v in values):
        what = "an int or a pair of ints" if kind is numbers.Integral else \
            "a number or a pair of numbers"
        raise TypeError("%s: %s must be %s, got %r" % (fn, name, what, value))
    return values


def _sides(fn, name, value):
    """(h, w) ints in [0, MAX_SIDE]: sizes that can be allocated (the shim
    refuses 0 itself, naming the tensor)."""
    h, w = _pair(fn, name, value, numbers.Integral)
    h, w = int(h), int(w)
    if not (0 <= h <= MAX_SIDE and 0 <= w <= MAX_SIDE):
        raise ValueError("%s: %s must be in [0, 2^31), got %r" % (fn, name, value))
    return h, w


def _scale_factors(fn, scale_factor):
    """scale_factor as an (h, w) pair of positive finite floats."""
    h, w = _pair(fn, "scale_factor", scale_factor, numbers.Real)
    try:
        h, w = float(h), float(w)
    except OverflowError:  # an int too large for a float
        h = w = math.inf
    if not (0 < h < math.inf and 0 < w < math.inf):  # NaN fails both
        raise ValueError("%s: scale_factor must be positive and finite, got %r"
                         % (fn, scale_factor))
    return h, w


def _check_recompute(fn, recompute_scale_factor):
    if recompute_scale_factor is not None and not isinstance(recompute_scale_factor, bool):
        raise TypeError("%s: recompute_scale_factor must be True, False or None, got %r"
                        % (fn, recompute_scale_factor))


def _scales(fn, scale_factor, recompute_scale_factor):
    """(scale_h, scale_w) as the kernels take them: 0 for "none"."""
    _check_recompute(fn, recompute_scale_factor)
    if scale_factor is None or recompute_scale_factor:
        return 0.0, 0.0
    return _scale_factors(fn, scale_factor)


def output_size(input_size, scale_factor=None, size=None, recompute_scale_factor=None,
                fn="upsample_bilinear"):
    """(OH, OW) for an input of spatial size input_size = (H, W), as
    torch.nn.functional.interpolate computes it."""
    return _geometry(fn, input_size, scale_factor, size, recompute_scale_factor)[0]


def _geometry(fn, input_size, scale_factor, size, recompute_scale_factor):
    """((OH, OW), (scale_h, scale_w)): output_size()'s and _scales()'s answers,
    each argument checked once (a call on a tiny input is mostly these checks)."""
    _check_recompute(fn, recompute_scale_factor)
    if (size is None) == (scale_factor is None):
        raise ValueError("%s: give exactly one of size and scale_factor" % fn)
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("%s: recompute_scale_factor is not meaningful with an explicit "
                             "size" % fn)
        out = _pair(fn, "size", size, numbers.Integral)
        if min(out) < 1:
            raise ValueError("%s: size must be positive, got %r" % (fn, size))
        if max(out) > MAX_SIDE:
            raise ValueError("%s: size must be below 2^31, got %r" % (fn, size))
        return (int(out[0]), int(out[1])), (0.0, 0.0)
    scale_h, scale_w = _scale_factors(fn, scale_factor)
    h, w = _sides(fn, "input_size", input_size)
    out_h, out_w = float(h) * scale_h, float(w) * scale_w
    if max(out_h, out_w) >= MAX_SIDE + 1:
        raise ValueError("%s: scale_factor %r makes the output %g x %g; its height and width "
                         "must be below 2^31" % (fn, scale_factor, out_h, out_w))
    out = int(math.floor(out_h)), int(math.floor(out_w))
    return out, ((0.0, 0.0) if recompute_scale_factor else (scale_h, scale_w))


def _run(cpu_entry, cuda_entry, device_tensor, *args):
    if device_tensor.is_cuda:
        status = cuda_entry(*args, _ffi.cuda_stream(ffi, device_tensor))
    else:
        status = cpu_entry(*args)
    _ffi.check(ffi, lib, status)


def _forward(x, output_size, coordinate_mode="half_pixel", scale_h=0.0, scale_w=0.0):
    """The kernel of ext::upsample_bilinear: x resampled to output_size (OH, OW)."""
    fn = "upsample_bilinear"
    require_tensor(fn, "input", x)
    return _resample(x, _sides(fn, "output_size", output_size), _mode_code(fn, coordinate_mode),
                     scale_h, scale_w)


def _resample(x, size, mode, scale_h, scale_w):
    """_forward once its arguments are checked: size (OH, OW) ints, mode a code."""
    fn = "upsample_bilinear"
    require_contiguous(fn, "input", x)
    out = empty(fn, "the output", _image_shape(x, size), x)
    _run(lib.upsample_bilinear_forward_cpu, lib.upsample_bilinear_forward_cuda, x,
         _ffi.describe(ffi, fn, "input", x), _ffi.describe(ffi, fn, "output", out),
         mode, scale_h, scale_w)
    return out


def _backward(grad_output, input_size, coordinate_mode="half_pixel", scale_h=0.0, scale_w=0.0):
    """The kernel of ext::upsample_bilinear_backward: the gradient of an input
    of spatial size input_size (H, W)."""
    fn = "upsample_bilinear_backward"
    require_tensor(fn, "grad_output", grad_output)
    mode = _mode_code(fn, coordinate_mode)
    size = _sides(fn, "input_size", input_size)
    require_contiguous(fn, "grad_output", grad_output)
    grad_input = empty(fn, "grad_input", _image_shape(grad_output, size), grad_output)
    _run(lib.upsample_bilinear_backward_cpu, lib.upsample_bilinear_backward_cuda, grad_output,
         _ffi.describe(ffi, fn, "grad_output", grad_output),
         _ffi.describe(ffi, fn, "grad_input", grad_input), mode, scale_h, scale_w)
    return grad_input


def _image_shape(like, size):
    """(N, C) of the 4-D tensor `like` and spatial size `size`. For a `like`
    of another rank the shim reports its rank first, so any shape will do."""
    return (like.shape[0], like.shape[1], *size) if like.dim() == 4 else (0,)


# ---------------------------------------------------------------------------
# the custom ops ext::upsample_bilinear and ext::upsample_bilinear_backward

_library = torch.library.Library("ext", "FRAGMENT")
_library.define("upsample_bilinear(Tensor input, SymInt[2] output_size, "
                "str coordinate_mode='half_pixel', float scale_h=0.0, float scale_w=0.0) "
                "-> Tensor")
_library.define("upsample_bilinear_backward(Tensor grad_output, SymInt[2] input_size, "
                "str coordinate_mode='half_pixel', float scale_h=0.0, float scale_w=0.0) "
                "-> Tensor")
_library.impl("upsample_bilinear", _forward, "CompositeExplicitAutograd")
_library.impl("upsample_bilinear_backward", _backward, "CompositeExplicitAutograd")


@torch.library.register_fake("ext::upsample_bilinear", lib=_library)
def _forward_fake(x, output_size, coordinate_mode="half_pixel", scale_h=0.0, scale_w=0.0):
    _mode_code("upsample_bilinear", coordinate_mode)
    return x.new_empty(_image_shape(x, output_size))


@torch.library.register_fake("ext::upsample_bilinear_backward", lib=_library)
def _backward_fake(grad_output, input_size, coordinate_mode="half_pixel", scale_h=0.0,
                   scale_w=0.0):
    _mode_code("upsample_bilinear_backward", coordinate_mode)
    return grad_output.new_empty(_image_shape(grad_output, input_size))


def _setup_context(ctx, inputs, output):
    x, _, coordinate_mode, scale_h, scale_w = inputs
    ctx.geometry = (x.shape[2:], coordinate_mode, scale_h, scale_w)


def _backward_formula(ctx, grad_output):
    input_size, coordinate_mode, scale_h, scale_w = ctx.geometry
    grad_input = _backward_op(grad_output.contiguous(), input_size, coordinate_mode, scale_h,
                              scale_w)
    return grad_input, None, None, None, None


def _backward_setup_context(ctx, inputs, output):
    grad_output, _, coordinate_mode, scale_h, scale_w = inputs
    ctx.geometry = (grad_output.shape[2:], coordinate_mode, scale_h, scale_w)


def _double_backward_formula(ctx, grad_grad_input):
    """The backward is A^T grad_output (A the resampling): linear in
    grad_output, so its gradient is A applied to grad_grad_input, the forward
    op to grad_output's size with the same mode and scales."""
    output_size, coordinate_mode, scale_h, scale_w = ctx.geometry
    grad_grad_output = _forward_op(grad_grad_input.contiguous(), output_size, coordinate_mode,
                                   scale_h, scale_w)
    return grad_grad_output, None, None, None, None


torch.library.register_autograd("ext::upsample_bilinear", _backward_formula,
                                setup_context=_setup_context, lib=_library)
torch.library.register_autograd("ext::upsample_bilinear_backward", _double_backward_formula,
                                setup_context=_backward_setup_context, lib=_library)
_forward_op = torch.ops.ext.upsample_bilinear.default
_backward_op = torch.ops.ext.upsample_bilinear_backward.default


class UpsampleBilinearFunction(torch.autograd.Function):
    """UpsampleBilinearFunction.apply(x, size, coordinate_mode, scales): x
    resampled to spatial size `size` = (OH, OW); scales = (scale_h, scale_w),
    0 for none (upsample_bilinear() works these out). The autograd.Function
    form of ext::upsample_bilinear."""

    @staticmethod
    def forward(ctx, x, size, coordinate_mode, scales):
        scale_h, scale_w = (float(s) for s in _pair("upsample_bilinear", "scales", scales,
                                                    numbers.Real))
        inputs = (x, size, coordinate_mode, scale_h, scale_w)
        out = _forward(*inputs)
        _setup_context(ctx, inputs, out)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        return _backward_formula(ctx, grad_output)[:4]


def upsample_bilinear(x, scale_factor=None, size=None, coordinate_mode=None, align_corners=None,
                      recompute_scale_factor=None):
    """Bilinear resampling of x (N, C, H, W); differentiable: ext::upsample_bilinear.

    coordinate_mode: "half_pixel" (the default, torch's align_corners=False),
    "align_corners" or "asymmetric" (TF1's default); see the module's
    docstring. align_corners=True/False may be given instead, as to torch.
    """
    fn = "upsample_bilinear"
    require_tensor(fn, "input", x)
    mode = _mode_name(fn, coordinate_mode, align_corners)
    spatial = x.shape[2:] if x.dim() == 4 else (1, 1)
    size, scales = _geometry(fn, spatial, scale_factor, size, recompute_scale_factor)
    if not (torch.compiler.is_compiling() or (x.requires_grad and torch.is_grad_enabled())):
        # the op's kernel, without the dispatcher
        return _resample(x, size, COORDINATE_MODES[mode], *scales)
    return _forward_op(x, size, mode, *scales)


def upsample_bilinear_backward(grad_output, input_size, scale_factor=None, coordinate_mode=None,
                               align_corners=None, recompute_scale_factor=None):
    """The gradient with respect to an input of spatial size input_size = (H,
    W), from grad_output (N, C, OH, OW), for the forward call made with the
    same scale_factor and mode; without autograd."""
    fn = "upsample_bilinear_backward"
    require_tensor(fn, "grad_output", grad_output)
    mode = _mode_name(fn, coordinate_mode, align_corners)
    input_size = _pair(fn, "input_size", input_size, numbers.Integral)
    return _backward(grad_output, input_size, mode,
                     *_scales(fn, scale_factor, recompute_scale_factor))


class UpsampleBilinear(torch.nn.Module):
    """nn.Module form of upsample_bilinear() (like torch.nn.Upsample)."""

    def __init__(self, scale_factor=None, size=None, coordinate_mode=None, align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        fn = "UpsampleBilinear"
        self.coordinate_mode = _mode_name(fn, coordinate_mode, align_corners)
        _geometry(fn, (1, 1), scale_factor, size, recompute_scale_factor)
        self.scale_factor, self.size = scale_factor, size
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x):
        return upsample_bilinear(x, self.scale_factor, self.size, self.coordinate_mode,
                                 recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self):
        what = ("size=%r" % (self.size,) if self.size is not None
                else "scale_factor=%r" % (self.scale_factor,))
        return "%s, coordinate_mode=%r" % (what, self.coordinate_mode)
