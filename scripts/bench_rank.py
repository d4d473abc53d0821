"""bench_rank.py: 1:N identification and re-ID ranking, rank.evaluate beside
its peers on one GPU, in one run.

    make bench                       # builds, then this, writing BENCHMARKS.md
    python scripts/bench_rank.py [--quick] [--large] [--markdown BENCHMARKS.md]
    torchrun --nproc-per-node=2 scripts/bench_rank.py --distributed [--large] [--markdown ...]

Workloads (benchmarks.rank_inputs, synthetic and seeded, on the GPU):
re-ID features (D = 2048, cameras, distractors 0, junk -1) at Market-1501's
size (3,368 x 15,913), MSMT17's (11,659 x 82,161) and Market + 500k
distractors' (3,368 x 515,913); IJB-C 1:N's (19,593 probe templates against
G1's 1,772 and G2's 1,759, D = 512); with --large, a face gallery of 10^7
against 10^5 probes (D = 512: 10^12 pairs, about two minutes; an estimate
is printed first).

Peers (benchmarks.rank_peers), in the same run: the fp32 GEMM alone (the
whole Q x G product, blocked, TF32 off), what a user writes on the GPU
(chunked matmul + per-row torch.sort, torchreid's mAP and CMC) and
torchreid's / fast-reid's way on the CPU (the distance matrix, np.argsort,
eval_market1501: its time and peak host memory, where that stays under 16
GB). This project: rank.evaluate from the features, default options, with
the cameras where the data has them. Before any timing, each peer's mAP and
CMC on rank.evaluate's own scores are checked against rank.evaluate's; a
mismatch aborts.

Times are the median of 20 runs (3 for the sort peer, one at the face
gallery's size) timed with CUDA events after warm-ups, L2 flushed before
each (benchmarks.timing.cuda_event_timer); each row gives milliseconds, the
ratio of each peer's time to its own and the fraction reached of the
measured fp32 GEMM rate (2 Q G D FLOP). The workloads are
benchmarks.rank_workloads; this script measures the ceiling, runs them,
checks the targets and writes its section of --markdown.

With --distributed (under torchrun, one process a GPU; benchmarks.rank_distributed):
MSMT17's size, and with --large the face gallery, on one GPU and on all of
them, the queries in shards and the gallery in shards, each report checked
equal to one GPU's, in a section of its own.
"""

import argparse
import datetime
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _ext import roc  # noqa: E402
from benchmarks.rank_distributed import section_lines, workload_distributed  # noqa: E402
from benchmarks.rank_workloads import workload_face, workload_ijb, workload_reid  # noqa: E402
from benchmarks.sections import targets_table, write_section  # noqa: E402
from benchmarks.timing import cuda_event_timer, fp32_gemm_rate  # noqa: E402

# (target key, name, queries, gallery, identities, cameras, distractors, junk):
# Market-1501's test split (751 identities, 6 cameras, its 2,793 distractors;
# junk within the gallery's size), MSMT17's (3,060 identities, 15 cameras, no
# distractors or junk), Market with 500,000 more distractors
REID_SIZES = (("market", "Market-1501", 3_368, 15_913, 751, 6, 2_793, 1_000),
              ("msmt", "MSMT17", 11_659, 82_161, 3_060, 15, 0, 0),
              ("market500k", "Market-1501 + 500k distractors", 3_368, 515_913, 751, 6,
               502_793, 1_000))
# --quick divides the re-ID and face sizes by this
QUICK_DIVISOR = 8
# (probes, gallery, probes the checks and the sort peer run on)
FACE_SIZE = (100_000, 10_000_000, 1_000)
FACE_DIM = 512
TARGET_RATIO = 1.3
IJB_TARGET_MS = 50.0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="the re-ID and face sizes divided by %d, fewer repeats" %
                             QUICK_DIVISOR)
    parser.add_argument("--large", action="store_true",
                        help="also the face gallery of 10^7 against 10^5 probes (10^12 pairs, "
                             "D = 512: about two minutes, about 45 GB of GPU memory)")
    parser.add_argument("--markdown", help="write the tables to this file (BENCHMARKS.md)")
    parser.add_argument("--distributed", action="store_true",
                        help="under torchrun: one GPU against all of them, the queries and the "
                             "gallery in shards (MSMT17's size; the face gallery with --large)")
    return parser.parse_args(argv)


