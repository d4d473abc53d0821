/*
 * roc_count.cuh: the count policies of the evaluator's GPU passes (Counter,
 * one per kind of count: exact, binned, curve, stored scores, partitioned and
 * set-aside exact), what each does with a pair the pass hands it. The passes
 * that drive them are in roc_eval_count.cu; what every policy shares is in
 * roc_pass.cuh. C++ only.
 *
 * Counters are private to a block in shared memory where they fit, and added
 * into 64-bit global ones at the block's end; else the pairs go to the global
 * counters directly. Exact mode finds a pair's genuine level through the
 * index of roc_math.h, and keeps the current run of pairs that fall in one gap
 * (most impostors of a row share a few gaps), flushing it when the gap changes.
 * Where the levels lie among the impostors, each pair needs its own lookup:
 * pairs() then looks its pairs up side by side, in 32-bit arithmetic, so that
 * their reads are in flight together and the instructions a pair costs stay
 * few. Where some pairs lie among them (roc_eval_plan.cu's plan_count),
 * the feature pass does not look those up at all (kAside): the count of the
 * stored tiles sets those pairs' keys aside in a buffer, and a kernel counts
 * them where the warps' shares of it are due (roc_eval_count.cu's
 * launch_pass).
 *
 * Where there are more levels than the shared counters hold and most pairs
 * lie among them (roc_eval_plan.cu's plan_count), the feature pass
 * counts exactly by partition (kPartitioned) instead: roc_partition.cu's
 * partition kernel reads the stored tiles, counts the pairs below the lowest
 * level as the other modes do, and stages the other keys (RangeSorter) by
 * range of consecutive levels for each range's segment of a buffer; its
 * drain counts each range's keys in shared memory. Two scattered atomics a
 * pair had made the hard count L2-bound (ncu: 77% L2 throughput), and the
 * sorting steps inside the tile pass were latency-bound at its 8 warps a
 * multiprocessor (dev/NOTES.md, partition/drain). A key whose segment is full is counted
 * directly, the old way, so the counts stay exact however the keys fall.
 *
 * In a whole tile, the pairs below the lowest level (nearly all where few
 * lie among the levels) go by count_below, a compare, a min and a max a
 * score; only the others take their mode's path.
 */
#ifndef ROC_COUNT_CUH
#define ROC_COUNT_CUH

#include <stdint.h>

#include "roc_pass.cuh"

