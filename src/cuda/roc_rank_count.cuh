/*
 * roc_rank_count.cuh: the 1:N identification count (RankCount), one count
 * policy beside those of roc_count.cuh, whose interface it keeps and whose
 * shared parts (each_pair) it uses; its backend is roc_rank_kernel.cu, its
 * passes roc_eval_count.cu's. C++ only.
 */
#ifndef ROC_RANK_COUNT_CUH
#define ROC_RANK_COUNT_CUH

#include <stdint.h>

#include "roc_count.cuh"

namespace roc_count {

/* 1:N identification (src/roc_rank.h): for each pair (query i, gallery j)
 * that the protocol keeps, a mate (equal labels) was counted when create
 * found it; a non-mate's key goes against query i's own mate keys (the
 * query's levels): below the lowest it moves nothing but the query's best
 * non-mate, at or above it one lookup among the query's mates and one atomic
 * into the gap above which it lies, or onto the mate it ties. The best
 * non-mate: in a whole tile a warp holds a row's 128 columns at once, so the
 * row's best is a warp's reduction and one atomic where it beats the best so
 * far (read first); elsewhere a pair's own. The pairs and each query's
 * non-mates are counted on the host, from the labels (roc_rank_kernel.cu);
 * only NaN non-mates are counted here. */
class RankCount {
  public:
    static constexpr Policy kPolicy = Policy::kRank;
    static constexpr bool kTracksTop = false;

    static size_t shared_bytes(const PassParams &) { return 0; }

    __device__ RankCount(const PassParams &p, uint32_t *) : p_(p), r_(p.rank) {}

    __device__ void begin_block() {}

    /* The thread's four columns of the tile (the same in both halves):
     * their labels and cameras, read once a tile. */
    __device__ __forceinline__ void at_half_tile(int64_t m0, int64_t n0, int half)
    {
        row0_ = m0 + half * kHalfTileRows;
        if (half != 0)
            return;
        col0_ = n0 + (threadIdx.x % 32) * 4;
#pragma unroll
        for (int c = 0; c < 4; c++) { /* past the gallery (a tile's edge): never used */
            const bool in = col0_ + c < p_.n_gallery;
            col_label_[c] = in ? __ldg(r_.labels_g + col0_ + c) : 0;
            col_cam_[c] = in && r_.cams_g ? __ldg(r_.cams_g + col0_ + c) : 0;
        }
    }

    /* A whole tile's half: float4 u of the thread is row row0_ + warp + 8u
     * (kThreads / 32 rows apart), columns col0_ .. + 3; every warp holds
     * whole rows, so each row's best non-mate is the warp's. All counted.
     * The row's best so far is read first: scores below both it and the
     * lowest mate key move nothing (not a count, not the best: a mate or an
     * excluded pair below them is nothing either), so a float4 of them skips
     * the labels, and a row whose warp beats nothing skips its reductions. */
    template <int kN> __device__ __forceinline__ uint32_t count_whole(const float4 (&v)[kN])
    {
#pragma unroll 1
        for (int u = 0; u < kN; u++) {
            const int64_t i = row0_ + threadIdx.x / 32 + (kThreads / 32) * u;
            const float4 x = pick(v, u);
            const float s[4] = {x.x, x.y, x.z, x.w};
            const Row row = open_row(i);
            const unsigned long long known = __ldcg(r_.best + i);
            /* NaN is below nothing here: it goes on to be counted */
            const float floor = roc_key_score(min(row.lowest, uint32_t(known >> 32)));
            uint32_t best = 0, best_col = 0xffffffffu;
            if (!(s[0] < floor && s[1] < floor && s[2] < floor && s[3] < floor)) {
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const uint32_t key =
                        count_nonmate(row, i, col0_ + c, col_label_[c], col_cam_[c], s[c]);
                    if (key > best) { /* columns ascending: the lowest of equals stays */
                        best = key;
                        best_col = (threadIdx.x % 32) * 4 + c;
                    }
                }
            }
            const unsigned long long offer =
                best ? (unsigned long long)best << 32 |
                           (0xffffffffull - uint64_t(col0_ - (threadIdx.x % 32) * 4 + best_col))
                     : 0;
            if (!__any_sync(0xffffffffu, offer > known))
                continue;
            const uint32_t top = warp_max(best);
            const uint32_t at = warp_min(best == top ? best_col : 0xffffffffu);
            if (threadIdx.x % 32 == 0 && top != 0)
                offer_best(i, top, col0_ - (threadIdx.x % 32) * 4 + at);
        }
        return kN >= 32 ? 0xffffffffu : (1u << kN) - 1;
    }

