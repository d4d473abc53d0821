"""bench_ops.py: the further ops (trilinear, upsample, GELU, image convolution,
PCL loss) beside their PyTorch peers on one GPU, in one run.

    python scripts/bench_ops.py [--markdown BENCHMARKS.md]

The rows come from bench_ops_interp.py and bench_ops_pcl_conv.py (each also
runnable alone); this script checks the targets and writes the table into
its section of BENCHMARKS.md.
"""

import argparse
import datetime
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# its neighbours in scripts/, the folder Python puts first on sys.path for a script
from bench_ops_interp import bench_interp  # noqa: E402
from bench_ops_pcl_conv import bench_pcl_conv  # noqa: E402
from benchmarks.sections import write_section  # noqa: E402
from benchmarks.timing import copy_gbps, cuda_event_timer  # noqa: E402


def unified(interp_rows, conv_rows):
    """(op, case, ours ms, peer, peer ms, peer / ours, GB/s, fraction of copy)"""
    rows = []
    for r in interp_rows:
        rows.append((r["op"], r["variant"], r["ours_ms"], r["peer"], r["peer_ms"],
                     r["peer_ms"] / r["ours_ms"] if r["peer_ms"] else None, r["gbps"],
                     r["copy_fraction"]))
    for r in conv_rows:
        rows.append((r["op"], r["case"], r["ours_ms"], r["peer"], r["peer_ms"],
                     r["peer_ms"] / r["ours_ms"], r["gbps"], r["copy_fraction"]))
    return rows


def targets(rows):
    """(target, measured, met) for the issues' targets."""
    out = []
    for op, case, ours, peer, peer_ms, speedup, gbps, fraction in rows:
        if op == "trilinear" and speedup is not None:
            out.append(("trilinear %s: >= 2x the pure-PyTorch version" % case, "%.2fx" % speedup,
                        speedup >= 2.0))
            out.append(("trilinear %s: >= 70%% of copy bandwidth" % case, "%.0f%%" % (100 * fraction),
                        fraction >= 0.70))
        elif op in ("upsample", "gelu") and speedup is not None and "seed" not in peer:
            out.append(("%s %s: no slower than %s (within 10%%)" % (op, case, peer),
                        "%.2fx" % speedup, speedup >= 1 / 1.1))
        elif op == "conv2d forward" and int(case.rsplit("R = ", 1)[1]) <= 3:
            out.append(("conv2d forward %s: within 1.5x of cuDNN" % case,
                        "%.2fx its time" % (1 / speedup), speedup >= 1 / 1.5))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", help="write the table into this file (BENCHMARKS.md)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_ops.py: needs a CUDA device")
    timer = cuda_event_timer(warmup=3, repeat=20)
    copy = copy_gbps(timer)
    interp_rows = bench_interp(timer, copy_gbps=copy)
    conv_rows = bench_pcl_conv(timer)
    if not all(r["ok"] for r in conv_rows):
        sys.exit("bench_ops.py: some results differ from their peer")
    rows = unified(interp_rows, conv_rows)
    device = torch.cuda.get_device_name()
    lines = ["| op | case | ms | peer | peer ms | peer / ours | GB/s | of copy BW |",
             "|---|---|---|---|---|---|---|---|"]
    for op, case, ours, peer, peer_ms, speedup, gbps, fraction in rows:
        lines.append("| %s | %s | %.3f | %s | %s | %s | %.0f | %.0f%% |" % (
            op, case, ours, peer, "%.3f" % peer_ms if peer_ms else "-",
            "%.2f" % speedup if speedup else "-", gbps, 100 * fraction))
    checks = ["| target | measured | met |", "|---|---|---|"] + [
        "| %s | %s | %s |" % (name, value, "yes" if met else "**no**")
        for name, value, met in targets(rows)]
    table, summary = "\n".join(lines), "\n".join(checks)
    print(table)
    print(summary)
    if args.markdown:
        body = ["## Further ops (`scripts/bench_ops.py`)", "",
                "Device: %s, %s. Command: `python scripts/bench_ops.py --markdown %s`." % (
                    device, datetime.date.today().isoformat(), os.path.basename(args.markdown)),
                "Times: median of 20 CUDA-event timings after 3 warm-ups, L2 flushed before "
                "each and the GPU kept busy until the call is enqueued (device times; the PCL "
                "calls include their read-back of the label check). "
                "Copy bandwidth measured: %.0f GB/s (bytes read + written). peer / ours above 1: "
                "faster than the peer. GB/s counts the bytes each op must move (the scripts' "
                "docstrings give them). Every result was checked against its peer first." % copy,
                "", table, "", "### Targets", "", summary, ""]
        write_section(args.markdown, "bench_ops.py", "\n".join(body))
        print("wrote", args.markdown)


if __name__ == "__main__":
    main()
