"""_ext.pcl: the Proposal Cluster Learning loss (Tang et al., PCL), forward and
backward, on the CPU or the GPU, through the legacy FFI (src/pcl.h).

    from _ext import pcl
    loss = pcl.pcl_loss(pcl_probs, labels, cls_loss_weights, gt_assignment,
                        pc_labels, pc_probs, pc_count, img_cls_loss_weights, im_labels)
    loss.backward()                 # gradient into pcl_probs only

pcl_probs is (B, C) float32 or float64 (B proposals, C classes). The
per-proposal inputs (labels, cls_loss_weights, gt_assignment) are (B,) or
(1, B); the per-cluster inputs (pc_labels, pc_probs, pc_count,
img_cls_loss_weights) are (P,) or (1, P); im_labels is (C,) or (1, C). The
weights and probabilities have pcl_probs' dtype; labels, gt_assignment,
pc_labels, pc_count and im_labels may be float32, float64, int32 or int64.

Forward: loss = sum over the classes c present in the image (im_labels[c] !=
0) of L_c, divided by B, with L_0 = -sum cls_loss_weights[i] *
log(pcl_probs[i, 0]) over proposals labelled 0, and L_c = -sum
img_cls_loss_weights[k] * log(pc_probs[k]) over clusters labelled c (c > 0).

Backward: the method's own gradient rule, as the seed's kernel defines it,
which is NOT the derivative of the forward (the forward reads pc_probs, the
backward writes into pcl_probs): grad[i, c] is 0 unless class c is in the
image, and then -cls_loss_weights[i] / pcl_probs[i, 0] for c == 0 and
labels[i] == 0, -img_cls_loss_weights[k] / (pc_count[k] * pc_probs[k]) with
k = gt_assignment[i] for c == labels[i] > 0, all times grad_output / B. Only
pcl_probs receives a gradient; the other inputs are constants.

Label mismatch: a proposal labelled c > 0 (c in the image) whose cluster is
labelled otherwise (pc_labels[gt_assignment[i]] != c), which the seed
printf'ed from its kernel. The forward counts them; `mismatch` says what then
happens: "warn" (default) emits a PCLLabelMismatchWarning carrying the count
and the first proposal, "error" raises ValueError, "ignore" does nothing. In
every case the gradient rule is the seed's (it uses the proposal's cluster).
PCLLossFunction.apply and pcl_forward return the count and the first
proposal alongside the loss.

Errors: a label outside [0, C), a gt_assignment outside [0, P) for a proposal
with a positive label, a pc_label outside [0, C), or a fractional index is a
ValueError naming the first offending element; nothing is read out of bounds.
CUDA calls run on the current stream and return once it has finished them
(the checks are read back from the device).

pcl_loss() is the custom op ext::pcl_loss (torch.ops.ext.pcl_loss(*nine_inputs,
mismatch) returns the loss and an int64 CPU tensor [count, first proposal] of
the mismatches, and warns or raises itself), traceable by
torch.compile(fullgraph=True), with the op ext::pcl_loss_backward as its
gradient. pcl_forward() and pcl_backward() are the raw entry points without
autograd.
"""

import warnings

import numpy as np
import torch

from .. import _ffi
from .._tensors import empty_like, require_contiguous, require_tensor

try:
    from ._pcl import ffi, lib
except ImportError as error:  # pragma: no cover - only before `make`
    raise ImportError("_ext.pcl is not built: run `make` in the project root (%s)"
                      % error) from error

from .reference import pcl_grad_reference, pcl_loss_reference  # noqa: E402,F401

built_with_cuda = bool(lib.ext_built_with_cuda())

INPUT_NAMES = ("pcl_probs", "labels", "cls_loss_weights", "gt_assignment", "pc_labels",
               "pc_probs", "pc_count", "img_cls_loss_weights", "im_labels")
MISMATCH_POLICIES = ("warn", "error", "ignore")


class PCLLabelMismatchWarning(UserWarning):
    """Proposals whose cluster has another class; .count and .first_proposal."""

    def __init__(self, message, count, first_proposal):
        super().__init__(message)
        self.count = count
        self.first_proposal = first_proposal


def _inputs(fn, tensors):
    """A pcl_inputs struct, and the descriptors it points to: keep them alive
    until the call returns (the struct does not own them)."""
    if not _ffi.is_tensor(tensors[0]):
        raise TypeError("%s: pcl_probs must be a torch.Tensor, got %s"
                        % (fn, type(tensors[0]).__name__))
    inputs = ffi.new("pcl_inputs *")
    descriptors = []
    for name, tensor in zip(INPUT_NAMES, tensors):
        desc = _ffi.describe(ffi, fn, name, tensor)
        setattr(inputs, name, desc)
        descriptors.append(desc)
    return inputs, descriptors


