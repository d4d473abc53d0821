/*
 * roc_count.cuh: the count policies of the evaluator's GPU passes, one small
 * functor per kind of count, each saying what it does with the pairs a pass
 * hands it:
 *
 *   ExactCount     each pair's gap among the genuine levels, looked up
 *   BinnedCount    each pair's bin of a uniform grid
 *   CurveKeys      each pair's key written out, for the curve's sort
 *   AsideCount     exact from features: the keys at or above the lowest level
 *                  set aside, counted after the pass's count
 *   PartitionKeys  exact from features: the keys at or above the lowest level
 *                  handed to the partition (roc_partition.cu)
 *   RankCount      1:N identification: each non-mate of a query against that
 *                  query's own mates (roc_rank_count.cuh, on the shared parts
 *                  below)
 *
 * The passes that drive them (roc_eval_count.cu's score, tile and list
 * passes, roc_partition.cu's partition) know no policy; the plan
 * (roc_eval_plan.cu) names the policy a pass runs (Policy, roc_pass.cuh), and
 * run_pass maps it to its functor. What every policy shares is in
 * roc_pass.cuh. A new kind of count is one functor here and one case in the
 * plan (dev/rank_count.md shows the per-query rank count). C++ only.
 *
 * A policy's interface, as the passes call it (a policy leaves out what its
 * passes never call):
 *
 *   static constexpr Policy kPolicy, bool kTracksTop (the pass merges the
 *       blocks' top keys after it)
 *   static size_t shared_bytes(const PassParams &)   its dynamic shared memory
 *   Policy(const PassParams &, uint32_t *shared)
 *   begin_block(), end_block()                      every thread of the block
 *   at_half_tile(m0, n0, half)     a stored tile's half is next (the tile at
 *                                  query row m0, gallery column n0)
 *   pair(i, j, s)                  one pair: query row i, gallery column j
 *   pairs(row, col, s, use)        kN pairs, those of use[u]
 *   count_whole(float4 (&)[kN])    in a whole tile, the float4s it counts at a
 *                                  few instructions a score, a bit each; the
 *                                  others go to pairs()
 *
 * Counters are private to a block in shared memory where they fit (the plan
 * says where: shared_gaps, shared_bins), and added into 64-bit global ones at
 * the block's end; else the pairs go to the global counters directly.
 */
#ifndef ROC_COUNT_CUH
#define ROC_COUNT_CUH

#include <stdint.h>

#include "roc_pass.cuh"

namespace roc_count {

/* At a block's end, from each thread: its pairs and NaN pairs into
 * p.totals. kLevels (the exact policies): also its run of gap 0 where the
 * thread kept it for here (zero_count pairs, least key zero_min), summed over
 * the block into gap 0's global counters, and its top key and that key's
 * count, merged over the block into the block's slot (merged over the blocks
 * after the pass: merge_block_tops). */
template <bool kLevels>
__device__ __forceinline__ void add_block_totals(const PassParams &p, unsigned long long pairs,
                                 unsigned long long nan, uint32_t key = 0,
                                 unsigned long long count = 0, unsigned long long zero_count = 0,
                                 uint32_t zero_min = 0xffffffffu)
{
    __shared__ unsigned long long warp_pairs[kCounterMaxWarps], warp_nan[kCounterMaxWarps];
    __shared__ uint32_t warp_key[kCounterMaxWarps], warp_zero_min[kCounterMaxWarps];
    __shared__ unsigned long long warp_count[kCounterMaxWarps], warp_zero[kCounterMaxWarps];
    for (int offset = 16; offset > 0; offset /= 2) {
        pairs += __shfl_down_sync(0xffffffffu, pairs, offset);
        nan += __shfl_down_sync(0xffffffffu, nan, offset);
        if constexpr (kLevels) {
            merge_top(key, count, __shfl_down_sync(0xffffffffu, key, offset),
                      __shfl_down_sync(0xffffffffu, count, offset));
            zero_count += __shfl_down_sync(0xffffffffu, zero_count, offset);
            zero_min = min(zero_min, __shfl_down_sync(0xffffffffu, zero_min, offset));
        }
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        warp_pairs[warp] = pairs;
        warp_nan[warp] = nan;
        if constexpr (kLevels) {
            warp_key[warp] = key;
            warp_count[warp] = count;
            warp_zero[warp] = zero_count;
            warp_zero_min[warp] = zero_min;
        }
    }
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    for (int w = 1; w < int(blockDim.x / 32); w++) {
        pairs += warp_pairs[w];
        nan += warp_nan[w];
        if constexpr (kLevels) {
            merge_top(key, count, warp_key[w], warp_count[w]);
            zero_count += warp_zero[w];
            zero_min = min(zero_min, warp_zero_min[w]);
        }
    }
    atomicAdd(&p.totals[0], pairs);
    atomicAdd(&p.totals[1], nan);
    if constexpr (kLevels) {
        if (zero_count)
            count_gap(p.gap, p.gap_min, 0, zero_count, zero_min);
        /* a later launch of one pass (roc_eval_count.cu's launch_pass) adds
         * to what the block's slot holds from the earlier ones */
        if (p.tile_begin > p.tile_first)
            merge_top(key, count, p.block_top_key[blockIdx.x], p.block_top_count[blockIdx.x]);
        p.block_top_key[blockIdx.x] = key;
        p.block_top_count[blockIdx.x] = count;
    }
}

/* What every count policy keeps: the pairs it saw and those with a NaN
 * score (counted apart, never counted otherwise). */
class PairTotals {
  public:
    /* where the tile is: no policy of these counts by position */
    __device__ __forceinline__ void at_half_tile(int64_t, int64_t, int) {}

