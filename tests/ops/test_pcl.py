"""_ext.pcl against a float64 transcription of the seed's two kernels (loops,
as written in pcl_loss_cuda.cu), on random PCL problems; the label-mismatch
policy; every error of the shims; CUDA against the CPU (GPU machine)."""

import math
import warnings

import numpy as np
import pytest
import torch

from _ext import _ffi, pcl
from torch_op_checks import check_compiled, opcheck, ops_called

NAMES = pcl.INPUT_NAMES


# ---------------------------------------------------------------------------
# the seed's kernels, transcribed to float64 loops

def seed_forward(probs, labels, weights, pc_labels, pc_probs, pc_weights, im_labels):
    """PCLLossesForward: top_data[c] per class, then the wrapper's sum / B."""
    n_proposals, n_classes = probs.shape
    top = np.zeros(n_classes)
    for c in range(n_classes):
        if im_labels[c] != 0:
            if c == 0:
                for i in range(n_proposals):
                    if labels[i] == 0:
                        top[c] -= weights[i] * math.log(probs[i, c])
            else:
                for k in range(len(pc_labels)):
                    if pc_labels[k] == c:
                        top[c] -= pc_weights[k] * math.log(pc_probs[k])
    return top.sum() / n_proposals


def seed_backward(probs, labels, weights, assignment, pc_labels, pc_probs, pc_count, pc_weights,
                  im_labels, grad_loss=1.0):
    """PCLLossesBackward, then the wrapper's / B, times the upstream gradient
    (which the seed dropped); also counts its "labels mismatch." printfs."""
    n_proposals, n_classes = probs.shape
    grad = np.zeros((n_proposals, n_classes))
    mismatches = []
    for i in range(n_proposals):
        for c in range(n_classes):
            if im_labels[c] == 0:
                continue
            if c == 0:
                if labels[i] == 0:
                    grad[i, c] = -weights[i] / probs[i, c]
            elif labels[i] == c:
                k = int(assignment[i])
                if c != pc_labels[k]:
                    mismatches.append(i)
                grad[i, c] = -pc_weights[k] / (pc_count[k] * pc_probs[k])
    return grad / n_proposals * grad_loss, mismatches


def seed_reference(args, grad_loss=1.0):
    """(loss, grad, mismatching proposals) of torch inputs, in float64."""
    a = {name: t.detach().cpu().double().numpy() for name, t in zip(NAMES, args)}
    flat = {name: v.reshape(-1) for name, v in a.items() if name != "pcl_probs"}
    probs = a["pcl_probs"]
    loss = seed_forward(probs, flat["labels"], flat["cls_loss_weights"], flat["pc_labels"],
                        flat["pc_probs"], flat["img_cls_loss_weights"], flat["im_labels"])
    grad, mismatches = seed_backward(
        probs, flat["labels"], flat["cls_loss_weights"], flat["gt_assignment"],
        flat["pc_labels"], flat["pc_probs"], flat["pc_count"], flat["img_cls_loss_weights"],
        flat["im_labels"], grad_loss)
    return loss, grad, mismatches


