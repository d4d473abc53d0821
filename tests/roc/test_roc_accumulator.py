"""RocAccumulator's batches: each is checked where it enters (update()), kept
in one form whatever form it came in (torch, NumPy, lists, mixed from batch
to batch), and the stream's labels_q keep the first batch's dtype: a later
batch that dtype cannot hold exactly is refused there, never promoted. The
report equals the one-shot evaluation of the batches taken, of queries or of
pairs; GPU twins on the GPU machine."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score
from test_roc_pairs import flat_pairs

from _ext import roc

UPDATE = "^RocAccumulator.update: "


def same_report(got, want):
    assert (got.n_genuine, got.n_impostor, got.n_nan, got.auc, got.eer) == \
        (want.n_genuine, want.n_impostor, want.n_nan, want.auc, want.eer)
    np.testing.assert_array_equal(got.false_accepts, want.false_accepts)
    np.testing.assert_array_equal(got.true_accepts, want.true_accepts)
    np.testing.assert_array_equal(got.thresholds, want.thresholds)


def gallery(rng, device="cpu"):
    """Labels 2^24 and 2^24 + 1 among the gallery's (float32 cannot tell them
    apart), and features on `device`."""
    labels_g = torch.tensor([2 ** 24, 2 ** 24 + 1, 5, 7, 5, 2 ** 24 + 1], device=device)
    feat_g = torch.from_numpy(rng.normal(size=(6, 8)).astype(np.float32)).to(device)
    feat_q = torch.from_numpy(rng.normal(size=(5, 8)).astype(np.float32)).to(device)
    return labels_g, feat_g, feat_q


# ---------------------------------------------------------------------------
# batches of queries or of pairs against the one-shot evaluation

def test_accumulator_batches_equal_one_shot(rng):
    gallery = rng.normal(size=(50, 16)).astype(np.float32)
    labels_g = rng.integers(0, 8, 50)
    queries = rng.normal(size=(130, 16)).astype(np.float32)
    labels_q = rng.integers(0, 8, 130)
    for mode in ("exact", "binned"):
        acc = roc.RocAccumulator(labels_g, gallery, mode=mode, bins=256)
        for start in range(0, 130, 40):
            acc.update(labels_q[start:start + 40], queries[start:start + 40].copy())
        got = acc.compute()
        want = roc.evaluate(labels_q, labels_g, feat_q=queries, feat_g=gallery, mode=mode,
                            bins=256)
        assert got.auc == want.auc and got.n_genuine == want.n_genuine
        np.testing.assert_array_equal(got.fpr, want.fpr)
        np.testing.assert_array_equal(got.true_accepts, want.true_accepts)


@pytest.mark.parametrize("mode", ["exact", "binned"])
def test_accumulator_of_pairs_and_reuse_of_buffers(rng, mode):
    genuine, score = flat_pairs(rng, 3000, "ties")
    acc = roc.RocAccumulator(mode=mode)
    buffer = np.empty(1000, np.float32)
    for start in range(0, 3000, 1000):
        buffer[:] = score[start:start + 1000]
        acc.update(genuine[start:start + 1000], buffer)  # the batch is copied or counted
    want = roc.evaluate_pairs(genuine, score, mode=mode)
    got = acc.compute()
    assert got.auc == want.auc
    np.testing.assert_array_equal(got.false_accepts, want.false_accepts)
    acc.reset()
    with pytest.raises(ValueError, match="RocAccumulator: compute\\(\\) before any update"):
        acc.compute()


# ---------------------------------------------------------------------------
# the stream's dtypes (issue 48, item 3)

@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("mode", ["exact", "binned"])
def test_int64_then_float32_labels_equal_one_shot(rng, mode, device):
    """labels_q [2^24 + 1, ...] (int64) then [5.0, ...] (float32): the float32
    batch is taken as the int64 labels it holds; promoting the stream to
    float32 would merge 2^24 + 1 with 2^24 (the GPU gave another report)."""
    labels_g, feat_g, feat_q = gallery(rng, device)
    acc = roc.RocAccumulator(labels_g, feat_g, mode=mode)
    acc.update(torch.tensor([2 ** 24 + 1, 7, 2 ** 24], device=device), feat_q[:3])
    acc.update(torch.tensor([5.0, 7.0], device=device), feat_q[3:])
    labels_q = torch.tensor([2 ** 24 + 1, 7, 2 ** 24, 5, 7], device=device)
    want = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=mode)
    same_report(acc.compute(), want)
    if device == "cuda":  # the GPU's report is the CPU's
        cpu = roc.evaluate(labels_q.cpu(), labels_g.cpu(), feat_q=feat_q.cpu(),
                           feat_g=feat_g.cpu(), mode=mode)
        same_report(acc.compute(), cpu)


@pytest.mark.parametrize("first, later, value", [
    (torch.tensor([5.0]), torch.tensor([2 ** 24 + 1]), "16777217"),
    (np.array([5], np.int64), np.array([2 ** 63 + 1], np.uint64), "9223372036854775809"),
    (np.array([5], np.uint64), np.array([-1], np.int64), "-1"),
    (np.array([5], np.int8), np.array([300]), "300"),
    (np.array([5.0], np.float16), np.array([2049.0], np.float32), "2049.0"),
    (np.array([True]), np.array([2]), "2"),
])
def test_later_labels_the_first_dtype_cannot_hold_are_refused(rng, first, later, value):
    """Refused at update(), naming the value and the stream's dtype; the
    batches before stay, and compute() reports them."""
    labels_g, feat_g, feat_q = gallery(rng)
    labels_g = np.array([5, 1, 2, 5, 3, 4])
    acc = roc.RocAccumulator(labels_g, feat_g)
    acc.update(first, feat_q[:1])
    with pytest.raises(ValueError, match=UPDATE + r"labels_q is \w+ and holds %s, which the "
                                                  r"dtype of the first batch's labels_q \(\w+\) "
                                                  r"cannot hold exactly" % value):
        acc.update(later, feat_q[1:2])
    acc.update(first, feat_q[2:3])
    want = roc.evaluate(np.concatenate([first, first]), labels_g, feat_q=feat_q[[0, 2]],
                        feat_g=feat_g)
    same_report(acc.compute(), want)


def test_later_labels_the_first_dtype_holds_are_taken(rng):
    """int64, then uint64, int8, float64 and bool batches holding int64 values."""
    labels_g, feat_g, feat_q = gallery(rng)
    acc = roc.RocAccumulator(labels_g, feat_g)
    batches = [np.array([2 ** 24 + 1]), np.array([2 ** 24], np.uint64), np.array([5], np.int8),
               np.array([7.0]), np.array([True])]
    for labels_q, row in zip(batches, feat_q):
        acc.update(labels_q, row[None])
    want = roc.evaluate(np.array([2 ** 24 + 1, 2 ** 24, 5, 7, 1]), labels_g, feat_q=feat_q,
                        feat_g=feat_g)
    same_report(acc.compute(), want)


def test_a_refused_or_empty_first_batch_fixes_nothing(rng):
    """Neither a refused batch nor an empty one (an empty list is float64 to
    NumPy) fixes the stream's labels dtype."""
    labels_g, feat_g, feat_q = gallery(rng)
    acc = roc.RocAccumulator(labels_g, feat_g)
    with pytest.raises(ValueError, match=UPDATE + "labels_q has 2 elements but there are 1 rows"):
        acc.update(torch.tensor([5.0, 7.0]), feat_q[:1])
    acc.update([], feat_q[:0])
    acc.update(torch.tensor([2 ** 24 + 1]), feat_q[:1])  # int64 fixes the stream, not float32
    acc.update(torch.tensor([2 ** 24]), feat_q[1:2])
    want = roc.evaluate(torch.tensor([2 ** 24 + 1, 2 ** 24]), labels_g, feat_q=feat_q[:2],
                        feat_g=feat_g)
    same_report(acc.compute(), want)
    acc.reset()  # a new stream: its first batch fixes float32
    acc.update(torch.tensor([5.0]), feat_q[:1])
    with pytest.raises(ValueError, match=UPDATE + "labels_q is int64 and holds 16777217"):
        acc.update(torch.tensor([2 ** 24 + 1]), feat_q[1:2])