    /* Pairs of a tile not whole: each on its own. */
    template <int kN>
    __device__ __forceinline__ void pairs(const int64_t (&row)[kN], const int64_t (&col)[kN],
                                          const float (&s)[kN], const bool (&use)[kN])
    {
        each_pair(*this, row, col, s, use);
    }

    /* One pair (the score matrix's pass, a tile's edges): the best non-mate
     * kept for the thread's current row, offered when the row changes. */
    __device__ __forceinline__ void pair(int64_t i, int64_t j, float s)
    {
        if (i != pending_row_) {
            flush_best();
            pending_row_ = i;
            pending_ = open_row(i);
        }
        const int64_t label = __ldg(r_.labels_g + j);
        const int64_t cam = r_.cams_g ? __ldg(r_.cams_g + j) : 0;
        const uint32_t key = count_nonmate(pending_, i, j, label, cam, s);
        if (key > pending_key_ || (key == pending_key_ && key != 0 && j < pending_col_)) {
            pending_key_ = key;
            pending_col_ = j;
        }
    }

    __device__ void end_block() { flush_best(); }

  private:
    /* What a query row's pairs are tested against. */
    struct Row {
        int64_t label, cam;
        uint32_t lowest;
    };

    __device__ __forceinline__ Row open_row(int64_t i) const
    {
        return Row{__ldg(r_.labels_q + i), r_.cams_q ? __ldg(r_.cams_q + i) : 0,
                   __ldg(r_.lowest + i)};
    }

    /* Pair (i, j) of gallery label and camera (label, cam): where it is a
     * non-mate with a score, counted against the query's mates and its key
     * returned; else 0 (excluded, a mate, or NaN: counted apart). */
    __device__ __forceinline__ uint32_t count_nonmate(const Row &row, int64_t i, int64_t j,
                                                      int64_t label, int64_t cam, float s)
    {
        if (rank_excluded(r_, p_.row_offset, i, j, row.label, row.cam, label, cam) ||
            label == row.label)
            return 0;
        if (isnan(s)) {
            atomicAdd(&r_.nan_nonmates[i], 1ull);
            return 0;
        }
        const uint32_t key = roc_score_key(s);
        if (key >= row.lowest)
            count_above_lowest(i, key);
        return key;
    }

    /* A non-mate at or above the query's lowest mate key: onto the first mate
     * of its key, or into the gap below the first mate above it. */
    __device__ __forceinline__ void count_above_lowest(int64_t i, uint32_t key)
    {
        int64_t lo = __ldg(r_.first + i);
        const int64_t end = __ldg(r_.first + i + 1);
        for (int64_t hi = end; lo < hi;) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (__ldg(r_.mate_key + mid) < key)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < end && __ldg(r_.mate_key + lo) == key)
            atomicAdd(&r_.tied[lo], 1ull);
        else
            atomicAdd(&r_.gap[lo + i], 1ull);
    }

    /* Non-mate j of key `key` into query i's best: one atomic, where it beats
     * the best so far (read through L2 first: most rows' best stops moving
     * after the first tiles). */
    __device__ __forceinline__ void offer_best(int64_t i, uint32_t key, int64_t j) const
    {
        const unsigned long long packed =
            (unsigned long long)key << 32 | (0xffffffffull - uint64_t(j));
        if (packed > __ldcg(r_.best + i))
            atomicMax(&r_.best[i], packed);
    }

    __device__ __forceinline__ void flush_best()
    {
        if (pending_key_ != 0)
            offer_best(pending_row_, pending_key_, pending_col_);
        pending_key_ = 0;
        pending_col_ = 0;
    }

    static __device__ __forceinline__ uint32_t warp_max(uint32_t x)
    {
#if __CUDA_ARCH__ >= 800
        return __reduce_max_sync(0xffffffffu, x);
#else
        for (int offset = 16; offset > 0; offset /= 2)
            x = max(x, __shfl_xor_sync(0xffffffffu, x, offset));
        return x;
#endif
    }
    static __device__ __forceinline__ uint32_t warp_min(uint32_t x)
    {
#if __CUDA_ARCH__ >= 800
        return __reduce_min_sync(0xffffffffu, x);
#else
        for (int offset = 16; offset > 0; offset /= 2)
            x = min(x, __shfl_xor_sync(0xffffffffu, x, offset));
        return x;
#endif
    }

    const PassParams &p_;
    const RankParams &r_;
    int64_t row0_ = 0, col0_ = 0;
    int64_t col_label_[4] = {0, 0, 0, 0}, col_cam_[4] = {0, 0, 0, 0};
    /* pair(): the thread's current row and its best non-mate so far */
    int64_t pending_row_ = -1, pending_col_ = 0;
    uint32_t pending_key_ = 0;
    Row pending_{0, 0, 0xffffffffu};
};

} // namespace roc_count

#endif /* ROC_RANK_COUNT_CUH */