  protected:
    /* A pair seen: whether it counts (its score is not NaN). */
    __device__ __forceinline__ bool see(float s)
    {
        n_pairs_++;
        const bool nan = isnan(s);
        n_nan_ += nan;
        return !nan;
    }

    /* a thread sees far fewer than 2^32 pairs in one pass */
    unsigned int n_pairs_ = 0, n_nan_ = 0;
};

/* pairs() for a policy without a path of its own for them: the used pairs
 * one by one through its pair(). */
template <class Policy, int kN>
__device__ __forceinline__ void each_pair(Policy &policy, const int64_t (&row)[kN],
                                          const int64_t (&col)[kN], const float (&s)[kN],
                                          const bool (&use)[kN])
{
#pragma unroll
    for (int u = 0; u < kN; u++)
        if (use[u])
            policy.pair(row[u], col[u], s[u]);
}

// ----------------------------------------------------------------------------
// the exact policies' common part

/* What the exact policies (ExactCount, AsideCount, PartitionKeys) share: the
 * bounds of the genuine levels, the highest key seen and its count, the
 * current run of pairs that fall in one gap (most impostors of a row share a
 * few gaps; the run is flushed when the gap changes), and count_below, which
 * in a whole tile takes the pairs below the lowest level (nearly all where
 * few lie among the levels) at a compare, a min and a max a score.
 * kSharedGaps: the gaps' counters may be the block's, in shared memory
 * (ExactCount's, where the plan put them there). */
template <bool kSharedGaps> class LevelCount : public PairTotals {
  public:
    static constexpr bool kTracksTop = true;

    /* In a whole tile (every pair counted), a thread's kN float4s of scores:
     * each float4 whose four scores all lie below the lowest level (float
     * compares, which NaN fails) joins the run of gap 0, and bit u of the
     * result says so; the others are left to the policy's own path. Pair by
     * pair, with the run and the top kept as pair() keeps them, the count of
     * the stored tiles took several times the lean count of
     * dev/cuda/roc_count.cu (dev/NOTES.md, direct count). In a tile not whole (kWhole false), only
     * the float4s of `counted`, whose four pairs all count, are taken. */
    template <int kN, bool kWhole = true>
    __device__ __forceinline__ uint32_t count_below(const float4 (&v)[kN],
                                                    uint32_t counted = 0)
    {
        static_assert(kN <= 32, "a bit a float4");
        float lo = INFINITY, hi = -INFINITY;
        uint32_t below = 0;
#pragma unroll
        for (int u = 0; u < kN; u++) {
            const bool take = kWhole || (counted >> u & 1);
            const bool all = take && v[u].x < lowest_score_ && v[u].y < lowest_score_ &&
                             v[u].z < lowest_score_ && v[u].w < lowest_score_;
            below |= uint32_t(all) << u;
            const float least = fminf(fminf(v[u].x, v[u].y), fminf(v[u].z, v[u].w));
            lo = fminf(lo, take ? least : INFINITY);
            /* for the top test only: a float4 not taken can make the test's
             * rare path run more often, never skip a top */
            hi = fmaxf(hi, fmaxf(fmaxf(v[u].x, v[u].y), fmaxf(v[u].z, v[u].w)));
        }
        if (below == 0)
            return 0;
        /* nearly always, after a launch's first tiles, the thread's top or the
         * block's from the pass's earlier launches lies above them all; the
         * rare case a loop, not unrolled: the count is bound by fetching its
         * instructions */
        if (!(hi < fmaxf(top_score_, top_floor_))) {
#pragma unroll 1
            for (int u = 0; u < kN; u++) {
                if (!(below >> u & 1))
                    continue;
                const float4 x = pick(v, u);
                see_top(roc_score_key(x.x));
                see_top(roc_score_key(x.y));
                see_top(roc_score_key(x.z));
                see_top(roc_score_key(x.w));
            }
        }
        const int n_below = __popc(below);
        n_pairs_ += 4 * n_below;
        /* the least of all kN float4s' scores taken, NaN aside: below the
         * lowest level (one float4 lies there), so a pair of gap 0, here or in
         * the policy's path */
        join_gap_zero(4 * n_below, roc_score_key(lo));
        return below;
    }

  protected:
    /* run_gap: the run's gap at the start (-1: none yet) */
    __device__ LevelCount(const PassParams &p, uint32_t *shared, int run_gap)
        : p_(p), shared_(shared), run_gap_(run_gap)
    {
        if (p.n_levels > 0) {
            lowest_ = __ldg(p.levels);
            highest_ = __ldg(p.levels + p.n_levels - 1);
            lowest_score_ = roc_key_score(lowest_);
            /* a later launch of one feature pass: the block's top so far */
            if (p.tile_begin > p.tile_first && p.block_top_count[blockIdx.x]) {
                top_floor_key_ = p.block_top_key[blockIdx.x];
                top_floor_ = roc_key_score(top_floor_key_);
            }
        }
    }

    /* Whether the gaps' counters are the block's, in shared memory. */
    __device__ __forceinline__ bool gaps_shared() const
    {
        return kSharedGaps && p_.shared_gaps;
    }

    /* The highest key and its count (top_key_ starts at 0, the lowest key):
     * one compare for nearly every pair, which lies below the top so far. */
    __device__ __forceinline__ void see_top(uint32_t key)
    {
        if (key >= top_key_) {
            top_count_ = key > top_key_ || top_count_ == 0 ? 1 : top_count_ + 1;
            top_key_ = key;
            top_score_ = roc_key_score(key);
        }
    }

    /* A key in gap g, or on level g (at: rare, a pair scored exactly like a
     * genuine level, counted at once). */
    __device__ __forceinline__ void count_key(int g, bool at, uint32_t key)
    {
        if (at) {
            count_exact(p_.at, p_.gap, p_.gap_min, g, true, 1ull, key);
            return;
        }
        if (g != run_gap_) {
            flush_run();
            run_gap_ = g;
        }
        run_count_++;
        run_min_ = min(run_min_, key);
    }

    /* n keys of gap 0, the least of them `least` */
    __device__ __forceinline__ void join_gap_zero(uint32_t n, uint32_t least)
    {
        if (run_gap_ != 0) {
            flush_run();
            run_gap_ = 0;
        }
        run_count_ += n;
        run_min_ = min(run_min_, least);
    }

    __device__ void flush_run()
    {
        if (run_count_ == 0)
            return;
        if (gaps_shared())
            count_gap(shared_, shared_ + p_.n_levels + 1, run_gap_, run_count_, run_min_);
        else
            count_gap(p_.gap, p_.gap_min, run_gap_, (unsigned long long)run_count_, run_min_);
        run_count_ = 0;
        run_min_ = 0xffffffffu;
    }

    /* At the block's end: the run flushed, unless it is of gap 0 in the
     * global counters, which add_block_totals adds up over the block first
     * (each thread's two atomics on those two addresses, ~135,000 a launch
     * of the feature pass's count, came after the loads of its last tile);
     * then the block's totals and top. */
    __device__ void finish_block()
    {
        const bool zero = !gaps_shared() && run_gap_ == 0;
        if (!zero)
            flush_run();
        add_block_totals<true>(p_, n_pairs_, n_nan_, top_key_, top_count_,
                               zero ? run_count_ : 0, zero ? run_min_ : 0xffffffffu);
    }

    const PassParams &p_;
    uint32_t *shared_;
    /* a thread sees far fewer than 2^32 pairs in one pass */
    unsigned int top_count_ = 0;
    uint32_t top_key_ = 0, lowest_ = 0, highest_ = 0, top_floor_key_ = 0;
    /* count_below's bounds as scores: no pair is below -inf (no levels, or
     * no top key yet). Below top_floor_, a key cannot be the block's top
     * (the top of its slot, from the pass's earlier launches). */
    float lowest_score_ = -INFINITY, top_score_ = -INFINITY, top_floor_ = -INFINITY;
    int run_gap_;
    uint32_t run_count_ = 0, run_min_ = 0xffffffffu;
};

// ----------------------------------------------------------------------------
// ExactCount

/* Exact mode's direct count: each pair's gap among the genuine levels found
 * through the level index of roc_math.h, into the block's shared counters
 * where the gaps fit, else the global ones. Where the levels lie among the
 * impostors, each pair needs its own lookup: pairs() then looks its pairs up
 * side by side, in 32-bit arithmetic, so that their reads are in flight
 * together and the instructions a pair costs stay few. */
class ExactCount : public LevelCount<true> {
  public:
    static constexpr Policy kPolicy = Policy::kExact;

