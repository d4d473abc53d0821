/*
 * roc_count.cuh: how the evaluator's GPU passes count a pair (used by
 * roc_eval_kernel.cu): what a pass needs (PassParams, a kernel argument), and
 * the per-pair counting policy of each mode (Counter). C++ only.
 *
 * Counters are private to a block in shared memory where they fit, and added
 * into 64-bit global ones at the block's end; else the pairs go to the global
 * counters directly. Exact mode finds a pair's genuine level through the
 * index of roc_math.h, and keeps the current run of pairs that fall in one gap
 * (most impostors of a row share a few gaps), flushing it when the gap changes.
 * Where the levels lie among the impostors, each pair needs its own lookup:
 * pairs() then looks its pairs up side by side, in 32-bit arithmetic, so that
 * their reads are in flight together and the instructions a pair costs stay
 * few. Where some pairs lie among them (roc_eval_kernel.cu's choose_count),
 * the feature pass does not look those up at all (kAside): the count of the
 * stored tiles sets those pairs' keys aside in a buffer, and a kernel counts
 * them where the warps' shares of it are due (roc_eval_kernel.cu's
 * launch_pass).
 *
 * Where there are more levels than the shared counters hold and most pairs
 * lie among them (roc_eval_kernel.cu's choose_count), the feature pass
 * counts exactly by partition (kPartitioned) instead: roc_eval_kernel.cu's
 * partition kernel reads the stored tiles, counts the pairs below the lowest
 * level as the other modes do, and stages the other keys (RangeSorter) by
 * range of consecutive levels for each range's segment of a buffer; its
 * drain counts each range's keys in shared memory. Two scattered atomics a
 * pair had made the hard count L2-bound (ncu: 77% L2 throughput), and the
 * sorting steps inside the tile pass were latency-bound at its 8 warps a
 * multiprocessor (dev/NOTES.md). A key whose segment is full is counted
 * directly, the old way, so the counts stay exact however the keys fall.
 *
 * In a whole tile, the pairs below the lowest level (nearly all where few
 * lie among the levels) go by count_below, a compare, a min and a max a
 * score; only the others take their mode's path.
 */
#ifndef ROC_COUNT_CUH
#define ROC_COUNT_CUH

#include <stdint.h>

#include "../roc.h"
#include "../roc_math.h"

