/*
 * roc_rank_kernel.h: the rank count's GPU backend (roc_rank_kernel.cu), the
 * same calls as the CPU's (roc_rank_internal.h), each returning a
 * cudaError_t as int.
 */
#ifndef ROC_RANK_KERNEL_H
#define ROC_RANK_KERNEL_H

#include <stdint.h>

#include "../roc_rank_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct roc_rank_cuda roc_rank_cuda;

int roc_rank_cuda_create(roc_rank_cuda **out, const roc_rank_source *src, const char *caller,
                         roc_rank_view *view /* OUT */);
int roc_rank_cuda_add_rows(roc_rank_cuda *backend, roc_rank_view *view, int64_t begin,
                           int64_t end);
int roc_rank_cuda_set_mates(roc_rank_cuda *backend, const roc_rank_view *view);
int roc_rank_cuda_finish(roc_rank_cuda *backend, roc_rank_view *view);
int64_t roc_rank_cuda_peak_bytes(const roc_rank_cuda *backend);
void roc_rank_cuda_free(roc_rank_cuda *backend);

#ifdef __cplusplus
}
#endif

#endif /* ROC_RANK_KERNEL_H */