    static size_t shared_bytes(const PassParams &p)
    {
        return p.shared_gaps ? size_t(p.n_levels + 1) * 2 * sizeof(uint32_t) : 0;
    }

    __device__ ExactCount(const PassParams &p, uint32_t *shared) : LevelCount(p, shared, -1) {}

    __device__ void begin_block()
    {
        if (p_.shared_gaps) {
            for (int64_t g = threadIdx.x; g <= p_.n_levels; g += blockDim.x) {
                shared_[g] = 0;
                shared_[p_.n_levels + 1 + g] = 0xffffffffu;
            }
        }
        __syncthreads();
    }

    __device__ __forceinline__ void pair(int64_t, int64_t, float s)
    {
        if (!see(s))
            return;
        const uint32_t key = roc_score_key(s);
        see_top(key);
        int at = 0;
        int g = key < lowest_ ? 0 : int(p_.n_levels);
        if (key >= lowest_ && key <= highest_)
            g = int(roc_find_level(p_.levels, p_.lut, p_.lut_base, p_.lut_shift, key, &at));
        count_key(g, at, key);
    }

    /* Pairs of use[u], as pair() counts them: all below every genuine level
     * without a branch a pair, else exact_pairs. */
    template <int kN>
    __device__ __forceinline__ void pairs(const int64_t (&)[kN], const int64_t (&)[kN],
                                          const float (&s)[kN], const bool (&use)[kN])
    {
        uint32_t key[kN];
        bool below = true;
#pragma unroll
        for (int u = 0; u < kN; u++) {
            key[u] = roc_score_key(s[u]);
            below = below && use[u] && !isnan(s[u]) && key[u] < lowest_;
        }
        if (!below) {
            exact_pairs(key, s, use);
            return;
        }
        uint32_t lowest_key = key[0];
#pragma unroll
        for (int u = 0; u < kN; u++) {
            see_top(key[u]);
            lowest_key = min(lowest_key, key[u]);
        }
        n_pairs_ += kN;
        join_gap_zero(kN, lowest_key);
    }

