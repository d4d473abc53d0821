"""The 1:N ranking benchmark's synthetic inputs, the same on every run (each
seeded), unit-normalized features with their labels:

    reid_features  person re-ID: identities photographed by several cameras,
                   distractors (label 0) and junk (label -1) in the gallery,
                   at Market-1501's, MSMT17's and Market + 500k's sizes
    ijb_c_1n       IJB-C 1:N: probe templates against the G1 and G2 galleries
                   (one template an identity; each probe mated in one of them)
    face_gallery   face 1:N at scale: a gallery of one image an identity, the
                   probes mated to some of it

Made in blocks of rows, so that the face gallery (20 GB) needs no more than
itself and one block (a re-ID gallery, shuffled, is copied once); on
`device` (the tests make them on the CPU). Imports torch and nothing of
_ext.
"""

import collections

import torch

# A camera adds this much of its own direction to every image it takes (with
# the identity's centre of norm 1): images of different people in one camera
# score above those in different cameras, which is why Market-1501's protocol
# excludes a query's own camera from its mates.
CAMERA_BIAS = 0.5
# An identity's images scatter around its centre by noise of this norm, drawn
# per identity: across cameras the easy ones (0.5) score about 0.7 with each
# other, the hard ones (3.5) about 0.07, inside the other identities' tail at
# D = 2048 (Market-1501's size: mAP about 0.77, rank-1 about 0.90).
REID_SPREAD = (0.5, 3.5)
# Face templates (IJB-C) and images (the large gallery) likewise, at D =
# 512: from about 0.9 with their mate down to 0.2, where a gallery of 10^7
# strangers has its best few.
FACE_SPREAD = (0.3, 2.0)
BLOCK_ROWS = 1 << 16

RankSet = collections.namedtuple("RankSet", "labels_q cams_q feat_q labels_g cams_g feat_g")
RankSet.__doc__ = """Queries and gallery, a row an image or template: labels
(int64), cameras (int64, or None where the protocol has none) and
unit-normalized float32 features."""


class _Draw:
    """Seeded draws on one device."""

    def __init__(self, seed, device):
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def normal(self, *shape):
        return torch.randn(*shape, device=self.device, generator=self.generator)

    def uniform(self, n, low, high):
        return low + (high - low) * torch.rand(n, device=self.device, generator=self.generator)

    def integers(self, high, n):
        return torch.randint(0, high, (n,), device=self.device, generator=self.generator)

    def permutation(self, n):
        return torch.randperm(n, device=self.device, generator=self.generator)

    def directions(self, n, dim):
        """n random unit vectors."""
        return unit_(self.normal(n, dim))


def unit_(x):
    """x's rows L2-normalized in place, a block at a time."""
    for begin in range(0, x.shape[0], BLOCK_ROWS):
        block = x[begin:begin + BLOCK_ROWS]
        block.div_(torch.linalg.vector_norm(block, dim=1, keepdim=True))
    return x


def _images(draw, out, centre, bias, spread):
    """out[:] = unit(centre + bias + spread * noise), noise of norm about 1,
    a block at a time: `centre`, `bias` and `spread` are callables of the
    block's row range giving its rows (or 0), so that nothing of out's size
    is made besides out."""
    n, dim = out.shape
    for begin in range(0, n, BLOCK_ROWS):
        rows = slice(begin, min(begin + BLOCK_ROWS, n))
        block = draw.normal(rows.stop - rows.start, dim).mul_(dim ** -0.5)
        block.mul_(spread(rows)).add_(centre(rows)).add_(bias(rows))
        out[rows] = block
    return unit_(out)


