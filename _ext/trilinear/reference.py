"""The seed's pure-PyTorch trilinear interpolation: the reference the tests
check _ext.trilinear against, and its peer in scripts/bench_ops_interp.py."""


def trilinear_reference(feats, points):
    """feats (N, 8, F), points (N, 3) in [-1, 1] -> (N, F), in plain torch ops
    (autograd gives its gradients)."""
    u = (points[:, 0:1] + 1) / 2
    v = (points[:, 1:2] + 1) / 2
    w = (points[:, 2:3] + 1) / 2
    a = (1 - v) * (1 - w)
    b = (1 - v) * w
    c = v * (1 - w)
    d = 1 - a - b - c
    return ((1 - u) * (a * feats[:, 0] + b * feats[:, 1] + c * feats[:, 2] + d * feats[:, 3])
            + u * (a * feats[:, 4] + b * feats[:, 5] + c * feats[:, 6] + d * feats[:, 7]))