    template <int kN> __device__ __forceinline__ uint32_t count_whole(const float4 (&v)[kN])
    {
        return count_below(v);
    }

    __device__ void end_block()
    {
        finish_block();
        __syncthreads();
        if (p_.shared_gaps) {
            for (int64_t g = threadIdx.x; g <= p_.n_levels; g += blockDim.x)
                if (shared_[g])
                    count_gap(p_.gap, p_.gap_min, g, (unsigned long long)shared_[g],
                              shared_[p_.n_levels + 1 + g]);
        }
    }

  private:
    /* pair() for kN pairs of keys `key`, their lookups side by side: the index
     * buckets of all of them, then each bisection step of all of them, are
     * read before any is used. Level numbers are below 2^31 (roc_eval.c), so
     * 32 bits hold them. A key equal to a level is found by the bisection
     * itself (the level it ends on is one it probed), not by another read. */
    template <int kN>
    __device__ __forceinline__ void exact_pairs(const uint32_t (&key)[kN], const float (&s)[kN],
                                                const bool (&use)[kN])
    {
        const uint32_t n_levels = uint32_t(p_.n_levels);
        bool live[kN], at[kN];
        uint32_t lo[kN], hi[kN];
#pragma unroll
        for (int u = 0; u < kN; u++) {
            n_pairs_ += use[u];
            n_nan_ += use[u] && isnan(s[u]);
            live[u] = use[u] && !isnan(s[u]);
            at[u] = false;
            lo[u] = hi[u] = key[u] < lowest_ ? 0u : n_levels;
            if (live[u] && key[u] >= lowest_ && key[u] <= highest_) {
                const uint32_t bucket = (key[u] - p_.lut_base) >> p_.lut_shift;
                lo[u] = __ldg(p_.lut + bucket);
                hi[u] = __ldg(p_.lut + bucket + 1);
            }
        }
        for (bool more = true; more;) {
            uint32_t level[kN];
#pragma unroll
            for (int u = 0; u < kN; u++)
                level[u] = lo[u] < hi[u] ? __ldg(p_.levels + (lo[u] + hi[u]) / 2) : 0u;
            more = false;
#pragma unroll
            for (int u = 0; u < kN; u++) {
                if (lo[u] < hi[u]) {
                    const uint32_t mid = (lo[u] + hi[u]) / 2;
                    at[u] = at[u] || level[u] == key[u];
                    lo[u] = level[u] < key[u] ? mid + 1 : lo[u];
                    hi[u] = level[u] < key[u] ? hi[u] : mid;
                    more = more || lo[u] < hi[u];
                }
            }
        }
#pragma unroll
        for (int u = 0; u < kN; u++) {
            if (!live[u])
                continue;
            see_top(key[u]);
            count_key(int(lo[u]), at[u], key[u]);
        }
    }
};

// ----------------------------------------------------------------------------
// AsideCount

/* Exact mode from features with global counters, where some pairs lie among
 * the levels (the plan's choice after its probe): the pass does not look
 * those up at all. The keys below the lowest level join the run of gap 0
 * (the only run); those at or above go to the warp's segment of
 * p.aside_keys (their places reserved by an atomic on the warp's count in
 * shared memory), and count_aside_kernel (roc_eval_count.cu) counts them
 * where launch_pass finds the segments due. Looked up in the pass, a warp
 * ran the lookup whenever one lane had such a pair, and each broke its
 * lane's run of gap 0 (dev/NOTES.md, aside). A key past its segment's end
 * is counted directly. */
class AsideCount : public LevelCount<false> {
  public:
    static constexpr Policy kPolicy = Policy::kAside;