# ---------------------------------------------------------------------------
# batches of any kind (items 4 and 6)

@pytest.mark.parametrize("mode", ["exact", "binned"])
def test_torch_numpy_and_lists_mix_across_batches(rng, mode):
    genuine = rng.random(60) < 0.3
    score = np.round(rng.normal(size=60), 1).astype(np.float32)
    acc = roc.RocAccumulator(mode=mode)
    acc.update(torch.from_numpy(genuine[:20]), torch.from_numpy(score[:20]))
    acc.update(genuine[20:40], score[20:40])
    acc.update(genuine[40:].astype(int).tolist(), score[40:])
    same_report(acc.compute(), roc.evaluate_pairs(genuine, score, mode=mode))

    labels_g, feat_g, feat_q = gallery(rng)
    acc = roc.RocAccumulator(labels_g.tolist(), feat_g.numpy(), mode=mode)
    acc.update([2 ** 24 + 1, 5], feat_q[:2])
    acc.update(np.array([7]), feat_q[2:3].numpy())
    acc.update(torch.tensor([2 ** 24, 5]), feat_q[3:])
    want = roc.evaluate(np.array([2 ** 24 + 1, 5, 7, 2 ** 24, 5]), labels_g, feat_q=feat_q,
                        feat_g=feat_g, mode=mode)
    same_report(acc.compute(), want)