namespace roc_count {

/* Binned mode's shared memory: each bin's two edges (float2, first: 8-byte
 * aligned), then the counters of below, the bins and above. */
inline size_t shared_bins_bytes(int64_t n_bins)
{
    return size_t(n_bins) * sizeof(float2) + size_t(n_bins + 2) * sizeof(uint32_t);
}

/* Bytes of private counters (and, binned, the edges) a pass of `mode` keeps
 * in shared memory. */
inline size_t counter_bytes(int mode, const PassParams &p)
{
    if (mode == kExact && p.shared_gaps)
        return size_t(p.n_levels + 1) * 2 * sizeof(uint32_t);
    if (mode == kBinned && p.shared_bins)
        return shared_bins_bytes(p.n_bins);
    if (mode == kAside) /* each warp's keys set aside so far */
        return (kThreads / 32) * sizeof(uint32_t);
    return 0;
}

/* Counts the pairs one thread sees, then the block's, into the globals.
 * Exact mode keeps the current run of pairs that fall in one gap (most
 * impostors of a row share a few gaps) and flushes it when the gap changes. */
template <int kMode> class Counter {
  public:
    __device__ Counter(const PassParams &p, uint32_t *shared)
        : p_(p), shared_(shared)
    {
        if (kCountsLevels && p.n_levels > 0) {
            lowest_ = __ldg(p.levels);
            highest_ = __ldg(p.levels + p.n_levels - 1);
            lowest_score_ = roc_key_score(lowest_);
            /* a later launch of one feature pass: the block's top so far */
            if (p.tile_begin > p.tile_first && p.block_top_count[blockIdx.x]) {
                top_floor_key_ = p.block_top_key[blockIdx.x];
                top_floor_ = roc_key_score(top_floor_key_);
            }
        }
        if (kMode == kPartitioned || kMode == kAside)
            run_gap_ = 0; /* the only gap counted here: below every level */
    }

    __device__ void begin_block()
    {
        if (kMode == kExact && p_.shared_gaps) {
            for (int64_t g = threadIdx.x; g <= p_.n_levels; g += blockDim.x) {
                shared_[g] = 0;
                shared_[p_.n_levels + 1 + g] = 0xffffffffu;
            }
        } else if (kMode == kAside) {
            /* the warp's keys set aside, those of the pass's earlier launches first */
            if (threadIdx.x % 32 == 0)
                shared_[threadIdx.x / 32] =
                    p_.tile_begin > p_.tile_first ? p_.aside_used[aside_warp()] : 0u;
        } else if (kMode == kBinned && p_.shared_bins) {
            for (int64_t b = threadIdx.x; b < p_.n_bins + 2; b += blockDim.x)
                bin_counts()[b] = 0;
            for (int64_t b = threadIdx.x; b < p_.n_bins; b += blockDim.x)
                bin_edges()[b] = make_float2(p_.edges[b], p_.edges[b + 1]);
        }
        __syncthreads();
    }

    __device__ __forceinline__ void pair(int64_t i, int64_t j, float s)
    {
        if (kMode == kStore) {
            p_.scores[i * p_.n_gallery + j] = s;
            return;
        }
        n_pairs_++;
        const bool nan = isnan(s);
        n_nan_ += nan;
        if (kMode == kCurve) {
            p_.keys[(i - p_.row_begin) * p_.n_gallery + j] = nan ? ROC_NO_KEY : roc_score_key(s);
            return;
        }
        if (nan)
            return;
        if (kMode == kBinned) {
            if (p_.shared_bins)
                atomicAdd(&bin_counts()[shared_bin(s) + 1], 1u);
            else
                atomicAdd(&p_.bins[roc_uniform_bin(s, p_.edges, p_.n_bins, p_.lo32, p_.scale32) + 1],
                          1ull);
            return;
        }
        const uint32_t key = roc_score_key(s);
        see_top(key);
        int at = 0;
        int g = key < lowest_ ? 0 : int(p_.n_levels);
        if (key >= lowest_ && key <= highest_)
            g = int(roc_find_level(p_.levels, p_.lut, p_.lut_base, p_.lut_shift, key, &at));
        if (at) { /* rare: a pair scored exactly like a genuine level */
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

    /* Pairs (row[u], col[u], s[u]) for which use[u], as pair() counts them.
     * The common cases go without a branch per pair, so that the kN pairs'
     * loads and atomics overlap: binned, bins whose edges (read for all of
     * them first) hold the scores; exact, all below every genuine level, else
     * exact_pairs. */
    template <int kN>
    __device__ __forceinline__ void pairs(const int64_t (&row)[kN], const int64_t (&col)[kN],
                                          const float (&s)[kN], const bool (&use)[kN])
    {
        if (kMode == kBinned && p_.shared_bins) {
            int b[kN];
            float2 e[kN];
#pragma unroll
            for (int u = 0; u < kN; u++) {
                b[u] = estimated_bin(s[u]);
                e[u] = bin_edges()[b[u]];
            }
#pragma unroll
            for (int u = 0; u < kN; u++) {
                if (!use[u])
                    continue;
                n_pairs_++;
                if (isnan(s[u])) {
                    n_nan_++;
                    continue;
                }
                const int bin = bin_holds(s[u], b[u], e[u])
                                    ? b[u]
                                    : int(roc_uniform_bin(s[u], p_.edges, p_.n_bins, p_.lo32,
                                                          p_.scale32));
                atomicAdd(&bin_counts()[bin + 1], 1u);
            }
            return;
        }
        if constexpr (kMode == kAside) {
            uint32_t key[kN];
#pragma unroll
            for (int u = 0; u < kN; u++)
                key[u] = roc_score_key(s[u]);
            set_aside(key, s, use);
        } else if constexpr (kMode == kExact) {
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
            if (run_gap_ != 0) { /* all in gap 0 */
                flush_run();
                run_gap_ = 0;
            }
            run_count_ += kN;
            run_min_ = min(run_min_, lowest_key);
        } else {
#pragma unroll
            for (int u = 0; u < kN; u++)
                if (use[u])
                    pair(row[u], col[u], s[u]);
        }
    }

    /* In a whole tile (every pair counted), a thread's kN float4s of scores:
     * those its mode counts at a few instructions a score (count_below,
     * count_binned), bit u of the result set for each; the others are left
     * to pairs(). */
    template <int kN> __device__ __forceinline__ uint32_t count_whole(const float4 (&v)[kN])
    {
        if constexpr (kMode == kExact || kMode == kAside)
            return count_below(v);
        else if constexpr (kMode == kBinned)
            return count_binned(v);
        else
            return 0;
    }

    /* kExact and kAside in a whole tile (every pair counted), a
     * thread's kN float4s of scores: each float4 whose four scores all lie
     * below the lowest level (float compares, which NaN fails) joins the run
     * of gap 0, at a compare, a min and a max a score, and bit u of the
     * result says so; the others are left to the mode's own path. Four at a
     * time, each with the run and the top kept as pair() keeps them, the
     * count of the stored tiles took 3-4x the lean count of
     * dev/cuda/roc_gemm.cu (dev/NOTES.md, direct count). In a tile not whole (kWhole
     * false), only the float4s of `counted`, whose four pairs all count, are
     * taken. */
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
         * instructions (ncu: most warps' cycles "no instruction") */
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
        if (run_gap_ != 0) {
            flush_run();
            run_gap_ = 0;
        }
        const int n_below = __popc(below);
        n_pairs_ += 4 * n_below;
        run_count_ += 4 * n_below;
        /* the least of all kN float4s' scores taken, NaN aside: below the
         * lowest level (one float4 lies there), so a pair of gap 0, here or in
         * the mode's path */
        run_min_ = min(run_min_, roc_score_key(lo));
        return below;
    }

    /* kBinned with the bins in shared memory, in a whole tile (every pair
     * counted), a thread's kN float4s of scores: each float4 whose four
     * scores lie in the bins their position suggests (one 8-byte read of a
     * bin's edges a score, which NaN and scores outside the range fail) is
     * counted here, about ten instructions a score, and bit u of the result
     * says so; the others are left to pairs(). Each pair through pairs(),
     * the count took 56 thread instructions a pair (ncu, 1e10 pairs). */
    template <int kN>
    __device__ __forceinline__ uint32_t count_binned(const float4 (&v)[kN])
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

    /* kPartitioned: a thread's kN float4s of a stored tile, the pairs of bit
     * 4u + c of `use` (score c of float4 u) counted as pair() would count
     * them, except that key[4u + c] keeps each key at or above the lowest
     * level for the partition (else ROC_NO_KEY); true where one does. A
     * handful of instructions a score, without a branch, the pairs below the
     * lowest level among them (count_below ahead of it, as the other modes
     * have, cost ~3 instructions a key and spared none). kAll: every pair of
     * a whole tile (`use` all ones), the usual case, without a test of it.
     * NaN, the pairs below and the least kept as counts a key: kept as bits
     * instead, the partition kernel spilled and its partition of 3.5M levels
     * ran 8% slower (dev/NOTES.md, partition/drain). The top is looked at only
     * where the highest key could be it (as count_below does), from the
     * stored tile again (v[u] is stored at stored[u * stride]): v kept for it
     * beside the keys, the partition kernel spilled. */
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
        if (kMode == kStore)
            return;
        if (kCountsLevels && !zero_with_totals())
            flush_run();
        if (kMode == kAside) {
            __syncwarp();
            if (threadIdx.x % 32 == 0)
                p_.aside_used[aside_warp()] = min(shared_[threadIdx.x / 32], p_.aside_segment);
        }
        reduce_totals();
        __syncthreads();
        if (kMode == kExact && p_.shared_gaps) {
            for (int64_t g = threadIdx.x; g <= p_.n_levels; g += blockDim.x)
                if (shared_[g])
                    count_gap(p_.gap, p_.gap_min, g, (unsigned long long)shared_[g],
                              shared_[p_.n_levels + 1 + g]);
        } else if (kMode == kBinned && p_.shared_bins) {
            for (int64_t b = threadIdx.x; b < p_.n_bins + 2; b += blockDim.x)
                if (bin_counts()[b])
                    atomicAdd(&p_.bins[b], (unsigned long long)bin_counts()[b]);
        }
    }

  private:
    static constexpr bool kCountsLevels = kMode == kExact || kMode == kPartitioned ||
                                          kMode == kAside;

    /* At the block's end: whether this thread's run is of gap 0 in the
     * global counters, which reduce_totals adds up over the block first.
     * Each thread's two atomics on those two addresses, ~135,000 a launch of
     * the feature pass's count, came after the loads of its last tile. */
    __device__ __forceinline__ bool zero_with_totals() const
    {
        return kCountsLevels && !(kMode == kExact && p_.shared_gaps) && run_gap_ == 0;
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

    /* kAside's pairs(): the keys at or above the lowest level set aside:
     * those below it join the run of gap 0 (the only run), those above go to
     * the warp's segment of p_.aside_keys (their places reserved by an
     * atomic on the warp's count, shared_[warp]), and count_aside_kernel
     * counts them where launch_pass finds the segments due, and after the
     * pass's last launch. Looked up here, a warp ran the lookup
     * whenever one lane had such a pair, and each broke its lane's run of
     * gap 0 (dev/NOTES.md, aside). A thread alone calls it: the quads left in a
     * tile differ from lane to lane. */
    template <int kN>
    __device__ __forceinline__ void set_aside(const uint32_t (&key)[kN], const float (&s)[kN],
                                              const bool (&use)[kN])
    {
        bool above[kN];
        int n_above = 0;
#pragma unroll
        for (int u = 0; u < kN; u++) {
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

    __device__ __forceinline__ int aside_warp() const
    {
        return int(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32);
    }

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
            const int g = int(lo[u]);
            if (at[u]) { /* rare: a pair scored exactly like a genuine level */
                count_exact(p_.at, p_.gap, p_.gap_min, g, true, 1ull, key[u]);
                continue;
            }
            if (g != run_gap_) {
                flush_run();
                run_gap_ = g;
            }
            run_count_++;
            run_min_ = min(run_min_, key[u]);
        }
    }

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
     * roc_uniform_bin's search over the global edges. ncu, 10,000 x 21,000
     * from features: with that search for every pair, the binned count after
     * the tile product took 3.5x the warp time of storing the scores. */
    __device__ __forceinline__ int shared_bin(float s) const
    {
        const int b = estimated_bin(s);
        if (bin_holds(s, b, bin_edges()[b]))
            return b;
        return int(roc_uniform_bin(s, p_.edges, p_.n_bins, p_.lo32, p_.scale32));
    }

    /* binned with shared bins (shared_bins_bytes): bin b's edges, and the
     * counters of below (0), bin b (b + 1) and above (n_bins + 1) */
    __device__ __forceinline__ float2 *bin_edges() const
    {
        return reinterpret_cast<float2 *>(shared_);
    }
    __device__ __forceinline__ uint32_t *bin_counts() const
    {
        return shared_ + 2 * p_.n_bins;
    }

    __device__ void flush_run()
    {
        if (run_count_ == 0)
            return;
        if (kMode == kExact && p_.shared_gaps)
            count_gap(shared_, shared_ + p_.n_levels + 1, run_gap_, run_count_, run_min_);
        else
            count_gap(p_.gap, p_.gap_min, run_gap_, (unsigned long long)run_count_, run_min_);
        run_count_ = 0;
        run_min_ = 0xffffffffu;
    }

    /* pairs and NaN pairs into the globals, and the runs of gap 0 where
     * zero_with_totals(); the block's top key and its count into the block's
     * slot (merged after the kernel) */
    __device__ void reduce_totals()
    {
        __shared__ unsigned long long warp_pairs[kCounterMaxWarps], warp_nan[kCounterMaxWarps];
        __shared__ uint32_t warp_key[kCounterMaxWarps], warp_zero_min[kCounterMaxWarps];
        __shared__ unsigned long long warp_count[kCounterMaxWarps], warp_zero[kCounterMaxWarps];
        unsigned long long pairs = n_pairs_, nan = n_nan_, count = top_count_;
        uint32_t key = top_key_;
        const bool zero = zero_with_totals();
        unsigned long long zero_count = zero ? run_count_ : 0;
        uint32_t zero_min = zero ? run_min_ : 0xffffffffu;
        for (int offset = 16; offset > 0; offset /= 2) {
            pairs += __shfl_down_sync(0xffffffffu, pairs, offset);
            nan += __shfl_down_sync(0xffffffffu, nan, offset);
            merge_top(key, count, __shfl_down_sync(0xffffffffu, key, offset),
                      __shfl_down_sync(0xffffffffu, count, offset));
            zero_count += __shfl_down_sync(0xffffffffu, zero_count, offset);
            zero_min = min(zero_min, __shfl_down_sync(0xffffffffu, zero_min, offset));
        }
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (lane == 0) {
            warp_pairs[warp] = pairs;
            warp_nan[warp] = nan;
            warp_key[warp] = key;
            warp_count[warp] = count;
            warp_zero[warp] = zero_count;
            warp_zero_min[warp] = zero_min;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < int(blockDim.x / 32); w++) {
                pairs += warp_pairs[w];
                nan += warp_nan[w];
                merge_top(key, count, warp_key[w], warp_count[w]);
                zero_count += warp_zero[w];
                zero_min = min(zero_min, warp_zero_min[w]);
            }
            atomicAdd(&p_.totals[0], pairs);
            atomicAdd(&p_.totals[1], nan);
            if (zero_count)
                count_gap(p_.gap, p_.gap_min, 0, zero_count, zero_min);
            if (kCountsLevels) {
                /* a later launch of one pass (roc_eval_count.cu's launch_pass)
                 * adds to what the block's slot holds from the earlier ones */
                if (p_.tile_begin > p_.tile_first)
                    merge_top(key, count, p_.block_top_key[blockIdx.x],
                              p_.block_top_count[blockIdx.x]);
                p_.block_top_key[blockIdx.x] = key;
                p_.block_top_count[blockIdx.x] = count;
            }
        }
    }

    const PassParams &p_;
    uint32_t *shared_;
    /* a thread sees far fewer than 2^32 pairs in one pass, and levels are < 2^31 */
    unsigned int n_pairs_ = 0, n_nan_ = 0, top_count_ = 0;
    uint32_t top_key_ = 0, lowest_ = 0, highest_ = 0, top_floor_key_ = 0;
    /* count_below's bounds as scores: no pair is below -inf (no levels, or
     * no top key yet). Below top_floor_, a key cannot be the block's top
     * (the top of its slot, from the pass's earlier launches). */
    float lowest_score_ = -INFINITY, top_score_ = -INFINITY, top_floor_ = -INFINITY;
    int run_gap_ = -1;
    uint32_t run_count_ = 0, run_min_ = 0xffffffffu;
};

} // namespace roc_count

#endif /* ROC_COUNT_CUH */
