/*
 * roc_rank_mates.c: what both backends of the rank count do on the host
 * (roc_rank_internal.h): the protocol's exclusions, every query's candidate
 * mates from the labels, the scored mates adopted into the view, and the
 * gaps turned into the non-mates above each mate at the end.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ext_check.h"
#include "roc_internal.h"
#include "roc_math.h"
#include "roc_rank_internal.h"

static int nomem(const char *caller, const char *what)
{
    return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate %s", caller, what);
}

int roc_rank_excluded(const roc_rank_source *s, int64_t i, int64_t label_i, int64_t label_j,
                      int64_t j)
{
    if (s->same_set && j == s->row_offset + i)
        return 1;
    if (s->has_junk && label_j == s->junk)
        return 1;
    return s->cams_q && label_j == label_i &&
           roc_int_at(s->cams_g, s->cam_dtype, j) == roc_int_at(s->cams_q, s->cam_dtype, i);
}

/* The run of query i's label in the groups ([*first, *last) of members),
 * empty where its label is junk. */
static void mate_run(const roc_rank_source *s, const roc_label_groups *groups, int64_t label,
                     int64_t *first, int64_t *last)
{
    if (s->has_junk && label == s->junk) {
        *first = *last = 0;
        return;
    }
    roc_label_run(groups, label, first, last);
}

int roc_rank_candidates_make(const roc_rank_source *s, const char *caller,
                             roc_rank_candidates *c)
{
    const int64_t Q = s->n_query, G = s->n_gallery;
    roc_label_groups groups = {0};
    int st = EXT_OK;
    memset(c, 0, sizeof *c);
    if (roc_label_groups_make(s->labels_g, s->label_dtype, G, &groups)) {
        st = nomem(caller, "the label groups");
        goto done;
    }
    /* the gallery's junk entries, excluded for every query not of their label */
    int64_t n_junk = 0;
    if (s->has_junk) {
        int64_t first, last;
        roc_label_run(&groups, s->junk, &first, &last);
        n_junk = last - first;
    }
    c->slots = ext_malloc((size_t)(Q + 1) * sizeof *c->slots);
    c->counted = ext_malloc((size_t)(Q > 0 ? Q : 1) * sizeof *c->counted);
    if (!c->slots || !c->counted) {
        st = nomem(caller, "the mated pairs");
        goto done;
    }
    c->slots[0] = 0;
    for (int64_t i = 0; i < Q; i++) {
        int64_t first, last;
        const int64_t label = roc_int_at(s->labels_q, s->label_dtype, i);
        mate_run(s, &groups, label, &first, &last);
        int64_t mates = 0, excluded = 0;
        for (int64_t m = first; m < last; m++) {
            if (roc_rank_excluded(s, i, label, label, groups.members[m]))
                excluded++;
            else
                mates++;
        }
        /* the junk entries: outside the run, or the run itself (skipped
         * above) where the query's label is junk; and the query's own row
         * where its label differs */
        excluded += n_junk;
        const int64_t own = s->row_offset + i;
        if (s->same_set && own < G) {
            const int64_t own_label = roc_int_at(s->labels_g, s->label_dtype, own);
            if (own_label != label && !(s->has_junk && own_label == s->junk))
                excluded++;
        }
        c->counted[i] = G - excluded;
        c->slots[i + 1] = c->slots[i] + mates;
    }
    const size_t n = (size_t)c->slots[Q];
    c->row = ext_malloc((n ? n : 1) * sizeof *c->row);
    c->index = ext_malloc((n ? n : 1) * sizeof *c->index);
    if (!c->row || !c->index) {
        st = nomem(caller, "the mated pairs");
        goto done;
    }
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t i = 0; i < Q; i++) {
        int64_t first, last, out = c->slots[i];
        const int64_t label = roc_int_at(s->labels_q, s->label_dtype, i);
        mate_run(s, &groups, label, &first, &last);
        for (int64_t m = first; m < last; m++) {
            const int64_t j = groups.members[m];
            if (roc_rank_excluded(s, i, label, label, j))
                continue;
            c->row[out] = i;
            c->index[out++] = j;
        }
    }
done:
    roc_label_groups_free(&groups);
    if (st)
        roc_rank_candidates_free(c);
    return st;
}

