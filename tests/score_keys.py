"""roc_math.h's order-preserving uint32 key of a float32 score, for tests that
build counts by hand."""

import numpy as np


def score_key(score):
    """The key of float32 `score` (ascending with the score)."""
    bits = int(np.float32(score).view(np.uint32))
    return bits | 0x80000000 if score >= 0 else ~bits & 0xFFFFFFFF