def test_batches_are_copied(rng):
    """A caller's buffer reused for the next batch changes no batch taken."""
    genuine = rng.random(40) < 0.5
    score = rng.normal(size=40).astype(np.float32)
    acc = roc.RocAccumulator()
    buffer = torch.empty(20)
    flags = torch.empty(20, dtype=torch.bool)
    for start in (0, 20):
        buffer.copy_(torch.from_numpy(score[start:start + 20]))
        flags.copy_(torch.from_numpy(genuine[start:start + 20]))
        acc.update(flags, buffer)
    same_report(acc.compute(), roc.evaluate_pairs(genuine, score))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_batches_count_as_their_float32_values(rng, dtype):
    genuine = rng.random(50) < 0.4
    half = torch.from_numpy(rng.normal(size=50)).to(getattr(torch, dtype))
    acc = roc.RocAccumulator()
    acc.update(genuine[:25], half[:25])
    acc.update(genuine[25:], half[25:].float())
    same_report(acc.compute(), roc.evaluate_pairs(genuine, half.float()))


# ---------------------------------------------------------------------------
# each batch checked at update() (item 5)

@pytest.mark.parametrize("genuine, score, error, message", [
    (np.array([1, 0, 1]), np.zeros(2, np.float32), ValueError,
     "score has 2 elements but genuine has 3"),
    (np.array([1, 0]), np.zeros((2, 1), np.float32), ValueError,
     r"score must be 1-D \(N,\), got shape \(2, 1\)"),
    (np.array([[1, 0]]), np.zeros(2, np.float32), ValueError,
     r"genuine must be 1-D \(N,\), got shape \(1, 2\)"),
    (np.array([1, 0]), np.zeros(2, np.int32), TypeError,
     "score must be float64, float32, float16 or bfloat16"),
    (np.array([1, 2]), np.zeros(2, np.float32), ValueError,
     r"genuine takes values in \{1, 2\}: give genuine as bool, or with values in \{0, 1\} or "
     r"\{-1, 1\}$"),
    (np.array([1.0, 0.5]), np.zeros(2, np.float32), ValueError,
     "genuine holds 0.5, which is not an integer"),
    (np.array([1.0, np.nan]), np.zeros(2, np.float32), ValueError, "genuine contains NaN"),
    ([1, 0], [0.5, 0.1], TypeError, "score must be an array"),
    (None, np.zeros(2, np.float32), TypeError, "genuine must be an array"),
])
def test_bad_pair_batches_are_refused_at_update(genuine, score, error, message):
    acc = roc.RocAccumulator()
    with pytest.raises(error, match=UPDATE + message):
        acc.update(genuine, score)
    with pytest.raises(ValueError, match=r"RocAccumulator: compute\(\) before any update"):
        acc.compute()


@pytest.mark.parametrize("labels_q, feat_q, error, message", [
    ([1, 2, 3], np.zeros((2, 8), np.float32), ValueError,
     "labels_q has 3 elements but there are 2 rows in feat_q"),
    ([1, 2], np.zeros((2, 9), np.float32), ValueError,
     r"feat_q must be \(B, 8\), rows of feat_g's dimension, got shape \(2, 9\)"),
    ([1, 2], np.zeros(8, np.float32), ValueError, r"feat_q must be \(B, 8\)"),
    ([1, 2], np.zeros((2, 8)), TypeError, r"feat_q is float64, but features are scored in "
     r"float32 \(each score an fp32 FMA chain"),
    ([1, np.nan], np.zeros((2, 8), np.float32), ValueError,
     "labels_q contains NaN; a NaN label matches nothing"),
    ([1, 2.5], np.zeros((2, 8), np.float32), ValueError,
     "labels_q holds 2.5, which is not an integer"),
    (["a", "b"], np.zeros((2, 8), np.float32), TypeError, "labels_q must hold bool, integers"),
    ([1, 2], [[0.0] * 8] * 2, TypeError, "feat_q must be an array"),
])
def test_bad_query_batches_are_refused_at_update(rng, labels_q, feat_q, error, message):
    labels_g, feat_g, _ = gallery(rng)
    acc = roc.RocAccumulator(labels_g, feat_g)
    with pytest.raises(error, match=UPDATE + message):
        acc.update(labels_q, feat_q)


def test_bad_galleries_are_refused_at_construction():
    with pytest.raises(ValueError, match="^RocAccumulator: labels_g has 3 elements but there are "
                                         "2 rows in feat_g"):
        roc.RocAccumulator([1, 2, 3], np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"^RocAccumulator: feat_g must be 2-D \(G, D\)"):
        roc.RocAccumulator([1, 2], np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="^RocAccumulator: labels_g holds 0.5"):
        roc.RocAccumulator([1, 0.5], np.zeros((2, 4), np.float32))


