"""What the tests of every op family check of its torch.library custom ops:
torch.library.opcheck (schema, fake kernel, autograd registration, AOT
dispatch), torch.compile(fullgraph=True) of a small model that uses the op:
no graph break, and the eager outputs and gradients; and the same for the
gradient of a gradient penalty (double backward) computed inside the
compiled function."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode


def opcheck(op, args, kwargs=None):
    """torch.library.opcheck's tests, each of which must pass."""
    results = torch.library.opcheck(op, args, kwargs)
    assert set(results.values()) == {"SUCCESS"}, results


def leaves(tensors):
    """Fresh leaf copies, floating tensors requiring grad."""
    return [t.detach().clone().requires_grad_(t.is_floating_point()) for t in tensors]


def check_compiled(model, inputs, backend="inductor", grad_tolerance=None):
    """model(*inputs) (a scalar or a tensor) compiled with fullgraph=True
    equals the eager model, forward and backward, with zero graph breaks.

    grad_tolerance: assert_close's keywords for the gradients (default: the
    dtype's defaults); outputs are compared the same way.
    """
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(*leaves(inputs))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1

    compiled = torch.compile(model, fullgraph=True, backend=backend)
    tolerance = grad_tolerance or {}
    eager_inputs, compiled_inputs = leaves(inputs), leaves(inputs)
    eager_out = model(*eager_inputs)
    compiled_out = compiled(*compiled_inputs)
    torch.testing.assert_close(compiled_out, eager_out, **tolerance)

    # the same gradients, and none where eager has none (an input the op's
    # gradient rule leaves out)
    params = list(model.parameters())
    eager_grads = torch.autograd.grad(eager_out.sum(), eager_inputs + params, allow_unused=True)
    compiled_grads = torch.autograd.grad(compiled_out.sum(), compiled_inputs + params,
                                         allow_unused=True)
    assert any(g is not None for g in eager_grads)
    for ours, theirs in zip(compiled_grads, eager_grads):
        assert (ours is None) == (theirs is None)
        if theirs is not None:
            torch.testing.assert_close(ours, theirs, **tolerance)
    return compiled_out


def hessian_vector_product(fn, inputs, weights, directions):
    """H d for the loss sum(weights * fn(*inputs)^2), H its Hessian with
    respect to the inputs and d the directions (one per input): the double
    backward of fn through every input and through its grad_output (the
    square makes grad_output depend on the inputs). None where H d has no
    path (a linear op's input)."""
    loss = (weights * fn(*inputs).square()).sum()
    grads = torch.autograd.grad(loss, inputs, create_graph=True)
    along = sum((g * d).sum() for g, d in zip(grads, directions))
    return torch.autograd.grad(along, inputs, allow_unused=True)


def penalty_gradients(model, inputs):
    """The gradient of a gradient penalty: with theta the inputs and the
    model's parameters and g = d model(*inputs).sum() / d theta, the gradient
    of sum(g^2) with respect to theta (None where nothing reaches), which
    runs the double backward of every op in the model."""
    wrt = list(inputs) + list(model.parameters())
    grads = torch.autograd.grad(model(*inputs).sum(), wrt, create_graph=True)
    penalty = sum(g.square().sum() for g in grads)
    return torch.autograd.grad(penalty, wrt, allow_unused=True)


def check_compiled_double_backward(model, inputs, backend="inductor", tolerance=None):
    """penalty_gradients(model, inputs) computed inside a function compiled
    with fullgraph=True (dynamo tracing torch.autograd.grad) equals eager's:
    the ops' double-backward formulas trace, and give the eager numbers."""
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        pytest.skip("this torch cannot trace torch.autograd.grad (trace_autograd_ops)")
    torch._dynamo.reset()
    eager = penalty_gradients(model, leaves(inputs))
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled_fn = torch.compile(lambda *xs: penalty_gradients(model, xs), fullgraph=True,
                                    backend=backend)
        compiled = compiled_fn(*leaves(inputs))
    assert any(g is not None for g in eager)
    for ours, theirs in zip(compiled, eager):
        assert (ours is None) == (theirs is None)
        if theirs is not None:
            torch.testing.assert_close(ours, theirs, **(tolerance or {}))


class _OpRecorder(TorchDispatchMode):
    """The names ("ext.gelu.default") of the ops dispatched under it."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def ops_called(fn, *args):
    """fn(*args), and the names of the ops it dispatched, backward included
    where fn runs one."""
    with _OpRecorder() as recorder:
        result = fn(*args)
    return result, recorder.names
