"""What the benchmark scripts import, by module name with the checkout on
sys.path (scripts/, dev/ and tests/ all put it there to import _ext):

    timing.py         CUDA-event timing with L2 flushed; the copy-bandwidth probe
    sections.py       each script's own section of BENCHMARKS.md

A package at the checkout's root rather than under _ext: `pip install .`
ships _ext alone, and these need a checkout (BENCHMARKS.md, peers that are
no dependency of the library).
"""
