"""The custom ops ext::cpu_roc and ext::gpu_roc behind the legacy entry points:
the legacy int result and the op's tensor one against the float64 NumPy
reference of test_roc_legacy, opcheck, and torch.compile(fullgraph=True) of a
model that scores features and bins them (GPU twins on a GPU machine)."""

import numpy as np
import pytest
import torch

from _ext import roc
from test_roc_legacy import reference_legacy, sample_inputs
from torch_op_checks import opcheck, ops_called


def tensors(score, labels_q, labels_g, nbins, dtype=torch.int64, device="cpu"):
    """score, histo1, histo2, labels_q, labels_g as tensors on `device`."""
    return (torch.from_numpy(score).to(device), torch.zeros(nbins, dtype=dtype, device=device),
            torch.zeros(nbins, dtype=dtype, device=device),
            torch.from_numpy(labels_q).to(device), torch.from_numpy(labels_g).to(device))


def test_legacy_call_runs_the_ops_kernel_eagerly_and_returns_an_int(rng):
    """Eagerly the legacy call runs the op's kernel without the dispatcher (its
    cost is the caller's: the call waits for its count); torch.compile traces
    the op (test_compile_fullgraph)."""
    score, labels_q, labels_g = sample_inputs(rng, 20, 30, kind="special")
    args = tensors(score, labels_q, labels_g, 64)
    n_nan, names = ops_called(roc.cpu_roc, *args)
    assert "ext.cpu_roc.default" not in names
    all_pairs, genuine, expected_nan = reference_legacy(score, labels_q, labels_g, 64)
    assert type(n_nan) is int and n_nan == expected_nan > 0
    assert np.array_equal(args[1].numpy(), all_pairs)
    assert np.array_equal(args[2].numpy(), genuine)


def test_op_returns_a_cpu_int64_tensor_and_adds_into_the_histograms(rng):
    score, labels_q, labels_g = sample_inputs(rng, 11, 17, kind="special")
    args = tensors(score, labels_q, labels_g, 16, dtype=torch.float64)
    first = torch.ops.ext.cpu_roc(*args)
    second = torch.ops.ext.cpu_roc(*args)
    all_pairs, genuine, expected_nan = reference_legacy(score, labels_q, labels_g, 16)
    assert first.dtype == torch.int64 and first.shape == () and first.device.type == "cpu"
    assert int(first) == int(second) == expected_nan
    assert np.array_equal(args[1].numpy(), 2 * all_pairs)
    assert np.array_equal(args[2].numpy(), 2 * genuine)


def test_numpy_arrays_skip_the_op(rng):
    score, labels_q, labels_g = sample_inputs(rng, 5, 9, kind="special")
    histo1, histo2 = np.zeros(32), np.zeros(32)
    n_nan, names = ops_called(roc.cpu_roc, score, histo1, histo2, labels_q, labels_g)
    all_pairs, genuine, expected_nan = reference_legacy(score, labels_q, labels_g, 32)
    assert names == [] and n_nan == expected_nan
    assert np.array_equal(histo1, all_pairs) and np.array_equal(histo2, genuine)


@pytest.mark.parametrize("shape,nbins", [((6, 9), 1024), ((1, 1), 2), ((0, 4), 8)])
def test_opcheck(rng, shape, nbins):
    score, labels_q, labels_g = sample_inputs(rng, *shape, kind="special")
    for dtype in (torch.int64, torch.float32):
        opcheck(torch.ops.ext.cpu_roc.default, tensors(score, labels_q, labels_g, nbins, dtype))


def test_op_errors_name_the_legacy_function():
    args = tensors(*sample_inputs(np.random.default_rng(0), 3, 5), 16)
    with pytest.raises(TypeError, match="^cpu_roc: score must be float32, got float64"):
        torch.ops.ext.cpu_roc(args[0].double(), *args[1:])
    with pytest.raises(RuntimeError, match="^gpu_roc: "):
        torch.ops.ext.gpu_roc(*args)


class ScoreAndBin(torch.nn.Module):
    """Cosine scores of two feature sets, binned the legacy way by `op`."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, feat_q, feat_g, histo1, histo2, labels_q, labels_g):
        q = torch.nn.functional.normalize(feat_q, dim=1)
        g = torch.nn.functional.normalize(feat_g, dim=1)
        return self.op(q @ g.T, histo1, histo2, labels_q, labels_g)


def check_compiled_binning(op, device):
    rng = np.random.default_rng(3)
    feat_q = torch.from_numpy(rng.standard_normal((40, 8)).astype(np.float32)).to(device)
    feat_g = torch.from_numpy(rng.standard_normal((50, 8)).astype(np.float32)).to(device)
    feat_q[3, 0] = float("nan")  # a row of NaN scores: 50 counted
    labels_q = torch.from_numpy(rng.integers(0, 5, 40)).to(device)
    labels_g = torch.from_numpy(rng.integers(0, 5, 50)).to(device)
    model = ScoreAndBin(op)

    def histograms():
        return [torch.zeros(256, dtype=torch.int64, device=device) for _ in range(2)]

    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(feat_q, feat_g, *histograms(), labels_q, labels_g)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    eager, compiled = histograms(), histograms()
    eager_nan = model(feat_q, feat_g, *eager, labels_q, labels_g)
    compiled_model = torch.compile(model, fullgraph=True)
    compiled_nan = compiled_model(feat_q, feat_g, *compiled, labels_q, labels_g)
    assert int(compiled_nan) == int(eager_nan) == 50
    assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[1], eager[1])
    assert int(eager[0].sum()) == 40 * 50 - 50
    compiled_model(feat_q, feat_g, *compiled, labels_q, labels_g)  # adds again
    assert torch.equal(compiled[0], 2 * eager[0])


def test_compile_fullgraph():
    check_compiled_binning(torch.ops.ext.cpu_roc, "cpu")


# ---------------------------------------------------------------------------
# GPU machine

@pytest.mark.gpu
def test_cuda_legacy_call_and_op(rng):
    score, labels_q, labels_g = sample_inputs(rng, 32, 32, kind="special")
    args = tensors(score, labels_q, labels_g, 1024, device="cuda")
    n_nan, names = ops_called(roc.gpu_roc, *args)
    all_pairs, genuine, expected_nan = reference_legacy(score, labels_q, labels_g, 1024)
    assert "ext.gpu_roc.default" not in names  # eagerly, the op's kernel itself
    assert type(n_nan) is int and n_nan == expected_nan
    assert int(torch.ops.ext.gpu_roc(*args)) == expected_nan
    assert np.array_equal(args[1].cpu().numpy(), 2 * all_pairs)
    assert np.array_equal(args[2].cpu().numpy(), 2 * genuine)


@pytest.mark.gpu
def test_cuda_opcheck(rng):
    score, labels_q, labels_g = sample_inputs(rng, 6, 9, kind="special")
    for dtype in (torch.int64, torch.float32):
        opcheck(torch.ops.ext.gpu_roc.default,
                tensors(score, labels_q, labels_g, 1024, dtype, "cuda"))


@pytest.mark.gpu
def test_cuda_compile_fullgraph():
    check_compiled_binning(torch.ops.ext.gpu_roc, "cuda")