    /* each warp's keys set aside so far */
    static size_t shared_bytes(const PassParams &)
    {
        return (kThreads / 32) * sizeof(uint32_t);
    }

    __device__ AsideCount(const PassParams &p, uint32_t *shared) : LevelCount(p, shared, 0) {}

    __device__ void begin_block()
    {
        /* the warp's keys set aside, those of the pass's earlier launches first */
        if (threadIdx.x % 32 == 0)
            shared_[threadIdx.x / 32] =
                p_.tile_begin > p_.tile_first ? p_.aside_used[aside_warp()] : 0u;
        __syncthreads();
    }

    /* A thread alone calls it: the quads left in a tile differ from lane to lane. */
    template <int kN>
    __device__ __forceinline__ void pairs(const int64_t (&)[kN], const int64_t (&)[kN],
                                          const float (&s)[kN], const bool (&use)[kN])
    {
        uint32_t key[kN];
        bool above[kN];
        int n_above = 0;
#pragma unroll
        for (int u = 0; u < kN; u++) {
            key[u] = roc_score_key(s[u]);
            const bool live = use[u] && !isnan(s[u]);
            n_pairs_ += use[u];
            n_nan_ += use[u] && !live;
            if (live)
                see_top(key[u]);
            above[u] = live && key[u] >= lowest_;
            n_above += above[u];
            const bool below = live && !above[u];
            run_count_ += below;
            run_min_ = min(run_min_, below ? key[u] : 0xffffffffu);
        }
        if (n_above == 0)
            return;
        uint32_t slot = atomicAdd(&shared_[threadIdx.x / 32], uint32_t(n_above));
        uint32_t *segment = p_.aside_keys + size_t(aside_warp()) * p_.aside_segment;
#pragma unroll
        for (int u = 0; u < kN; u++) {
            if (!above[u])
                continue;
            if (slot < p_.aside_segment)
                segment[slot] = key[u];
            else
                count_directly(p_, key[u], highest_);
            slot++;
        }
    }

    template <int kN> __device__ __forceinline__ uint32_t count_whole(const float4 (&v)[kN])
    {
        return count_below(v);
    }

    __device__ void end_block()
    {
        __syncwarp(); /* the warp's reservations made */
        if (threadIdx.x % 32 == 0)
            p_.aside_used[aside_warp()] = min(shared_[threadIdx.x / 32], p_.aside_segment);
        finish_block();
        __syncthreads();
    }

