"""The ROC benchmark's synthetic inputs, the same on every run (each seeded):
face-like embeddings at the blog's size and above, the 2.6e11-pair (and
IFRT-size) gallery with 4 images an identity, an IJB-C-sized pair list from
template features, and flat pairs with 1% positives.

Imports torch and nothing of _ext: dev/ab_eval.py takes these from its own
checkout before it imports the _ext of the build it times.
"""

import torch


def unit(x):
    return torch.nn.functional.normalize(x, dim=1)


def embeddings(n_query, n_gallery, dim, seed, same_set=False, per_id=1):
    """Face-like embeddings: query i is identity i // per_id; the first
    n_query / per_id gallery entries are one sample of each query identity,
    the rest identities of their own (one genuine match per query for
    per_id = 1, as in the blog)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    n_ids = n_query // per_id
    centres = torch.nn.functional.normalize(
        torch.randn(n_ids, dim, device="cuda", generator=generator), dim=1)
    labels_q = torch.arange(n_query, device="cuda") // per_id
    feat_q = centres[labels_q] + 0.07 * torch.randn(n_query, dim, device="cuda",
                                                    generator=generator)
    if same_set:
        return labels_q, feat_q, None, None
    labels_g = torch.arange(n_gallery, device="cuda") + n_ids
    labels_g[:n_ids] = torch.arange(n_ids, device="cuda")
    feat_g = torch.randn(n_gallery, dim, device="cuda", generator=generator) / dim ** 0.5
    feat_g[:n_ids] = centres + 0.07 * torch.randn(n_ids, dim, device="cuda", generator=generator)
    return labels_q, feat_q, labels_g, feat_g


def scale_embeddings(n_query, n_ids, dim, hard, seed, per_id=4, device="cuda"):
    """The 2.6e11-pair (and IFRT-size) workload: a Gaussian gallery of n_ids
    identities with per_id images each, queries near image 0 of identity
    i % n_ids. Easy: all of an identity's images near its centre (every
    genuine score high). Hard: images 1.. are random directions, so 3 of 4
    genuine scores lie inside the impostor mass (hard pairs, label noise).
    On `device` (the tests make it on the CPU)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    centres = unit(torch.randn(n_ids, dim, device=device, generator=generator))
    labels_g = torch.arange(n_ids, device=device).repeat_interleave(per_id)
    feat_g = torch.empty(n_ids * per_id, dim, device=device)
    step = 1 << 18
    for start in range(0, n_ids * per_id, step):
        rows = slice(start, min(start + step, n_ids * per_id))
        ids = labels_g[rows]
        noise = torch.randn(ids.numel(), dim, device=device, generator=generator) / dim ** 0.5
        first = (torch.arange(rows.start, rows.stop, device=device) % per_id) == 0
        near = centres[ids] + 0.5 * noise  # cosine about 0.8 with a query of its identity
        far = noise
        feat_g[rows] = torch.where(first[:, None] | (not hard), near, far)
    labels_q = torch.arange(n_query, device=device) % n_ids
    feat_q = centres[labels_q] + 0.5 / dim ** 0.5 * torch.randn(n_query, dim, device=device,
                                                                 generator=generator)
    return labels_q, feat_q, labels_g, feat_g


def ijb_like(n_templates=23_124, n_genuine=19_557, n_impostor=15_638_932, dim=512, seed=5):
    """IJB-C-sized pair list from synthetic template features: identities of a
    few templates each (centre + noise of a per-identity difficulty), the
    genuine pairs drawn within identities, the impostor pairs across them."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    n_ids = n_templates // 6
    identity = torch.randint(0, n_ids, (n_templates,), device="cuda", generator=generator)
    centres = unit(torch.randn(n_ids, dim, device="cuda", generator=generator))
    spread = 0.03 + 0.08 * torch.rand(n_ids, device="cuda", generator=generator)
    feat = unit(centres[identity] + spread[identity, None] *
                torch.randn(n_templates, dim, device="cuda", generator=generator))
    order = torch.argsort(identity)
    a = torch.randint(0, n_templates, (4 * n_genuine,), device="cuda", generator=generator)
    # a genuine partner: a neighbour in identity order with the same identity
    position = torch.empty_like(order)
    position[order] = torch.arange(n_templates, device="cuda")
    b = order[(position[a] + 1) % n_templates]
    same = (identity[a] == identity[b]) & (a != b)
    a, b = a[same][:n_genuine], b[same][:n_genuine]
    ia = torch.randint(0, n_templates, (n_impostor,), device="cuda", generator=generator)
    ib = torch.randint(0, n_templates, (n_impostor,), device="cuda", generator=generator)
    keep = identity[ia] != identity[ib]
    index_a, index_b = torch.cat([a, ia[keep]]), torch.cat([b, ib[keep]])
    genuine = torch.zeros(index_a.numel(), dtype=torch.bool, device="cuda")
    genuine[:a.numel()] = True
    return feat, index_a, index_b, genuine


def flat_pairs(n_pairs, seed=6, positive=0.01):
    """A classifier's scores of n_pairs pairs, a share `positive` of them
    positive: (flags, scores), the scores normal with the positives' mean 1
    higher. Drawn in blocks of 2^28 so that no more than the two outputs and
    one block are held."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    flags = torch.empty(n_pairs, dtype=torch.bool, device="cuda")
    values = torch.empty(n_pairs, dtype=torch.float32, device="cuda")
    for begin in range(0, n_pairs, 1 << 28):
        end = min(begin + (1 << 28), n_pairs)
        flags[begin:end] = torch.rand(end - begin, device="cuda", generator=generator) < positive
        values[begin:end] = torch.randn(end - begin, device="cuda", generator=generator)
        values[begin:end] += flags[begin:end]
    return flags, values
