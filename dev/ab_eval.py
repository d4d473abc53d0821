"""A/B of the ROC evaluator between builds, on bench_roc.py's workloads: every
row of BENCHMARKS.md's ROC sections that times this project (score matrices,
features, pair lists, the 2.6e11 and IFRT sizes, gpu_roc and the curve).

    python3 dev/ab_eval.py ROOT_A ROOT_B [--rounds 2] [--only NAME,...]
        [--names A,B] [--results FILE] [--markdown BENCHMARKS.md]

ROOT_A and ROOT_B are checkouts with their _ext modules built (a base built
beside this one, say). Each (round, build) runs in a process of its own, the
builds' order alternating between rounds, so that one process's GPU state and
clocks do not favour a build; the largest workloads run in fewer rounds
(WORKLOADS' last column). Each workload's time is the least wall time of its
calls (synchronized), the first call untimed where a workload makes several;
every build's results must agree (each count array both builds report,
hashed), or the run fails. --results keeps the measured rows in a JSON file
and adds to them, so that a long A/B can run in parts (one machine's calls);
--markdown writes every row so far as a section of its own, with the device
and the builds' names.
"""

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name: (inputs, their sizes, call, calls timed, rounds at most). Inputs and
# sizes are bench_roc.py's; calls timed 1: the one call that gives the result.
WORKLOADS = {
    "blog matrix gpu_roc": ("matrix", (10_000, 21_000), "gpu_roc", 20, 9),
    "blog matrix gpu_roc int64": ("matrix", (10_000, 21_000), "gpu_roc int64", 20, 9),
    "blog matrix exact": ("matrix", (10_000, 21_000), "exact", 20, 9),
    "blog matrix binned": ("matrix", (10_000, 21_000), "binned", 20, 9),
    "blog matrix curve": ("matrix", (10_000, 21_000), "curve", 3, 9),
    "blog exact": ("embeddings", (10_000, 21_000), "exact", 20, 9),
    "blog binned": ("embeddings", (10_000, 21_000), "binned", 20, 9),
    "1e10 exact": ("embeddings", (50_000, 200_000), "exact", 4, 9),
    "1e10 binned": ("embeddings", (50_000, 200_000), "binned", 4, 9),
    "same set exact": ("same_set", (30_000, 10), "exact", 10, 9),
    "same set binned": ("same_set", (30_000, 10), "binned", 10, 9),
    "same set matrix exact": ("same_set_matrix", (30_000, 10), "exact", 10, 9),
    "ijb flat exact": ("ijb_flat", (), "exact", 20, 9),
    "ijb flat curve": ("ijb_flat", (), "curve", 3, 9),
    "ijb templates exact": ("ijb_templates", (), "exact", 10, 9),
    "4e9 flat exact": ("flat", (4_000_000_000,), "exact", 1, 9),
    "2.6e11 easy exact": ("scale_easy", (100_000, 650_000), "exact", 1, 2),
    "2.6e11 easy binned": ("scale_easy", (100_000, 650_000), "binned", 1, 2),
    "2.6e11 hard exact": ("scale_hard", (100_000, 650_000), "exact", 1, 2),
    "2.6e11 hard binned": ("scale_hard", (100_000, 650_000), "binned", 1, 2),
    "IFRT hard exact": ("scale_hard", (1_000_000, 650_000), "exact", 1, 1),
}


def digests(result):
    """{array name: hash} of a result: a report's counts, a curve's arrays or
    gpu_roc's histograms."""
    if isinstance(result, (tuple, list)):
        arrays = {"array%d" % i: a for i, a in enumerate(result)}
    else:
        arrays = result.counts
    out = {}
    for name, value in arrays.items():
        if hasattr(value, "cpu"):
            value = value.cpu().numpy()
        data = value.tobytes() if hasattr(value, "tobytes") else repr(value).encode()
        out[name] = hashlib.sha256(data).hexdigest()[:16]
    return out


