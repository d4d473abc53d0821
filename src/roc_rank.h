/*
 * roc_rank.h: the C entry points of 1:N identification and re-ID ranking,
 * in _ext.roc's module (fed to cffi's cdef after roc.h). Semantics in
 * README.md, "1:N identification"; the Python side is _ext/rank/.
 *
 * Every 1:N metric is a count keyed per query, not a sort. For query i and
 * gallery entry j, after the protocol's exclusions, the pair is a mate when
 * the labels are equal, else a non-mate. For each mated pair (i, j) the count
 * is how many non-mates of i score strictly above s(i, j) and how many tie
 * with it; for each query, its best non-mate (score, and gallery index, the
 * lowest of equals) and its number of non-mates. Memory O(P + Q) (P mated
 * pairs), whatever Q x G.
 *
 * Steps, so the caller can show progress and, across processes, gather what
 * each one counted:
 *
 *   roc_rank_create     labels, optional cameras, and either a score matrix
 *                       (Q, G) float32 or features feat_q (Q, D) and feat_g
 *                       (G, D) float32, scored as roc_eval scores them (the
 *                       same bits); finds and scores every query's mates
 *   roc_rank_set_mates  (a shard of the gallery, optional) before any rows:
 *                       every query's mates over all the shards, whose keys this
 *                       shard's non-mates are counted against
 *   roc_rank_add_rows   counts the non-mates of query rows [row_begin, row_end)
 *   roc_rank_counts     completes the counts and views them (roc_rank_view)
 *   roc_rank_summarize  CMC, AP, mINP, MAP@R, R-precision and TPIR at FPIR from
 *                       a view: the evaluator's own, or one the caller built
 *                       from several processes' views (queries concatenated)
 *
 * Pairs excluded for query i (neither mate nor non-mate, counted nowhere):
 *   - same_set: gallery entry row_offset + i (the queries are rows of the
 *     gallery's own set: all of it, or one process's consecutive shard)
 *   - has_junk: every gallery entry labelled `junk`
 *   - cameras given: every gallery entry with i's label AND i's camera
 *     (Market-1501's protocol)
 * NaN scores are excluded and counted (totals; a query's NaN mates apart).
 *
 * Labels (and cameras) come as integers: labels_q (Q,) and labels_g (G,) both
 * int32 or both int64; cams_q (Q,) and cams_g (G,) both int32 or both int64,
 * or both NULL. (The Python side passes integer labels as they are and float
 * labels as the bits of their float64 value; `junk` likewise.) The evaluator
 * runs on the device of labels_q, the CPU (roc_rank_cpu.c) or a GPU
 * (cuda/roc_rank_kernel.cu) behind these same entry points, and keeps the
 * descriptors' data pointers (the tensors must outlive it).
 */
#ifndef ROC_RANK_H
#define ROC_RANK_H

#include <stdint.h>

#include "ext_tensor.h"

typedef struct roc_rank roc_rank;

typedef struct {
    char caller[32];          /* the Python function, for messages: "evaluate" */
    int32_t similarity;       /* roc_similarity (roc.h), for features */
    int32_t same_set;         /* 1: query i is gallery entry row_offset + i, excluded */
    int64_t row_offset;
    int32_t has_junk;         /* 1: gallery entries labelled `junk` are excluded */
    int64_t junk;
    int32_t topk;             /* 0 .. 100: keep each query's topk best gallery entries */
    int64_t keep_nonmated;    /* >= 0: keep the keep_nonmated highest non-mated pair
                                 scores of the queries that have a mate (the
                                 "insightface_1n_legacy" rule's threshold) */
} roc_rank_config;

/* An evaluator's counts, and the input of roc_rank_summarize. Keys are the
 * order-preserving uint32 keys of roc_math.h (roc_score_key); 0 means none.
 * Arrays by query are in query order; across processes, concatenate the
 * ranks' arrays in rank order (first[] offset by the mated pairs before). */
typedef struct {
    int64_t n_query;          /* Q */
    int64_t n_mated;          /* P: mated pairs with a score (NaN excluded) */
    int64_t *first;           /* Q + 1: query i's mated pairs are [first[i], first[i + 1]) */
    uint32_t *mate_key;       /* P: their keys, ascending within a query */
    int64_t *mate_index;      /* P: their gallery index */
    uint64_t *above;          /* P: non-mates of the query scoring strictly above */
    uint64_t *tied;           /* P: non-mates of the query scoring equal */
    uint32_t *best_key;       /* Q: the query's highest non-mate key (0: none) */
    int64_t *best_index;      /* Q: its gallery index, the lowest of equals (-1: none) */
    uint64_t *n_nonmates;     /* Q: non-mates with a score */
    uint64_t *nan_mates;      /* Q: mated pairs whose score is NaN */
    int64_t topk;             /* k, 0 .. 100 */
    int64_t *topk_index;      /* Q x k: the best gallery entries, score descending, ties
                                 by index; -1 past the entries there are */
    float *topk_score;        /* Q x k: their scores (NaN past the entries) */
    int64_t n_kept;           /* non-mated pair keys kept (config.keep_nonmated) */
    uint32_t *kept_keys;      /* n_kept keys, any order */
    uint64_t *totals;         /* 2: pairs counted (NaN included), non-mated pairs with a NaN
                                 score (NaN mated pairs: nan_mates) */
} roc_rank_view;