def sample_inputs(rng, n_proposals, n_classes, n_clusters, dtype=torch.float32,
                  index_dtype=torch.float32, rows=True, n_mismatch=0, absent=0):
    """A PCL problem as the seed's callers build it: clusters of the image's
    classes, each proposal either background (0) or its cluster's class.
    rows: the (1, N) shapes of the seed's callers, else (N,). `n_mismatch`
    proposals get another present class than their cluster's; `absent`
    classes are left out of the image (class 0 included when absent > 0)."""
    present = np.ones(n_classes)
    if absent:
        present[rng.choice(n_classes, size=min(absent, n_classes), replace=False)] = 0
    positive = np.flatnonzero(present[1:]) + 1
    all_positive = np.arange(1, n_classes)
    choices = positive if len(positive) else all_positive
    if n_clusters and len(choices):
        pc_labels = rng.choice(choices, n_clusters)
    else:
        pc_labels = np.zeros(n_clusters, np.int64)
    assignment = rng.integers(0, max(n_clusters, 1), n_proposals)
    labels = np.zeros(n_proposals, np.int64)
    if n_clusters:
        is_object = rng.random(n_proposals) < 0.6
        labels[is_object] = pc_labels[assignment[is_object]]
    # classes absent from the image still show up among the clusters' labels
    if absent and n_clusters and len(all_positive):
        pc_labels[rng.random(n_clusters) < 0.2] = rng.choice(all_positive)
        labels = np.where(labels > 0, pc_labels[assignment], 0)
    if n_mismatch:
        candidates = np.flatnonzero(labels > 0)
        swap = rng.choice(candidates, size=n_mismatch, replace=False)
        for i in swap:
            others = [c for c in np.flatnonzero(present) if c > 0 and c != labels[i]]
            labels[i] = rng.choice(others)
    probs = rng.dirichlet(np.ones(n_classes), n_proposals) * 0.9 + 0.1 / n_classes
    shape = (lambda n: (1, n)) if rows else (lambda n: (n,))

    def floats(values, n):
        return torch.tensor(values, dtype=dtype).reshape(shape(n))

    def indices(values, n):
        return torch.tensor(values).to(index_dtype).reshape(shape(n))

    return (torch.tensor(probs, dtype=dtype),
            indices(labels, n_proposals),
            floats(rng.uniform(0.1, 1.0, n_proposals), n_proposals),
            indices(assignment, n_proposals),
            indices(pc_labels, n_clusters),
            floats(rng.uniform(0.05, 1.0, n_clusters), n_clusters),
            indices(rng.integers(1, 12, n_clusters), n_clusters),
            floats(rng.uniform(0.1, 1.0, n_clusters), n_clusters),
            indices(present, n_classes))


def tolerance(dtype):
    return dict(rtol=2e-6, atol=1e-7) if dtype == torch.float32 else dict(rtol=1e-12, atol=0)


def run_op(args, grad_loss=1.0, mismatch="ignore"):
    probs = args[0].detach().clone().requires_grad_()
    loss = pcl.pcl_loss(probs, *args[1:], mismatch=mismatch)
    (loss * grad_loss).backward()
    return loss.detach(), probs.grad


# ---------------------------------------------------------------------------
# forward and backward against the seed

SIZES = [(1, 2, 1), (7, 3, 2), (64, 21, 5), (300, 21, 40), (1000, 81, 64)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size", SIZES)
def test_matches_seed(rng, size, dtype):
    args = sample_inputs(rng, *size, dtype=dtype)
    loss, grad = run_op(args)
    ref_loss, ref_grad, mismatches = seed_reference(args)
    assert loss.dtype == dtype and loss.shape == ()
    assert grad.dtype == dtype and grad.shape == size[:2]
    assert mismatches == []
    np.testing.assert_allclose(loss.item(), ref_loss, **tolerance(dtype))
    np.testing.assert_allclose(grad.double().numpy(), ref_grad, **tolerance(dtype))


@pytest.mark.parametrize("index_dtype", [torch.float32, torch.float64, torch.int32,
                                         torch.int64])
@pytest.mark.parametrize("rows", [True, False])
def test_index_dtypes_and_shapes(rng, index_dtype, rows):
    args = sample_inputs(rng, 200, 21, 16, index_dtype=index_dtype, rows=rows)
    loss, grad = run_op(args)
    ref_loss, ref_grad, _ = seed_reference(args)
    np.testing.assert_allclose(loss.item(), ref_loss, **tolerance(torch.float32))
    np.testing.assert_allclose(grad.double().numpy(), ref_grad, **tolerance(torch.float32))


def test_index_dtypes_may_differ_from_each_other(rng):
    args = list(sample_inputs(rng, 100, 11, 9, dtype=torch.float64))
    for position, dtype in zip((1, 3, 4, 6, 8), (torch.int32, torch.float32, torch.int64,
                                                 torch.float64, torch.int32)):
        args[position] = args[position].to(dtype)
    loss, grad = run_op(args)
    ref_loss, ref_grad, _ = seed_reference(args)
    np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-12)
    np.testing.assert_allclose(grad.numpy(), ref_grad, rtol=1e-12)


@pytest.mark.parametrize("absent", [1, 3, 10])
def test_classes_absent_from_the_image(rng, absent):
    args = sample_inputs(rng, 400, 11, 20, dtype=torch.float64, absent=absent)
    assert (args[8] == 0).sum() == absent
    loss, grad = run_op(args)
    ref_loss, ref_grad, _ = seed_reference(args)
    np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-12)
    np.testing.assert_allclose(grad.numpy(), ref_grad, rtol=1e-12)
    missing = np.flatnonzero(args[8].numpy().reshape(-1) == 0)
    assert not grad[:, missing].any()


