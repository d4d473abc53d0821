"""Run under torchrun on a machine with 2+ GPUs (tests/rank/test_rank_distributed.py
does): rank.evaluate across the ranks through NCCL, each rank on its own GPU,
the queries in shards and the gallery in shards, equals one GPU's evaluation
of everything, count for count (per-query counts and top-k included). Prints
"nccl rank: ok" on rank 0 when every case matched."""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist

# the checkout (two folders up) and tests/ (distributed_common)
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(TESTS), TESTS]

from distributed_common import nccl_verdict  # noqa: E402

from _ext import rank  # noqa: E402
from _ext.roc._distributed import _shard  # noqa: E402


def summary(report):
    """What must be equal, count for count (NaN as None)."""
    out = {"report": report.to_dict()}
    out["report"].pop("device_bytes_peak")  # each process's own evaluator
    for name, values in (report.per_query or {}).items():
        out[name] = [None if v != v else v for v in np.asarray(values).reshape(-1).tolist()]
    return out


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    me, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank)
    rng = np.random.default_rng(5)
    n_query, n_gallery = 1501, 3003
    host = {"labels_q": rng.integers(0, 400, n_query), "labels_g": rng.integers(-1, 500, n_gallery),
            "cams_q": rng.integers(0, 6, n_query), "cams_g": rng.integers(0, 6, n_gallery),
            "feat_q": rng.normal(size=(n_query, 64)).astype(np.float32),
            "feat_g": rng.normal(size=(n_gallery, 64)).astype(np.float32)}
    d = {name: torch.from_numpy(x).to(device) for name, x in host.items()}
    failures = []
    for kwargs in (dict(), dict(ties="pessimistic", fpir_rule="insightface_ijb"),
                   dict(cams=True, ap="trapezoid")):
        kwargs = dict(kwargs)
        cams = kwargs.pop("cams", False)

        def call(q, g, **more):
            extra = dict(cams_q=d["cams_q"][q], cams_g=d["cams_g"][g]) if cams else {}
            return summary(rank.evaluate(d["labels_q"][q], d["labels_g"][g],
                                         feat_q=d["feat_q"][q], feat_g=d["feat_g"][g],
                                         per_query=True, **extra, **kwargs, **more))

        one = call(slice(None), slice(None))
        a, b = _shard(n_query, me, world, False)
        if call(slice(a, b), slice(None), group=True) != one:
            failures.append(("queries", sorted(kwargs), cams))
        a, b = _shard(n_gallery, me, world, False)
        if call(slice(None), slice(a, b), group=True, shard="gallery") != one:
            failures.append(("gallery", sorted(kwargs), cams))
    return nccl_verdict("nccl rank", failures)


if __name__ == "__main__":
    sys.exit(main())
