"""mxnet_roc.py: the MXNet side of compare_mxnet.py: the scores and the legacy
histograms of a query/gallery pair of .npz files, computed with MXNet's own
ndarray operations, written to an .npz for the project side to compare.

    .venv-mxnet/bin/python scripts/mxnet_roc.py query.npz gallery.npz out.npz [--bins 1024]

It runs in its own environment (MXNet 1.9.1 needs NumPy < 1.24; see
requirements-mxnet.txt and `make .venv-mxnet`) and imports neither torch nor
_ext: only MXNet, NumPy and the NumPy-only helpers beside it.

What MXNet computes, per block of query rows (score is (rows, G), row-major):

    score   = mx.nd.dot(feature_q, feature_g, transpose_b=True)      float32
    genuine = mx.nd.broadcast_equal(labels_q (rows, 1), labels_g (1, G))
    clipped = mx.nd.clip(score, -1, 1)
    all     += mx.nd.histogram(clipped, bins=legacy edges)
    genuine += mx.nd.histogram(mx.nd.where(genuine, clipped, -3), bins=legacy edges)

The edges are legacy_bins.legacy_edges(nbins): float32, the smallest float32
score of each legacy bin, so that MXNet's [e_k, e_k+1) bins hold exactly the
float32 scores the legacy trunc((s + 1) / 2 * (nbins - 1)) puts in bin k.
They must be float32 because the scores are: MXNet's histogram reads the
edges with the data's dtype (and refuses edges of another dtype). Clipping
to [-1, 1] first gives out-of-range scores the legacy edge bins (MXNet drops
values outside the edges); NaN stays NaN, falls outside every bin and is
dropped, as the legacy code skips it. Impostor pairs are replaced by -3,
below the first edge, so the second histogram counts the genuine pairs only.
The last edge is the float32 just above 1, so no clipped score equals it
(MXNet's bin search would read past the edge array for a value equal to the
last edge).
"""

import argparse
import os
import sys

import numpy as np

from legacy_bins import legacy_edges

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ext.tools.embeddings import InputError, fail, load, query_gallery  # noqa: E402

# pairs per MXNet block: MXNet 1.9.1's wheel indexes tensors with 32-bit
# integers, and the histogram takes an int per pair of temporary space
BLOCK_PAIRS = 1 << 25
OUTSIDE = -3.0  # below the first edge (-1): not counted by mx.nd.histogram


def mxnet_legacy(feature_q, label_q, feature_g, label_g, nbins):
    """(score (Q, G) float32, all (nbins,) int64, genuine (nbins,) int64),
    every step an MXNet operation but the copies into NumPy."""
    import mxnet as mx

    n_query, n_gallery = feature_q.shape[0], feature_g.shape[0]
    edges = mx.nd.array(legacy_edges(nbins), dtype="float32")
    gallery = mx.nd.array(feature_g, dtype="float32")
    labels_g = mx.nd.array(label_g, dtype=label_g.dtype).reshape((1, -1))
    score = np.empty((n_query, n_gallery), dtype=np.float32)
    histo_all = np.zeros(nbins, dtype=np.int64)
    histo_genuine = np.zeros(nbins, dtype=np.int64)
    rows = max(1, BLOCK_PAIRS // max(n_gallery, 1))
    for begin in range(0, n_query, rows):
        end = min(begin + rows, n_query)
        query = mx.nd.array(feature_q[begin:end], dtype="float32")
        labels_q = mx.nd.array(label_q[begin:end], dtype=label_q.dtype).reshape((-1, 1))
        block = mx.nd.dot(query, gallery, transpose_b=True)
        clipped = mx.nd.clip(block, -1.0, 1.0)
        genuine = mx.nd.broadcast_equal(labels_q, labels_g)
        genuine_only = mx.nd.where(genuine, clipped, mx.nd.full(clipped.shape, OUTSIDE))
        counts_all, _ = mx.nd.histogram(clipped, bins=edges)
        counts_genuine, _ = mx.nd.histogram(genuine_only, bins=edges)
        score[begin:end] = block.asnumpy()
        histo_all += counts_all.asnumpy().astype(np.int64)
        histo_genuine += counts_genuine.asnumpy().astype(np.int64)
    return score, histo_all, histo_genuine


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("query", help="query .npz (feature, label)")
    parser.add_argument("gallery", help="gallery .npz (feature, label)")
    parser.add_argument("out", help=".npz to write: score, histo_all, histo_genuine, edges, "
                                    "versions")
    parser.add_argument("--bins", type=int, default=1024, help="legacy bins (default 1024)")
    args = parser.parse_args(argv)
    if args.bins < 1:
        fail("mxnet_roc.py", "--bins must be at least 1, got %d" % args.bins)
    try:
        import mxnet as mx
    except ImportError as error:
        fail("mxnet_roc.py", "cannot import mxnet with %s: %s" % (sys.executable, error))
    try:
        feature_q, label_q, feature_g, label_g = query_gallery(load(args.query),
                                                               load(args.gallery))
    except InputError as error:
        fail("mxnet_roc.py", str(error))
    score, histo_all, histo_genuine = mxnet_legacy(feature_q, label_q, feature_g, label_g,
                                                   args.bins)
    np.savez(args.out, score=score, histo_all=histo_all, histo_genuine=histo_genuine,
             edges=legacy_edges(args.bins), mxnet_version=np.array(mx.__version__),
             numpy_version=np.array(np.__version__),
             python_version=np.array(sys.version.split()[0]))


if __name__ == "__main__":
    main()