    /* The keys a block's warp set aside (its segment: block b drains warp
     * b's), into the global counters: the keys of a warp that fall in one gap
     * counted at once (__match_any_sync), the lowest kAsideGaps gaps in
     * shared memory first, where the impostors' tail crowds them (one warp a
     * segment, 32 keys at a time, each warp's chain of reads was long:
     * dev/NOTES.md, aside). */
    static __device__ void drain(const PassParams &p)
    {
        __shared__ uint32_t gap_count[kAsideGaps], gap_low[kAsideGaps];
        const uint32_t n = p.aside_used[blockIdx.x];
        if (n == 0)
            return; /* the whole block */
        for (int g = threadIdx.x; g < kAsideGaps; g += blockDim.x) {
            gap_count[g] = 0;
            gap_low[g] = 0xffffffffu;
        }
        __syncthreads();
        const uint32_t highest = __ldg(p.levels + p.n_levels - 1);
        const uint32_t *keys = p.aside_keys + size_t(blockIdx.x) * p.aside_segment;
        const int lane = threadIdx.x % 32;
        /* every lane takes every round, so that the warp's match is whole */
        for (uint32_t t = threadIdx.x; t < (n + blockDim.x - 1) / blockDim.x * blockDim.x;
             t += blockDim.x) {
            const bool live = t < n;
            const uint32_t key = live ? keys[t] : 0u;
            int at = 0;
            int64_t g = -1;
            if (live)
                g = key > highest
                        ? p.n_levels
                        : roc_find_level(p.levels, p.lut, p.lut_base, p.lut_shift, key, &at);
            const unsigned peers = __match_any_sync(0xffffffffu, 2 * g + at);
#if __CUDA_ARCH__ >= 800
            const uint32_t lowest = __reduce_min_sync(peers, key);
#else /* no warp reduction before sm_80: each lane's key its own atomicMin */
            if (live && !at)
                atomicMin(g < kAsideGaps ? &gap_low[g] : &p.gap_min[g], key);
            const uint32_t lowest = key;
#endif
            if (!live || lane != __ffs(peers) - 1)
                continue;
            if (!at && g < kAsideGaps)
                count_gap(gap_count, gap_low, g, uint32_t(__popc(peers)), lowest);
            else
                count_exact(p.at, p.gap, p.gap_min, g, at, (unsigned long long)__popc(peers),
                            lowest);
        }
        __syncthreads();
        for (int g = threadIdx.x; g < kAsideGaps; g += blockDim.x)
            if (gap_count[g])
                count_gap(p.gap, p.gap_min, g, (unsigned long long)gap_count[g], gap_low[g]);
        if (threadIdx.x == 0)
            p.aside_used[blockIdx.x] = 0;
    }

  private:
    static constexpr int kAsideGaps = 1024;

    __device__ __forceinline__ int aside_warp() const
    {
        return int(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32);
    }
};

// ----------------------------------------------------------------------------
// PartitionKeys

/* Exact mode from features by partition, where there are more levels than
 * the shared counters hold and most pairs lie among them (the plan's
 * choice): roc_partition.cu's partition kernel reads the stored tiles and
 * hands them here; the keys below the lowest level are counted as the other
 * exact policies count them, the others are staged by range of levels
 * (RangeSorter) and drained. */
class PartitionKeys : public LevelCount<false> {
  public:
    static constexpr Policy kPolicy = Policy::kPartitioned;

    /* the partition kernel's shared memory is its sorter's (launch_partition) */
    static size_t shared_bytes(const PassParams &) { return 0; }

    __device__ explicit PartitionKeys(const PassParams &p) : LevelCount(p, nullptr, 0) {}

    /* A thread's kN float4s of a stored tile, the pairs of bit 4u + c of
     * `use` (score c of float4 u) counted as ExactCount would count them,
     * except that key[4u + c] keeps each key at or above the lowest level for
     * the partition (else ROC_NO_KEY); true where one does. A handful of
     * instructions a score, without a branch, the pairs below the lowest
     * level among them (count_below ahead of it, as the other policies have,
     * cost ~3 instructions a key and spared none). kAll: every pair of a
     * whole tile (`use` all ones), the usual case, without a test of it.
     * NaN, the pairs below and the least are kept as counts a key (as bits,
     * the partition kernel spilled: dev/NOTES.md, partition/drain). The top
     * is looked at only where the highest key could be it (as count_below
     * does), from the stored tile again (v[u] is stored at
     * stored[u * stride]): v kept for it beside the keys, the partition
     * kernel spilled. */
    template <bool kAll, int kN>
    __device__ __forceinline__ bool keys_to_partition(const float4 (&v)[kN],
                                                      const float4 *stored, int stride,
                                                      uint32_t use, uint32_t (&key)[4 * kN])
    {
        static_assert(4 * kN <= 32, "a bit a pair");
        uint32_t live = 0, n_nan = 0, n_below = 0, least = 0xffffffffu, top = 0;
#pragma unroll
        for (int i = 0; i < 4 * kN; i++) {
            const float s = component(v[i / 4], i % 4);
            const bool used = kAll || (use >> i & 1), nan = isnan(s);
            const uint32_t k = lean_score_key(s);
            const bool counts = used && !nan, below = k < lowest_;
            n_nan += used && nan;
            n_below += counts && below;
            least = min(least, counts && below ? k : 0xffffffffu);
            top = max(top, counts ? k : 0u);
            key[i] = counts && !below ? k : ROC_NO_KEY;
            live |= uint32_t(counts) << i;
        }
        n_pairs_ += __popc(use);
        n_nan_ += n_nan;
        run_count_ += n_below; /* run_gap_ is 0, the only gap counted here */
        run_min_ = min(run_min_, least);
        if (live && top >= max(top_key_, top_floor_key_)) { /* rare after the first tiles */
#pragma unroll 1
            for (int i = 0; i < 4 * kN; i++) {
                const uint32_t k = roc_score_key(component(stored[i / 4 * stride], i % 4));
                if ((live >> i & 1) && k >= top_floor_key_)
                    see_top(k);
            }
        }
        return __popc(live) > int(n_below);
    }

