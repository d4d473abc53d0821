"""Timing that the benchmark scripts share: CUDA-event timing with L2
flushed, the measured copy bandwidth and fp32 GEMM rate they divide by, and
a host run's wall time with its peak NumPy memory.
"""

import os
import statistics
import time
import tracemalloc

import torch


def cuda_event_timer(warmup=3, repeat=20, flush_bytes=256 << 20, device="cuda",
                     lead_cycles=2_000_000):
    """timer(fn, repeat=None): the median ms of fn() on the current stream,
    timed with CUDA events after `warmup` calls; a `flush_bytes` buffer is
    rewritten before each timed call so that no run starts with its data in L2.

    The GPU then spins for `lead_cycles` clock cycles (about 1 ms) before the
    start event, so that the host has enqueued fn's work by the time the
    clock starts: the time is the device's, not the Python wrapper's (an
    autograd backward in Python, say). Work that makes the host wait (a
    read-back) still counts from there on."""
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device=device)

    def timer(fn, repeat=repeat):
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeat):
            flush.fill_(1)
            torch.cuda._sleep(lead_cycles)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    return timer


def copy_gbps(timer, device="cuda", nbytes=1 << 30):
    """GB/s of a device-to-device copy of nbytes, counting bytes read + written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = timer(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e6)


def fp32_gemm_rate(timer, device="cuda", n=8192):
    """FLOP per second of torch.matmul of two n x n float32 matrices (2 n^3
    FLOP), TF32 off for the measurement."""
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ms = timer(lambda: torch.matmul(a, b))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return 2 * n ** 3 / (ms / 1e3)


def host_run(fn):
    """(fn's result, its wall time in ms, the peak bytes that tracemalloc saw
    allocated during it): NumPy's arrays and Python's objects, not torch's
    tensors. One run."""
    tracemalloc.start()
    try:
        start = time.perf_counter()
        result = fn()
        ms = (time.perf_counter() - start) * 1e3
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, ms, peak


# ---------------------------------------------------------------------------
# under torchrun: one process a GPU

def nccl_group():
    """This process's GPU (LOCAL_RANK) and the NCCL process group joined, TF32
    off; (rank, world size)."""
    import torch.distributed as dist
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    torch.backends.cuda.matmul.allow_tf32 = False
    return dist.get_rank(), dist.get_world_size()


def group_wall(fn):
    """(wall seconds, fn()) of a call every rank makes, the ranks met and their
    GPUs synchronized before and after."""
    import torch.distributed as dist
    dist.barrier()
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    dist.barrier()
    return time.perf_counter() - start, result