def test_accumulator_errors():
    with pytest.raises(ValueError, match="RocAccumulator: give labels_g and feat_g"):
        roc.RocAccumulator(np.zeros(3))
    with pytest.raises(ValueError, match="RocAccumulator: mode must be one of"):
        roc.RocAccumulator(mode="fast")


def test_default_pos_label_rule_covers_every_batch(rng):
    """As scikit-learn's rule on the batches' concatenation: {0, 1} then {-1}
    is refused at the second batch; {1} then {-1, 1} is taken as pos_label 1."""
    score = rng.normal(size=6).astype(np.float32)
    acc = roc.RocAccumulator()
    acc.update(np.array([0, 1, 1]), score[:3])
    with pytest.raises(ValueError, match=UPDATE + r"genuine takes values in \{-1, 0, 1\} \(this "
                                                  r"batch and the earlier ones\)"):
        acc.update(np.array([-1, -1, 1]), score[3:])
    acc = roc.RocAccumulator()
    y_true = np.array([1, 1, 1, -1, 1, -1])
    acc.update(y_true[:3], score[:3])
    acc.update(y_true[3:].tolist(), score[3:])
    report = acc.compute()
    assert abs(report.auc - roc_auc_score(y_true, score)) < 1e-12


# ---------------------------------------------------------------------------
# GPU twins (GPU machine)

@pytest.mark.parametrize("mode", ["exact", "binned"])
def test_eer_rule_and_max_fpr_as_evaluate_takes_them(rng, mode):
    """The accumulator's eer_rule and max_fpr give evaluate()'s EER and partial
    AUC on the batches at once; bad values are refused at construction."""
    labels_g, feat_g, feat_q = gallery(rng)
    labels_q = torch.tensor([5, 7, 2 ** 24, 5, 2 ** 24 + 1])
    acc = roc.RocAccumulator(labels_g, feat_g, mode=mode, eer_rule="nearest_mean", max_fpr=0.5)
    acc.update(labels_q[:2], feat_q[:2])
    acc.update(labels_q[2:], feat_q[2:])
    got = acc.compute()
    want = roc.evaluate(labels_q, labels_g, feat_q=feat_q, feat_g=feat_g, mode=mode,
                        eer_rule="nearest_mean", max_fpr=0.5)
    same_report(got, want)
    assert (got.eer_rule, got.max_fpr, got.partial_auc) == ("nearest_mean", 0.5, want.partial_auc)
    with pytest.raises(ValueError, match="^RocAccumulator: .*max_fpr"):
        roc.RocAccumulator(labels_g, feat_g, max_fpr=0.0)
    with pytest.raises(ValueError, match="^RocAccumulator: .*eer_rule"):
        roc.RocAccumulator(labels_g, feat_g, eer_rule="mean")


@pytest.mark.parametrize("seed", range(6))
def test_rules_exact_corners_cannot_decide_equal_evaluate_pairs(seed):
    """Tied scores: nearest_sklearn's TAR@FAR and nearest_mean's EER can lie
    inside a run of tied impostors, which exact mode's corners do not see;
    the accumulator decides them as evaluate_pairs() does (it took the
    corners' answer before)."""
    rng = np.random.default_rng(seed)
    genuine = rng.random(400) < 0.3
    score = np.round(rng.normal(size=400) + genuine, 1).astype(np.float32)
    options = dict(far_rule="nearest_sklearn", eer_rule="nearest_mean", fars=(0.01, 0.1, 0.3))
    acc = roc.RocAccumulator(**options)
    for part in np.array_split(np.arange(400), 3):
        acc.update(genuine[part], score[part])
    got, want = acc.compute(), roc.evaluate_pairs(genuine, score, **options)
    same_report(got, want)
    assert [(r.far, r.tar, r.threshold) for r in got.tar_at_far] == \
        [(r.far, r.tar, r.threshold) for r in want.tar_at_far]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["exact", "binned"])
def test_gpu_stream_of_mixed_kinds_equals_cpu(rng, mode):
    """CUDA tensors, NumPy arrays and lists in one stream on the GPU
    (device="cuda"), half-precision scores among them: the CPU's report."""
    genuine = rng.random(3000) < 0.2
    score = np.round(rng.normal(size=3000), 2).astype(np.float32)
    acc = roc.RocAccumulator(mode=mode, device="cuda")
    acc.update(torch.from_numpy(genuine[:1000]).cuda(), torch.from_numpy(score[:1000]).cuda())
    acc.update(genuine[1000:2000], score[1000:2000])
    acc.update(genuine[2000:].astype(int).tolist(),
               torch.from_numpy(score[2000:]).cuda().half())
    wide = score.copy()
    wide[2000:] = score[2000:].astype(np.float16).astype(np.float32)
    same_report(acc.compute(), roc.evaluate_pairs(genuine, wide, mode=mode))