def reid_sizes(quick):
    """REID_SIZES; where quick, their counts of images and identities divided
    by QUICK_DIVISOR (the cameras kept), the names saying so."""
    if not quick:
        return list(REID_SIZES)
    d = QUICK_DIVISOR
    return [(key, "%s / %d" % (name, d), n_query // d, n_gallery // d, n_ids // d, n_cams,
             n_distractors // d, n_junk // d)
            for key, name, n_query, n_gallery, n_ids, n_cams, n_distractors, n_junk
            in REID_SIZES]


def face_size(quick):
    """(probes, gallery, sample) of the face workload: FACE_SIZE, divided by
    QUICK_DIVISOR where quick."""
    n_probes, n_gallery, sample = FACE_SIZE
    if quick:
        return n_probes // QUICK_DIVISOR, n_gallery // QUICK_DIVISOR, sample // QUICK_DIVISOR
    return n_probes, n_gallery, sample


def face_estimate(n_probes, n_gallery, gemm_rate):
    """What the face workload will take, in words, before it starts."""
    gemm_s = 2 * n_probes * n_gallery * FACE_DIM / gemm_rate
    return ("face gallery: %d probes x %d (D = %d), %.2g FLOP: the GEMM alone about %.3g s at "
            "the measured rate, rank.evaluate about as long (at most %.1fx by the target); "
            "with the inputs (%.3g GB on the GPU, and as much again for rank.evaluate's "
            "normalized copy) and the checks and sort peer on a sample, expect about %.0f s"
            % (n_probes, n_gallery, FACE_DIM, 2 * n_probes * n_gallery * FACE_DIM, gemm_s,
               TARGET_RATIO, 4 * n_gallery * FACE_DIM / 1e9, 2.5 * gemm_s + 60))


def target_checks(targets, reid, face=None):
    """(target, measured, bound, sense) rows of the targets that were run:
    the re-ID sizes' and the face gallery's (face: its (probes, gallery),
    or None where it was not run) time over the GEMM alone, the IJB-C
    galleries' end-to-end milliseconds."""
    checks = [("%s size: rank.evaluate <= %.1fx the fp32 GEMM alone" % (name, TARGET_RATIO),
               targets[key + " evaluate"] / targets[key + " gemm"], TARGET_RATIO, "<=")
              for key, name, *_ in reid]
    if face is not None:
        checks.append(("face gallery, %d probes x %d: rank.evaluate <= %.1fx the fp32 GEMM "
                       "alone" % (face[0], face[1], TARGET_RATIO), targets["face evaluate"] /
                       targets["face gemm"], TARGET_RATIO, "<="))
    checks += [("IJB-C 1:N size, %s: end to end from template features, ms (under %.0f)"
                % (gallery, IJB_TARGET_MS), targets["ijb %s evaluate" % gallery],
                IJB_TARGET_MS, "<") for gallery in ("G1", "G2")]
    return checks


def repeats(args):
    """Timed runs a row (after the warm-ups)."""
    return 3 if args.quick else 20


def options_of(args):
    return (" --quick" if args.quick else "") + (" --large" if args.large else "")


def section(args, device, gemm_rate, tables, summary):
    """The markdown section of one run."""
    options = options_of(args)
    command = "python scripts/bench_rank.py%s --markdown %s" % (
        options, os.path.basename(args.markdown or "BENCHMARKS.md"))
    body = ["## 1:N identification and re-ID ranking (`scripts/bench_rank.py%s`)" % options, "",
            "Device: %s, %s. Command: `%s`%s." % (
                device, datetime.date.today().isoformat(), command,
                "" if options else " (also `make bench`)"),
            "Measured ceiling: fp32 GEMM %.1f TFLOP/s (torch.matmul 8192^3, TF32 off)."
            % (gemm_rate / 1e12),
            "Ratios are a peer's time over the row's time (above 1: the row is faster). Times: "
            "median of CUDA-event timings after warm-ups (%d runs; 3 for the sort peer%s), L2 "
            "flushed before each and the GPU kept busy until the call is enqueued; "
            "rank.evaluate's include its summary on the host; torchreid's way is one run's "
            "wall time on the CPU, with the peak of NumPy's allocations (tracemalloc)." % (
                repeats(args), "; one at the face gallery's size" if args.large else ""),
            "Checked before any timing: each peer's mAP and CMC on rank.evaluate's own scores "
            "(roc.pair_scores) equal rank.evaluate's to float64 rounding; where a mate ties a "
            "non-mate (fp32 scores of 10^8 pairs and more have a few such ties), they lie "
            "between its values with ties pessimistic and optimistic. The notes give each "
            "peer's mAP and rank-1 on its own scores (cuBLAS's sums, not one FMA chain a "
            "pair). rank.evaluate's device memory is its report's device_bytes_peak: the "
            "evaluator allocates from its own CUDA pool, which torch's counters do not see.",
            ""]
    for table in tables:
        body += [table.markdown(None, gemm_rate), ""]
    body += ["### Targets", "", summary, ""]
    return "\n".join(body)


def distributed(args):
    """Under torchrun: workload_distributed, then rank 0 writes its section."""
    msmt = next(size for size in reid_sizes(args.quick) if size[0] == "msmt")
    face = face_size(args.quick)[:2] if args.large else None
    me, world, rows = workload_distributed(msmt[1:], face)
    if me != 0 or not args.markdown:
        return
    lines = section_lines(world, torch.cuda.get_device_name(), datetime.date.today().isoformat(),
                          os.path.basename(args.markdown), rows, options_of(args))
    name = "bench_rank.py --distributed" + options_of(args)
    write_section(args.markdown, name, "\n".join(lines) + "\n")
    print("wrote", args.markdown)


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available() or not roc.built_with_cuda:
        sys.exit("bench_rank.py: needs a CUDA device and a CUDA build")
    if args.distributed:
        distributed(args)
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    timer = cuda_event_timer(warmup=1 if args.quick else 3, repeat=repeats(args))
    gemm_rate = fp32_gemm_rate(timer)
    device = torch.cuda.get_device_name()
    print("%s: fp32 GEMM %.1f TFLOP/s (TF32 off)" % (device, gemm_rate / 1e12))
    face = face_size(args.quick) if args.large else None
    if face is not None:
        print(face_estimate(face[0], face[1], gemm_rate), flush=True)

    targets = {}
    tables = []
    reid = reid_sizes(args.quick)
    for key, name, n_query, n_gallery, n_ids, n_cams, n_distractors, n_junk in reid:
        tables.append(workload_reid(timer, key, name, n_query, n_gallery, n_ids, n_cams,
                                    targets, n_distractors, n_junk))
    tables += workload_ijb(timer, targets)
    if face is not None:
        n_probes, n_faces, sample = face
        tables.append(workload_face(cuda_event_timer(warmup=0, repeat=1), n_probes, n_faces,
                                    targets, sample, FACE_DIM))

    summary = targets_table(target_checks(targets, reid, face[:2] if face else None))
    print(summary)
    if args.markdown:
        write_section(args.markdown, "bench_rank.py" + options_of(args),
                      section(args, device, gemm_rate, tables, summary))
        print("wrote", args.markdown)


if __name__ == "__main__":
    main()
