"""What the benchmark scripts import, by module name with the checkout on
sys.path (scripts/, dev/ and tests/ all put it there to import _ext):

    timing.py          CUDA-event timing with L2 flushed; the copy-bandwidth and GEMM-rate
                       probes; a host run's time and peak NumPy memory
    sections.py        each script's own section of BENCHMARKS.md, and its targets table
    roc_inputs.py      the ROC benchmark's synthetic inputs (embeddings, pair lists)
    roc_peers.py       the ROC evaluators this project is timed beside, and their checks
    roc_table.py       one table of rows beside the peers, as markdown (ROC and ranking)
    roc_workloads.py   the ROC workloads: inputs, peers and this project, timed and checked
    rank_inputs.py     the 1:N ranking benchmark's synthetic inputs (re-ID, IJB-C, face)
    rank_peers.py      the ranking peers (the GEMM alone, torch.sort, torchreid), their check
    rank_workloads.py  the ranking workloads: inputs, peers and rank.evaluate, checked, timed

scripts/bench_roc.py and scripts/bench_rank.py are the commands that run the
ROC and the ranking workloads and write their sections; scripts/bench_ops*.py
and bench_calls.py use timing and sections.

A package at the checkout's root rather than under _ext: `pip install .`
ships _ext alone, and these need a checkout (the blog's kernel built under
build/, BENCHMARKS.md, peers that are no dependency of the library). And
dev/ab_eval.py times another checkout's _ext on this checkout's inputs.
"""