def test_no_class_in_the_image_gives_zero(rng):
    args = list(sample_inputs(rng, 50, 5, 4))
    args[8] = torch.zeros_like(args[8])
    loss, grad = run_op(args)
    assert loss.item() == 0 and not grad.any()


def test_no_clusters(rng):
    """P = 0: every proposal is background; the cluster vectors are empty."""
    args = sample_inputs(rng, 30, 4, 0, dtype=torch.float64)
    assert (args[1] == 0).all() and args[4].numel() == 0
    loss, grad = run_op(args)
    ref_loss, ref_grad, _ = seed_reference(args)
    np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-12)
    np.testing.assert_allclose(grad.numpy(), ref_grad, rtol=1e-12)


def test_upstream_gradient_is_applied(rng):
    """The seed dropped grad_output; here it scales the gradient."""
    args = sample_inputs(rng, 120, 7, 6, dtype=torch.float64)
    _, grad = run_op(args, grad_loss=-2.5)
    _, ref_grad, _ = seed_reference(args, grad_loss=-2.5)
    np.testing.assert_allclose(grad.numpy(), ref_grad, rtol=1e-12)


def test_gradient_is_the_seed_rule_not_the_derivative(rng):
    """The rule puts a gradient on pcl_probs[i, labels[i]] for labels[i] > 0;
    the derivative of the forward has none there (the forward reads
    pc_probs for those classes)."""
    args = sample_inputs(rng, 80, 6, 5, dtype=torch.float64)
    probs = args[0].clone().requires_grad_()
    pcl.pcl_loss_reference(probs, *args[1:]).backward()
    _, grad = run_op(args)
    positive = args[1].reshape(-1) > 0
    assert positive.any()
    assert not probs.grad[positive].any()
    assert grad[positive].abs().sum(1).gt(0).all()
    background = ~positive
    torch.testing.assert_close(grad[background], probs.grad[background], rtol=1e-12, atol=0)


@pytest.mark.parametrize("size", [(7, 3, 2), (300, 21, 40)])
def test_plain_pytorch_reference_matches_seed(rng, size):
    """The vectorized reference the benchmark times is the seed too."""
    args = sample_inputs(rng, *size, dtype=torch.float64, absent=1)
    ref_loss, ref_grad, _ = seed_reference(args, grad_loss=0.5)
    np.testing.assert_allclose(pcl.pcl_loss_reference(*args).item(), ref_loss, rtol=1e-12)
    np.testing.assert_allclose(pcl.pcl_grad_reference(*args, grad_loss=0.5).numpy(), ref_grad,
                               rtol=1e-12)


def test_module_and_function(rng):
    args = sample_inputs(rng, 90, 9, 7)
    probs = args[0].clone().requires_grad_()
    module = pcl.PCLLoss()
    loss = module(probs, *args[1:])
    loss.backward()
    ref_loss, grad = run_op(args)
    assert torch.equal(loss.detach(), ref_loss) and torch.equal(probs.grad, grad)
    assert "mismatch='warn'" in repr(module)
    loss, n_mismatch, first = pcl.PCLLossFunction.apply(probs, *args[1:])
    assert torch.equal(loss.detach(), ref_loss) and (n_mismatch, first) == (0, -1)


def test_inputs_other_than_probs_get_no_gradient(rng):
    args = [t.double() if t.is_floating_point() else t for t in sample_inputs(rng, 40, 5, 3)]
    leaves = [t.clone().requires_grad_() if t.is_floating_point() else t for t in args]
    pcl.pcl_loss(*leaves).backward()
    assert leaves[0].grad is not None
    assert all(t.grad is None for t in leaves[1:] if t.requires_grad)


# ---------------------------------------------------------------------------
# label mismatch