namespace roc_count {

enum { kExact = 0, kBinned = 1, kCurve = 2, kStore = 3, kPartitioned = 4, kAside = 5 };

constexpr int kThreads = 256; /* the counting passes' block */

/* Partitioned exact counting: a range holds at most kRangeLevels
 * consecutive levels, or kWideRangeLevels where the levels are many
 * (range_levels_for), whose counters fill a drain block's shared memory; the
 * partition kernel keeps an index of kRangeBuckets buckets from a key to its
 * range in shared memory, and stages the kSortKeys keys of a stored tile at
 * once by range with a block of kPartitionThreads. */
constexpr int kRangeLevels = 8192;
constexpr int kWideRangeLevels = 2 * kRangeLevels;
constexpr int kMaxRanges = 1023;
/* the partition's slot of keys below the lowest level, after every range's:
 * the staging steps then go without a branch a key */
constexpr int kDiscard = kMaxRanges;
constexpr int kHistogram = kMaxRanges + 1;
/* buckets even in the key, or in the score, between the lowest and the
 * highest level. A range ends where a bucket ends wherever it can, so that a
 * key's bucket names its range: where a range starts inside a bucket, the
 * bucket's keys bisect, and most warps had a lane that did (ncu, sixteenth
 * pass). Even in the key, cosine scores crowd ~1/25 of the buckets (scores of
 * tiny magnitude lie between), up to 130,000 of 3.3M levels in one; even in
 * the score, ~6,000. 8,192 buckets (16 KB) keep two partition blocks a
 * multiprocessor (dev/NOTES.md, fifteenth and sixteenth passes). */
constexpr int kRangeBuckets = 8192;
constexpr int kHalfTilePairs = 64 * 128;
/* the partition stages a stored tile's keys at once: each range's keys of
 * them are one run of stores to its segment (dev/NOTES.md) */
constexpr int kSortKeys = 2 * kHalfTilePairs;
/* staging slots for a tile's keys: 10% more than a tile holds, as much as
 * leaves two partition blocks a multiprocessor (keys past their range's run
 * go to the segment one at a time) */
constexpr int kStageSlots = 18048;
constexpr int kStageWords = kStageSlots / 32; /* the bitmap of the runs' starts */
static_assert(kStageSlots % 32 == 0 && kStageSlots < 0x10000, "whole words, 16-bit slots");
constexpr int kPartitionThreads = 512;
/* the largest block that keeps a Counter: the partition kernel's */
constexpr int kCounterMaxWarps = kPartitionThreads / 32;
constexpr int kAmbiguous = 0x8000; /* an index entry whose bucket a range starts in */

/* roc_score_key in three instructions: -0 made +0 by adding +0 (exact, and
 * no flush of subnormals without fast math), then the bits flipped by their
 * sign. NaN comes out as some key; callers test it apart. */
__device__ __forceinline__ uint32_t lean_score_key(float score)
{
    const uint32_t bits = __float_as_uint(__fadd_rn(score, 0.0f));
    return bits ^ (uint32_t(int32_t(bits) >> 31) | 0x80000000u);
}

/* range_axis's score axis: the key's score (roc_key_score without a branch:
 * the sign bit flipped where the key's top bit is set, a score >= 0, every
 * bit where it is clear) times scale, in whole numbers. */
__device__ __forceinline__ uint32_t score_axis(uint32_t key, float scale)
{
    const uint32_t flip = ~uint32_t(int32_t(key) >> 31) | 0x80000000u;
    return uint32_t(__float2int_rz(__fmul_rn(__uint_as_float(key ^ flip), scale)));
}

/* A key's place on the index's axis: the key itself, or (scale > 0) its
 * score times scale, a power of two, in whole numbers (a conversion that
 * saturates). Either rises with the key, so buckets of it are intervals of
 * keys; host_range_axis (roc_eval_kernel.cu) gives the same numbers. */
__device__ __forceinline__ uint32_t range_axis(uint32_t key, float scale)
{
    return scale > 0.0f ? score_axis(key, scale) : key;
}

/* The ranges, and the device buffer their keys wait in until the drain. */
struct RangePartition {
    int n_ranges;
    /* range r holds levels first[r] .. first[r + 1] - 1 (n_ranges + 1 entries) */
    const uint32_t *first;
    /* bucket b of the index holds keys whose range_axis(key, scale) is base +
     * (b << shift) ..; index[b] is the range of its first key, with
     * kAmbiguous where another range starts inside it; index[n_buckets] is
     * the last range. A range that starts where a bucket starts holds its
     * keys below the range's lowest level too. */
    float scale;
    uint32_t base;
    int shift;
    const uint32_t *starts; /* each range's lowest level */
    const uint16_t *index;  /* kRangeBuckets + 1 entries */
    /* range r's segment, offset[r] .. + capacity[r], in one part for each of
     * the partition kernel's n_blocks blocks, capacity[r] / n_blocks keys from
     * offset[r] + b (capacity[r] / n_blocks) for block b, so that a block
     * reserves its space in shared memory */
    uint32_t *keys;
    const uint32_t *offset, *capacity;
    int n_blocks;
    uint32_t *block_used; /* [b * n_ranges + r]: keys block b's part of range r holds */
    uint32_t *reserved;   /* keys asked of each segment since the last drain */
    /* the partition's staging slots for a launch (segment_kernel): range
     * r's run starts at slot stage_layout[r] & 0xffff and holds
     * stage_layout[r] >> 16 slots (at least one); stage_owner[w] has bit i
     * set where a run starts at slot 32 w + i, and the runs that start
     * before slot 32 w, less one (a slot's range is that plus the bits at or
     * below its own) */
    const uint32_t *stage_layout;
    const uint2 *stage_owner;
};

// ----------------------------------------------------------------------------
// what a counting pass needs (by value, as a kernel argument)

struct PassParams {
    int64_t n_gallery, row_begin, row_end;
    int same_set;        /* roc_same_set */
    int64_t row_offset;  /* same_set: the set's row of query row 0 */
    /* exact */
    const uint32_t *levels;
    int64_t n_levels;
    const uint32_t *lut;
    uint32_t lut_base;
    int lut_shift;
    unsigned long long *at, *gap;
    uint32_t *gap_min;
    int shared_gaps;
    /* binned */
    const float *edges;
    int64_t n_bins;
    float lo32, scale32;
    unsigned long long *bins; /* below, n_bins bins, above */
    int shared_bins;
    /* curve: one key per pair of the rows; store: one score per pair */
    uint32_t *keys;
    float *scores;
    /* partitioned exact */
    RangePartition part;
    /* kAside (exact from features with global counters): the keys at or
     * above the lowest level set aside for count_aside_kernel. Warp w of the
     * pass's count_tiles_kernel has aside_segment of them from w *
     * aside_segment, and leaves how many it holds in aside_used[w], from
     * launch to launch until count_aside_kernel counts them; a key past its
     * segment's end is counted directly. */
    uint32_t *aside_keys;
    uint32_t *aside_used;
    uint32_t aside_segment;
    /* feature pass: the tiles of its operands this launch walks, and the
     * first of the launches that share the blocks' top-key slots */
    int64_t tile_begin, tile_end, tile_first;
    /* every mode */
    unsigned long long *totals; /* pairs, NaN pairs */
    uint32_t *block_top_key;
    unsigned long long *block_top_count;
};

/* v[u] for a u not known at compile time, by selects: indexed, the array
 * would go to local memory. */
template <int kN> __device__ __forceinline__ float4 pick(const float4 (&v)[kN], int u)
{
    float4 x = v[0];
#pragma unroll
    for (int k = 1; k < kN; k++)
        if (u == k)
            x = v[k];
    return x;
}

/* Score c of x, for a c not known at compile time too, by selects. */
__device__ __forceinline__ float component(const float4 &x, int c)
{
    return c == 0 ? x.x : c == 1 ? x.y : c == 2 ? x.z : x.w;
}

/* Whether pair (query row i, gallery column j) counts: one set counts j > i
 * once (unordered) or every j != i (ordered), with i the set's row. */
__device__ __forceinline__ bool counted(const PassParams &p, int64_t i, int64_t j)
{
    if (p.same_set == ROC_SAME_SET_UNORDERED)
        return j > p.row_offset + i;
    if (p.same_set == ROC_SAME_SET_ORDERED)
        return j != p.row_offset + i;
    return true;
}

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

/* A key at or above the lowest level (at or below `highest`, the highest, or
 * above it: the top gap) into exact mode's global counters. */
__device__ __forceinline__ void count_directly(const PassParams &p, uint32_t key,
                                               uint32_t highest)
{
    int at = 0;
    const int64_t g = key > highest ? p.n_levels
                                    : roc_find_level(p.levels, p.lut, p.lut_base, p.lut_shift,
                                                     key, &at);
    if (at) {
        atomicAdd(&p.at[g], 1ull);
    } else {
        atomicAdd(&p.gap[g], 1ull);
        atomicMin(&p.gap_min[g], key);
    }
}

/* (key, count) becomes the higher of it and (other_key, other_count), the
 * counts added where the keys are equal; a count of 0 is no key at all. */
__device__ __forceinline__ void merge_top(uint32_t &key, unsigned long long &count,
                                          uint32_t other_key, unsigned long long other_count)
{
    if (other_count == 0)
        return;
    if (count == 0 || other_key > key) {
        key = other_key;
        count = other_count;
    } else if (other_key == key) {
        count += other_count;
    }
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
            atomicAdd(&p_.at[g], 1ull);
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
     * dev/cuda/roc_gemm.cu (dev/NOTES.md). In a tile not whole (kWhole
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
     * ran 8% slower (dev/NOTES.md, twentieth pass). The top is looked at only
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
                if (shared_[g]) {
                    atomicAdd(&p_.gap[g], (unsigned long long)shared_[g]);
                    atomicMin(&p_.gap_min[g], shared_[p_.n_levels + 1 + g]);
                }
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
     * gap 0 (dev/NOTES.md). A thread alone calls it: the quads left in a
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
                atomicAdd(&p_.at[g], 1ull);
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
        if (kMode == kExact && p_.shared_gaps) {
            atomicAdd(&shared_[run_gap_], run_count_);
            atomicMin(&shared_[p_.n_levels + 1 + run_gap_], run_min_);
        } else {
            atomicAdd(&p_.gap[run_gap_], (unsigned long long)run_count_);
            atomicMin(&p_.gap_min[run_gap_], run_min_);
        }
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
            if (zero_count) {
                atomicAdd(&p_.gap[0], zero_count);
                atomicMin(&p_.gap_min[0], zero_min);
            }
            if (kCountsLevels) {
                /* a later launch of one pass (roc_eval_kernel.cu's launch_pass)
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

/* The partition kernel's work (roc_eval_kernel.cu): a stored tile's keys at
 * a time, held in registers, staged by range in shared memory and written to
 * the ranges' segments. For a launch each range has a run of the kStageSlots
 * staging slots, in proportion to the keys it drew since the last drain
 * (segment_kernel's stage layout): a key takes the next slot of its range's
 * run (one shared atomic) or, past the run's end, goes straight to its place
 * in the block's part of the segment. Then each warp writes 32 slots at a
 * time, a lane's slot's range read off a bitmap of the runs' starts. Sorted
 * by a histogram, a scan and a scatter instead, each key was looked up three
 * times and passed four barriers (ncu, dev/NOTES.md, twentieth pass).
 * ROC_NO_KEY (below the lowest level) is skipped. */
class RangeSorter {
  public:
    static constexpr int kKeys = kSortKeys / kPartitionThreads; /* a thread's */
    /* the runs' bitmap; sink, fill, layout, left; the staged keys; the index */
    static constexpr size_t kSharedBytes =
        size_t(kStageWords + kHistogram) * sizeof(uint2) +
        size_t(3 * kHistogram + kStageSlots) * sizeof(uint32_t) +
        size_t(kRangeBuckets + 2) * sizeof(uint16_t);

    __device__ RangeSorter(const PassParams &p, uint32_t *shared) : p_(p), shared_(shared)
    {
        lowest_ = __ldg(p.levels);
        highest_ = __ldg(p.levels + p.n_levels - 1);
    }

    __device__ void begin_block()
    {
        for (int r = threadIdx.x; r < kHistogram; r += blockDim.x) {
            const bool real = r < p_.part.n_ranges;
            const uint32_t lay = real ? p_.part.stage_layout[r] : 0u;
            const uint32_t room = real ? p_.part.capacity[r] / uint32_t(p_.part.n_blocks) : 0u;
            const uint32_t next = real ? p_.part.offset[r] + blockIdx.x * room : 0u;
            layout()[r] = lay;
            fill()[r] = 0;
            sink()[r].y = next - (lay & 0xffffu);
            left()[r] = room;
        }
        for (int w = threadIdx.x; w < kStageWords; w += blockDim.x)
            owner()[w] = p_.part.stage_owner[w];
        for (int b = threadIdx.x; b <= kRangeBuckets; b += blockDim.x)
            range_index()[b] = p_.part.index[b];
        __syncthreads();
    }

    /* A tile's keys (kSortKeys), kKeys a thread; every thread calls it.
     * kScoreAxis: whether the index's buckets are even in the score
     * (p.part.scale > 0), chosen once a kernel so that a lookup does not
     * test it. */
    template <bool kScoreAxis> __device__ void sort(const uint32_t (&key)[kKeys])
    {
        /* kLook lookups at once so that their reads overlap */
        constexpr int kLook = 4;
#pragma unroll
        for (int u0 = 0; u0 < kKeys; u0 += kLook) {
            int slot[kLook];
            uint32_t pos[kLook], lay[kLook], past = 0;
            histogram_slots<kScoreAxis>(key + u0, slot);
#pragma unroll
            for (int u = 0; u < kLook; u++)
                pos[u] = atomicAdd(&fill()[slot[u]], 1u);
#pragma unroll
            for (int u = 0; u < kLook; u++)
                lay[u] = layout()[slot[u]];
#pragma unroll
            for (int u = 0; u < kLook; u++) {
                if (pos[u] < lay[u] >> 16)
                    staged()[(lay[u] & 0xffffu) + pos[u]] = key[u0 + u];
                else /* past its run (kDiscard's is empty) */
                    past |= uint32_t(slot[u] != kDiscard) << u;
            }
            if (past) /* one branch for the group: a branch a key cost ~3 instructions */
#pragma unroll
                for (int u = 0; u < kLook; u++)
                    if (past >> u & 1)
                        place(slot[u], pos[u] + (lay[u] & 0xffffu), key[u0 + u]);
        }
        __syncthreads();
        /* the slot where the keys of each range's run that its part has room
         * for end; whether a run holds keys past it */
        bool full = false;
        for (int r = threadIdx.x; r < p_.part.n_ranges; r += blockDim.x) {
            const uint32_t lay = layout()[r], in_run = min(fill()[r], lay >> 16);
            sink()[r].x = (lay & 0xffffu) + min(in_run, left()[r]);
            full = full || in_run > left()[r];
        }
        if (__syncthreads_or(full))
            write_staged<true>();
        else
            write_staged<false>();
        __syncthreads(); /* every slot written, every sink read */
        for (int r = threadIdx.x; r < kHistogram; r += blockDim.x) {
            const uint32_t n = fill()[r];
            sink()[r].y += n;
            left()[r] = left()[r] > n ? left()[r] - n : 0u;
            fill()[r] = 0;
        }
        __syncthreads(); /* zero before the next keys' atomics */
    }

    /* What the block's parts of the segments hold, and what it asked for. */
    __device__ void end_block()
    {
        __syncthreads();
        for (int r = threadIdx.x; r < p_.part.n_ranges; r += blockDim.x) {
            const uint32_t room = p_.part.capacity[r] / uint32_t(p_.part.n_blocks);
            const uint32_t first = p_.part.offset[r] + blockIdx.x * room;
            const uint32_t n = sink()[r].y + (layout()[r] & 0xffffu) - first;
            p_.part.block_used[size_t(blockIdx.x) * p_.part.n_ranges + r] = min(n, room);
            if (n)
                atomicAdd(&p_.part.reserved[r], n);
        }
    }

  private:
    /* owner[w]: bit i set where a range's run starts at slot 32 w + i, and
     * the runs that start before slot 32 w, less one */
    __device__ uint2 *owner() const { return reinterpret_cast<uint2 *>(shared_); }
    /* a range's: x, the slot where the keys of its run that its part has
     * room for end; y, where staged slot t goes in the keys' buffer: y + t */
    __device__ uint2 *sink() const { return owner() + kStageWords; }
    __device__ uint32_t *fill() const { return reinterpret_cast<uint32_t *>(sink() + kHistogram); }
    /* a range's run: its first slot, and in the top 16 bits its slots */
    __device__ uint32_t *layout() const { return fill() + kHistogram; }
    /* the keys the block's part of the range's segment still has room for */
    __device__ uint32_t *left() const { return fill() + 2 * kHistogram; }
    __device__ uint32_t *staged() const { return fill() + 3 * kHistogram; }
    __device__ uint16_t *range_index() const
    {
        return reinterpret_cast<uint16_t *>(staged() + kStageSlots);
    }

    /* Key of range r that would be staged at `slot` (past its run) to its
     * place in the block's part, or counted directly where the part is full. */
    __device__ void place(int r, uint32_t slot, uint32_t key) const
    {
        if (slot - (layout()[r] & 0xffffu) < left()[r])
            p_.part.keys[sink()[r].y + slot] = key;
        else
            count_directly(p_, key, highest_);
    }

    /* The staged keys to their segments, a warp 32 slots at a time (a bitmap
     * word's), kWrite words a warp at once, then the words left one at a
     * time. kFull: some run holds keys past its part's room, to be counted
     * directly (a test of every empty slot for them had cost a tenth of the
     * partition's instructions at 3.5M levels). */
    template <bool kFull> __device__ void write_staged() const
    {
        constexpr int kWrite = 4, kWarps = kPartitionThreads / 32;
        constexpr int kWhole = kStageWords / (kWrite * kWarps) * (kWrite * kWarps);
        const int warp = threadIdx.x / 32;
        for (int w0 = warp; w0 < kWhole; w0 += kWrite * kWarps)
            write_words<kFull, kWrite, kWarps>(w0);
        for (int w = kWhole + warp; w < kStageWords; w += kWarps)
            write_words<kFull, 1, kWarps>(w);
    }

    /* Words w0, w0 + kStep, .. (kN of them) of the staged slots; a lane's
     * slot's range off the bitmap. */
    template <bool kFull, int kN, int kStep>
    __device__ __forceinline__ void write_words(int w0) const
    {
        const int lane = threadIdx.x % 32;
        const uint32_t at_or_below = (2u << lane) - 1u; /* lanes 0 .. lane */
        uint32_t t[kN], key[kN];
        uint2 to[kN];
        int r[kN];
#pragma unroll
        for (int u = 0; u < kN; u++) {
            const uint2 word = owner()[w0 + u * kStep];
            t[u] = uint32_t(w0 + u * kStep) * 32u + uint32_t(lane);
            r[u] = int(word.y + __popc(word.x & at_or_below));
        }
#pragma unroll
        for (int u = 0; u < kN; u++) {
            to[u] = sink()[r[u]];
            key[u] = staged()[t[u]];
        }
#pragma unroll
        for (int u = 0; u < kN; u++) {
            if (t[u] < to[u].x) {
                p_.part.keys[to[u].y + t[u]] = key[u];
            } else if (kFull) { /* a key past a full part, or an empty slot */
                const uint32_t lay = layout()[r[u]];
                if (t[u] < (lay & 0xffffu) + min(fill()[r[u]], lay >> 16))
                    count_directly(p_, key[u], highest_);
            }
        }
    }

    /* The histogram slots of keys key[0 .. kN): each one's range, or
     * kDiscard below the lowest level (ROC_NO_KEY among them). Each key is
     * clamped to the levels' span and looked up without a branch; the few
     * whose bucket a range starts inside (kAmbiguous) then bisect, behind one
     * test for all kN. A lookup had taken ~29 instructions, most of them
     * branches around the rare cases (ncu, dev/NOTES.md, nineteenth pass). */
    template <bool kScoreAxis, int kN>
    __device__ __forceinline__ void histogram_slots(const uint32_t *key, int (&slot)[kN]) const
    {
        int ambiguous = 0;
#pragma unroll
        for (int u = 0; u < kN; u++) {
            const int entry = range_index()[bucket_of<kScoreAxis>(key[u])];
            slot[u] = key[u] >= lowest_ ? entry : kDiscard;
            ambiguous |= slot[u];
        }
        if (ambiguous & kAmbiguous) {
#pragma unroll
            for (int u = 0; u < kN; u++)
                if (slot[u] & kAmbiguous)
                    slot[u] = settle(min(key[u], highest_), slot[u]);
        }
    }

    /* The index's bucket of a key clamped to the levels' span (a key above
     * the highest level is in the last range, as the highest level is). */
    template <bool kScoreAxis> __device__ __forceinline__ uint32_t bucket_of(uint32_t key) const
    {
        const uint32_t k = min(max(key, lowest_), highest_);
        const uint32_t axis = kScoreAxis ? score_axis(k, p_.part.scale) : k;
        return (axis - p_.part.base) >> p_.part.shift;
    }

    /* The range of a key between the lowest and the highest level whose
     * bucket's index entry, `entry`, is kAmbiguous: a range starts inside the
     * bucket, so the key's is the last range between the entry's and the
     * next bucket's whose lowest level is at or below the key (the next
     * bucket's, where it starts with that bucket, has its lowest level there:
     * above the key). Rare: the ranges' lowest levels are read from global
     * memory (L1), not kept in shared. */
    __device__ int settle(uint32_t key, int entry) const
    {
        const uint32_t bucket = (range_axis(key, p_.part.scale) - p_.part.base) >> p_.part.shift;
        int lo = entry & ~kAmbiguous, hi = range_index()[bucket + 1] & ~kAmbiguous;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (__ldg(p_.part.starts + mid) <= key)
                lo = mid;
            else
                hi = mid - 1;
        }
        return lo;
    }

    const PassParams &p_;
    uint32_t *shared_;
    uint32_t lowest_ = 0, highest_ = 0;
};

} // namespace roc_count

#endif /* ROC_COUNT_CUH */
