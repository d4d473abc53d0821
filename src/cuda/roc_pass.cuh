/*
 * roc_pass.cuh: what every counting pass of the evaluator's GPU backend shares,
 * whatever it counts: the pass's parameters (PassParams, a kernel argument),
 * which pairs of a row count (counted), the order-preserving key of a score,
 * the exact update of a key into the global counters (count_directly) and the
 * merge of top keys, and the names of the count policies. The count policies
 * (roc_count.cuh) and the partitioned
 * count (roc_partition.cuh) build on it. C++ only.
 *
 * Includes go one way: each .cu file of the evaluator includes
 * roc_eval_plan.cuh -> roc_eval_state.cuh -> roc_tiles.cuh (-> roc_gemm.cuh)
 * and roc_scores.cuh -> this header -> roc_math.h; the files that count add
 * roc_count.cuh or roc_partition.cuh, which include only this header (and
 * roc_rank_count.cuh, which adds the one policy it holds to roc_count.cuh's).
 */
#ifndef ROC_PASS_CUH
#define ROC_PASS_CUH

#include <stdint.h>

#include "../roc.h"
#include "../roc_math.h"

namespace roc_count {

/* The count policies (roc_count.cuh: one functor each). The plan names the
 * policy a pass runs (roc_eval_plan.cu's policy_of and pass_policy), and
 * run_pass (roc_eval_count.cu) maps it to its functor. */
enum class Policy { kExact, kBinned, kCurve, kAside, kPartitioned, kRank };

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
 * bucket's keys bisect, and most warps had a lane that did. Even in the
 * key, cosine scores crowd ~1/25 of the buckets (scores of tiny magnitude lie
 * between), up to 130,000 of 3.3M levels in one; even in the score, ~6,000.
 * 8,192 buckets (16 KB) keep two partition blocks a multiprocessor
 * (dev/NOTES.md, partition/drain, "Range sizes and the range index"). */
constexpr int kRangeBuckets = 8192;
constexpr int kTileColumns = 128; /* a stored tile's row (roc_tiles.cuh checks it) */
constexpr int kHalfTileRows = 64;
constexpr int kHalfTilePairs = kHalfTileRows * kTileColumns;
/* the partition stages a stored tile's keys at once: each range's keys of
 * them are one run of stores to its segment (dev/NOTES.md, partition/drain) */
constexpr int kSortKeys = 2 * kHalfTilePairs;
/* staging slots for a tile's keys: 10% more than a tile holds, as much as
 * leaves two partition blocks a multiprocessor (keys past their range's run
 * go to the segment one at a time) */
constexpr int kStageSlots = 18048;
constexpr int kStageWords = kStageSlots / 32; /* the bitmap of the runs' starts */
static_assert(kStageSlots % 32 == 0 && kStageSlots < 0x10000, "whole words, 16-bit slots");
constexpr int kPartitionThreads = 512;
/* the largest block that runs a count policy: the partition kernel's */
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
 * keys; host_range_axis (roc_partition.cu) gives the same numbers. */
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

/* The rank count's protocol and per-query state (RankCount, roc_rank_count.cuh;
 * src/roc_rank.h has the semantics): the labels (and cameras) as int64, and
 * each query's mates that create found, with their counters. */
struct RankParams {
    const int64_t *labels_q, *labels_g;
    const int64_t *cams_q, *cams_g; /* null: no cameras */
    int same_set;                   /* query i is gallery entry row_offset + i: excluded */
    int has_junk;                   /* gallery entries labelled `junk` are excluded */
    int64_t junk;
    const int64_t *first;           /* Q + 1: query i's mates are [first[i], first[i + 1]) */
    const uint32_t *mate_key;       /* P: their keys, ascending within a query */
    const uint32_t *lowest;         /* Q: the query's lowest mate key (0xffffffff: none) */
    /* gap[first[i] + i + u]: non-mates strictly between mate keys u - 1 and u
     * (above the lowest: u >= 1); tied[first[i] + u]: on mate key u, the
     * first of equal ones */
    unsigned long long *gap, *tied;
    /* Q: the best non-mate as key << 32 | (0xffffffff - gallery index), so
     * that the larger is the higher key, then the lower index; 0: none */
    unsigned long long *best;
    unsigned long long *nan_nonmates; /* Q */
};

/* Whether the protocol excludes pair (query i, gallery j), of labels and
 * cameras (label_i, cam_i) and (label, cam): i's own row of one set, a junk
 * entry, or (with cameras) an entry of i's label and camera. */
__device__ __forceinline__ bool rank_excluded(const RankParams &r, int64_t row_offset, int64_t i,
                                              int64_t j, int64_t label_i, int64_t cam_i,
                                              int64_t label, int64_t cam)
{
    return (r.same_set && j == row_offset + i) || (r.has_junk && label == r.junk) ||
           (r.cams_q && label == label_i && cam == cam_i);
}

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
    /* curve: one key per pair of the rows; store: one score per pair, row
     * i of the queries at row i - scores_row0 of `scores` */
    uint32_t *keys;
    float *scores;
    int64_t scores_row0;
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
    /* rank */
    RankParams rank;
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

/* The one exact update: `count` pairs in gap g (below level g, above level
 * g - 1), the least of their keys `least`, into a gap's count and least key:
 * the global counters (64-bit counts) or a block's in shared memory (32-bit). */
template <typename Count, typename Index>
__device__ __forceinline__ void count_gap(Count *gap, uint32_t *gap_min, Index g, Count count,
                                          uint32_t least)
{
    atomicAdd(&gap[g], count);
    atomicMin(&gap_min[g], least);
}

/* ... or `count` pairs on level g (on_level), into the level's count. */
template <typename Index>
__device__ __forceinline__ void count_exact(unsigned long long *at, unsigned long long *gap,
                                            uint32_t *gap_min, Index g, bool on_level,
                                            unsigned long long count, uint32_t least)
{
    if (on_level)
        atomicAdd(&at[g], count);
    else
        count_gap(gap, gap_min, g, count, least);
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
    count_exact(p.at, p.gap, p.gap_min, g, at, 1ull, key);
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

} // namespace roc_count

#endif /* ROC_PASS_CUH */