def reid_features(n_query, n_gallery, n_ids, n_cams, n_distractors=0, n_junk=0, dim=2048,
                  seed=0, device="cuda"):
    """Re-ID-like features: identities 1..n_ids, each image its identity's
    centre, its camera's bias and noise of the identity's spread
    (REID_SPREAD). Query i is of identity i % n_ids + 1, in a random camera.
    The gallery, in random order: n_gallery - n_distractors - n_junk images
    of the same identities in random cameras (several each), n_distractors
    people seen once (label 0, scored as non-mates), n_junk images of the
    identities too poor to count (label -1, near a random identity's centre
    with the widest spread: excluded by the protocol, they would rank among
    the mates if they were not). Returns a RankSet."""
    n_images = n_gallery - n_distractors - n_junk
    if n_images < n_ids:
        raise ValueError("reid_features: %d gallery entries leave %d images for %d identities"
                         % (n_gallery, n_images, n_ids))
    draw = _Draw(seed, device)
    centres = draw.directions(n_ids, dim)
    cameras = draw.directions(n_cams, dim)
    spread = draw.uniform(n_ids, *REID_SPREAD)

    def take(out, cams, centre, spread_of):
        """Images into `out` taken by cameras `cams`: centre(rows), the
        camera's bias, and noise of norm spread_of(rows)."""
        return _images(draw, out, centre, lambda r: CAMERA_BIAS * cameras[cams[r]], spread_of)

    ids_q = torch.arange(n_query, device=device) % n_ids
    cams_q = draw.integers(n_cams, n_query)
    feat_q = take(torch.empty(n_query, dim, device=device), cams_q,
                  lambda r: centres[ids_q[r]], lambda r: spread[ids_q[r], None])

    ids_g = torch.arange(n_images, device=device) % n_ids
    junk_ids = draw.integers(n_ids, n_junk)
    cams_g = draw.integers(n_cams, n_gallery)
    images, junk = slice(0, n_images), slice(n_images + n_distractors, n_gallery)
    distractors = slice(n_images, junk.start)
    feat_g = torch.empty(n_gallery, dim, device=device)
    take(feat_g[images], cams_g[images], lambda r: centres[ids_g[r]],
         lambda r: spread[ids_g[r], None])
    take(feat_g[distractors], cams_g[distractors],
         lambda r: draw.directions(r.stop - r.start, dim), lambda r: 1.0)
    take(feat_g[junk], cams_g[junk], lambda r: centres[junk_ids[r]], lambda r: REID_SPREAD[1])
    labels_g = torch.cat([ids_g + 1, torch.zeros(n_distractors, dtype=torch.int64, device=device),
                          torch.full((n_junk,), -1, dtype=torch.int64, device=device)])
    order = draw.permutation(n_gallery)
    return RankSet(ids_q + 1, cams_q, feat_q, labels_g[order], cams_g[order],
                   _gather_rows(feat_g, order))


def _gather_rows(x, order):
    """x[order], gathered a block at a time (nothing of x's size but the result)."""
    out = torch.empty_like(x)
    for begin in range(0, x.shape[0], BLOCK_ROWS):
        out[begin:begin + BLOCK_ROWS] = x[order[begin:begin + BLOCK_ROWS]]
    return out


def ijb_c_1n(n_probes=19_593, n_g1=1_772, n_g2=1_759, dim=512, seed=7, device="cuda"):
    """IJB-C 1:N-sized templates: n_g1 + n_g2 identities, one gallery template
    each, G1 the first n_g1 and G2 the others; each probe template of a random
    identity, so mated in one gallery and a non-mated search in the other.
    Templates are centre + noise of a per-identity spread (FACE_SPREAD).
    Returns (G1's RankSet, G2's RankSet): the same probes, no cameras."""
    draw = _Draw(seed, device)
    n_ids = n_g1 + n_g2
    centres = draw.directions(n_ids, dim)
    spread = draw.uniform(n_ids, *FACE_SPREAD)

    def templates(ids):
        out = torch.empty(ids.numel(), dim, device=device)
        return _images(draw, out, lambda r: centres[ids[r]], lambda r: 0.0,
                       lambda r: spread[ids[r], None])

    labels_p = draw.integers(n_ids, n_probes)
    feat_p = templates(labels_p)
    labels = torch.arange(n_ids, device=device)
    feat = templates(labels)
    return tuple(RankSet(labels_p, None, feat_p, labels[part], None, feat[part])
                 for part in (slice(0, n_g1), slice(n_g1, n_ids)))


def face_gallery(n_probes, n_gallery, dim=512, mated=0.9, seed=8, device="cuda"):
    """Face 1:N at scale: a gallery of n_gallery people seen once (labels a
    random permutation of 0..n_gallery-1, so that the mates lie anywhere);
    probe i is of person i, in the gallery for the first mated * n_probes
    probes (an image of its own centre + noise, FACE_SPREAD, as is its
    gallery image), else a person the gallery lacks (label n_gallery + i).
    Returns a RankSet without cameras."""
    n_mated = int(mated * n_probes)
    if n_mated > n_gallery:
        raise ValueError("face_gallery: %d mated probes need a gallery of as many, got %d"
                         % (n_mated, n_gallery))
    draw = _Draw(seed, device)
    centres = draw.directions(n_probes, dim)
    spread = draw.uniform(n_probes, *FACE_SPREAD)
    labels_q = torch.arange(n_probes, device=device)
    labels_q[n_mated:] += n_gallery
    feat_q = _images(draw, torch.empty(n_probes, dim, device=device),
                     lambda r: centres[r], lambda r: 0.0, lambda r: spread[r, None])
    labels_g = draw.permutation(n_gallery)
    feat_g = torch.empty(n_gallery, dim, device=device)
    for begin in range(0, n_gallery, BLOCK_ROWS):
        rows = slice(begin, min(begin + BLOCK_ROWS, n_gallery))
        person = labels_g[rows]
        mate = (person < n_mated)[:, None]
        known = person.clamp(max=n_probes - 1)
        block = draw.normal(rows.stop - rows.start, dim).mul_(dim ** -0.5)
        # a mate: its centre + noise of its spread; anyone else: a random direction
        feat_g[rows] = torch.where(mate, centres[known] + spread[known, None] * block, block)
    return RankSet(labels_q, None, feat_q, labels_g, None, unit_(feat_g))