def make_inputs(kind, size):
    """The workload's inputs (benchmarks.roc_inputs imports no _ext)."""
    import torch
    from benchmarks.roc_inputs import embeddings, flat_pairs, ijb_like, scale_embeddings, unit
    if kind in ("embeddings", "matrix"):
        labels_q, feat_q, labels_g, feat_g = embeddings(*size, 512, seed=2)
        if kind == "embeddings":
            return labels_q, feat_q, labels_g, feat_g
        return labels_q, unit(feat_q) @ unit(feat_g).T, labels_g
    if kind.startswith("ijb"):
        feat, index_a, index_b, genuine = ijb_like()
        return genuine, feat, index_a, index_b, (feat[index_a] * feat[index_b]).sum(1)
    if kind == "flat":
        return flat_pairs(*size)
    if kind.startswith("same_set"):
        labels, feat, _, _ = embeddings(size[0], 0, 512, seed=3, same_set=True, per_id=size[1])
        if kind == "same_set":
            return labels, feat
        return labels, unit(feat) @ unit(feat).T
    torch.cuda.empty_cache()
    return scale_embeddings(*size, 512, kind == "scale_hard", seed=4)


def make_call(roc, kind, call, inputs):
    """The workload's call of the build's roc module."""
    import torch
    if kind == "matrix":
        labels_q, score, labels_g = inputs
        if call.startswith("gpu_roc"):
            dtype = torch.int64 if call.endswith("int64") else torch.float32
            histo1 = torch.zeros(1024, dtype=dtype, device="cuda")
            histo2 = torch.zeros(1024, dtype=dtype, device="cuda")
            flabels_q, flabels_g = labels_q.float(), labels_g.float()

            def legacy():
                histo1.zero_()
                histo2.zero_()
                roc.gpu_roc(score, histo1, histo2, flabels_q, flabels_g)
                return histo1, histo2
            return legacy
        if call == "curve":
            return lambda: roc.roc_curve(labels_q, labels_g, score=score)
        return lambda: roc.evaluate(labels_q, labels_g, score=score, mode=call)
    if kind == "ijb_flat":
        if call == "curve":
            return lambda: roc.roc_curve_pairs(inputs[0], inputs[4])
        return lambda: roc.evaluate_pairs(inputs[0], inputs[4])
    if kind == "ijb_templates":
        genuine, feat, index_a, index_b, _ = inputs
        return lambda: roc.evaluate_pairs(genuine, feat_a=feat, feat_b=feat, index_a=index_a,
                                          index_b=index_b)
    if kind == "flat":
        return lambda: roc.evaluate_pairs(*inputs)
    if kind == "same_set_matrix":
        labels, score = inputs
        return lambda: roc.evaluate(labels, None, score=score, same_set=True, mode=call)
    if kind == "same_set":
        labels, feat = inputs
        return lambda: roc.evaluate(labels, None, feat_q=feat, same_set=True, mode=call)
    labels_q, feat_q, labels_g, feat_g = inputs
    return lambda: roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=call)


def measure(root, names):
    """In the child: time each workload with root's _ext on this checkout's
    inputs (root goes before this checkout on sys.path for _ext, after the
    inputs' module is imported)."""
    import time

    import torch
    sys.path.insert(0, ROOT)
    import benchmarks.roc_inputs  # noqa: F401  (before root's _ext shadows this one's)
    sys.path.insert(0, os.path.abspath(root))
    from _ext import roc
    assert os.path.abspath(roc.__file__).startswith(os.path.abspath(root) + os.sep)
    torch.backends.cuda.matmul.allow_tf32 = False
    results, data = {}, {}
    for name in names:
        kind, size, call, calls, _ = WORKLOADS[name]
        if (kind, size) not in data:
            data.clear()
            torch.cuda.empty_cache()
            data[kind, size] = make_inputs(kind, size)
        fn = make_call(roc, kind, call, data[kind, size])
        best = float("inf")
        for i in range(calls + (calls > 1)):
            torch.cuda.synchronize()
            start = time.perf_counter()
            result = fn()
            torch.cuda.synchronize()
            if i or calls == 1:
                best = min(best, time.perf_counter() - start)
        peak = getattr(result, "device_bytes_peak", None)
        results[name] = {"ms": best * 1e3, "digests": digests(result),
                         "peak_mib": None if peak is None else peak / 2**20}
    print(json.dumps(results))