void roc_rank_candidates_free(roc_rank_candidates *c)
{
    free(c->slots);
    free(c->counted);
    free(c->row);
    free(c->index);
    memset(c, 0, sizeof *c);
}

typedef struct {
    uint32_t key;
    int64_t index;
} mate;

static int by_key(const void *x, const void *y)
{
    const mate *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

int roc_rank_mates_adopt(const roc_rank_source *s, const roc_rank_candidates *c,
                         const float *scores, const char *caller, roc_rank_view *view)
{
    const int64_t Q = s->n_query;
    int64_t n_mated = 0;
    for (int64_t t = 0; t < c->slots[Q]; t++)
        n_mated += !isnan(scores[t]);
    if (roc_rank_view_alloc(view, Q, n_mated, s->topk, s->keep_nonmated))
        return nomem(caller, "the counts");
    mate *found = ext_malloc((size_t)(c->slots[Q] ? c->slots[Q] : 1) * sizeof *found);
    if (!found)
        return nomem(caller, "the mated pairs");
    view->first[0] = 0;
    for (int64_t i = 0; i < Q; i++) {
        int64_t kept = 0;
        for (int64_t t = c->slots[i]; t < c->slots[i + 1]; t++) {
            if (isnan(scores[t]))
                view->nan_mates[i]++;
            else
                found[c->slots[i] + kept++] = (mate){roc_score_key(scores[t]), c->index[t]};
        }
        view->first[i + 1] = view->first[i] + kept;
    }
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t i = 0; i < Q; i++) {
        mate *own = found + c->slots[i];
        const int64_t kept = view->first[i + 1] - view->first[i];
        qsort(own, (size_t)kept, sizeof *own, by_key);
        for (int64_t u = 0; u < kept; u++) {
            view->mate_key[view->first[i] + u] = own[u].key;
            view->mate_index[view->first[i] + u] = own[u].index;
        }
    }
    free(found);
    return EXT_OK;
}

void roc_rank_gaps_to_counts(roc_rank_view *view, const uint64_t *gap)
{
    const int64_t Q = view->n_query;
#pragma omp parallel for schedule(dynamic, 256)
    for (int64_t i = 0; i < Q; i++) {
        const int64_t first = view->first[i], m = view->first[i + 1] - first;
        const uint32_t *keys = view->mate_key + first;
        const uint64_t *own = gap + first + i;
        uint64_t *tied = view->tied + first, *above = view->above + first;
        uint64_t acc = own[m];
        /* the runs of equal mate keys, highest first: the count tied with a run
         * sits on its first mate */
        for (int64_t end = m; end > 0;) {
            int64_t start = end - 1;
            while (start > 0 && keys[start - 1] == keys[end - 1])
                start--;
            const uint64_t on_run = tied[start];
            for (int64_t u = start; u < end; u++) {
                above[u] = acc;
                tied[u] = on_run;
            }
            acc += on_run + own[start];
            end = start;
        }
    }
}

int roc_rank_check_mates(int64_t n_query, int64_t n_mated, const int64_t *first,
                         const uint32_t *mate_key, const char *fn)
{
    if (first[0] != 0 || first[n_query] != n_mated)
        return ext_fail(EXT_ERR_VALUE, "%s: the counts' first[] must run from 0 to the %lld "
                        "mated pairs", fn, (long long)n_mated);
    for (int64_t i = 0; i < n_query; i++)
        if (first[i + 1] < first[i])
            return ext_fail(EXT_ERR_VALUE, "%s: the counts' first[] decreases at query %lld", fn,
                            (long long)i);
    for (int64_t i = 0; i < n_query; i++) {
        for (int64_t p = first[i] + 1; p < first[i + 1]; p++)
            if (mate_key[p] < mate_key[p - 1])
                return ext_fail(EXT_ERR_VALUE, "%s: the mate keys of query %lld are not "
                                "ascending", fn, (long long)i);
    }
    for (int64_t p = 0; p < n_mated; p++)
        if (mate_key[p] == ROC_NO_KEY)
            return ext_fail(EXT_ERR_VALUE, "%s: mated pair %lld has no score key", fn,
                            (long long)p);
    return EXT_OK;
}