    __device__ void end_block()
    {
        finish_block();
        __syncthreads();
    }
};

// ----------------------------------------------------------------------------
// BinnedCount

/* Binned mode's shared memory: each bin's two edges (float2, first: 8-byte
 * aligned), then the counters of below, the bins and above. */
inline size_t shared_bins_bytes(int64_t n_bins)
{
    return size_t(n_bins) * sizeof(float2) + size_t(n_bins + 2) * sizeof(uint32_t);
}

/* Each pair's bin of the uniform grid (roc_math.h's roc_uniform_bin), into
 * the block's shared counters where the bins fit (their edges beside them),
 * else the global ones. */
class BinnedCount : public PairTotals {
  public:
    static constexpr Policy kPolicy = Policy::kBinned;
    static constexpr bool kTracksTop = false;

    static size_t shared_bytes(const PassParams &p)
    {
        return p.shared_bins ? shared_bins_bytes(p.n_bins) : 0;
    }

    __device__ BinnedCount(const PassParams &p, uint32_t *shared) : p_(p), shared_(shared) {}

    __device__ void begin_block()
    {
        if (p_.shared_bins) {
            for (int64_t b = threadIdx.x; b < p_.n_bins + 2; b += blockDim.x)
                bin_counts()[b] = 0;
            for (int64_t b = threadIdx.x; b < p_.n_bins; b += blockDim.x)
                bin_edges()[b] = make_float2(p_.edges[b], p_.edges[b + 1]);
        }
        __syncthreads();
    }

    __device__ __forceinline__ void pair(int64_t, int64_t, float s)
    {
        if (!see(s))
            return;
        if (p_.shared_bins)
            atomicAdd(&bin_counts()[shared_bin(s) + 1], 1u);
        else
            atomicAdd(&p_.bins[roc_uniform_bin(s, p_.edges, p_.n_bins, p_.lo32, p_.scale32) + 1],
                      1ull);
    }

    /* Pairs of use[u], as pair() counts them; with the bins in shared
     * memory, without a branch a pair: the edges of the bins their positions
     * suggest read for all of them first, so that the reads overlap. */
    template <int kN>
    __device__ __forceinline__ void pairs(const int64_t (&row)[kN], const int64_t (&col)[kN],
                                          const float (&s)[kN], const bool (&use)[kN])
    {
        if (!p_.shared_bins) {
            each_pair(*this, row, col, s, use);
            return;
        }
        int b[kN];
        float2 e[kN];
#pragma unroll
        for (int u = 0; u < kN; u++) {
            b[u] = estimated_bin(s[u]);
            e[u] = bin_edges()[b[u]];
        }
#pragma unroll
        for (int u = 0; u < kN; u++) {
            if (!use[u] || !see(s[u]))
                continue;
            const int bin = bin_holds(s[u], b[u], e[u])
                                ? b[u]
                                : int(roc_uniform_bin(s[u], p_.edges, p_.n_bins, p_.lo32,
                                                      p_.scale32));
            atomicAdd(&bin_counts()[bin + 1], 1u);
        }
    }