def pcl_forward(pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
                pc_count, img_cls_loss_weights, im_labels):
    """(loss, n_mismatch, first_mismatch), without autograd (see pcl_loss).

    loss is a 0-d tensor of pcl_probs' dtype on its device; n_mismatch counts
    the label mismatches and first_mismatch is the lowest one's proposal, or -1.
    """
    fn = "pcl_loss"
    inputs, descriptors = _inputs(fn, (pcl_probs, labels, cls_loss_weights, gt_assignment,
                                       pc_labels, pc_probs, pc_count, img_cls_loss_weights,
                                       im_labels))
    loss = torch.empty((), dtype=pcl_probs.dtype, device=pcl_probs.device)
    out = _ffi.describe(ffi, fn, "loss", loss, writable=True)
    report = ffi.new("pcl_report *")
    if pcl_probs.is_cuda:
        status = lib.pcl_forward_cuda(inputs, out, _ffi.cuda_stream(ffi, pcl_probs), report)
    else:
        status = lib.pcl_forward_cpu(inputs, out, report)
    _ffi.check(ffi, lib, status)
    return loss, int(report.n_mismatch), int(report.first_mismatch)


def pcl_backward(pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
                 pc_count, img_cls_loss_weights, im_labels, grad_loss):
    """The gradient of pcl_probs, (B, C), by the seed's rule (module
    docstring), for the upstream gradient grad_loss (one element)."""
    fn = "pcl_loss_backward"
    inputs, descriptors = _inputs(fn, (pcl_probs, labels, cls_loss_weights, gt_assignment,
                                       pc_labels, pc_probs, pc_count, img_cls_loss_weights,
                                       im_labels))
    require_contiguous(fn, "pcl_probs", pcl_probs)
    grad_probs = empty_like(fn, "grad_probs", pcl_probs)
    grad_loss_desc = _ffi.describe(ffi, fn, "grad_loss", grad_loss)
    grad_desc = _ffi.describe(ffi, fn, "grad_probs", grad_probs, writable=True)
    if pcl_probs.is_cuda:
        status = lib.pcl_backward_cuda(inputs, grad_loss_desc, grad_desc,
                                       _ffi.cuda_stream(ffi, pcl_probs))
    else:
        status = lib.pcl_backward_cpu(inputs, grad_loss_desc, grad_desc)
    _ffi.check(ffi, lib, status)
    return grad_probs


def _mismatch_message(labels, gt_assignment, pc_labels, n_mismatch, first):
    label = labels.reshape(-1)[first].item()
    cluster = int(gt_assignment.reshape(-1)[first].item())
    cluster_label = pc_labels.reshape(-1)[cluster].item()
    return ("pcl_loss: %d proposal%s labelled c > 0 belong%s to a cluster of another class "
            "(pc_labels[gt_assignment[i]] != c); first: proposal %d, label %g, cluster %d "
            "labelled %g; the gradient still uses that cluster, as in the seed"
            % (n_mismatch, "" if n_mismatch == 1 else "s", "s" if n_mismatch == 1 else "",
               first, label, cluster, cluster_label))


def _check_policy(fn, mismatch):
    if not (isinstance(mismatch, str) and mismatch in MISMATCH_POLICIES):
        raise ValueError("%s: mismatch must be one of %s, got %r"
                         % (fn, ", ".join(MISMATCH_POLICIES), mismatch))


def _loss_kernel(pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
                 pc_count, img_cls_loss_weights, im_labels, mismatch="warn"):
    """The kernel of ext::pcl_loss: (loss, [n_mismatch, first_mismatch]),
    having warned of or refused the mismatches as `mismatch` says."""
    _check_policy("pcl_loss", mismatch)
    loss, n_mismatch, first = pcl_forward(pcl_probs, labels, cls_loss_weights, gt_assignment,
                                          pc_labels, pc_probs, pc_count, img_cls_loss_weights,
                                          im_labels)
    if n_mismatch and mismatch != "ignore":
        message = _mismatch_message(labels, gt_assignment, pc_labels, n_mismatch, first)
        if mismatch == "error":
            raise ValueError(message)
        # from beneath torch's dispatcher: no stack level reaches the caller
        warnings.warn(PCLLabelMismatchWarning(message, n_mismatch, first))
    return loss, torch.tensor([n_mismatch, first])


# ---------------------------------------------------------------------------
# the custom ops ext::pcl_loss and ext::pcl_loss_backward