def test_mismatch_is_counted_and_warned(rng):
    args = sample_inputs(rng, 500, 21, 30, n_mismatch=7)
    ref_loss, ref_grad, mismatches = seed_reference(args)
    assert len(mismatches) == 7
    _, n_mismatch, first = pcl.pcl_forward(*args)
    assert (n_mismatch, first) == (7, mismatches[0])
    with pytest.warns(pcl.PCLLabelMismatchWarning, match="pcl_loss: 7 proposals labelled c > 0 "
                      "belong to a cluster of another class") as record:
        loss, grad = run_op(args, mismatch="warn")
    warning = record[0].message
    assert warning.count == 7 and warning.first_proposal == mismatches[0]
    assert "first: proposal %d" % mismatches[0] in str(warning)
    # the gradient rule is the seed's, mismatch or not
    np.testing.assert_allclose(loss.item(), ref_loss, **tolerance(torch.float32))
    np.testing.assert_allclose(grad.double().numpy(), ref_grad, **tolerance(torch.float32))


def test_mismatch_policies(rng):
    args = sample_inputs(rng, 100, 6, 8, n_mismatch=1)
    with pytest.raises(ValueError, match="pcl_loss: 1 proposal labelled c > 0 belongs to"):
        pcl.pcl_loss(*args, mismatch="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pcl.pcl_loss(*args, mismatch="ignore")
        pcl.PCLLoss(mismatch="ignore")(*args)
    with pytest.warns(pcl.PCLLabelMismatchWarning):
        pcl.PCLLoss()(*args)
    with pytest.raises(ValueError, match="pcl_loss: mismatch must be one of warn, error, "
                       "ignore, got 'loud'"):
        pcl.pcl_loss(*args, mismatch="loud")
    with pytest.raises(ValueError, match="PCLLoss: mismatch must be one of"):
        pcl.PCLLoss(mismatch=None)


def test_mismatch_of_an_absent_class_is_not_counted(rng):
    """The seed checks the mismatch only for classes in the image."""
    args = list(sample_inputs(rng, 60, 5, 4, n_mismatch=1))
    _, _, mismatches = seed_reference(args)
    labels = args[1].reshape(-1)
    args[8] = args[8].clone()
    args[8].reshape(-1)[int(labels[mismatches[0]])] = 0
    assert seed_reference(args)[2] == []
    _, n_mismatch, first = pcl.pcl_forward(*args)
    assert (n_mismatch, first) == (0, -1)


# ---------------------------------------------------------------------------
# the custom ops ext::pcl_loss and ext::pcl_loss_backward, and torch.compile

def test_public_entry_points_go_through_the_ops(rng):
    args = sample_inputs(rng, 30, 4, 3, dtype=torch.float64)
    probs = args[0].clone().requires_grad_()
    for call in (pcl.pcl_loss, pcl.PCLLoss()):
        _, names = ops_called(lambda p: call(p, *args[1:]).backward(), probs)
        assert "ext.pcl_loss.default" in names and "ext.pcl_loss_backward.default" in names


@pytest.mark.parametrize("size,n_mismatch,mismatch", [((30, 4, 3), 0, "warn"),
                                                      ((40, 5, 6), 2, "ignore"),
                                                      ((1, 2, 0), 0, "error")])
def test_opcheck(rng, size, n_mismatch, mismatch):
    args = sample_inputs(rng, *size, dtype=torch.float64, index_dtype=torch.int64,
                         n_mismatch=n_mismatch)
    opcheck(torch.ops.ext.pcl_loss.default,
            (args[0].clone().requires_grad_(), *args[1:], mismatch))
    opcheck(torch.ops.ext.pcl_loss_backward.default,
            (*args, torch.tensor(0.5, dtype=torch.float64)))


def test_op_returns_the_mismatch_report(rng):
    args = sample_inputs(rng, 200, 6, 8, n_mismatch=3)
    _, _, mismatches = seed_reference(args)
    loss, report = torch.ops.ext.pcl_loss(*args, "ignore")
    assert report.dtype == torch.int64 and report.device.type == "cpu"
    assert report.tolist() == [3, mismatches[0]]
    assert torch.equal(loss, pcl.pcl_forward(*args)[0])


class PCLModel(torch.nn.Module):
    """Proposal scores from features, softmax over the classes, the PCL loss."""

    def __init__(self, n_features, n_classes, mismatch):
        super().__init__()
        self.linear = torch.nn.Linear(n_features, n_classes, dtype=torch.float64)
        self.loss = pcl.PCLLoss(mismatch)

    def forward(self, features, *rest):
        return self.loss(torch.softmax(self.linear(features), dim=1), *rest)


def test_compile_fullgraph(rng):
    torch.manual_seed(0)
    args = sample_inputs(rng, 60, 5, 7, dtype=torch.float64)
    features = torch.from_numpy(rng.standard_normal((60, 9)))
    check_compiled(PCLModel(9, 5, "warn"), [features, *args[1:]])


def test_compiled_model_still_applies_the_mismatch_policy(rng):
    args = sample_inputs(rng, 60, 5, 7, dtype=torch.float64, n_mismatch=2)
    features = torch.from_numpy(rng.standard_normal((60, 9)))
    torch._dynamo.reset()
    warn = torch.compile(PCLModel(9, 5, "warn"), fullgraph=True)
    with pytest.warns(pcl.PCLLabelMismatchWarning, match="pcl_loss: 2 proposals"):
        warn(features, *args[1:])
    error = torch.compile(PCLModel(9, 5, "error"), fullgraph=True)
    with pytest.raises(ValueError, match="pcl_loss: 2 proposals"):
        error(features, *args[1:])


def test_numpy_inputs_other_than_probs(rng):
    """The inputs other than pcl_probs may be NumPy arrays, read-only too."""
    args = sample_inputs(rng, 50, 4, 5, dtype=torch.float64)
    arrays = [t.numpy().copy() for t in args[1:]]
    for array in arrays:
        array.setflags(write=False)
    probs = args[0].clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = pcl.pcl_loss(probs, *arrays)
    loss.backward()
    ref_loss, ref_grad = run_op(args)
    assert torch.equal(loss.detach(), ref_loss) and torch.equal(probs.grad, ref_grad)
    with pytest.raises(TypeError, match="^pcl_loss: labels has a dtype torch cannot take"):
        pcl.pcl_loss(args[0], arrays[0].astype(">f8"), *arrays[1:])


# ---------------------------------------------------------------------------
# errors

def good_args():
    return dict(zip(NAMES, sample_inputs(np.random.default_rng(0), 5, 3, 4)))


def call(args):
    return pcl.pcl_loss(*[args[name] for name in NAMES])


@pytest.mark.parametrize("name,bad,error,message", [
    ("pcl_probs", torch.zeros(5, 3, dtype=torch.int64), TypeError,
     "pcl_probs must be float32 or float64, got int64"),
    ("pc_probs", torch.ones(1, 4, dtype=torch.float64), TypeError,
     r"pc_probs must have the dtype of pcl_probs \(float32\), got float64"),
    ("cls_loss_weights", torch.ones(1, 5, dtype=torch.float16), TypeError,
     "cls_loss_weights must be float32 or float64, got float16"),
    ("labels", torch.zeros(1, 5, dtype=torch.uint8), TypeError,
     "labels must be float32, float64, int32 or int64, got uint8"),
    ("im_labels", torch.ones(1, 3, dtype=torch.bool), TypeError,
     "im_labels must be float32, float64, int32 or int64, got bool"),
    ("pc_count", [1, 1, 1, 1], TypeError, "pc_count must be an array with __dlpack__"),
    ("pcl_probs", torch.zeros(15), ValueError, "pcl_probs must be 2-D, got 1-D"),
    ("labels", torch.zeros(5, 1), ValueError, r"labels must be \(B,\) or \(1, B\), got \(5, 1\)"),
    ("labels", torch.zeros(1, 4), ValueError,
     "labels has 4 elements but pcl_probs has B = 5 rows"),
    ("gt_assignment", torch.zeros(6), ValueError,
     "gt_assignment has 6 elements but pcl_probs has B = 5 rows"),
    ("cls_loss_weights", torch.ones(1, 1, 5), ValueError,
     r"cls_loss_weights must be \(B,\) or \(1, B\), got \(1, 1, 5\)"),
    ("pc_probs", torch.ones(1, 5), ValueError, "pc_probs has 5 elements but pc_labels has 4"),
    ("pc_count", torch.ones(3), ValueError, "pc_count has 3 elements but pc_labels has 4"),
    ("img_cls_loss_weights", torch.ones(2, 2), ValueError,
     r"img_cls_loss_weights must be \(P,\) or \(1, P\), got \(2, 2\)"),
    ("pc_labels", torch.ones(4, 1), ValueError, r"pc_labels must be \(P,\) or \(1, P\)"),
    ("im_labels", torch.ones(1, 4), ValueError,
     "im_labels has 4 elements but pcl_probs has C = 3 columns"),
    ("pcl_probs", torch.zeros(0, 3), ValueError, r"pcl_probs is empty, \(0, 3\)"),
    ("pcl_probs", torch.zeros(5, 0), ValueError, r"pcl_probs is empty, \(5, 0\)"),
])
def test_bad_arguments(name, bad, error, message):
    args = good_args()
    args[name] = bad
    with pytest.raises(error, match="pcl_loss: " + message):
        call(args)


@pytest.mark.parametrize("mismatch", [None, 1, ["warn"], np.array(["warn", "error"])])
def test_mismatch_policy_of_another_type(mismatch):
    with pytest.raises(ValueError, match="^pcl_loss: mismatch must be one of warn, error, "
                                         "ignore"):
        pcl.pcl_loss(*[good_args()[n] for n in NAMES], mismatch=mismatch)
    with pytest.raises(ValueError, match="^PCLLoss: mismatch must be one of"):
        pcl.PCLLoss(mismatch)


def test_huge_expanded_probs_are_refused_before_allocating():
    args = good_args()
    tensors = [args[n] for n in NAMES]
    tensors[0] = torch.zeros(1, 1).expand(5, 2**40)
    with pytest.raises(ValueError, match="^pcl_loss_backward: pcl_probs must be contiguous"):
        pcl.pcl_backward(*tensors, torch.ones(()))


def test_probs_must_be_a_tensor():
    args = good_args()
    args["pcl_probs"] = args["pcl_probs"].numpy()
    with pytest.raises(TypeError, match="pcl_loss: pcl_probs must be a torch.Tensor, got ndarray"):
        call(args)


@pytest.mark.parametrize("name", NAMES)
def test_non_contiguous_is_a_value_error(name):
    args = good_args()
    t = args[name]
    doubled = torch.stack([t, t], dim=-1)[..., 0]  # same shape, strides doubled
    assert doubled.shape == t.shape and not doubled.is_contiguous()
    args[name] = doubled
    with pytest.raises(ValueError, match="pcl_loss: %s must be contiguous" % name):
        call(args)


@pytest.mark.parametrize("name,value,message", [
    ("labels", 3, r"labels\[2\] = 3 is not a class index in \[0, 3\)"),
    ("labels", -1, r"labels\[2\] = -1 is not a class index in \[0, 3\)"),
    ("labels", 1.5, r"labels\[2\] = 1.5 is not a class index in \[0, 3\)"),
    ("labels", float("nan"), r"labels\[2\] = nan is not a class index"),
    ("gt_assignment", 4, r"gt_assignment\[2\] = 4 is not a cluster index in \[0, 4\)"),
    ("gt_assignment", -3, r"gt_assignment\[2\] = -3 is not a cluster index in \[0, 4\)"),
    ("gt_assignment", 0.5, r"gt_assignment\[2\] = 0.5 is not a cluster index"),
    ("pc_labels", 7, r"pc_labels\[2\] = 7 is not a class index in \[0, 3\)"),
    ("pc_labels", 1e300, r"pc_labels\[2\] = 1.0000000000000001e\+300 is not a class index"),
])
@pytest.mark.parametrize("backward", [False, True])
def test_index_out_of_range_is_a_value_error(name, value, message, backward):
    args = good_args()
    args["labels"] = torch.tensor([[0, 1, 2, 1, 0]], dtype=torch.float32)
    args[name] = args[name].double()
    args[name].reshape(-1)[2] = value
    tensors = [args[n] for n in NAMES]
    if backward:
        fn = "pcl_loss_backward"
        with pytest.raises(ValueError, match=fn + ": " + message):
            pcl.pcl_backward(*tensors, torch.ones(()))
    else:
        with pytest.raises(ValueError, match="pcl_loss: " + message):
            pcl.pcl_loss(*tensors)


def test_gt_assignment_of_background_proposals_is_not_used():
    """Only proposals with a positive label need a cluster."""
    args = good_args()
    args["labels"] = torch.tensor([[0, 1, 0, 1, 0]], dtype=torch.float32)
    args["gt_assignment"] = torch.tensor([[-1, 2, 99, 3, 0.5]])
    pcl.pcl_loss(*[args[name] for name in NAMES], mismatch="ignore")


def test_backward_argument_errors():
    args = good_args()
    tensors = [args[n] for n in NAMES]
    with pytest.raises(ValueError, match="pcl_loss_backward: grad_loss must have one element, "
                       "got 2"):
        pcl.pcl_backward(*tensors, torch.ones(2))
    with pytest.raises(TypeError, match=r"pcl_loss_backward: grad_loss must have the dtype of "
                       r"pcl_probs \(float32\), got float64"):
        pcl.pcl_backward(*tensors, torch.ones((), dtype=torch.float64))
    # grad_probs is allocated by the wrapper; a wrong one can only come through the lib
    inputs, descriptors = pcl._inputs("pcl_loss_backward", tensors)
    descs = [_ffi.describe(pcl.ffi, "test", "grad_loss", torch.ones(())),
             _ffi.describe(pcl.ffi, "test", "grad_probs", torch.empty(5, 4))]
    with pytest.raises(ValueError, match=r"pcl_loss_backward: grad_probs must be \(B, C\) = "
                       r"\(5, 3\) like pcl_probs, got \(5, 4\)"):
        _ffi.check(pcl.ffi, pcl.lib, pcl.lib.pcl_backward_cpu(inputs, *descs))


def test_loss_output_must_have_one_element():
    args = good_args()
    inputs, descriptors = pcl._inputs("pcl_loss", [args[n] for n in NAMES])
    loss = _ffi.describe(pcl.ffi, "pcl_loss", "loss", torch.empty(2))
    with pytest.raises(ValueError, match="pcl_loss: loss must have one element, got 2"):
        _ffi.check(pcl.ffi, pcl.lib,
                   pcl.lib.pcl_forward_cpu(inputs, loss, pcl.ffi.new("pcl_report *")))


@pytest.mark.parametrize("name", NAMES[1:])
def test_tensor_on_another_device_is_refused(name):
    """Checked on the descriptors before any data is read, so a CPU tensor
    described as a CUDA one stands in for it on a machine without a GPU."""
    args = good_args()
    inputs, descriptors = pcl._inputs("pcl_loss", [args[n] for n in NAMES])
    getattr(inputs, name).device_type = _ffi.CUDA
    loss = _ffi.describe(pcl.ffi, "pcl_loss", "loss", torch.empty(()))
    with pytest.raises(RuntimeError, match="pcl_loss: %s is on cuda:0; pcl_loss needs CPU "
                       "tensors" % name):
        _ffi.check(pcl.ffi, pcl.lib, pcl.lib.pcl_forward_cpu(inputs, loss,
                                                             pcl.ffi.new("pcl_report *")))


def test_cuda_entry_point_refuses_cpu_tensors():
    args = good_args()
    inputs, descriptors = pcl._inputs("pcl_loss", [args[n] for n in NAMES])
    loss = _ffi.describe(pcl.ffi, "pcl_loss", "loss", torch.empty(()))
    expected = "needs CUDA tensors" if pcl.built_with_cuda else "built without CUDA"
    with pytest.raises(RuntimeError, match="pcl_loss: .*" + expected):
        _ffi.check(pcl.ffi, pcl.lib, pcl.lib.pcl_forward_cuda(
            inputs, loss, pcl.ffi.NULL, pcl.ffi.new("pcl_report *")))


# ---------------------------------------------------------------------------
# CUDA against the CPU (GPU machine)

def to_cuda(args):
    return [t.cuda() for t in args]


@pytest.mark.gpu
def test_cuda_opcheck(rng):
    args = to_cuda(sample_inputs(rng, 40, 5, 6, dtype=torch.float64, index_dtype=torch.int64,
                                 n_mismatch=2))
    opcheck(torch.ops.ext.pcl_loss.default,
            (args[0].clone().requires_grad_(), *args[1:], "ignore"))
    opcheck(torch.ops.ext.pcl_loss_backward.default,
            (*args, torch.tensor(0.5, dtype=torch.float64, device="cuda")))


@pytest.mark.gpu
def test_cuda_compile_fullgraph(rng):
    torch.manual_seed(0)
    args = to_cuda(sample_inputs(rng, 60, 5, 7, dtype=torch.float64))
    features = torch.from_numpy(rng.standard_normal((60, 9))).cuda()
    check_compiled(PCLModel(9, 5, "warn").cuda(), [features, *args[1:]])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size", SIZES + [(4096, 21, 64), (70000, 3, 500)])
def test_gpu_equals_cpu(rng, size, dtype):
    args = sample_inputs(rng, *size, dtype=dtype, n_mismatch=1 if size[0] > 50 else 0,
                         absent=1 if size[1] > 3 else 0)
    cpu_loss, cpu_n, cpu_first = pcl.pcl_forward(*args)
    gpu_loss, gpu_n, gpu_first = pcl.pcl_forward(*to_cuda(args))
    assert (gpu_n, gpu_first) == (cpu_n, cpu_first)
    torch.testing.assert_close(gpu_loss.cpu(), cpu_loss, **tolerance(dtype))
    grad_loss = torch.tensor(0.75, dtype=dtype)
    cpu_grad = pcl.pcl_backward(*args, grad_loss)
    gpu_grad = pcl.pcl_backward(*to_cuda(args), grad_loss.cuda())
    torch.testing.assert_close(gpu_grad.cpu(), cpu_grad, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("index_dtype", [torch.float32, torch.float64, torch.int32,
                                         torch.int64])
def test_gpu_autograd_and_index_dtypes(rng, index_dtype):
    args = sample_inputs(rng, 500, 21, 30, index_dtype=index_dtype, rows=False)
    ref_loss, ref_grad, _ = seed_reference(args)
    probs = args[0].cuda().requires_grad_()
    loss = pcl.pcl_loss(probs, *to_cuda(args[1:]))
    loss.backward()
    assert loss.is_cuda and probs.grad.is_cuda
    np.testing.assert_allclose(loss.item(), ref_loss, **tolerance(torch.float32))
    np.testing.assert_allclose(probs.grad.double().cpu().numpy(), ref_grad,
                               **tolerance(torch.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("name,value,message", [
    ("labels", 3, r"labels\[2\] = 3 is not a class index in \[0, 3\)"),
    ("gt_assignment", 4, r"gt_assignment\[2\] = 4 is not a cluster index in \[0, 4\)"),
    ("pc_labels", -2, r"pc_labels\[2\] = -2 is not a class index in \[0, 3\)"),
])
def test_gpu_index_errors(name, value, message):
    args = good_args()
    args["labels"] = torch.tensor([[0, 1, 2, 1, 0]], dtype=torch.int64)
    args[name] = args[name].double()
    args[name].reshape(-1)[2] = value
    tensors = to_cuda([args[n] for n in NAMES])
    with pytest.raises(ValueError, match="pcl_loss: " + message):
        pcl.pcl_loss(*tensors)
    with pytest.raises(ValueError, match="pcl_loss_backward: " + message):
        pcl.pcl_backward(*tensors, torch.ones((), device="cuda"))
    args[name].reshape(-1)[2] = 0  # the module is still usable
    pcl.pcl_loss(*to_cuda([args[n] for n in NAMES]))


@pytest.mark.gpu
def test_gpu_errors():
    args = {name: t.cuda() for name, t in good_args().items()}
    args["pc_count"] = args["pc_count"].cpu()
    with pytest.raises(RuntimeError, match="pcl_loss: pc_count is on cpu; pcl_loss needs CUDA"):
        call(args)
    args = {name: t.cuda() for name, t in good_args().items()}
    args["labels"] = torch.zeros(1, 10, device="cuda")[:, ::2]
    with pytest.raises(ValueError, match="pcl_loss: labels must be contiguous"):
        call(args)
    args = {name: t for name, t in good_args().items()}
    args["im_labels"] = args["im_labels"].cuda()
    with pytest.raises(RuntimeError, match="pcl_loss: im_labels is on cuda:0; pcl_loss needs CPU"):
        call(args)


@pytest.mark.gpu
def test_gpu_runs_on_the_current_stream(rng):
    """pcl_probs written on a side stream behind a long sleep must be waited for."""
    args = sample_inputs(rng, 3000, 21, 40, dtype=torch.float64)
    ref_loss, _, _ = seed_reference(args)
    host = args[0].pin_memory()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        rest = to_cuda(args[1:])
        probs = torch.ones_like(args[0], device="cuda")
        torch.cuda._sleep(200_000_000)
        probs.copy_(host, non_blocking=True)
        loss, _, _ = pcl.pcl_forward(probs, *rest)
    np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-12)
