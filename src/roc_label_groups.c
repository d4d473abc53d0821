/*
 * roc_label_groups.c: a gallery grouped by label on the CPU, so that the
 * partners of a query (the entries with its label) are one run, found by
 * bisection: the evaluator's genuine pairs (roc_eval_cpu.c) and the rank
 * count's mated pairs (roc_rank_cpu.c).
 */
#include <stdlib.h>

#include "ext_check.h"
#include "roc_internal.h"
#include "roc_math.h"

typedef struct {
    int64_t label, index;
} labelled;

static int by_label(const void *x, const void *y)
{
    const labelled *a = x, *b = y;
    if (a->label != b->label)
        return a->label < b->label ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

int roc_label_groups_make(const void *labels, int label_dtype, int64_t n,
                          roc_label_groups *groups)
{
    labelled *entries = ext_malloc((size_t)n * sizeof *entries);
    groups->n = n;
    groups->members = ext_malloc((size_t)n * sizeof(int64_t));
    groups->sorted = ext_malloc((size_t)n * sizeof(int64_t));
    groups->position = ext_malloc((size_t)n * sizeof(int64_t));
    if (!entries || !groups->members || !groups->sorted || !groups->position) {
        free(entries);
        return EXT_ERR_NOMEM;
    }
    for (int64_t j = 0; j < n; j++)
        entries[j] = (labelled){roc_int_at(labels, label_dtype, j), j};
    qsort(entries, (size_t)n, sizeof *entries, by_label);
    for (int64_t t = 0; t < n; t++) {
        groups->members[t] = entries[t].index;
        groups->sorted[t] = entries[t].label;
        groups->position[entries[t].index] = t;
    }
    free(entries);
    return EXT_OK;
}

/* The first of the n ascending values above `value` (upper), or at or above it. */
static int64_t bound(const int64_t *sorted, int64_t n, int64_t value, int upper)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < value || (upper && sorted[mid] == value))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void roc_label_run(const roc_label_groups *groups, int64_t label, int64_t *first, int64_t *last)
{
    *first = bound(groups->sorted, groups->n, label, 0);
    *last = bound(groups->sorted, groups->n, label, 1);
}

void roc_label_groups_free(roc_label_groups *groups)
{
    free(groups->members);
    free(groups->sorted);
    free(groups->position);
    groups->members = groups->sorted = groups->position = NULL;
}
