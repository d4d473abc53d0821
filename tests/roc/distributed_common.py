"""The tests' launcher of a gloo group: a function run on every rank of a
group of spawned processes (the tests of evaluation across processes)."""

import datetime
import os
import queue as queues
import socket
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
