"""bench_rank.py --distributed: under torchrun, one process a GPU, rank.evaluate
on one GPU (rank 0 alone) against all of them, with the queries in shards and
with the gallery in shards, each result checked equal to one GPU's; wall
times with the GPUs synchronized (an evaluation returns its report, so it
has waited for its counts)."""

import time

import torch

from _ext import rank, roc
from benchmarks.rank_inputs import face_gallery, reid_features
from benchmarks.timing import group_wall, nccl_group


def _same(a, b):
    """Equal reports, count for count (each process's device memory apart)."""
    def plain(report):
        out = report.to_dict()
        out.pop("device_bytes_peak")
        return out
    return plain(a) == plain(b)


def _shard(data, shard, a, b):
    """This rank's inputs: queries [a, b) against the gallery, or every query
    against gallery entries [a, b)."""
    def cut(x):
        return x[a:b].contiguous() if x is not None else None
    if shard == "queries":
        return data._replace(labels_q=cut(data.labels_q), feat_q=cut(data.feat_q),
                             cams_q=cut(data.cams_q))
    return data._replace(labels_g=cut(data.labels_g), feat_g=cut(data.feat_g),
                         cams_g=cut(data.cams_g))


def _evaluate(data, **options):
    return rank.evaluate(data.labels_q, data.labels_g, feat_q=data.feat_q, feat_g=data.feat_g,
                         cams_q=data.cams_q, cams_g=data.cams_g, **options)


def workloads(reid, face):
    """(name, make) of each size: reid = (name, n_query, n_gallery, n_ids, n_cams,
    n_distractors, n_junk), face = (probes, gallery) or None."""
    out = [("%s size" % reid[0], lambda: reid_features(*reid[1:], dim=2048, seed=0,
                                                       device="cuda"))]
    if face is not None:
        out.append(("face gallery %d x %d" % face,
                    lambda: face_gallery(face[0], face[1], 512, device="cuda")))
    return out


def workload_distributed(reid, face):
    """Under torchrun. Returns (rank, world size, rows); rank 0's rows are
    (size, shard, one-GPU s, all-GPU s, report.communication, identical), the
    others' empty."""
    import torch.distributed as dist
    me, world = nccl_group()
    rows = []

    for name, make in workloads(reid, face):
        data = make()
        one = None
        if me == 0:
            start = time.perf_counter()
            one = _evaluate(data)
            one_s = time.perf_counter() - start
        for shard in ("queries", "gallery"):
            n = len(data.labels_q) if shard == "queries" else len(data.labels_g)
            a, b = roc.shard_rows(n, True)
            part = _shard(data, shard, a, b)
            many_s, many = group_wall(lambda part=part, shard=shard: _evaluate(part, group=True,
                                                                          shard=shard))
            if me == 0:
                same = _same(one, many)
                comm = many.communication
                rows.append((name, shard, one_s, many_s, comm, same))
                print("  %s, %s in shards: 1 GPU %.2f s, %d GPUs %.2f s (%.2fx), communication "
                      "%.3f s, %.1f MB sent by rank 0, identical: %s" % (
                          name, shard, one_s, world, many_s, one_s / many_s, comm["seconds"],
                          comm["bytes"] / 1e6, same), flush=True)
            del part, many
        del data, one
        torch.cuda.empty_cache()
    dist.destroy_process_group()
    return me, world, rows


def section_lines(world, device, date, markdown, rows, options):
    """The section of rank 0's rows, with the target (speed-up >= 0.925 x GPUs
    at the face gallery's size, identical); options: the command's other
    options (" --quick", " --large")."""
    lines = ["## 1:N ranking on %d GPUs (`scripts/bench_rank.py --distributed%s`)" % (
                 world, options), "",
             "Device: %d x %s, %s, NCCL (NVLink multicast off). Command: `torchrun "
             "--nproc-per-node=%d scripts/bench_rank.py --distributed%s --markdown %s`. "
             "rank.evaluate from features; the one-GPU time is rank 0 alone on the same inputs, "
             "the report compared count for count; wall times with the GPUs synchronized; "
             "communication = the collectives of the counts (report.communication)." % (
                 world, device, date, world, options, markdown), "",
             "| workload | shards | 1 GPU s | %d GPUs s | speed-up | communication s | bytes "
             "sent by rank 0 | identical to 1 GPU |" % world, "|---|---|---|---|---|---|---|---|"]
    targets = ["", "| target | measured | met |", "|---|---|---|"]
    for name, shard, one_s, many_s, comm, same in rows:
        lines.append("| %s | %s | %.2f | %.2f | %.2fx | %.3f | %.1f MB | %s |" % (
            name, shard, one_s, many_s, one_s / many_s, comm["seconds"], comm["bytes"] / 1e6,
            "yes" if same else "**no**"))
        if name.startswith("face"):
            met = one_s / many_s >= 0.925 * world and same
            targets.append("| %s, %s in shards: %d GPUs >= %.2fx one GPU, identical | %.2f | %s |"
                           % (name, shard, world, 0.925 * world, one_s / many_s,
                              "yes" if met else "**no**"))
    return lines + (targets if len(targets) > 3 else [])

