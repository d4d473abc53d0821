"""The tests' launchers of process groups: a function run on every rank of a
gloo group of spawned processes (the tests of evaluation across processes),
and an NCCL script run under torchrun on the 2-GPU machine, with the verdict
its ranks agree on."""

import datetime
import os
import queue as queues
import socket
import subprocess
import sys
import time

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(target, rank, world, port, timeout_s, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    try:
        results.put((rank, True, target(rank, world)))
    except Exception as error:  # the parent reports it
        results.put((rank, False, "%s: %s" % (type(error).__name__, error)))
    finally:
        dist.destroy_process_group()


def launch(target, world, timeout_s=600):
    """{rank: target(rank, world)} from `world` processes joined in a gloo group
    (the default one) whose collectives time out after timeout_s. Fails the
    calling test where a rank raised, died (a signal, a C abort) or ran past
    timeout_s; `target` must be a module-level function (spawn pickles it)."""
    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port()
    processes = [context.Process(target=_rank, args=(target, r, world, port, timeout_s, results))
                 for r in range(world)]
    for p in processes:
        p.start()
    out, deadline = {}, time.monotonic() + timeout_s
    try:
        while len(out) < world:
            try:
                rank, ok, result = results.get(timeout=1)
            except queues.Empty:
                died = [(r, p.exitcode) for r, p in enumerate(processes)
                        if r not in out and p.exitcode not in (None, 0)]
                assert not died, "rank(s) died with exit code(s): %s" % died
                assert time.monotonic() < deadline, "the ranks ran past %d s" % timeout_s
                continue
            assert ok, "rank %d failed: %s" % (rank, result)
            out[rank] = result
    finally:
        for p in processes:
            p.join(60)
            if p.is_alive():
                p.kill()
    return out


def run_nccl_script(script, name):
    """`script` under torchrun on 2 GPUs (skipped with fewer): it must exit 0
    and print "<name>: ok" (nccl_verdict)."""
    import pytest
    import torch
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                          script], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "%s: ok" % name in run.stdout


def nccl_verdict(name, failures):
    """Every rank's failures gathered: rank 0 prints "<name>: ok" or the
    failures; the group is destroyed; the exit status (0: none anywhere)."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, failures)
    if dist.get_rank() == 0:
        bad = [(r, f) for r, fs in enumerate(everyone) for f in fs]
        print("%s: ok" % name if not bad else "%s: FAILED %s" % (name, bad))
    dist.destroy_process_group()
    return 0 if not any(everyone) else 1