def agree(rows):
    """Whether every build's result agrees on each array that all of them report."""
    common = set.intersection(*(set(row["digests"]) for row in rows))
    return bool(common) and all(len({row["digests"][k] for row in rows}) == 1 for k in common)


def markdown(args, names, table):
    """The A/B table as BENCHMARKS.md's section of this script."""
    import torch
    labels = args.names.split(",") if args.names else args.roots
    first, last = labels[0], labels[-1]
    lines = ["## The ROC evaluator between builds (`dev/ab_eval.py`)", "",
             "Device: %s, %s. Command: `python3 dev/ab_eval.py BEFORE AFTER --names %s "
             "--results FILE --markdown BENCHMARKS.md` (in parts with `--only`, the rounds "
             "as the table says), BEFORE and AFTER being checkouts of %s and %s, each built. A "
             "time is the least wall time of a build's calls over its rounds (synchronized, "
             "after an untimed first call where a workload makes several); the builds alternate "
             "between rounds, each in a process of its own. The workloads are bench_roc.py's "
             "(one row each of its ROC sections' rows that time this project)." % (
                 torch.cuda.get_device_name(), datetime.date.today().isoformat(),
                 ",".join(labels), first, last), "",
             "| workload | rounds | %s ms | %s ms | %s / %s | device memory peak MiB (%s, %s) "
             "| results identical |" % (first, last, last, first, first, last),
             "|---|---|---|---|---|---|---|"]
    for name in names:
        rows = table[name]
        ms = [min(r["ms"] for r in rows[root]) for root in (args.roots[0], args.roots[-1])]
        peaks = [rows[root][0]["peak_mib"] for root in (args.roots[0], args.roots[-1])]
        peak = "-" if None in peaks else "%.0f, %.0f" % tuple(peaks)
        same = agree([r for root in args.roots for r in rows[root]])
        lines.append("| %s | %d | %.2f | %.2f | %.3f | %s | %s |" % (
            name, len(rows[args.roots[0]]), ms[0], ms[1], ms[1] / ms[0], peak,
            "yes" if same else "**no**"))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", help="comma-separated workload names")
    parser.add_argument("--names", help="comma-separated names of the builds, for the table")
    parser.add_argument("--results", help="JSON file of measured rows, read and added to")
    parser.add_argument("--markdown", help="write the table as a section of this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error("unknown workloads %s; known: %s" % (unknown, ", ".join(WORKLOADS)))
    if args.child:
        return measure(args.child, names)
    table = {}
    if args.results and os.path.exists(args.results):
        with open(args.results) as f:
            table = json.load(f)
    for name in names:
        table.pop(name, None)
    for r in range(args.rounds):
        order = args.roots if r % 2 == 0 else args.roots[::-1]
        now = [n for n in names if r < WORKLOADS[n][4]]
        for root in order:
            child = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", root,
                                    "--only", ",".join(now)], capture_output=True, text=True)
            if child.returncode:
                sys.exit("ab_eval.py: the run of %s failed:\n%s" % (root, child.stderr))
            for name, row in json.loads(child.stdout.strip().splitlines()[-1]).items():
                table.setdefault(name, {}).setdefault(root, []).append(row)
            print("round %d, %s: done" % (r, root), flush=True)
    if args.results:
        with open(args.results, "w") as f:
            json.dump(table, f)
    all_agree = True
    for name in names:
        rows = table[name]
        cells = []
        for root in args.roots:
            ms = sorted("%.2f" % row["ms"] for row in rows[root])
            peak = rows[root][0]["peak_mib"]
            cells.append("%s: %s ms%s" % (root, "-".join(ms),
                                          "" if peak is None else ", %.0f MiB" % peak))
        same = agree([row for root in args.roots for row in rows[root]])
        all_agree = all_agree and same
        print("%-26s %s%s" % (name, " | ".join(cells), "" if same else "  RESULTS DIFFER"))
    if args.markdown:
        sys.path.insert(0, ROOT)
        from benchmarks.sections import write_section
        write_section(args.markdown, "dev/ab_eval.py",
                      markdown(args, [n for n in WORKLOADS if n in table], table))
    return 0 if all_agree else 1


if __name__ == "__main__":
    sys.exit(main())
