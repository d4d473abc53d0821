"""Out of memory on the way: every CUDA entry point, with its k-th device (or
host) allocation made to fail by the test hook (ext_test_fail_allocations),
raises MemoryError naming its function, leaks no device memory, and works on
the next call. GPU machine; the evaluator's host failures on the CPU, and
pair_scores' outputs that cannot be allocated, are in
tests/roc/test_roc_inputs.py."""

import numpy as np
import pytest
import torch

from _ext import conv, gelu, pcl, roc, trilinear, upsample

pytestmark = pytest.mark.gpu


def cases():
    """(name, module, call) for every CUDA entry point, on small inputs."""
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, device="cuda", generator=g)

    labels_q = torch.randint(0, 5, (300,), device="cuda", generator=g)
    labels_g = torch.randint(0, 5, (700,), device="cuda", generator=g)
    feat_q, feat_g = rand(300, 24) - 0.5, rand(700, 24) - 0.5
    score = roc.pair_scores(feat_q, feat_g)
    genuine = (labels_q[:, None] == labels_g[None, :]).reshape(-1)
    index = torch.arange(300, device="cuda")
    histo = torch.zeros(1024, device="cuda")
    probs = torch.softmax(rand(64, 5), 1).requires_grad_()
    pcl_args = (probs, torch.randint(0, 5, (64,), device="cuda", generator=g).float(),
                rand(64), torch.randint(0, 8, (64,), device="cuda", generator=g).float(),
                torch.randint(0, 5, (8,), device="cuda", generator=g).float(), rand(8), rand(8) + 1,
                rand(8), torch.ones(5, device="cuda"))
    x = rand(2, 3, 17, 19).requires_grad_()
    return [
        ("gpu_roc", roc, lambda: roc.gpu_roc(score, histo, histo.clone(), labels_q, labels_g)),
        ("evaluate", roc, lambda: roc.evaluate(labels_q, labels_g, score=score)),
        ("evaluate", roc, lambda: roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g,
                                                mode="binned")),
        ("evaluate", roc, lambda: roc.evaluate(labels_g, None, feat_q=feat_g, same_set="ordered")),
        ("roc_curve", roc, lambda: roc.roc_curve(labels_q, labels_g, score=score)),
        ("evaluate_pairs", roc, lambda: roc.evaluate_pairs(genuine, score.reshape(-1))),
        ("evaluate_pairs", roc, lambda: roc.evaluate_pairs(
            genuine[:300], feat_a=feat_q, feat_b=feat_g, index_a=index, index_b=index)),
        ("pair_scores", roc, lambda: roc.pair_scores(feat_q, feat_g)),
        ("gelu", gelu, lambda: gelu.gelu(rand(1000).requires_grad_()).sum().backward()),
        ("trilinear_interpolation", trilinear, lambda: trilinear.trilinear_interpolation(
            rand(50, 8, 6).requires_grad_(), rand(50, 3) * 2 - 1).sum().backward()),
        ("upsample_bilinear", upsample,
         lambda: upsample.upsample_bilinear(x, scale_factor=2).sum().backward()),
        ("conv2d", conv, lambda: conv.conv2d(x, rand(3, 3).requires_grad_()).sum().backward()),
        ("pcl_loss", pcl, lambda: pcl.pcl_loss(*pcl_args).backward()),
    ]


def device_bytes_in_use():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free


@pytest.mark.parametrize("index", range(len(cases())) if torch.cuda.is_available() else [0])
def test_failed_allocations_raise_and_leak_nothing(index):
    name, module, call = cases()[index]
    call()  # warm: pools and torch's caches as after any call
    call()
    baseline = device_bytes_in_use()
    failures = 0
    for k in range(1, 60):  # the k-th device allocation fails, then the k-th host one
        for device, host in ((k, 0), (0, k)):
            module.lib.ext_test_fail_allocations(device, host)
            try:
                call()
            except MemoryError as error:
                assert str(error).split(":")[0] in (name, name + "_backward"), str(error)
                failures += 1
            finally:
                module.lib.ext_test_fail_allocations(0, 0)
        call()  # works again
    for _ in range(1000 // max(failures, 1)):  # about 1,000 failing calls in all
        module.lib.ext_test_fail_allocations(1, 0)
        try:
            call()
        except MemoryError:
            pass
        finally:
            module.lib.ext_test_fail_allocations(0, 0)
    assert abs(device_bytes_in_use() - baseline) <= 2 << 20, "device memory not back to baseline"
    call()


def test_hook_is_off_by_default():
    x = torch.rand(100, device="cuda")
    assert torch.equal(gelu.gelu(x), torch.nn.functional.gelu(x))
    assert np.isfinite(roc.evaluate(torch.arange(4, device="cuda") % 2,
                                    torch.arange(4, device="cuda") % 2,
                                    score=torch.rand(4, 4, device="cuda")).auc)
