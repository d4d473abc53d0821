"""A/B of evaluate() between builds, on bench_roc.py's workloads (features, score matrices, pair lists).

    python3 dev/ab_eval.py ROOT_A ROOT_B [--rounds 2] [--only NAME,...]

ROOT_A and ROOT_B are checkouts with their _ext modules built (this one and a
base built beside it, say). Each (round, build) runs in a process of its own,
the builds' order alternating between rounds, so that one process's GPU
state and clocks do not favour a build. Each workload prints the least wall
time of its calls (synchronized); the reports of every build must agree
count for count, or the run fails.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# name: (bench_roc.py workload's inputs, their sizes, mode, calls timed)
WORKLOADS = {
    "blog matrix exact": ("matrix", (10_000, 21_000), "exact", 20),
    "blog matrix binned": ("matrix", (10_000, 21_000), "binned", 20),
    "ijb flat exact": ("ijb_flat", (), "exact", 20),
    "ijb templates exact": ("ijb_templates", (), "exact", 10),
    "4e9 flat exact": ("flat", (4_000_000_000,), "exact", 1),
    "blog exact": ("embeddings", (10_000, 21_000), "exact", 20),
    "blog binned": ("embeddings", (10_000, 21_000), "binned", 20),
    "1e10 exact": ("embeddings", (50_000, 200_000), "exact", 4),
    "1e10 binned": ("embeddings", (50_000, 200_000), "binned", 4),
    "same set exact": ("same_set", (30_000, 10), "exact", 10),
    "same set binned": ("same_set", (30_000, 10), "binned", 10),
    "2.6e10 easy exact": ("scale_easy", (10_000, 650_000), "exact", 3),
    "2.6e10 hard exact": ("scale_hard", (10_000, 650_000), "exact", 3),
}


def digest(report):
    """The report's counts, hashed: equal builds give equal digests."""
    h = hashlib.sha256()
    for name in sorted(report.counts):
        value = report.counts[name]
        h.update(name.encode())
        h.update(value.tobytes() if hasattr(value, "tobytes") else repr(value).encode())
    return h.hexdigest()[:16]


def measure(root, names):
    """In the child: time each workload with root's _ext on this checkout's
    inputs (benchmarks.roc_inputs imports no _ext, so it comes first, and
    root then goes before this checkout on sys.path for _ext)."""
    import torch
    sys.path.insert(0, os.path.dirname(HERE))
    from benchmarks.roc_inputs import embeddings, flat_pairs, ijb_like, scale_embeddings
    sys.path.insert(0, os.path.abspath(root))
    from _ext import roc
    assert os.path.abspath(roc.__file__).startswith(os.path.abspath(root) + os.sep)
    from profile_eval import wall
    torch.backends.cuda.matmul.allow_tf32 = False
    results, data = {}, {}
    for name in names:
        kind, size, mode, calls = WORKLOADS[name]
        if (kind, size) not in data:
            data.clear()
            torch.cuda.empty_cache()
            if kind in ("embeddings", "matrix"):
                data[kind, size] = embeddings(*size, 512, seed=2)
                if kind == "matrix":
                    labels_q, feat_q, labels_g, feat_g = data[kind, size]
                    data[kind, size] = labels_q, feat_q @ feat_g.T, labels_g
            elif kind.startswith("ijb"):
                feat, index_a, index_b, genuine = ijb_like()
                data[kind, size] = (genuine, feat, index_a, index_b,
                                    (feat[index_a] * feat[index_b]).sum(1))
            elif kind == "flat":
                data[kind, size] = flat_pairs(*size)
            elif kind == "same_set":
                data[kind, size] = embeddings(size[0], 0, 512, seed=3, same_set=True,
                                              per_id=size[1])
            else:
                data[kind, size] = scale_embeddings(*size, 512, kind == "scale_hard", seed=4)
        inputs = data[kind, size]

        def call():
            if kind == "matrix":
                labels_q, score, labels_g = inputs
                return roc.evaluate(labels_q, labels_g, score=score, mode=mode)
            if kind == "ijb_flat":
                return roc.evaluate_pairs(inputs[0], inputs[4])
            if kind == "ijb_templates":
                genuine, feat, index_a, index_b, _ = inputs
                return roc.evaluate_pairs(genuine, feat_a=feat, feat_b=feat, index_a=index_a,
                                          index_b=index_b)
            if kind == "flat":
                return roc.evaluate_pairs(*inputs)
            labels_q, feat_q, labels_g, feat_g = inputs
            return roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=mode,
                                same_set=kind == "same_set")
        report = call()
        results[name] = {"ms": wall(call, repeat=calls), "digest": digest(report),
                         "peak_mib": report.device_bytes_peak / 2**20}
    print(json.dumps(results))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", help="comma-separated workload names")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(WORKLOADS)
    if args.child:
        return measure(args.child, names)
    table = {}
    for r in range(args.rounds):
        order = args.roots if r % 2 == 0 else args.roots[::-1]
        for root in order:
            child = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", root,
                                    "--only", ",".join(names)], capture_output=True, text=True)
            if child.returncode:
                sys.exit("ab_eval.py: the run of %s failed:\n%s" % (root, child.stderr))
            for name, row in json.loads(child.stdout.strip().splitlines()[-1]).items():
                table.setdefault(name, {}).setdefault(root, []).append(row)
    agree = True
    for name in names:
        rows = table[name]
        cells = []
        for root in args.roots:
            ms = sorted("%.2f" % row["ms"] for row in rows[root])
            cells.append("%s: %s ms, %.0f MiB" % (root, "-".join(ms), rows[root][0]["peak_mib"]))
        digests = {row["digest"] for root in args.roots for row in rows[root]}
        agree = agree and len(digests) == 1
        print("%-18s %s%s" % (name, " | ".join(cells),
                              "" if len(digests) == 1 else "  COUNTS DIFFER %s" % digests))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
