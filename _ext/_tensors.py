"""The checks the torch wrappers of the op families make before they allocate
an output, and the allocation itself.

The C shims check every descriptor, but only once the wrapper has allocated
the outputs they fill. An output shaped like an input that is not
contiguous (torch.zeros(1).expand(2**40), say) would be allocated whole
before the shim could refuse the input, and fail in torch's allocator
instead: require_contiguous refuses it first, with the shim's own message.
empty() turns an allocation that fails anyway (an output size asked for
explicitly) into a MemoryError that names the function.
"""

import torch

from ._ffi import allocation_error


def require_tensor(fn, name, x):
    if not isinstance(x, torch.Tensor):
        raise TypeError("%s: %s must be a torch.Tensor, got %s" % (fn, name, type(x).__name__))


def require_contiguous(fn, name, x):
    """The message of ext_check_contiguous (src/ext_check.c)."""
    if not x.is_contiguous():
        raise ValueError("%s: %s must be contiguous (call .contiguous() on it)" % (fn, name))


def empty_like(fn, name, like):
    """An uninitialized tensor like the contiguous tensor `like` (the cheapest
    allocation torch has); a failure as empty()'s."""
    try:
        return torch.empty_like(like)
    except (RuntimeError, AssertionError) as error:
        raise allocation_error(fn, name, like.shape, like.device, error) from error


def empty(fn, name, shape, like=None, dtype=None, device=None):
    """An uninitialized contiguous tensor of `shape` with like's dtype and
    device (or those given). A failure is a MemoryError where memory ran out,
    else a RuntimeError (a device that cannot be used), naming fn and the
    output."""
    try:
        if like is not None:
            return like.new_empty(shape)
        return torch.empty(shape, dtype=dtype, device=device)
    # torch.OutOfMemoryError is a RuntimeError; a CUDA device asked of a torch
    # built without CUDA fails an assertion
    except (RuntimeError, AssertionError) as error:
        raise allocation_error(fn, name, shape, device if like is None else like.device,
                                error) from error
