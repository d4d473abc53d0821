"""What the benchmark scripts import, by module name with the checkout on
sys.path (scripts/, dev/ and tests/ all put it there to import _ext):

    timing.py         CUDA-event timing with L2 flushed; the copy-bandwidth probe
    sections.py       each script's own section of BENCHMARKS.md
    roc_inputs.py     the ROC benchmark's synthetic inputs (embeddings, pair lists)
    roc_peers.py      the ROC evaluators this project is timed beside, and their checks
    roc_table.py      one table of rows beside the peers, as markdown
    roc_workloads.py  the ROC workloads: inputs, peers and this project, timed and checked

scripts/bench_roc.py is the command that runs the ROC workloads and writes
their section; scripts/bench_ops*.py and bench_calls.py use timing and sections.

A package at the checkout's root rather than under _ext: `pip install .`
ships _ext alone, and these need a checkout (the blog's kernel built under
build/, BENCHMARKS.md, peers that are no dependency of the library). And
dev/ab_eval.py times another checkout's _ext on this checkout's inputs.
"""
