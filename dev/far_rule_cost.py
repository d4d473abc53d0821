"""What a TAR@FAR rule costs an exact evaluation: wall time and peak memory of
evaluate() over every pair of one set of face-like features (identities with
noise, unit-normalized, same_set), each rule in a process of its own, so that
one's peak is not another's.

    python3 dev/far_rule_cost.py [--n 10000] [--dim 256] [--ids 1000] [--noise 1.6]
                                 [--rules max_tpr nearest_sklearn] [--repeat 3]
                                 [--checkout DIR]     # another checkout's _ext (a baseline)
                                 [--low-keys K]       # nearest_sklearn's CPU lists: K keys a
                                                      # gap (0: none, every undecided row
                                                      # probed, as on the GPU)

Prints, per rule: the best wall time of the repeats and the best CPU time
(user + system, every thread: on a shared machine whose cores are also taken
by others, the steadier of the two), the process's peak RSS (getrusage) and
its RSS before the evaluation (the features loaded), the passes over the pairs
(report.passes, where the checkout reports it), and the TAR@FAR rows.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def features(n, dim, ids, noise, seed=0):
    """n unit rows of `ids` identities: an identity's centre plus noise."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((ids, dim)).astype(np.float32)
    labels = rng.integers(0, ids, n)
    x = centres[labels] + noise * rng.standard_normal((n, dim)).astype(np.float32)
    return labels, x / np.linalg.norm(x, axis=1, keepdims=True)


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child(args):
    sys.path.insert(0, args.checkout)
    from _ext import roc
    if args.low_keys is not None:
        from _ext.roc import _evaluate
        _evaluate.LOW_KEYS = args.low_keys
    labels, feat = features(args.n, args.dim, args.ids, args.noise)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times, cpu_times = [], []
    for _ in range(args.repeat):
        start, cpu = time.perf_counter(), cpu_seconds()
        report = roc.evaluate(labels, None, feat_q=feat, same_set=True, far_rule=args.child)
        times.append(time.perf_counter() - start)
        cpu_times.append(cpu_seconds() - cpu)
    print(json.dumps({
        "rule": args.child, "seconds": min(times), "cpu_seconds": min(cpu_times),
        "pairs": report.n_genuine + report.n_impostor,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_mib": rss_before / 1024, "passes": getattr(report, "passes", None),
        "tar": [row.tar for row in report.tar_at_far]}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--ids", type=int, default=1000)
    parser.add_argument("--noise", type=float, default=1.6)
    parser.add_argument("--rules", nargs="+", default=["max_tpr", "nearest_sklearn"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--checkout", default=HERE)
    parser.add_argument("--low-keys", type=int)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    print("%s, %d x %d features, %d ids, noise %g, same_set%s" % (
        os.path.abspath(args.checkout), args.n, args.dim, args.ids, args.noise,
        "" if args.low_keys is None else ", low_keys %d" % args.low_keys))
    print("%-16s %12s %8s %8s %14s %12s %7s" % ("rule", "pairs", "wall s", "CPU s",
                                                 "peak RSS MiB", "before MiB", "passes"))
    for rule in args.rules:
        command = [sys.executable, os.path.abspath(__file__), "--child", rule] + [
            "--%s=%s" % (k, getattr(args, k)) for k in ("n", "dim", "ids", "noise", "repeat",
                                                        "checkout")] + (
            [] if args.low_keys is None else ["--low-keys=%d" % args.low_keys])
        out = json.loads(subprocess.run(command, check=True, capture_output=True,
                                        text=True).stdout)
        print("%-16s %12d %8.2f %8.2f %14.0f %12.0f %7s   TAR %s" % (
            rule, out["pairs"], out["seconds"], out["cpu_seconds"], out["peak_rss_mib"],
            out["rss_before_mib"], out["passes"], " ".join("%.4f" % t for t in out["tar"])))


if __name__ == "__main__":
    main()