    /* With the bins in shared memory, in a whole tile (every pair counted), a
     * thread's kN float4s of scores: each float4 whose four scores lie in the
     * bins their position suggests (one 8-byte read of a bin's edges a score,
     * which NaN and scores outside the range fail) is counted here, about ten
     * instructions a score, and bit u of the result says so; the others are
     * left to pairs() (pair by pair, several times the instructions:
     * dev/NOTES.md, direct count). */
    template <int kN> __device__ __forceinline__ uint32_t count_whole(const float4 (&v)[kN])
    {
        if (!p_.shared_bins)
            return 0;
        /* the edges of all of them read first, so that the reads overlap */
        int b[kN][4];
        uint32_t held = 0;
#pragma unroll
        for (int u = 0; u < kN; u++) {
            const float s[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
            bool all = true;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                b[u][c] = estimated_bin(s[c]);
                const float2 e = bin_edges()[b[u][c]];
                all = all && e.x <= s[c] && s[c] < e.y;
            }
            held |= uint32_t(all) << u;
        }
#pragma unroll
        for (int u = 0; u < kN; u++)
            if (held >> u & 1)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    atomicAdd(&bin_counts()[b[u][c] + 1], 1u);
        n_pairs_ += 4 * __popc(held);
        return held;
    }

    __device__ void end_block()
    {
        add_block_totals<false>(p_, n_pairs_, n_nan_);
        __syncthreads();
        if (p_.shared_bins) {
            for (int64_t b = threadIdx.x; b < p_.n_bins + 2; b += blockDim.x)
                if (bin_counts()[b])
                    atomicAdd(&p_.bins[b], (unsigned long long)bin_counts()[b]);
        }
    }

  private:
    /* The bin the score's position suggests, clamped into [0, n_bins) (the
     * conversion saturates and takes NaN to 0), so that its edges can be read. */
    __device__ __forceinline__ int estimated_bin(float s) const
    {
        return min(max(__float2int_rz((s - p_.lo32) * p_.scale32), 0), int(p_.n_bins) - 1);
    }

    /* Whether bin b, with edges e, holds the score: then b is
     * roc_uniform_bin's answer (no other bin can hold it). */
    __device__ __forceinline__ bool bin_holds(float s, int b, float2 e) const
    {
        return e.x <= s && (s < e.y || (b == int(p_.n_bins) - 1 && s <= e.y));
    }

    /* roc_uniform_bin's answer with the edges in shared memory: the estimated
     * bin when its two edges hold the score (nearly always), else
     * roc_uniform_bin's search over the global edges (for every pair, it
     * dominated the count: dev/NOTES.md, direct count). */
    __device__ __forceinline__ int shared_bin(float s) const
    {
        const int b = estimated_bin(s);
        if (bin_holds(s, b, bin_edges()[b]))
            return b;
        return int(roc_uniform_bin(s, p_.edges, p_.n_bins, p_.lo32, p_.scale32));
    }

    /* the shared bins (shared_bins_bytes): bin b's edges, and the counters of
     * below (0), bin b (b + 1) and above (n_bins + 1) */
    __device__ __forceinline__ float2 *bin_edges() const
    {
        return reinterpret_cast<float2 *>(shared_);
    }
    __device__ __forceinline__ uint32_t *bin_counts() const
    {
        return shared_ + 2 * p_.n_bins;
    }

    const PassParams &p_;
    uint32_t *shared_;
};

// ----------------------------------------------------------------------------
// CurveKeys

/* Curve mode: each pair's key (ROC_NO_KEY for NaN) written to its place in
 * p.keys, a (rows, n_gallery) array of the pass's rows, which roc_sorted.cu
 * sorts and merges into the curve. */
class CurveKeys : public PairTotals {
  public:
    static constexpr Policy kPolicy = Policy::kCurve;
    static constexpr bool kTracksTop = false;

    static size_t shared_bytes(const PassParams &) { return 0; }

    __device__ CurveKeys(const PassParams &p, uint32_t *) : p_(p) {}

    __device__ void begin_block() {}

    __device__ __forceinline__ void pair(int64_t i, int64_t j, float s)
    {
        p_.keys[(i - p_.row_begin) * p_.n_gallery + j] = see(s) ? roc_score_key(s) : ROC_NO_KEY;
    }

    template <int kN>
    __device__ __forceinline__ void pairs(const int64_t (&row)[kN], const int64_t (&col)[kN],
                                          const float (&s)[kN], const bool (&use)[kN])
    {
        each_pair(*this, row, col, s, use);
    }

    template <int kN> __device__ __forceinline__ uint32_t count_whole(const float4 (&)[kN])
    {
        return 0;
    }

    __device__ void end_block() { add_block_totals<false>(p_, n_pairs_, n_nan_); }

  private:
    const PassParams &p_;
};

} // namespace roc_count

#endif /* ROC_COUNT_CUH */
