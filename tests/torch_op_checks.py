"""What the tests of every op family check of its torch.library custom ops:
torch.library.opcheck (schema, fake kernel, autograd registration, AOT
dispatch), and torch.compile(fullgraph=True) of a small model that uses the
op: no graph break, and the eager outputs and gradients."""

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