typedef enum {
    ROC_TIES_PESSIMISTIC = 0, /* a mate ranks after every non-mate tied with it */
    ROC_TIES_OPTIMISTIC = 1,  /* before them */
    ROC_TIES_EXPECTED = 2     /* every metric's expectation over a uniformly random
                                 order of the tied entries (mates and non-mates) */
} roc_rank_ties;
typedef enum {
    ROC_AP_NONINTERPOLATED = 0,  /* torchreid / fast-reid: precision at each mate */
    ROC_AP_TRAPEZOID = 1         /* layumi's Person_reID_baseline: trapezoids */
} roc_rank_ap;
typedef enum {
    ROC_FPIR_NIST = 0,                /* NIST FRVT: T the lowest threshold with at most
                                         floor(fpir N) of the N non-mated searches' best
                                         scores >= T; hit: first mate at rank 1, >= T */
    ROC_FPIR_INSIGHTFACE_IJB = 1,     /* ijb_evals.py evaluation_1N */
    ROC_FPIR_INSIGHTFACE_1N_LEGACY = 2,  /* ijb_1n.py */
    ROC_FPIR_INSIGHTFACE_STUDIO = 3   /* InsightFace 1.0's evaluation studio */
} roc_fpir_rule;

typedef struct {
    int32_t ties;             /* roc_rank_ties */
    int32_t ap;               /* roc_rank_ap */
    int32_t fpir_rule;        /* roc_fpir_rule */
    int64_t max_rank;         /* CMC length, >= 1 */
    const double *fpirs;      /* n_fpirs targets, each in [0, 1] */
    int64_t n_fpirs;
} roc_rank_summary_options;

/* The result; arrays are owned by it (roc_rank_summary_free). Closed-set
 * metrics average over the mated queries (a query with a scored mate); the
 * open set's non-mated searches are the queries with no mate at all. */
typedef struct {
    int64_t n_queries;
    int64_t n_mated;          /* queries with at least one scored mate */
    int64_t n_unmated;        /* queries with no mate: the non-mated searches */
    int64_t n_skipped;        /* queries the closed-set metrics skip: no scored mate
                                 (n_unmated, and those whose mates are all NaN) */
    uint64_t n_mated_pairs;   /* scored */
    uint64_t n_nonmated_pairs;  /* scored */
    uint64_t n_nan;           /* pairs with a NaN score, excluded */
    int64_t max_rank;
    double *cmc;              /* max_rank: cmc[k - 1], the rank-k identification rate */
    double mean_ap;           /* by options.ap; NaN where no query is mated */
    double mean_inp;          /* fast-reid's mINP */
    double map_at_r;          /* pytorch-metric-learning's MAP@R (R: the query's mates) */
    double r_precision;
    double precision_at_1;
    int64_t n_fpirs;
    double *fpir;             /* the targets */
    double *tpir;             /* NaN where the rule cannot answer */
    double *threshold;        /* the rule's threshold (see README.md) */
    double *achieved_fpir;    /* the rule's false positives at it, as a rate */
    int32_t *below_resolution;  /* the target is below what the data resolves */
    /* by query (Q) */
    double *first_rank;       /* the first mate's rank (its mean under ROC_TIES_EXPECTED);
                                 NaN without a scored mate */
    double *average_precision;  /* by options.ap; NaN without a scored mate */
    double *best_nonmate_score; /* NaN where none */
    /* by mated pair (P) */
    double *mate_score;
    double *mate_rank;        /* 1 + mates and non-mates ranked before (their mean under
                                 ROC_TIES_EXPECTED) */
} roc_rank_summary;

int roc_rank_create(roc_rank **out /* OUT */, const roc_rank_config *config,
                    const ext_tensor *labels_q, const ext_tensor *labels_g,
                    const ext_tensor *cams_q, const ext_tensor *cams_g,
                    const ext_tensor *score, const ext_tensor *feat_q,
                    const ext_tensor *feat_g, void *stream);
/* The gallery in shards (one process each, every process all the queries):
 * each shard finds its own mates, the caller gathers them, and each shard's
 * evaluator is given every query's mates of all shards (n_mated pairs: first
 * (Q + 1) from 0 to n_mated, mate_key ascending within a query, then by
 * mate_index, the index in the whole gallery), before any add_rows. Its
 * non-mates are then counted against all of them: the shards' above, tied,
 * n_nonmates and totals add up, and their best non-mates (offset to the whole
 * gallery) give the queries' by the highest key, then the lowest index. The
 * view's nan_mates stay the shard's own. */
int roc_rank_set_mates(roc_rank *rank, const int64_t *first, const uint32_t *mate_key,
                       const int64_t *mate_index, int64_t n_mated);
int roc_rank_add_rows(roc_rank *rank, int64_t row_begin, int64_t row_end);
/* The rows of the pass's tile on a device of `device_type`: add_rows steps of
 * whole multiples of it never compute a tile twice. */
int64_t roc_rank_row_tile(int32_t device_type);
/* Completes the counts (after the last add_rows) and views them; the view's
 * arrays stay the evaluator's, valid until it is freed. */
int roc_rank_counts(roc_rank *rank, roc_rank_view *out /* OUT */);
int roc_rank_summarize(const roc_rank_view *counts, const roc_rank_summary_options *options,
                       const char *caller, roc_rank_summary **out /* OUT */);
/* The evaluator's own device memory at its peak, in bytes (0 on the CPU). */
int64_t roc_rank_device_bytes_peak(const roc_rank *rank);
void roc_rank_free(roc_rank *rank);
void roc_rank_summary_free(roc_rank_summary *summary);

#endif /* ROC_RANK_H */
