/*
 * roc_rank_internal.h: between the rank count's shim (roc_rank_eval.c) and
 * its backends: the CPU's (roc_rank_cpu.c) now, the GPU's to come, behind
 * the same calls. Host memory, plain C.
 *
 * The contract a backend implements (the CPU's calls are named here; a GPU
 * backend's twins take the same arguments and return a cudaError_t as int):
 *
 *   create    finds every query's mates (roc_rank.h's exclusions applied),
 *             scores them with the one pair score of roc_math.h, drops and
 *             counts the NaN ones (nan_mates), and fills the host view's
 *             first, mate_key (ascending within a query) and mate_index, the
 *             rest of the view allocated by roc_rank_view_alloc and left as it
 *             leaves them (zero counts, best_key 0, best_index -1, topk_index
 *             -1, topk_score NaN)
 *   set_mates (before add_rows) takes the view's new mate lists (every
 *             gallery shard's mates, roc_rank_set_mates): its counters sized
 *             and keyed for them; a query's own mates (those create found,
 *             which its pairs hold) stay what its non-mates are told from
 *   add_rows  counts the non-mates of query rows [begin, end) (each row once
 *             over the calls): per mated pair, non-mates above and tied; per
 *             query, best non-mate (key, lowest index of equals), n_nonmates;
 *             the topk entries; the keep_nonmated highest non-mated keys of
 *             the queries with a scored mate; the totals
 *   finish    makes the host view whole (above and tied by mated pair), and
 *             may be called again after more rows
 *   free      releases what the backend holds (not the view)
 *
 * The GPU backend may count in any layout (rank_count.md: per-query gap
 * counters, a 64-bit atomicMax of key << 32 | ~index for the best non-mate)
 * as long as finish leaves this view, count for count the CPU's.
 */
#ifndef ROC_RANK_INTERNAL_H
#define ROC_RANK_INTERNAL_H

#include <stdint.h>

#include "roc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ROC_RANK_MAX_TOPK 100 /* roc_rank_config.topk's most */

/* The checked inputs (roc_rank.h), on `device` (CUDA) or the CPU. */
typedef struct {
    int similarity, same_set, has_junk;
    int device;                              /* CUDA ordinal */
    void *stream;                            /* cudaStream_t */
    int64_t n_query, n_gallery, dim, row_offset, junk;
    const void *labels_q, *labels_g;
    int label_dtype;                         /* EXT_INT32 or EXT_INT64 */
    const void *cams_q, *cams_g;             /* NULL: no cameras */
    int cam_dtype;
    const float *score, *feat_q, *feat_g;    /* one source: score, or both features */
    int64_t topk, keep_nonmated;
} roc_rank_source;

/* The view's arrays for Q queries, P mated pairs, k topk entries and `keep`
 * kept keys, in host memory, initialized as the contract says (first, mate_key
 * and mate_index uninitialized); EXT_ERR_NOMEM without a message where one
 * cannot be had. roc_rank_view_free releases them. */
int roc_rank_view_alloc(roc_rank_view *view, int64_t n_query, int64_t n_mated, int64_t topk,
                        int64_t keep);
void roc_rank_view_free(roc_rank_view *view);

/* What both backends do on the host (roc_rank_mates.c). */

/* Whether pair (i, j), of labels label_i and label_j, is excluded: the
 * query's own row, a junk entry, a mate on the query's camera. */
int roc_rank_excluded(const roc_rank_source *s, int64_t i, int64_t label_i, int64_t label_j,
                      int64_t j);

/* Every query's candidate mates, from labels (and cameras) in host memory:
 * the gallery entries of its label that the protocol keeps, pairs
 * (row[t], index[t]) for t in [slots[i], slots[i + 1]); and counted[i], the
 * pairs of query i that the protocol keeps (G less its exclusions). */
typedef struct {
    int64_t *slots;   /* Q + 1 */
    int64_t *row, *index;
    int64_t *counted; /* Q */
} roc_rank_candidates;
int roc_rank_candidates_make(const roc_rank_source *host, const char *caller,
                             roc_rank_candidates *out /* OUT */);
void roc_rank_candidates_free(roc_rank_candidates *c);
/* The candidates' scores (scores[t] of pair t; NaN: a NaN mate, counted in
 * nan_mates) into a view allocated here: first, mate_key (ascending within a
 * query, then by gallery index) and mate_index. */
int roc_rank_mates_adopt(const roc_rank_source *s, const roc_rank_candidates *c,
                         const float *scores, const char *caller, roc_rank_view *view /* OUT */);
/* finish's last step: gap[first[i] + i + u] (the non-mates of query i
 * strictly between mate keys u - 1 and u, u <= its mates) and the view's
 * tied (on the first mate of each run of equal keys) into above and tied by
 * mated pair. */
void roc_rank_gaps_to_counts(roc_rank_view *view, const uint64_t *gap);
/* Q queries' mate lists (first, Q + 1, from 0 to n_mated; keys ascending
 * within a query, none ROC_NO_KEY) checked, naming `fn`. */
int roc_rank_check_mates(int64_t n_query, int64_t n_mated, const int64_t *first,
                         const uint32_t *mate_key, const char *fn);

typedef struct roc_rank_cpu roc_rank_cpu;

/* Each returns an ext_status with its message set, naming `caller`. */
int roc_rank_cpu_create(roc_rank_cpu **out, const roc_rank_source *src, const char *caller,
                        roc_rank_view *view /* OUT */);
int roc_rank_cpu_add_rows(roc_rank_cpu *backend, roc_rank_view *view, int64_t begin,
                          int64_t end);
int roc_rank_cpu_set_mates(roc_rank_cpu *backend, const roc_rank_view *view);
void roc_rank_cpu_finish(roc_rank_cpu *backend, roc_rank_view *view);
void roc_rank_cpu_free(roc_rank_cpu *backend);

/* The metrics of a checked view (roc_rank_summary.c); an ext_status with its
 * message naming `caller`. */
int roc_rank_summarize_view(const roc_rank_view *view, const roc_rank_summary_options *options,
                            const char *caller, roc_rank_summary *out);

#ifdef __cplusplus
}
#endif

#endif /* ROC_RANK_INTERNAL_H */