_INPUTS_SCHEMA = ", ".join("Tensor " + name for name in INPUT_NAMES)
_library = torch.library.Library("ext", "FRAGMENT")
_library.define("pcl_loss(%s, str mismatch='warn') -> (Tensor, Tensor)" % _INPUTS_SCHEMA)
_library.define("pcl_loss_backward(%s, Tensor grad_loss) -> Tensor" % _INPUTS_SCHEMA)
_library.impl("pcl_loss", _loss_kernel, "CompositeExplicitAutograd")
_library.impl("pcl_loss_backward", pcl_backward, "CompositeExplicitAutograd")


@torch.library.register_fake("ext::pcl_loss", lib=_library)
def _loss_fake(pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
               pc_count, img_cls_loss_weights, im_labels, mismatch="warn"):
    _check_policy("pcl_loss", mismatch)
    return pcl_probs.new_empty(()), torch.empty(2, dtype=torch.int64)


@torch.library.register_fake("ext::pcl_loss_backward", lib=_library)
def _backward_fake(pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
                   pc_count, img_cls_loss_weights, im_labels, grad_loss):
    return pcl_probs.new_empty(pcl_probs.shape)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:len(INPUT_NAMES)])


def _grad_probs(ctx, grad_loss):
    """The gradient of pcl_probs (None when not needed); no other input gets one."""
    if not ctx.needs_input_grad[0]:
        return None
    tensors = ctx.saved_tensors
    return _backward_op(*tensors, grad_loss.to(tensors[0].dtype).contiguous())


def _backward(ctx, grad_loss, _grad_report):
    return (_grad_probs(ctx, grad_loss),) + (None,) * len(INPUT_NAMES)


torch.library.register_autograd("ext::pcl_loss", _backward, setup_context=_setup_context,
                                lib=_library)
_loss_op = torch.ops.ext.pcl_loss.default
_backward_op = torch.ops.ext.pcl_loss_backward.default


class PCLLossFunction(torch.autograd.Function):
    """The loss as an autograd Function.

    apply(*nine_inputs) returns (loss, n_mismatch, first_mismatch); only loss
    is differentiable, in pcl_probs, by the seed's gradient rule (the kernels
    and formula of ext::pcl_loss, without its warning).
    """

    @staticmethod
    def forward(ctx, pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
                pc_count, img_cls_loss_weights, im_labels):
        tensors = (pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
                   pc_count, img_cls_loss_weights, im_labels)
        loss, n_mismatch, first = pcl_forward(*tensors)
        _setup_context(ctx, tensors, loss)
        return loss, n_mismatch, first

    @staticmethod
    def backward(ctx, grad_loss, _grad_n_mismatch, _grad_first):
        return (_grad_probs(ctx, grad_loss),) + (None,) * (len(INPUT_NAMES) - 1)


def _as_tensor(fn, name, value):
    """A tensor input as it is; a NumPy array or another DLPack producer (the
    inputs other than pcl_probs may be one) as a tensor over its memory (read
    only: the op never writes)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray) and name != "pcl_probs":
        try:
            with warnings.catch_warnings():  # a read-only array: nothing writes to it
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(value)
        except (TypeError, ValueError) as error:  # a dtype or a byte order torch lacks
            raise TypeError("%s: %s has a dtype torch cannot take (%s)"
                            % (fn, name, error)) from error
    if name == "pcl_probs":
        require_tensor(fn, name, value)
    if hasattr(type(value), "__dlpack__"):  # CuPy, JAX...: zero-copy
        return torch.from_dlpack(value)
    raise TypeError("%s: %s must be an array with __dlpack__ (torch, NumPy, CuPy, JAX...), "
                    "got %s" % (fn, name, type(value).__name__))


def pcl_loss(pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
             pc_count, img_cls_loss_weights, im_labels, mismatch="warn"):
    """The PCL loss, a 0-d tensor of pcl_probs' dtype (module docstring),
    differentiable in pcl_probs by the seed's gradient rule (not autograd's
    derivative of the forward): ext::pcl_loss. mismatch: "warn", "error" or
    "ignore"."""
    fn = "pcl_loss"
    _check_policy(fn, mismatch)
    tensors = [_as_tensor(fn, name, value) for name, value in zip(INPUT_NAMES, (
        pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs, pc_count,
        img_cls_loss_weights, im_labels))]
    loss, _ = _loss_op(*tensors, mismatch)
    return loss


class PCLLoss(torch.nn.Module):
    """nn.Module form of pcl_loss: PCLLoss(mismatch="warn")(*nine_inputs)."""

    def __init__(self, mismatch="warn"):
        super().__init__()
        _check_policy("PCLLoss", mismatch)
        self.mismatch = mismatch

    def forward(self, pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
                pc_count, img_cls_loss_weights, im_labels):
        return pcl_loss(pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels,
                        pc_probs, pc_count, img_cls_loss_weights, im_labels, self.mismatch)

    def extra_repr(self):
        return "mismatch=%r" % self.mismatch
