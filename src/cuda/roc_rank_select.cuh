/*
 * roc_rank_select.cuh: the rank count's selections on the GPU
 * (roc_rank_select.cu): each query's top k gallery entries (topk) and the
 * highest non-mated keys of the queries with a mate (keep_nonmated, the
 * insightface_1n_legacy rule's), over blocks of whole query rows' scores.
 * C++ only; the backend (roc_rank_kernel.cu) owns one per evaluation.
 */
#ifndef ROC_RANK_SELECT_CUH
#define ROC_RANK_SELECT_CUH

#include <stdint.h>

#include "../roc_rank_internal.h"
#include "roc_eval_state.cuh"

namespace roc_gpu {

class RankSelection {
  public:
    explicit RankSelection(ExtDeviceArena &arena)
        : arena_(arena), topk_index_(arena), topk_score_(arena), kept_(arena), sorted_(arena),
          n_kept_(arena)
    {
    }

    /* Room for Q queries' k entries (-1 / NaN) and the highest `keep` keys
     * beside blocks of up to block_pairs scores. */
    cudaError_t create(int64_t n_query, int k, int64_t keep, int64_t block_pairs);

    bool active() const { return k_ > 0 || keep_ > 0; }

    /* Rows [row0, row0 + rows) of the scores (row-major, n_gallery a row,
     * row r of `scores` being query row0 + r): their entries into the top k
     * and their non-mated keys into the kept ones. */
    cudaError_t add(const float *scores, int64_t row0, int64_t rows, int64_t n_gallery,
                    int64_t row_offset, const RankParams &rank);

    /* The top k and the kept keys into the host view (its topk_index,
     * topk_score, kept_keys and n_kept). */
    cudaError_t to_view(roc_rank_view *view);

  private:
    ExtDeviceArena &arena_;
    int k_ = 0;
    int64_t n_query_ = 0, keep_ = 0, held_ = 0; /* held_: kept keys so far (<= keep_) */
    uint32_t floor_ = 0;                        /* held_ == keep_: the lowest of them */
    Buffer<int64_t> topk_index_;
    Buffer<float> topk_score_;
    Buffer<uint32_t> kept_, sorted_; /* the kept keys, then a block's candidates */
    Buffer<unsigned long long> n_kept_;
};

} // namespace roc_gpu

#endif /* ROC_RANK_SELECT_CUH */
