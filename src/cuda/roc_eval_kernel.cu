/*
 * roc_eval_kernel.cu: the evaluator's GPU backend (the steps are in
 * roc_eval.c, the calls in roc_internal.h).
 *
 * Genuine pairs: the gallery is sorted by label (CUB, stable), so the genuine
 * partners of a query are one contiguous run, found by bisection. One thread per
 * genuine pair computes its score (read from the score matrix, or the dot
 * product with the same fmaf chain as the tiles below), then CUB sorts and
 * run-length encodes the keys into the distinct genuine levels, which go to
 * the host (the shim sets them back; their index is made here, from the index
 * shape the shim computes).
 *
 * The counting pass reads the score matrix (warps over row segments) or
 * computes it tile by tile from the features (roc_gemm.cuh: fp32 FMA, k in
 * order; a chunk of tiles at a time stored, then counted, never the whole
 * matrix) and hands every pair to a Counter (roc_count.cuh):
 * exact (the level or gap between genuine keys), binned (numpy's uniform
 * bins) or curve (the pair's key into a buffer that CUB sorts and merges into
 * the distinct keys so far).
 *
 * Device memory comes from the evaluator's arena (ext_cuda.cuh): every buffer
 * is released by its owner's scope, so an early error return leaks nothing.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <cub/cub.cuh>

extern "C" {
#include "../ext_check.h"
}
#include "../roc_math.h"
#include "ext_cuda.cuh"
#include "roc_count.cuh"
#include "roc_eval_kernel.h"
#include "roc_gemm.cuh"

using namespace roc_count;

namespace {

constexpr int64_t kSegment = 2048;        /* columns of one warp's work item */
constexpr int kGroupRows = 8;             /* feature pass: row tiles that share column tiles */
constexpr int64_t kTilePairs = int64_t(roc_gemm::kBM) * roc_gemm::kBN;
/* the feature pass's tile product (roc_gemm.cuh; dev/cuda/roc_gemm.cu chose it:
 * version 11, alone in its kernel since the count has its own) */
using FeatureTile = roc_gemm::PipelinedTile;
/* Private counters a block may keep in shared memory (on a device with less
 * shared memory, what it has; see pass_params). The feature pass's stay at
 * what its count held beside the tiles when it was one kernel, 7,167 levels:
 * where more levels choose their count (choose_count) was measured there. */
constexpr size_t kSharedCountersScore = 96 * 1024;
constexpr size_t kSharedCountersFeature = 56 * 1024;
constexpr size_t kStaticSharedMargin = 1024; /* the kernels' own static shared memory */
/* Flat scores with more genuine levels than this are counted sorted
 * (count_sorted): their counters no longer stay in L2, and two scattered
 * atomics a pair cost about a nanosecond each (4e9 pairs, 2.4e7 levels: 4.2 s). */
constexpr int64_t kSortedLevels = int64_t(1) << 20;
constexpr int64_t kSortedChunk = int64_t(1) << 26; /* pairs sorted at once: ~4 GiB of buffers */

template <typename T> using Buffer = ExtDeviceBuffer<T>;

/* A CUB device-wide call: size the scratch space, allocate it, run. */
template <typename Call> cudaError_t cub_run(ExtDeviceArena &arena, Call call)
{
    size_t bytes = 0;
    EXT_CUDA_TRY(call(nullptr, bytes));
    Buffer<char> scratch(arena);
    EXT_CUDA_TRY(scratch.allocate(bytes));
    return call(scratch.get(), bytes);
}

// ----------------------------------------------------------------------------
// counting passes

/* Warps take work items (row, segment of kSegment columns) of the score
 * matrix; lanes read 16-byte vectors of consecutive columns, after peeling
 * the columns before the segment's first 16-byte boundary. */
template <int kMode>
__global__ void __launch_bounds__(kThreads)
    score_pass_kernel(const float *__restrict__ score, const PassParams p)
{
    extern __shared__ uint32_t shared[];
    Counter<kMode> counter(p, shared);
    counter.begin_block();
    const int lane = threadIdx.x % 32;
    const bool ordered = p.same_set == ROC_SAME_SET_ORDERED;
    const int64_t n_segments = (p.n_gallery + kSegment - 1) / kSegment;
    const int64_t n_items = (p.row_end - p.row_begin) * n_segments;
    const int64_t n_warps = int64_t(gridDim.x) * blockDim.x / 32;
    for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < n_items;
         item += n_warps) {
        const int64_t i = p.row_begin + item / n_segments;
        const int64_t diagonal = p.row_offset + i; /* one set: the pair with itself */
        int64_t c0 = (item % n_segments) * kSegment;
        const int64_t c1 = c0 + kSegment < p.n_gallery ? c0 + kSegment : p.n_gallery;
        if (p.same_set == ROC_SAME_SET_UNORDERED && c0 < diagonal + 1)
            c0 = diagonal + 1;
        if (c0 >= c1)
            continue;
        const float *row = score + i * p.n_gallery;
        const int64_t misaligned = (reinterpret_cast<uintptr_t>(row + c0) / 4) % 4;
        const int64_t body = c0 + (4 - misaligned) % 4 < c1 ? c0 + (4 - misaligned) % 4 : c1;
        const int64_t tail = body + (c1 - body) / 4 * 4;
        if (c0 + lane < body && !(ordered && c0 + lane == diagonal))
            counter.pair(i, c0 + lane, __ldg(row + c0 + lane));
        for (int64_t j = body + 4 * lane; j < tail; j += 4 * 32) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(row + j));
            const float s[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (!(ordered && j + u == diagonal))
                    counter.pair(i, j + u, s[u]);
        }
        if (tail + lane < c1 && !(ordered && tail + lane == diagonal))
            counter.pair(i, tail + lane, __ldg(row + tail + lane));
    }
    counter.end_block();
}

/* The operands of one feature pass: a block of query rows and a chunk of
 * gallery columns prepared k-major and padded (roc_gemm.cuh): column m - m_base
 * of A is query row m, column n - n_begin of B gallery entry n, for the
 * columns [n_begin, n_end) this pass counts. m_base is a multiple of kBM, the
 * first row of the tile that holds the pass's first row (over_feature_blocks):
 * the tiles start there. */
struct Operands {
    const float *a, *b;
    int64_t lda, ldb, k_pad;
    int64_t m_base, n_begin, n_end;
};

/* The feature pass's tiles over rows [p.row_begin, p.row_end) of `op`: tiles_m
 * rows of tiles (from the one holding row_begin, op.m_base) by tiles_n columns. */
__host__ __device__ inline int64_t feature_tiles(const Operands &op, const PassParams &p,
                                                 int64_t *tiles_m, int64_t *tiles_n)
{
    *tiles_m = (p.row_end - op.m_base + roc_gemm::kBM - 1) / roc_gemm::kBM;
    *tiles_n = (op.n_end - op.n_begin + roc_gemm::kBN - 1) / roc_gemm::kBN;
    return *tiles_m * *tiles_n;
}

/* Tile t of a feature pass over `op` (tiles_m x tiles_n tiles, in groups of
 * kGroupRows row tiles, column by column, so the blocks running together
 * share their gallery tiles in L2): its first row m0 and column n0, the
 * tiles' rows from first_row (op.m_base, see for_each_tile). False where one
 * set's unordered pairs skip it: every column at or left of every row, below
 * the diagonal. */
__device__ __forceinline__ bool feature_tile(const Operands &op, const PassParams &p,
                                             int64_t first_row, int64_t t, int64_t tiles_m,
                                             int64_t tiles_n, int64_t &m0, int64_t &n0)
{
    const int64_t group = t / (kGroupRows * tiles_n);
    const int64_t rows_in_group = min(int64_t(kGroupRows), tiles_m - group * kGroupRows);
    const int64_t in_group = t - group * kGroupRows * tiles_n;
    m0 = first_row + (group * kGroupRows + in_group % rows_in_group) * roc_gemm::kBM;
    n0 = op.n_begin + (in_group / rows_in_group) * roc_gemm::kBN;
    return !(p.same_set == ROC_SAME_SET_UNORDERED && n0 + roc_gemm::kBN - 1 <= p.row_offset + m0);
}

/* body(t, m0, n0) for this block's tiles of [p.tile_begin, p.tile_end)
 * that feature_tile does not skip: tile_kernel and count_tiles_kernel walk
 * the same ones. kFromBase: the tiles' first row as op.m_base, else as the
 * same row from p.row_begin. Only ptxas tells them apart: from p.row_begin,
 * the loop-invariant held a register through tile_kernel's product, and
 * ptxas chose 213 registers and twice the FMAs with two operands in one bank
 * (tile_kernel +11%); from op.m_base, the partition kernel spilled 12 bytes
 * (+1.6%). dev/NOTES.md, twenty-fourth pass. */
template <bool kFromBase = false, typename Body>
__device__ __forceinline__ void for_each_tile(const Operands &op, const PassParams &p, Body body)
{
    int64_t tiles_m, tiles_n;
    feature_tiles(op, p, &tiles_m, &tiles_n);
    const int64_t first_row = kFromBase ? op.m_base : p.row_begin / roc_gemm::kBM * roc_gemm::kBM;
    for (int64_t t = p.tile_begin + blockIdx.x; t < p.tile_end; t += gridDim.x) {
        int64_t m0, n0;
        if (feature_tile(op, p, first_row, t, tiles_m, tiles_n, m0, n0))
            body(t, m0, n0);
    }
}

/* Whether every pair of the tile at (m0, n0) is one of the pass's: inside
 * its rows and columns, and off one set's diagonal. */
__device__ __forceinline__ bool whole_tile(const Operands &op, const PassParams &p, int64_t m0,
                                           int64_t n0)
{
    const int64_t d0 = p.row_offset + m0; /* the set's rows of this tile: d0 .. */
    const bool off_diagonal = n0 >= d0 + roc_gemm::kBM ||
                              (p.same_set == ROC_SAME_SET_ORDERED && n0 + roc_gemm::kBN <= d0);
    return m0 >= p.row_begin && m0 + roc_gemm::kBM <= p.row_end &&
           n0 + roc_gemm::kBN <= op.n_end && (!p.same_set || off_diagonal);
}

/* Pairs (m0 + row, n0 + col + c) of a stored tile, c < 4, four columns of a
 * row: use[c] where the pair is one of the pass's and `left` (not counted
 * yet), whole where the tile's pairs all are. */
__device__ __forceinline__ void quad_pairs(const Operands &op, const PassParams &p, int64_t m0,
                                           int64_t n0, int row, int col, bool whole, bool left,
                                           int64_t (&rows)[4], int64_t (&cols)[4],
                                           bool (&use)[4])
{
#pragma unroll
    for (int c = 0; c < 4; c++) {
        rows[c] = m0 + row;
        cols[c] = n0 + col + c;
        use[c] = left && (whole || (rows[c] >= p.row_begin && rows[c] < p.row_end &&
                                    cols[c] < op.n_end && counted(p, rows[c], cols[c])));
    }
}

/*
 * The feature pass, in two kernels a chunk of tiles [p.tile_begin,
 * p.tile_end): tile_kernel computes the scores (FeatureTile::product) and
 * stores each tile whole, row-major, at chunk + (t - p.tile_begin)
 * kTilePairs; count_tiles_kernel counts them. In one kernel, the product and
 * the count were scheduled together (240 registers, 8 warps a
 * multiprocessor) and issued in ~71% of the slots, against ~90% for the
 * product alone; apart, the product runs within 5% of the GEMM alone and
 * the count after it (dev/NOTES.md, twelfth pass).
 */
__global__ void __launch_bounds__(FeatureTile::kThreads, 2)
    tile_kernel(const Operands op, const PassParams p, float *chunk)
{
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    FeatureTile::Shared &tiles = *reinterpret_cast<FeatureTile::Shared *>(shared_bytes);
    for_each_tile<true>(op, p, [&](int64_t t, int64_t m0, int64_t n0) {
        float acc[8][FeatureTile::kFragN];
        FeatureTile::product(op.a, op.lda, op.b, op.ldb, m0 - op.m_base, n0 - op.n_begin,
                             op.k_pad, tiles, acc);
        float *out = chunk + (t - p.tile_begin) * kTilePairs;
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < FeatureTile::kFragN; j += 4)
                /* through the intrinsic: a plain float4 assignment here came out as
                 * four 4-byte stores (ncu: 12% slower, LSU queue full) */
                __stcg(reinterpret_cast<float4 *>(
                           &out[FeatureTile::row(i) * roc_gemm::kBN + FeatureTile::col(j)]),
                       make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
    });
}

/* The chunk's tiles counted (see tile_kernel), a half tile at a time: a
 * thread's kHalfLoads 16-byte loads of it in flight together, then, in a
 * whole tile, Counter::count_whole over them all, then the quads it left
 * (all of them elsewhere), four pairs of a row each. Persistent blocks. The
 * partition kernel below counts kPartitioned's. */
template <int kMode>
__global__ void __launch_bounds__(kThreads)
    count_tiles_kernel(const Operands op, const PassParams p, const float *__restrict__ chunk)
{
    constexpr int kHalfLoads = kHalfTilePairs / 4 / kThreads;
    static_assert(kHalfLoads * 4 * kThreads == kHalfTilePairs, "whole half tiles");
    extern __shared__ uint32_t counters[];
    Counter<kMode> counter(p, counters);
    counter.begin_block();
    for_each_tile(op, p, [&](int64_t t, int64_t m0, int64_t n0) {
        const bool whole = whole_tile(op, p, m0, n0);
        const float4 *tile = reinterpret_cast<const float4 *>(chunk + (t - p.tile_begin) *
                                                                          kTilePairs);
        for (int half = 0; half < 2; half++) {
            float4 v[kHalfLoads];
#pragma unroll
            for (int u = 0; u < kHalfLoads; u++)
                v[u] = __ldcs(tile + half * (kHalfTilePairs / 4) + threadIdx.x + u * kThreads);
            const uint32_t done = whole ? counter.count_whole(v) : 0u;
            /* the quads left, a loop not unrolled: this kernel is bound by
             * fetching its instructions, and eight copies of the modes' paths
             * made kAside's count 2x slower and binned's 1.3x (dev/NOTES.md,
             * thirteenth and fourteenth passes) */
#pragma unroll 1
            for (uint32_t left = ~done & ((1u << kHalfLoads) - 1); left; left &= left - 1) {
                const int u = __ffs(left) - 1;
                /* float4 f of the half tile: row f / 32, columns 4 (f % 32) .. + 3 */
                const int f = int(threadIdx.x) + u * kThreads;
                const float4 x = pick(v, u);
                const float s[4] = {x.x, x.y, x.z, x.w};
                int64_t row[4], col[4];
                bool use[4];
                quad_pairs(op, p, m0, n0, half * 64 + f / 32, (f % 32) * 4, whole, true, row,
                           col, use);
                counter.pairs(row, col, s, use);
            }
        }
    });
    counter.end_block();
}

/*
 * Partitioned exact counting (roc_count.cuh): the partition reads the chunk's
 * stored tiles, persistent blocks a tile at a time (kLoads 16-byte loads a
 * thread in flight together, streamed: read once), counts the pairs below
 * the lowest level with each key's conversion (keys_to_partition), and
 * stages the other keys by range for the ranges' segments (RangeSorter).
 * Before, the count wrote each half tile
 * with a key above the lowest level to a buffer of its own, which this
 * kernel then read: a pass over every such pair more. kScoreAxis: the range
 * index's buckets are even in the score (p.part.scale > 0), else in the key.
 */
template <bool kScoreAxis>
__global__ void __launch_bounds__(kPartitionThreads, 2)
    partition_kernel(const Operands op, const PassParams p, const float *__restrict__ chunk)
{
    constexpr int kLoads = RangeSorter::kKeys / 4;
    static_assert(kLoads * 4 * kPartitionThreads == kTilePairs, "whole tiles");
    extern __shared__ uint32_t sorter_shared[];
    RangeSorter sorter(p, sorter_shared);
    Counter<kPartitioned> counter(p, nullptr);
    sorter.begin_block();
    for_each_tile(op, p, [&](int64_t t, int64_t m0, int64_t n0) {
        const bool whole = whole_tile(op, p, m0, n0);
        const float4 *tile = reinterpret_cast<const float4 *>(chunk + (t - p.tile_begin) *
                                                                          kTilePairs);
        float4 v[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; u++)
            v[u] = __ldcs(tile + threadIdx.x + u * kPartitionThreads);
        /* the pairs to count: bit 4u + c for score c of float4 u */
        uint32_t use = 0xffffffffu;
        if (!whole) { /* a tile at an edge or on one set's diagonal: rare */
            use = 0;
#pragma unroll 1
            for (int u = 0; u < kLoads; u++) {
                /* float4 f of the tile: row f / 32, columns 4 (f % 32) .. + 3 */
                const int f = int(threadIdx.x) + u * kPartitionThreads;
                int64_t row[4], col[4];
                bool counts[4];
                quad_pairs(op, p, m0, n0, f / 32, (f % 32) * 4, false, true, row, col,
                           counts);
#pragma unroll
                for (int c = 0; c < 4; c++)
                    use |= uint32_t(counts[c]) << (4 * u + c);
            }
        }
        uint32_t key[RangeSorter::kKeys];
        const bool any =
            whole ? counter.template keys_to_partition<true>(v, tile + threadIdx.x,
                                                             kPartitionThreads, use, key)
                  : counter.template keys_to_partition<false>(v, tile + threadIdx.x,
                                                              kPartitionThreads, use, key);
        /* a tile below the lowest level, as most are where few pairs lie
         * among the levels, is counted already */
        if (__syncthreads_or(any))
            sorter.sort<kScoreAxis>(key);
    });
    sorter.end_block();
    counter.end_block();
}

/* The partition kernel for a range index's scale (RangePartition's). */
using PartitionKernel = void (*)(const Operands, const PassParams, const float *__restrict__);
PartitionKernel partition_kernel_for(float scale)
{
    return scale > 0.0f ? partition_kernel<true> : partition_kernel<false>;
}

/*
 * Then the drain counts the keys the partition left in each range's
 * segment. A block takes the parts of one range's segment that a slice of the
 * partition's blocks filled, and holds the range's levels, a count and a
 * lowest key for each of its gaps (the one below its lowest level too: a
 * range that starts where a bucket of the partition's index starts holds the
 * bucket's keys below it), and an index of up to 2^14 buckets over its levels
 * in shared memory, each entry both ends of its bucket's levels; a key's gap
 * is then one read of the index and a step of bisection at most where its
 * bucket holds a level, and its count a shared atomic. The block adds its
 * counters into the global ones at its end. One block of 1,024 threads a
 * multiprocessor, not two of 512 (the same threads and registers): the
 * range's levels and counters once, which leaves room for an index 8 times
 * as fine (ncu, twentieth pass: the drain was bound by its shared accesses,
 * 7.3 a key, two of them the index's and ~3.3 the bisection's).
 */
constexpr int kDrainThreads = 1024;
/* a drain block's parts, one a thread in the scan of their sizes
 * (drain_ranges' slices see to it); no more, so that a wide range's drain
 * has room for an index of 2^13 buckets */
constexpr int kMaxDrainParts = 512;
constexpr int kDrainBucketBitsMax = 14;
constexpr int kDrainBucketBitsMin = 12;
constexpr int kDrainIndexStride = 1 << kDrainBucketBitsMax; /* a range's index entries */

/* The drain's shared memory for ranges of at most range_levels levels: count
 * and lowest hold a range's gaps, then, from drain_spare, a slot a lane for
 * the keys its gaps do not count (on a level, or past the warp's share: a
 * slot each, so that their atomics do not queue on one address). */
__host__ __device__ constexpr int drain_spare(int range_levels) { return range_levels + 1; }
__host__ __device__ constexpr int drain_counters(int range_levels)
{
    return drain_spare(range_levels) + 32;
}

/* level[range_levels + 1] (after the range's levels, a key above any:
 * bisection steps then read no further), count and lowest[drain_counters],
 * the index of 2^bucket_bits entries */
constexpr size_t drain_shared_bytes(int range_levels, int bucket_bits)
{
    return (range_levels + 1 + 2 * size_t(drain_counters(range_levels))) * sizeof(uint32_t) +
           (size_t(1) << bucket_bits) * sizeof(uint32_t);
}

/* The drain's index over one range's levels lo .. hi: offset o = key - lo
 * in bucket of(o) = o * scale / 2^32, the most buckets up to 2^bucket_bits
 * (any order-preserving map would do: a level in an earlier bucket is below
 * the key, in a later one above). Entry b is the first level in bucket b or
 * after (low 16 bits) and the first after bucket b (high 16 bits). */
struct DrainBuckets {
    uint32_t scale;
    int n_buckets;
    __device__ DrainBuckets(uint32_t lo, uint32_t hi, int bucket_bits)
    {
        const uint64_t s = (uint64_t(1) << (32 + bucket_bits)) / (uint64_t(hi - lo) + 1);
        scale = uint32_t(min(s, uint64_t(0xffffffffu)));
        n_buckets = int(of(hi - lo)) + 1;
    }
    __device__ uint32_t of(uint32_t offset) const { return __umulhi(offset, scale); }
};

/* The first of n sorted levels at or above `start` (n where none is). */
__device__ __forceinline__ int64_t first_level_from(const uint32_t *levels, int64_t n,
                                                    uint64_t start)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = (lo + hi) >> 1;
        if (levels[mid] < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The first of a range's n levels in bucket b or after (n where none is). */
__device__ int first_in_bucket(const uint32_t *level, int n, const DrainBuckets &k, uint32_t b)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (k.of(level[mid] - level[0]) < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Each range's drain index, once a count (set_ranges): built by every drain
 * block of every launch, bisections of its buckets took a tenth of the
 * drain's instructions (ncu, sixteenth pass). A block a range. */
__global__ void __launch_bounds__(kDrainThreads)
    drain_index_kernel(const uint32_t *levels, const uint32_t *first, int bucket_bits,
                       uint32_t *index)
{
    const int r = blockIdx.x;
    const uint32_t *level = levels + first[r];
    const int n_range = int(first[r + 1] - first[r]);
    const DrainBuckets k(level[0], level[n_range - 1], bucket_bits);
    for (int b = threadIdx.x; b < k.n_buckets; b += blockDim.x)
        index[size_t(r) * kDrainIndexStride + b] =
            uint32_t(first_in_bucket(level, n_range, k, b)) |
            uint32_t(first_in_bucket(level, n_range, k, b + 1)) << 16;
}

struct DrainParams {
    const uint32_t *levels;
    const uint32_t *first; /* RangePartition's */
    const uint32_t *index; /* drain_index_kernel's */
    const uint32_t *keys, *offset, *capacity, *block_used;
    int n_ranges, n_blocks, bucket_bits;
    unsigned long long *at, *gap;
    uint32_t *gap_min;
};

/* src[0 .. n) to shared dst by a block of kDrainThreads, kFetch reads a
 * thread in flight at once (one at a time, each waited on L2: a tenth of the
 * drain's stalls, ncu, nineteenth pass). */
template <typename T> __device__ void fetch_to_shared(T *dst, const T *src, int n)
{
    constexpr int kFetch = 8;
    for (int i0 = threadIdx.x; i0 < n; i0 += kFetch * kDrainThreads) {
        T v[kFetch];
#pragma unroll
        for (int u = 0; u < kFetch; u++)
            v[u] = i0 + u * kDrainThreads < n ? __ldg(src + i0 + u * kDrainThreads) : T(0);
#pragma unroll
        for (int u = 0; u < kFetch; u++)
            if (i0 + u * kDrainThreads < n)
                dst[i0 + u * kDrainThreads] = v[u];
    }
}

/* kLevels: the most levels a range holds (ev->range_levels) */
template <int kLevels>
__global__ void __launch_bounds__(kDrainThreads, 1) drain_kernel(const DrainParams d)
{
    constexpr int kDrainSpare = drain_spare(kLevels);
    constexpr int kDrainCounters = drain_counters(kLevels);
    extern __shared__ uint32_t drain_shared[];
    /* count[i] and lowest[i]: gap i of the range, below its level i */
    uint32_t *level = drain_shared, *count = drain_shared + kLevels + 1,
             *lowest = count + kDrainCounters, *index = lowest + kDrainCounters;
    /* this block's slice of range r: the parts of pass blocks [b0, b1), and
     * the keys in them, begin[i] before part b0 + i (an exclusive scan, a
     * part a thread) */
    const int r = blockIdx.y;
    const int b0 = d.n_blocks * blockIdx.x / gridDim.x;
    const int b1 = d.n_blocks * (blockIdx.x + 1) / gridDim.x, n_parts = b1 - b0;
    /* warp scans: the raking kind's 4 KB of shared memory would leave a wide
     * range too little room for its index */
    using Scan = cub::BlockScan<uint32_t, kDrainThreads, cub::BLOCK_SCAN_WARP_SCANS>;
    __shared__ typename Scan::TempStorage scan;
    __shared__ uint32_t begin[kMaxDrainParts + 1];
    const int own = int(threadIdx.x); /* the thread's part */
    const uint32_t n = own < n_parts ? d.block_used[size_t(b0 + own) * d.n_ranges + r] : 0u;
    uint32_t before, total;
    Scan(scan).ExclusiveSum(n, before, total);
    if (total == 0) /* the same in every thread */
        return;
    if (own < n_parts)
        begin[own] = before;
    if (threadIdx.x == 0)
        begin[n_parts] = total;
    const uint32_t first = d.first[r];
    const int n_range = int(d.first[r + 1] - first);
    const uint32_t lo = d.levels[first], hi = d.levels[first + n_range - 1];
    const DrainBuckets k(lo, hi, d.bucket_bits);
    fetch_to_shared(level, d.levels + first, n_range);
    fetch_to_shared(index, d.index + size_t(r) * kDrainIndexStride, k.n_buckets);
    for (int i = threadIdx.x; i < kDrainCounters; i += kDrainThreads)
        if (i <= n_range || i >= kDrainSpare) {
            count[i] = 0;
            lowest[i] = 0xffffffffu;
        }
    if (threadIdx.x == 0)
        level[n_range] = 0xffffffffu; /* after the range's levels: no key is NaN's */
    __syncthreads();
    /* a key equal to none lies in gap i (after level i - 1, before level i).
     * Each warp takes an even share of the block's keys, lane l its keys l,
     * l + 32, ... of the share, whatever part each is in: a warp a part in
     * turn (ncu, twentieth pass) left a block's warps 3 parts against 2.75
     * on average at 95 ranges, and a warp the parts of its share one after
     * the other left a third of its lanes idle at 428 (parts of ~265 keys,
     * three rounds of 128). kKeys keys a lane at once, each step of their
     * lookups side by side (ncu: one at a time, the warps waited 17 cycles
     * an instruction). */
    constexpr int kKeys = 4;
    constexpr uint32_t stride = 32; /* between a lane's keys */
    const int n_warps = blockDim.x / 32, warp = threadIdx.x / 32;
    const uint32_t share_lo = uint32_t(uint64_t(total) * warp / n_warps);
    const uint32_t share_hi = uint32_t(uint64_t(total) * (warp + 1) / n_warps);
    const uint32_t room = d.capacity[r] / uint32_t(d.n_blocks);
    /* the block's key t is d.keys[base + t] in part `part`, the parts up to
     * `limit` (begin[part + 1]); the lane's keys are read in order, so the
     * part only moves on. In 32 bits: the buffer holds fewer than 2^32 keys
     * (partition_keys), and base may wrap below zero before t is added. */
    int part = 0; /* the last part that starts at or before the share */
    for (int hi_part = n_parts - 1; part < hi_part;) {
        const int mid = (part + hi_part + 1) / 2;
        if (begin[mid] <= share_lo)
            part = mid;
        else
            hi_part = mid - 1;
    }
    const uint32_t range_base = d.offset[r] + uint32_t(b0) * room;
    uint32_t limit = begin[part + 1];
    uint32_t base = range_base + uint32_t(part) * room - begin[part];
    /* past the share, another of the block's keys (counted nowhere): no branch */
    const auto read = [&](uint32_t t) {
        t = min(t, total - 1);
        while (t >= limit) {
            part++;
            base = range_base + uint32_t(part) * room - limit;
            limit = begin[part + 1];
        }
        return d.keys[base + t];
    };
    /* the next keys read while these are looked up (waiting on their reads
     * was a fifth of the drain's stalls) */
    uint32_t next[kKeys];
#pragma unroll
    for (int u = 0; u < kKeys; u++)
        next[u] = read(share_lo + threadIdx.x % 32 + u * stride);
    for (uint32_t t0 = share_lo + threadIdx.x % 32; t0 < share_hi; t0 += kKeys * stride) {
        uint32_t key[kKeys];
        uint32_t a[kKeys], z[kKeys];
#pragma unroll
        for (int u = 0; u < kKeys; u++) {
            key[u] = next[u];
            next[u] = read(t0 + (kKeys + u) * stride);
        }
        /* a key clamped to the range's span: below its lowest level the
         * bisection ends at 0, above its highest at n_range */
#pragma unroll
        for (int u = 0; u < kKeys; u++) {
            const uint32_t ends = index[k.of(min(max(key[u], lo), hi) - lo)];
            a[u] = ends & 0xffffu;
            z[u] = ends >> 16;
        }
        /* the steps without a branch a key: selects, not an if around
         * each key's step (ncu: its divergence barriers and branches took
         * most of the loop's instructions). A finished key (a == z)
         * keeps its a and z and reads nothing: most keys' buckets hold
         * no level or one. */
        bool more = false;
#pragma unroll
        for (int u = 0; u < kKeys; u++)
            more = more || a[u] < z[u];
        while (more) {
            more = false;
#pragma unroll
            for (int u = 0; u < kKeys; u++) {
                const bool open = a[u] < z[u];
                const uint32_t mid = (a[u] + z[u]) / 2;
                const uint32_t at_mid = open ? level[mid] : 0u;
                const bool below = at_mid < key[u];
                a[u] = open && below ? mid + 1 : a[u];
                z[u] = open && !below ? mid : z[u];
                more = more || a[u] < z[u];
            }
        }
        /* a key on a level is on level a, the first at or above it (after
         * the range's levels, one above any key). Read again here, not kept
         * through the steps: the drain waits on its arithmetic pipe more
         * than on shared memory since its index holds both ends (ncu). */
        bool at[kKeys];
#pragma unroll
        for (int u = 0; u < kKeys; u++)
            at[u] = level[a[u]] == key[u];
        /* without a branch a key (ncu: with them, a key's count took ~11
         * instructions; the drain waits on its arithmetic pipe): a key on a
         * level or past the share is counted in the lane's spare slot. An
         * impostor on a level (7% of them at 3.5M levels, 1M x 65,000 hard)
         * is counted in global memory (a count of them in shared memory
         * took longer, twenty-first pass). */
#pragma unroll
        for (int u = 0; u < kKeys; u++) {
            const bool counted = t0 + u * stride < share_hi;
            const uint32_t i = counted && !at[u] ? a[u] : kDrainSpare + threadIdx.x % 32;
            atomicAdd(&count[i], 1u);
            atomicMin(&lowest[i], key[u]);
            if (counted && at[u])
                atomicAdd(&d.at[first + a[u]], 1ull);
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j <= n_range; j += blockDim.x)
        if (count[j]) {
            atomicAdd(&d.gap[first + j], (unsigned long long)count[j]);
            atomicMin(&d.gap_min[first + j], lowest[j]);
        }
}

/* The segments for the next launch: `total` keys shared in proportion to what
 * each range asked for since the last drain, plus a quarter of an even share
 * (so every range keeps room, and after no demand at all the shares are
 * even); the partition's staging slots (RangePartition's stage_layout and
 * stage_owner) a slot each and the rest in proportion to the demand alone
 * (a tile's keys fall as the last launch's did: runs sized so leave few
 * keys past them), evenly where there was none; the demand zeroed. */
__global__ void __launch_bounds__(kHistogram)
    segment_kernel(uint32_t *reserved, uint32_t *capacity, uint32_t *offset,
                   uint32_t *stage_layout, uint2 *stage_owner, int n_ranges, int64_t total)
{
    using Reduce = cub::BlockReduce<unsigned long long, kHistogram>;
    using Scan = cub::BlockScan<unsigned long long, kHistogram>;
    using SlotScan = cub::BlockScan<uint32_t, kHistogram>;
    __shared__ union {
        typename Reduce::TempStorage reduce;
        typename Scan::TempStorage scan;
        typename SlotScan::TempStorage slot_scan;
    } temp;
    __shared__ unsigned long long sum;
    __shared__ uint32_t starts[kStageWords];
    const int r = threadIdx.x;
    const unsigned long long demand = r < n_ranges ? reserved[r] : 0;
    const unsigned long long all = Reduce(temp.reduce).Sum(demand);
    if (r == 0)
        sum = all;
    __syncthreads();
    const unsigned long long demanded = sum;
    const unsigned long long weight = r < n_ranges ? demand + demanded / (4 * n_ranges) + 1 : 0;
    __syncthreads();
    const unsigned long long weights = Reduce(temp.reduce).Sum(weight);
    if (r == 0)
        sum = weights;
    __syncthreads();
    const unsigned long long share = weight * (unsigned long long)total / sum;
    __syncthreads();
    unsigned long long start = 0;
    Scan(temp.scan).ExclusiveSum(share, start);
    if (r < n_ranges) {
        capacity[r] = uint32_t(share);
        offset[r] = uint32_t(start);
        reserved[r] = 0;
    }
    /* staging: each range's run, then a bit where each starts */
    const unsigned long long spare = kStageSlots - n_ranges;
    const uint32_t slots =
        r < n_ranges ? 1u + uint32_t(demanded ? demand * spare / demanded : spare / n_ranges)
                     : 0u;
    uint32_t first = 0;
    __syncthreads();
    SlotScan(temp.slot_scan).ExclusiveSum(slots, first);
    for (int w = r; w < kStageWords; w += blockDim.x)
        starts[w] = 0;
    __syncthreads();
    if (r < n_ranges) {
        stage_layout[r] = first | slots << 16;
        atomicOr(&starts[first / 32], 1u << (first % 32));
    }
    __syncthreads();
    const uint32_t bits = r < kStageWords ? starts[r] : 0u;
    uint32_t before = 0;
    SlotScan(temp.slot_scan).ExclusiveSum(uint32_t(__popc(bits)), before);
    if (r < kStageWords)
        stage_owner[r] = make_uint2(bits, before - 1u); /* a slot's range: y + its popc */
}

/* Merges the blocks' top keys into the running (key, count): one warp, each
 * lane a stride of the blocks, then the lanes (one thread walking a thousand
 * blocks took 35 us, H100). */
__global__ void merge_top_kernel(const uint32_t *block_key, const unsigned long long *block_count,
                                 int n_blocks, uint32_t *top_key, unsigned long long *top_count)
{
    uint32_t key = 0;
    unsigned long long count = 0;
    if (threadIdx.x == 0) {
        key = *top_key;
        count = *top_count;
    }
    for (int b = threadIdx.x; b < n_blocks; b += 32)
        merge_top(key, count, block_key[b], block_count[b]);
    for (int offset = 16; offset > 0; offset /= 2)
        merge_top(key, count, __shfl_down_sync(0xffffffffu, key, offset),
                  __shfl_down_sync(0xffffffffu, count, offset));
    if (threadIdx.x == 0) {
        *top_key = key;
        *top_count = count;
    }
}

/* count_aside_kernel counts the keys of the lowest gaps in shared memory: the
 * keys above the lowest level crowd them (the impostors' tail). */
constexpr int kAsideGaps = 1024;

/* The keys the feature pass set aside (roc_count.cuh's set_aside) into the
 * global counters: a block a warp's segment, its lowest gaps counted in
 * shared memory first. Launched where the segments are due (launch_pass:
 * the segments keep their keys from launch to launch until then). A warp a
 * segment after every launch, 32 keys at a time, took 23 us a launch at
 * 1e10 (H100), each warp's chain of reads 57 keys long. */
__global__ void __launch_bounds__(kThreads) count_aside_kernel(const PassParams p)
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
            g = key > highest ? p.n_levels
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
        if (at) {
            atomicAdd(&p.at[g], (unsigned long long)__popc(peers));
        } else if (g < kAsideGaps) {
            atomicAdd(&gap_count[g], uint32_t(__popc(peers)));
            atomicMin(&gap_low[g], lowest);
        } else {
            atomicAdd(&p.gap[g], (unsigned long long)__popc(peers));
            atomicMin(&p.gap_min[g], lowest);
        }
    }
    __syncthreads();
    for (int g = threadIdx.x; g < kAsideGaps; g += blockDim.x)
        if (gap_count[g]) {
            atomicAdd(&p.gap[g], (unsigned long long)gap_count[g]);
            atomicMin(&p.gap_min[g], gap_low[g]);
        }
    if (threadIdx.x == 0)
        p.aside_used[blockIdx.x] = 0;
}

// ----------------------------------------------------------------------------
// genuine pairs

__global__ void iota_kernel(int64_t *out, int64_t n)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        out[i] = i;
}

__global__ void position_kernel(const int64_t *members, int64_t n, int64_t *position)
{
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
         t += int64_t(gridDim.x) * blockDim.x)
        position[members[t]] = t;
}

/* How query row i finds its genuine partners among the gallery sorted by
 * (label, index): members[t] is a gallery index, gallery entry j sits at
 * position[j], and row i's partners are members[first[i] ..], count[i] of
 * them (less the row itself for one set's ordered pairs: the position to
 * skip). One set: the query is the set's row row_offset + i. */
struct Partners {
    const int64_t *first, *position, *members;
    int64_t row_offset;
    int same_set;

    __device__ int64_t skip(int64_t i) const
    {
        return same_set == ROC_SAME_SET_ORDERED ? position[row_offset + i] : -1;
    }
};

/* The first of n ascending labels above `label` (upper), or at or above it. */
template <typename T>
__device__ int64_t label_bound(const T *sorted, int64_t n, T label, bool upper)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = (lo + hi) >> 1;
        if (sorted[mid] < label || (upper && sorted[mid] == label))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* first[i] and count[i] of each query row (count[n_query] = 0, for the scan). */
template <typename T>
__global__ void genuine_count_kernel(const T *labels_q, const T *labels_g, const T *sorted,
                                     int64_t n_gallery, const Partners partners, int64_t n_query,
                                     int64_t *first, int64_t *count)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i <= n_query;
         i += int64_t(gridDim.x) * blockDim.x) {
        if (i == n_query) {
            count[i] = 0;
            continue;
        }
        const int64_t self = partners.row_offset + i;
        const T label = partners.same_set ? labels_g[self] : labels_q[i];
        const int64_t begin = partners.same_set == ROC_SAME_SET_UNORDERED
                                  ? partners.position[self] + 1
                                  : label_bound(sorted, n_gallery, label, false);
        first[i] = begin;
        count[i] = label_bound(sorted, n_gallery, label, true) - begin -
                   (partners.same_set == ROC_SAME_SET_ORDERED);
    }
}

/* The features of a genuine pair's two rows as the feature pass sees them:
 * raw (row-major), scaled by their inverse norms for cosine. */
struct FeatureRows {
    const float *q, *g;
    const double *inverse_q, *inverse_g; /* null for dot */
    int64_t dim;
    bool vectors; /* rows of whole, aligned float4s */

    /* The fmaf chain of FeatureTile::product over the values prepare_kernel
     * makes, so the two agree bit for bit (the product's zero padding only
     * turns a sum of -0 into +0, one key). */
    __device__ float score(int64_t i, int64_t j) const
    {
        const float *a = q + i * dim, *b = g + j * dim;
        const bool cosine = inverse_q != nullptr;
        const double scale_a = cosine ? inverse_q[i] : 1.0, scale_b = cosine ? inverse_g[j] : 1.0;
        float s = 0.0f;
        auto step = [&](float x, float y) {
            if (cosine) {
                x = float(__dmul_rn(double(x), scale_a));
                y = float(__dmul_rn(double(y), scale_b));
            }
            s = fmaf(x, y, s);
        };
        int64_t k = 0;
        if (vectors) { /* a quarter of the load instructions (threads read rows far apart) */
            for (; k < dim; k += 4) {
                const float4 x = *reinterpret_cast<const float4 *>(a + k);
                const float4 y = *reinterpret_cast<const float4 *>(b + k);
                step(x.x, y.x);
                step(x.y, y.y);
                step(x.z, y.z);
                step(x.w, y.w);
            }
        }
        for (; k < dim; k++)
            step(a[k], b[k]);
        return s;
    }
};

/* One thread per genuine pair: its key (or NO_KEY for NaN), from the score
 * matrix or the features. Blocks of kGenuineThreads: each thread's score from
 * features is a chain of 512 steps, and the blog's 10,000 pairs in blocks of
 * 256 ran on 40 of the H100's 132 multiprocessors (50 us). */
constexpr int kGenuineThreads = 64;
__global__ void genuine_key_kernel(const Partners partners, int64_t n_query, int64_t n_gallery,
                                   const int64_t *offset, const float *score,
                                   const FeatureRows features, int64_t n_pairs, uint32_t *keys,
                                   unsigned long long *n_nan)
{
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_pairs;
         t += int64_t(gridDim.x) * blockDim.x) {
        int64_t lo = 0, hi = n_query; /* the query: last i with offset[i] <= t */
        while (lo < hi) {
            int64_t mid = (lo + hi + 1) >> 1;
            if (offset[mid] <= t)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int64_t i = lo, skip = partners.skip(i);
        int64_t m = partners.first[i] + (t - offset[i]);
        if (skip >= 0 && m >= skip)
            m++;
        const int64_t j = partners.members[m];
        const float s = score ? score[i * n_gallery + j] : features.score(i, j);
        if (isnan(s)) {
            keys[t] = ROC_NO_KEY;
            atomicAdd(n_nan, 1ull);
        } else {
            keys[t] = roc_score_key(s);
        }
    }
}

/* Cosine: 1 / sqrt(sum of squares) of each row, in float64 in index order
 * with the CPU's IEEE operations (no contraction). A warp takes 32 rows and
 * reads 32 columns of each at a time, coalesced, into shared memory; each lane
 * then sums its row's. (A thread reading its own row took 139 us for 31,000
 * rows of 512 on the H100: 32 rows 2 KB apart a load.) The next 32 columns
 * are loaded while a lane sums: loaded in turn, each slice's loads and each
 * of its 32 adds waited on the one before (44-52 us for 10,000 and 21,000
 * rows, H100). */
constexpr int kNormThreads = 128;
__global__ void __launch_bounds__(kNormThreads)
    inverse_norm_kernel(const float *x, int64_t n, int64_t dim, double *inverse)
{
    __shared__ float slices[kNormThreads / 32][32][33];
    float(*slice)[33] = slices[threadIdx.x / 32];
    const int lane = threadIdx.x % 32;
    const int64_t n_groups = (n + 31) / 32;
    for (int64_t group = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; group < n_groups;
         group += int64_t(gridDim.x) * blockDim.x / 32) {
        const int64_t r0 = group * 32;
        const int rows = int(min(int64_t(32), n - r0));
        /* column k0 + lane of each of the group's rows */
        float next[32];
        auto load = [&](int64_t k0) {
#pragma unroll
            for (int r = 0; r < 32; r++)
                next[r] = r < rows && k0 + lane < dim ? x[(r0 + r) * dim + k0 + lane] : 0.0f;
        };
        load(0);
        double sum = 0.0;
        for (int64_t k0 = 0; k0 < dim; k0 += 32) {
            __syncwarp();
#pragma unroll
            for (int r = 0; r < 32; r++)
                slice[r][lane] = next[r];
            __syncwarp();
            if (k0 + 32 < dim)
                load(k0 + 32);
            const int cols = int(min(int64_t(32), dim - k0));
#pragma unroll
            for (int c = 0; c < 32; c++) {
                if (c < cols) {
                    const double v = slice[lane][c];
                    sum = __dadd_rn(sum, __dmul_rn(v, v));
                }
            }
        }
        if (lane < rows)
            inverse[r0 + lane] = __ddiv_rn(1.0, __dsqrt_rn(sum));
    }
}

/* out (k_pad, ld), k-major: out[k][i] = x[i][k] (times inverse[i], rounded to
 * float32, for cosine), zero beyond n rows and dim columns. 32 x 32 blocks go
 * through shared memory so both the reads and the writes are coalesced. */
__global__ void prepare_kernel(const float *x, int64_t n, int64_t dim, const double *inverse,
                               float *out, int64_t ld, int64_t k_pad)
{
    __shared__ float block[32][33];
    const int64_t i0 = int64_t(blockIdx.x) * 32, k0 = int64_t(blockIdx.y) * 32;
    for (int r = threadIdx.y; r < 32; r += blockDim.y) {
        const int64_t i = i0 + r, k = k0 + threadIdx.x;
        float v = 0.0f;
        if (i < n && k < dim)
            v = inverse ? float(__dmul_rn(double(x[i * dim + k]), inverse[i])) : x[i * dim + k];
        block[r][threadIdx.x] = v;
    }
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += blockDim.y) {
        const int64_t k = k0 + r, i = i0 + threadIdx.x;
        if (k < k_pad && i < ld)
            out[k * ld + i] = block[threadIdx.x][r];
    }
}

// ----------------------------------------------------------------------------
// a list of pairs

/* A list of pairs as the kernels read it: flags, and the score or the two
 * feature rows of each pair (row-major, scaled to unit length for cosine). */
struct PairList {
    const void *genuine, *index_a, *index_b;
    int genuine_dtype, index_dtype;
    const float *score, *a, *b;
    int64_t dim, n_a, n_b;

    /* The pair's score: one fmaf chain over k in order, as on the CPU. */
    __device__ __forceinline__ float score_of(int64_t t) const
    {
        if (score)
            return score[t];
        const float *ra = a + roc_int_at(index_a, index_dtype, t) * dim;
        const float *rb = b + roc_int_at(index_b, index_dtype, t) * dim;
        float s = 0.0f;
        if (dim % 8 == 0 && ext_aligned16(ra) && ext_aligned16(rb)) {
            /* 32 bytes of each row a step: whole sectors, though a warp's lanes
             * read 32 different rows */
            for (int64_t k = 0; k < dim; k += 8) {
                const float4 x0 = __ldg(reinterpret_cast<const float4 *>(ra + k));
                const float4 x1 = __ldg(reinterpret_cast<const float4 *>(ra + k + 4));
                const float4 y0 = __ldg(reinterpret_cast<const float4 *>(rb + k));
                const float4 y1 = __ldg(reinterpret_cast<const float4 *>(rb + k + 4));
                const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                const float y[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
                for (int u = 0; u < 8; u++)
                    s = fmaf(x[u], y[u], s);
            }
        } else {
            for (int64_t k = 0; k < dim; k++)
                s = fmaf(__ldg(ra + k), __ldg(rb + k), s);
        }
        return s;
    }
};

/* Flags that are not 0/1 and indices that are not rows (the first position of
 * each, in bad[0..2]), and counts the genuine pairs (a warp's at once). */
__global__ void check_list_kernel(const PairList list, int64_t n, unsigned long long *bad,
                                  unsigned long long *n_genuine)
{
    for (int64_t t0 = blockIdx.x * int64_t(blockDim.x); t0 < n;
         t0 += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = t0 + threadIdx.x;
        int64_t flag = 0;
        if (t < n) {
            flag = roc_int_at(list.genuine, list.genuine_dtype, t);
            if (flag != 0 && flag != 1)
                atomicMin(&bad[0], (unsigned long long)t);
            if (list.index_a) {
                const int64_t ia = roc_int_at(list.index_a, list.index_dtype, t);
                const int64_t ib = roc_int_at(list.index_b, list.index_dtype, t);
                if (ia < 0 || ia >= list.n_a)
                    atomicMin(&bad[1], (unsigned long long)t);
                if (ib < 0 || ib >= list.n_b)
                    atomicMin(&bad[2], (unsigned long long)t);
            }
        }
        const unsigned genuine = __ballot_sync(0xffffffffu, flag == 1);
        if (threadIdx.x % 32 == 0 && genuine)
            atomicAdd(n_genuine, (unsigned long long)__popc(genuine));
    }
}

/* The keys (NO_KEY for NaN) of the genuine pairs, in any order: a warp takes
 * its slots at once. */
__global__ void list_genuine_key_kernel(const PairList list, int64_t n, uint32_t *keys,
                                        unsigned long long *fill, unsigned long long *n_nan)
{
    const int lane = threadIdx.x % 32;
    for (int64_t t0 = blockIdx.x * int64_t(blockDim.x); t0 < n;
         t0 += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = t0 + threadIdx.x;
        const bool genuine = t < n && roc_int_at(list.genuine, list.genuine_dtype, t) == 1;
        const unsigned mask = __ballot_sync(0xffffffffu, genuine);
        unsigned long long first = 0;
        if (lane == 0 && mask)
            first = atomicAdd(fill, (unsigned long long)__popc(mask));
        first = __shfl_sync(0xffffffffu, first, 0);
        if (genuine) {
            const float s = list.score_of(t);
            keys[first + __popc(mask & ((1u << lane) - 1))] = isnan(s) ? ROC_NO_KEY
                                                                        : roc_score_key(s);
            if (isnan(s))
                atomicAdd(n_nan, 1ull);
        }
    }
}

/* Counts pairs [begin, begin + p.n_gallery) of a list scored from features. */
template <int kMode>
__global__ void __launch_bounds__(kThreads)
    list_pass_kernel(const PairList list, int64_t begin, const PassParams p)
{
    extern __shared__ uint32_t shared[];
    Counter<kMode> counter(p, shared);
    counter.begin_block();
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < p.n_gallery;
         t += int64_t(gridDim.x) * blockDim.x)
        counter.pair(0, t, list.score_of(begin + t));
    counter.end_block();
}

/* Exact mode, flat scores with many levels: the chunk's keys (NaN: NO_KEY, counted),
 * to be sorted so that equal keys, and keys of one gap, come together. */
__global__ void flat_keys_kernel(const float *score, int64_t n, uint32_t *keys,
                                 unsigned long long *totals)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        atomicAdd(&totals[0], (unsigned long long)n);
    unsigned long long nan = 0;
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
         t += int64_t(gridDim.x) * blockDim.x) {
        const float s = __ldg(score + t);
        keys[t] = isnan(s) ? ROC_NO_KEY : roc_score_key(s);
        nan += isnan(s);
    }
    for (int offset = 16; offset > 0; offset /= 2)
        nan += __shfl_down_sync(0xffffffffu, nan, offset);
    if (threadIdx.x % 32 == 0 && nan)
        atomicAdd(&totals[1], nan);
}

/* Sorted runs of one key, merged by the slot they count into: a slot is 2 g
 * for gap g, 2 u + 1 for level u (ascending with the key), -1 for NaN. */
struct RunCount {
    unsigned long long count;
    uint32_t min_key;
};

struct MergeRuns {
    __device__ RunCount operator()(const RunCount &a, const RunCount &b) const
    {
        return RunCount{a.count + b.count, min(a.min_key, b.min_key)};
    }
};

/* Exact mode, sorted distinct keys with their counts: each run's slot, and
 * the highest key into block 0's top slot. */
__global__ void slot_of_runs_kernel(const uint32_t *keys, const unsigned long long *counts,
                                    const int64_t *n_runs, const PassParams p, int64_t *slots,
                                    RunCount *runs)
{
    const int64_t n = *n_runs;
    const uint32_t lowest = __ldg(p.levels), highest = __ldg(p.levels + p.n_levels - 1);
    for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < n;
         r += int64_t(gridDim.x) * blockDim.x) {
        const uint32_t key = keys[r];
        runs[r] = RunCount{counts[r], key};
        if (key == ROC_NO_KEY) { /* NaN pairs: counted with the keys */
            slots[r] = -1;
            continue;
        }
        int at = 0;
        int64_t g = key < lowest ? 0 : p.n_levels;
        if (key >= lowest && key <= highest)
            g = roc_find_level(p.levels, p.lut, p.lut_base, p.lut_shift, key, &at);
        slots[r] = 2 * g + at;
        if (r == n - 1) {
            p.block_top_key[0] = key;
            p.block_top_count[0] = counts[r];
        }
    }
}

/* One atomic a slot of the chunk: into its level or its gap (with the gap's
 * lowest key). */
__global__ void count_slots_kernel(const int64_t *slots, const RunCount *runs,
                                   const int64_t *n_slots, const PassParams p)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < *n_slots;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t slot = slots[i];
        if (slot < 0)
            continue;
        if (slot % 2) {
            atomicAdd(&p.at[slot / 2], runs[i].count);
        } else {
            atomicAdd(&p.gap[slot / 2], runs[i].count);
            atomicMin(&p.gap_min[slot / 2], runs[i].min_key);
        }
    }
}

/* Cosine for a list: out = x scaled to unit length, row-major, with the same
 * IEEE operations as prepare_kernel (and the CPU). */
__global__ void scale_rows_kernel(const float *x, int64_t n, int64_t dim, const double *inverse,
                                  float *out)
{
    for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * dim;
         e += int64_t(gridDim.x) * blockDim.x)
        out[e] = float(__dmul_rn(double(x[e]), inverse[e / dim]));
}

unsigned grid_for(int64_t n, int threads = kThreads)
{
    return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads,
                                                           int64_t(ext_sm_count()) * 32)));
}

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

/* 1 / norm of each of the n rows of x (n, dim) into inverse. */
cudaError_t launch_inverse_norms(cudaStream_t stream, const float *x, int64_t n, int64_t dim,
                                 double *inverse)
{
    inverse_norm_kernel<<<grid_for((n + 31) / 32 * 32, kNormThreads), kNormThreads, 0, stream>>>(
        x, n, dim, inverse);
    return cudaGetLastError();
}

/* Device memory each side's prepared block may take. The gallery goes in
 * chunks of columns and the queries in blocks of rows, each prepared (scaled,
 * k-major) when a pass needs it; a gallery of one chunk is prepared once. With
 * whole copies of both, the IFRT size (1M x 2.6M, D = 512) took 7.0 GiB
 * beyond its inputs; 256 MiB chunks leave room for the partitioned count's
 * buffer within ~1 GiB, and preparing the gallery again at every step stays
 * ~1% of the pass either way. EXT_ROC_OPERAND_KIB, where set, replaces the
 * gallery's (the queries get half): less memory, more preparation. */
constexpr size_t kGalleryChunkBytes = size_t(256) << 20;

/* The tuning variable `name` where it is a whole number of at least `least`,
 * else `fallback` (unset, empty or not a number: atoll would read those as 0). */
int64_t env_tuning(const char *name, int64_t least, int64_t fallback)
{
    const char *text = getenv(name);
    if (!text || !*text)
        return fallback;
    char *end = nullptr;
    errno = 0;
    const long long value = strtoll(text, &end, 10);
    return errno == 0 && *end == '\0' && value >= least ? int64_t(value) : fallback;
}

/* Tiles a launch of a `mode` feature pass over `tiles` tiles makes (and
 * stores before counting them): whole waves of tile_kernel (2
 * blocks a multiprocessor), 7 of them, 121 MB on an H100; 14 where the pass
 * has more than 4 such chunks to make, but for pair_scores. At 1e10 pairs,
 * 3.5 waves a launch took 14% longer than 7, and 14 waves 1.3% less; at the
 * blog size, 14 took 2-5% more than 7: a buffer past what the memory pool
 * keeps between calls (dev/NOTES.md, fourteenth pass). The partitioned count
 * drains after each launch, a fixed cost of its levels: 14 waves took 4.5%
 * less than 7 at 1M x 65,000 hard (twenty-second pass). EXT_ROC_CHUNK_TILES
 * sets it (the tests make it small). */
int64_t chunk_tiles(int mode, int64_t tiles)
{
    const int64_t wave = 2 * ext_sm_count();
    const bool large = mode != kStore && tiles > 4 * 14 * wave;
    const int64_t waves = large ? 14 : 7;
    return env_tuning("EXT_ROC_CHUNK_TILES", 1, waves * wave);
}

size_t gallery_chunk_bytes()
{
    const int64_t kib = env_tuning("EXT_ROC_OPERAND_KIB", 1, 0);
    return kib > 0 ? size_t(kib) << 10 : kGalleryChunkBytes;
}

/* One side of the feature pass: its raw features (row-major), their inverse
 * norms (cosine), and which of its rows, [begin, end), `prepared` holds. */
struct FeatureSide {
    const float *x = nullptr;
    int64_t n = 0;
    int64_t block_rows = 0; /* rows a prepared block holds at most: whole tiles */
    Buffer<double> own_inverse;
    const double *inverse = nullptr; /* own_inverse, or the other side's for one set */
    Buffer<float> prepared;
    int64_t begin = 0, end = 0;

    explicit FeatureSide(ExtDeviceArena &arena) : own_inverse(arena), prepared(arena) {}
};

struct FeatureOperands {
    int64_t dim = 0, k_pad = 0;
    FeatureSide q, g;

    explicit FeatureOperands(ExtDeviceArena &arena) : q(arena), g(arena) {}
    FeatureRows rows() const
    {
        const bool vectors = dim % 4 == 0 && reinterpret_cast<uintptr_t>(q.x) % 16 == 0 &&
                             reinterpret_cast<uintptr_t>(g.x) % 16 == 0;
        return FeatureRows{q.x, g.x, q.inverse, g.inverse, dim, vectors};
    }
};

/* The sides' sizes and blocks, and for cosine their inverse norms (one set:
 * computed once). Where the caller said the rows of its calls (step_rows > 0),
 * a query block holds no more than one call's: its rows start anywhere in a
 * tile, so round_up(step_rows) + one tile of rows. At the IFRT size a call's
 * 6,607 rows take 13 MiB instead of the 128 MiB block, room the partitioned
 * count's buffers use. */
cudaError_t feature_setup(ExtDeviceArena &arena, FeatureOperands &f, const float *feat_q,
                          const float *feat_g, int64_t n_query, int64_t n_gallery, int64_t dim,
                          int similarity, int64_t step_rows)
{
    f.dim = dim;
    f.k_pad = round_up(dim, FeatureTile::kSliceK);
    const int64_t row_bytes = std::max<int64_t>(f.k_pad, 1) * int64_t(sizeof(float));
    FeatureSide *sides[2] = {&f.q, &f.g};
    const float *x[2] = {feat_q, feat_g};
    const int64_t n[2] = {n_query, n_gallery};
    const size_t bytes[2] = {gallery_chunk_bytes() / 2, gallery_chunk_bytes()};
    const bool one_set = feat_q == feat_g && n_query == n_gallery;
    for (int side = 0; side < 2; side++) {
        FeatureSide &to = *sides[side];
        to.x = x[side];
        to.n = n[side];
        to.block_rows = std::max<int64_t>(roc_gemm::kBM,
                                          int64_t(bytes[side]) / row_bytes / roc_gemm::kBM *
                                              roc_gemm::kBM);
        if (side == 0 && step_rows > 0)
            to.block_rows =
                std::min(to.block_rows, round_up(step_rows, roc_gemm::kBM) + roc_gemm::kBM);
        if (similarity != ROC_COSINE)
            continue;
        if (side == 1 && one_set) {
            to.inverse = f.q.inverse;
            continue;
        }
        EXT_CUDA_TRY(to.own_inverse.allocate(to.n));
        EXT_CUDA_TRY(launch_inverse_norms(arena.stream(), to.x, to.n, dim, to.own_inverse.get()));
        to.inverse = to.own_inverse.get();
    }
    return cudaSuccess;
}

/* Room in `side` for a block of rows [begin, end) prepared: once, the largest
 * block there is. */
cudaError_t prepare_room(const FeatureOperands &f, FeatureSide &side, int64_t begin, int64_t end)
{
    const int64_t ld = round_up(end - begin, roc_gemm::kBM);
    if (side.prepared.size() >= size_t(f.k_pad * ld))
        return cudaSuccess;
    return side.prepared.allocate(f.k_pad *
                                  std::min(side.block_rows, round_up(side.n, roc_gemm::kBM)));
}

/* Rows [begin, end) of `side` prepared (k-major, padded to whole tiles) on
 * `stream`, unless they are already. */
cudaError_t prepare_block(const FeatureOperands &f, FeatureSide &side, int64_t begin, int64_t end,
                          cudaStream_t stream)
{
    if (side.end > side.begin && side.begin == begin && side.end == end)
        return cudaSuccess;
    const int64_t ld = round_up(end - begin, roc_gemm::kBM);
    EXT_CUDA_TRY(prepare_room(f, side, begin, end));
    if (f.k_pad > 0) {
        const dim3 grid(unsigned(ld / 32), unsigned((f.k_pad + 31) / 32));
        prepare_kernel<<<grid, dim3(32, 8), 0, stream>>>(
            side.x + begin * f.dim, end - begin, f.dim,
            side.inverse ? side.inverse + begin : nullptr, side.prepared.get(), ld, f.k_pad);
        EXT_CUDA_TRY(cudaGetLastError());
    }
    side.begin = begin;
    side.end = end;
    return cudaSuccess;
}

/* The operands of query rows [qa, qb) and gallery columns [ga, gb), as
 * prepare_block left them. */
Operands block_operands(const FeatureOperands &f, int64_t qa, int64_t qb, int64_t ga, int64_t gb)
{
    return Operands{f.q.prepared.get(),  f.g.prepared.get(), round_up(qb - qa, roc_gemm::kBM),
                    round_up(gb - ga, roc_gemm::kBN), f.k_pad, qa, ga, gb};
}

/* launch(op, begin, end) for query rows [begin, end) against every gallery
 * chunk, over all of rows [row_begin, row_end) in blocks: the blocks' and
 * chunks' operands prepared first. The chunk prepared last goes first, so
 * that consecutive calls on a gallery of one chunk prepare it once. */
template <typename Launch>
cudaError_t over_feature_blocks(ExtDeviceArena &arena, FeatureOperands &f, int64_t row_begin,
                                int64_t row_end, Launch launch)
{
    const int64_t n_chunks = (f.g.n + f.g.block_rows - 1) / f.g.block_rows;
    for (int64_t qa = row_begin / roc_gemm::kBM * roc_gemm::kBM; qa < row_end;
         qa += f.q.block_rows) {
        const int64_t qb = std::min(qa + f.q.block_rows, row_end);
        EXT_CUDA_TRY(prepare_block(f, f.q, qa, qb, arena.stream()));
        const int64_t first = f.g.end > f.g.begin ? f.g.begin / f.g.block_rows : 0;
        for (int64_t c = 0; c < n_chunks; c++) {
            const int64_t ga = (first + c) % n_chunks * f.g.block_rows;
            const int64_t gb = std::min(ga + f.g.block_rows, f.g.n);
            EXT_CUDA_TRY(prepare_block(f, f.g, ga, gb, arena.stream()));
            EXT_CUDA_TRY(launch(block_operands(f, qa, qb, ga, gb), std::max(row_begin, qa), qb));
        }
    }
    return cudaSuccess;
}

/* The tiles a feature pass's chunk holds, or will once the stream reaches
 * their tile_kernel: tiles [tile_begin, tile_end) of rows [row_begin,
 * row_end) of the operands from query row m_base and gallery columns
 * [n_begin, n_end). None where m_base < 0. */
struct StoredTiles {
    int64_t m_base = -1, n_begin = 0, n_end = 0, row_begin = 0, row_end = 0, tile_begin = 0,
            tile_end = 0;

    static StoredTiles of(const Operands &op, const PassParams &q)
    {
        return StoredTiles{op.m_base, op.n_begin, op.n_end, q.row_begin, q.row_end,
                           q.tile_begin, q.tile_end};
    }
    /* whether they are the tiles from q.tile_begin of the same rows and operands */
    bool start(const Operands &op, const PassParams &q) const
    {
        return m_base >= 0 && m_base == op.m_base && n_begin == op.n_begin && n_end == op.n_end &&
               row_begin == q.row_begin && row_end == q.row_end && tile_begin == q.tile_begin;
    }
};

} // namespace

// ----------------------------------------------------------------------------
// the backend's device state

struct roc_eval_cuda {
    roc_source src;
    ExtDeviceArena arena; /* before every buffer: released after them */
    FeatureOperands features; /* the feature pass's operands, prepared by block */
    /* exact: levels, index, counters */
    int64_t n_levels = 0;
    Buffer<uint32_t> levels, lut, block_top_key;
    Buffer<unsigned long long> block_top_count;
    /* the counters, one buffer laid out as the host's (roc_counts_alloc), so
     * that one copy fetches them: at[U + 1], gap[U + 1], gap_min[U + 1]
     * (32-bit), then top_count and top_key. Six copies of pageable memory
     * took ~90 us of the blog size's 5.9 ms (H100). */
    Buffer<unsigned long long> counters;
    unsigned long long *at = nullptr, *gap = nullptr, *top_count = nullptr;
    uint32_t *gap_min = nullptr, *top_key = nullptr;
    uint32_t lut_base = 0;
    int lut_shift = 0;
    /* exact from features with more levels than a block's shared counters:
     * the ranges the keys are partitioned by and the segments' buffer
     * (roc_count.cuh); part.n_ranges = 0 where not */
    RangePartition part{};
    /* exact from features with global counters: the first tiles are
     * counted directly and their pairs choose how the rest are
     * (choose_count): directly, with keys set aside, or by partition where
     * may_partition */
    bool probe_count = false, may_partition = false;
    Buffer<uint32_t> range_first, range_starts, range_keys, range_offset, range_capacity,
        range_block_used, range_reserved, range_stage_layout;
    Buffer<uint2> range_stage_owner;
    Buffer<uint16_t> range_index;
    Buffer<uint32_t> drain_index; /* drain_index_kernel's, drain_bucket_bits' */
    int drain_bucket_bits = 0;
    int range_levels = kRangeLevels; /* the most a range holds (range_levels_for) */
    int64_t range_keys_total = 0;
    /* exact from features with global counters: the keys the pass sets aside
     * (roc_count.cuh), while not partitioned, and each warp's count of them;
     * the share of the probe's pairs at or above the lowest level */
    Buffer<uint32_t> aside_keys, aside_used;
    double aside_share = 0;
    /* binned */
    Buffer<float> edges;
    Buffer<unsigned long long> bins;
    int64_t n_bins = 0;
    float lo32 = 0, scale32 = 0;
    /* curve: the distinct keys so far */
    Buffer<uint32_t> acc_keys;
    Buffer<unsigned long long> acc_counts;
    int64_t n_acc = 0;
    /* the feature pass's chunk of stored tiles (tile_kernel), and which */
    Buffer<float> chunk;
    StoredTiles stored{};
    /* exact and binned from features, where the caller said the rows of its
     * add_rows calls (src.step_rows): tiles stored ahead on a stream of their
     * own, from ahead_start on the evaluator's stream, until ahead_done
     * (pending until the evaluator's stream waits for it): the first call's
     * first chunk, beside the genuine pairs' kernels and the host's work up to
     * that call; the chunk after the probe, while the host reads it. On one
     * stream the GPU waited for those ~0.4 ms of the blog size's 5.8 (H100). */
    cudaStream_t ahead = nullptr;
    cudaEvent_t ahead_start = nullptr, ahead_done = nullptr;
    bool ahead_pending = false;
    /* pairs, NaN pairs */
    Buffer<unsigned long long> totals;
    int pass_blocks = 0;
    /* a list of pairs, and its features scaled for cosine */
    PairList list{};
    Buffer<float> scaled_a, scaled_b;

    explicit roc_eval_cuda(const roc_source &s)
        : src(s), arena(static_cast<cudaStream_t>(s.stream)), features(arena), levels(arena),
          lut(arena), block_top_key(arena), block_top_count(arena), counters(arena),
          range_first(arena), range_starts(arena),
          range_keys(arena), range_offset(arena), range_capacity(arena), range_block_used(arena),
          range_reserved(arena), range_stage_layout(arena), range_stage_owner(arena),
          range_index(arena), drain_index(arena), aside_keys(arena),
          aside_used(arena), edges(arena), bins(arena), acc_keys(arena),
          acc_counts(arena), chunk(arena), totals(arena), scaled_a(arena), scaled_b(arena)
    {
    }
    ~roc_eval_cuda() /* before the buffers go: the tiles stored ahead are written */
    {
        if (ahead) {
            cudaStreamSynchronize(ahead);
            cudaStreamDestroy(ahead);
        }
        for (cudaEvent_t e : {ahead_start, ahead_done})
            if (e)
                cudaEventDestroy(e);
    }
};

namespace {

/* Finds the genuine pairs and their keys; leaves the distinct levels in
 * `genuine` (host arrays). */
cudaError_t levels_from_keys(roc_eval_cuda *ev, Buffer<uint32_t> &keys, int64_t n_pairs,
                             Buffer<unsigned long long> &nan, roc_genuine_levels *genuine,
                             roc_totals *totals);

/* The gallery sorted by label of type T (stable: members[t] is a gallery
 * index, position its inverse), then each query row's partners counted. */
template <typename T>
cudaError_t count_partners(ExtDeviceArena &arena, const roc_source &s, Buffer<int64_t> &members,
                           Buffer<int64_t> &position, Buffer<int64_t> &first,
                           Buffer<int64_t> &count)
{
    cudaStream_t stream = arena.stream();
    const int64_t Q = s.n_query, G = s.n_gallery;
    const T *labels_q = static_cast<const T *>(s.labels_q);
    const T *labels_g = static_cast<const T *>(s.labels_g);
    Buffer<T> sorted(arena);
    Buffer<int64_t> index(arena);
    EXT_CUDA_TRY(sorted.allocate(G));
    EXT_CUDA_TRY(index.allocate(G));
    iota_kernel<<<grid_for(G), kThreads, 0, stream>>>(index.get(), G);
    EXT_CUDA_TRY(cudaGetLastError());
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortPairs(tmp, bytes, labels_g, sorted.get(), index.get(),
                                               members.get(), G, 0, int(8 * sizeof(T)), stream);
    }));
    position_kernel<<<grid_for(G), kThreads, 0, stream>>>(members.get(), G, position.get());
    const Partners partners{first.get(), position.get(), members.get(), s.row_offset,
                            s.same_set};
    genuine_count_kernel<<<grid_for(Q + 1), kThreads, 0, stream>>>(
        labels_q, labels_g, sorted.get(), G, partners, Q, first.get(), count.get());
    return cudaGetLastError();
}

cudaError_t find_genuine(roc_eval_cuda *ev, roc_genuine_levels *genuine, roc_totals *totals)
{
    const roc_source &s = ev->src;
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    const int64_t Q = s.n_query, G = s.n_gallery;
    Buffer<int64_t> members(arena), position(arena), first(arena), count(arena), offset(arena);
    EXT_CUDA_TRY(members.allocate(G));
    EXT_CUDA_TRY(position.allocate(G));
    EXT_CUDA_TRY(first.allocate(Q));
    EXT_CUDA_TRY(count.allocate(Q + 1));
    EXT_CUDA_TRY(offset.allocate(Q + 1));
    EXT_CUDA_TRY(s.label_dtype == EXT_INT64
                     ? count_partners<int64_t>(arena, s, members, position, first, count)
                     : count_partners<int32_t>(arena, s, members, position, first, count));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceScan::ExclusiveSum(tmp, bytes, count.get(), offset.get(), Q + 1,
                                             stream);
    }));
    const Partners partners{first.get(), position.get(), members.get(), s.row_offset,
                            s.same_set};
    int64_t n_pairs = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&n_pairs, offset.get() + Q, sizeof n_pairs,
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));

    Buffer<uint32_t> keys(arena);
    Buffer<unsigned long long> nan(arena);
    EXT_CUDA_TRY(keys.allocate(n_pairs));
    EXT_CUDA_TRY(nan.allocate(1));
    EXT_CUDA_TRY(cudaMemsetAsync(nan.get(), 0, sizeof(unsigned long long), stream));
    genuine_key_kernel<<<grid_for(n_pairs, kGenuineThreads), kGenuineThreads, 0, stream>>>(
        partners, Q, G, offset.get(), s.score, ev->features.rows(), n_pairs, keys.get(),
        nan.get());
    EXT_CUDA_TRY(cudaGetLastError());
    for (Buffer<int64_t> *a : {&members, &position, &first, &count, &offset})
        a->release();
    return levels_from_keys(ev, keys, n_pairs, nan, genuine, totals);
}

/* The genuine pairs of a list and their keys, after checking the list. */
cudaError_t find_list_genuine(roc_eval_cuda *ev, roc_genuine_levels *genuine, roc_totals *totals,
                              roc_bad_input *bad_input)
{
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    const int64_t N = ev->src.n_query;
    /* bad[0..2]: first bad flag, index_a, index_b; [3]: genuine pairs; [4]: filled; [5]: NaN */
    Buffer<unsigned long long> tally(arena);
    EXT_CUDA_TRY(tally.allocate(6));
    EXT_CUDA_TRY(cudaMemsetAsync(tally.get(), 0xff, 3 * sizeof(unsigned long long), stream));
    EXT_CUDA_TRY(cudaMemsetAsync(tally.get() + 3, 0, 3 * sizeof(unsigned long long), stream));
    check_list_kernel<<<grid_for(N), kThreads, 0, stream>>>(ev->list, N, tally.get(),
                                                            tally.get() + 3);
    EXT_CUDA_TRY(cudaGetLastError());
    unsigned long long host[4];
    EXT_CUDA_TRY(cudaMemcpyAsync(host, tally.get(), sizeof host, cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    static const int kinds[3] = {ROC_BAD_GENUINE, ROC_BAD_INDEX_A, ROC_BAD_INDEX_B};
    for (int k = 0; k < 3; k++)
        if (host[k] != ~0ull) {
            *bad_input = roc_bad_input{kinds[k], int64_t(host[k])};
            return cudaSuccess;
        }
    const int64_t n_pairs = int64_t(host[3]);
    Buffer<uint32_t> keys(arena);
    Buffer<unsigned long long> nan(arena);
    EXT_CUDA_TRY(keys.allocate(n_pairs));
    EXT_CUDA_TRY(nan.allocate(1));
    EXT_CUDA_TRY(cudaMemsetAsync(nan.get(), 0, sizeof(unsigned long long), stream));
    list_genuine_key_kernel<<<grid_for(N, kGenuineThreads), kGenuineThreads, 0, stream>>>(
        ev->list, N, keys.get(), tally.get() + 4, nan.get());
    EXT_CUDA_TRY(cudaGetLastError());
    return levels_from_keys(ev, keys, n_pairs, nan, genuine, totals);
}

/* The distinct genuine levels of n_pairs genuine keys (NaN pairs: NO_KEY, nan
 * of them), on the host. */
cudaError_t levels_from_keys(roc_eval_cuda *ev, Buffer<uint32_t> &keys, int64_t n_pairs,
                             Buffer<unsigned long long> &nan, roc_genuine_levels *genuine,
                             roc_totals *totals)
{
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    Buffer<uint32_t> sorted_keys(arena);
    EXT_CUDA_TRY(sorted_keys.allocate(n_pairs));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortKeys(tmp, bytes, keys.get(), sorted_keys.get(), n_pairs,
                                              0, 32, stream);
    }));
    keys.release();
    /* runs of the sorted keys (a NaN pair's NO_KEY sorts first), copied whole
     * with their count and the NaN count: one synchronization */
    Buffer<uint32_t> unique(arena);
    Buffer<unsigned long long> run_counts(arena);
    Buffer<int64_t> n_runs(arena);
    EXT_CUDA_TRY(unique.allocate(n_pairs));
    EXT_CUDA_TRY(run_counts.allocate(n_pairs));
    EXT_CUDA_TRY(n_runs.allocate(1));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRunLengthEncode::Encode(tmp, bytes, sorted_keys.get(), unique.get(),
                                                  run_counts.get(), n_runs.get(), n_pairs,
                                                  stream);
    }));
    unsigned long long n_nan = 0;
    int64_t U = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&n_nan, nan.get(), sizeof n_nan, cudaMemcpyDeviceToHost,
                                 stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(&U, n_runs.get(), sizeof U, cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    if (n_pairs == 0)
        U = 0;
    /* the runs only: the buffers' tails were never written */
    genuine->keys = static_cast<uint32_t *>(ext_malloc(U * sizeof(uint32_t)));
    genuine->counts = static_cast<uint64_t *>(ext_malloc(U * sizeof(uint64_t)));
    if (!genuine->keys || !genuine->counts)
        return cudaErrorMemoryAllocation;
    EXT_CUDA_TRY(cudaMemcpyAsync(genuine->keys, unique.get(), U * sizeof(uint32_t),
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(genuine->counts, run_counts.get(), U * sizeof(uint64_t),
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    if (n_nan > 0) { /* drop the NaN run */
        memmove(genuine->keys, genuine->keys + 1, (U - 1) * sizeof(uint32_t));
        memmove(genuine->counts, genuine->counts + 1, (U - 1) * sizeof(uint64_t));
        U--;
    }
    genuine->n_levels = U;
    totals->n_genuine = uint64_t(n_pairs) - n_nan;
    totals->n_nan_genuine = n_nan;
    return cudaSuccess;
}

/* Bytes of private counters a block of the evaluator's pass may keep in
 * shared memory. */
size_t counters_max(const roc_eval_cuda *ev)
{
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ev->src.device) !=
        cudaSuccess)
        optin = 48 * 1024;
    const bool features = ev->src.score == nullptr;
    const size_t room = size_t(optin) > kStaticSharedMargin ? size_t(optin) - kStaticSharedMargin
                                                            : 0;
    return std::min(room, features ? kSharedCountersFeature : kSharedCountersScore);
}

/* Where EXT_ROC_PARTITION_LEVELS is set (the tests make it 0): the levels
 * beyond which exact mode counts the feature pass's pairs by partition from
 * the first pair on. Else -1: the first operand block's pairs choose
 * (choose_count). */
int64_t forced_partition_levels()
{
    return env_tuning("EXT_ROC_PARTITION_LEVELS", 0, -1);
}

/* The drain kernel for ranges of at most `range_levels` levels. */
const void *drain_kernel_for(int range_levels)
{
    if (range_levels > kRangeLevels)
        return reinterpret_cast<const void *>(drain_kernel<kWideRangeLevels>);
    return reinterpret_cast<const void *>(drain_kernel<kRangeLevels>);
}

/* The drain's finest index (its bucket bits) for ranges of `range_levels`
 * levels that leaves room for its shared memory on the device, 0 where even
 * the coarsest does not; EXT_ROC_DRAIN_BUCKET_BITS, where set, at most that
 * (the tests make it the coarsest: buckets of several levels, bisected). */
int drain_bucket_bits(int device, int range_levels)
{
    const int most = int(std::min<int64_t>(
        env_tuning("EXT_ROC_DRAIN_BUCKET_BITS", kDrainBucketBitsMin, kDrainBucketBitsMax),
        kDrainBucketBitsMax));
    int optin = 0;
    cudaFuncAttributes drain{};
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess ||
        cudaFuncGetAttributes(&drain, drain_kernel_for(range_levels)) != cudaSuccess)
        return 0;
    for (int bits = most; bits >= kDrainBucketBitsMin; bits--)
        if (drain_shared_bytes(range_levels, bits) + drain.sharedSizeBytes <= size_t(optin))
            return bits;
    return 0;
}

/* The most levels a range of the partitioned count holds for `n_levels`
 * levels: kWideRangeLevels from kWideRangesFrom levels, where the device has
 * the shared memory for its drain, else kRangeLevels. The partition's cost a
 * key grows with its ranges, the drain's with the levels a range holds (a
 * coarser index, more levels to read): at 3.5M levels (563 -> 253 ranges)
 * partition and drain took 795 -> 683 ms, at ~2.1M 379 -> 387, at 773,000
 * 111 -> 115, at 400,000 (2.6e11 pairs) 2,179 -> 2,510 (H100, dev/NOTES.md,
 * twenty-fifth pass). EXT_ROC_RANGE_LEVELS, set to either, chooses (the tests). */
constexpr int64_t kWideRangesFrom = int64_t(300) * kRangeLevels;

int range_levels_for(int64_t n_levels, int device)
{
    const int64_t forced = env_tuning("EXT_ROC_RANGE_LEVELS", kRangeLevels, 0);
    const bool wide = forced == kWideRangeLevels ||
                      (forced != kRangeLevels && n_levels >= kWideRangesFrom);
    return wide && drain_bucket_bits(device, kWideRangeLevels) > 0 ? kWideRangeLevels
                                                                   : kRangeLevels;
}

/* Whether exact mode may count the feature pass's pairs by partition:
 * features (not a score matrix or list), more levels than the shared counters
 * hold, no more than the ranges hold, and room for the partition's and the
 * drain's shared memory. */
bool can_partition(const roc_eval_cuda *ev, int64_t n_levels)
{
    const roc_source &s = ev->src;
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, s.device) !=
        cudaSuccess)
        optin = 0;
    const int range_levels = range_levels_for(n_levels, s.device);
    return s.mode == kExact && !s.list && s.score == nullptr &&
           size_t(n_levels + 1) * 2 * sizeof(uint32_t) > counters_max(ev) &&
           n_levels <= int64_t(kMaxRanges) * range_levels &&
           RangeSorter::kSharedBytes + kStaticSharedMargin <= size_t(optin) &&
           drain_bucket_bits(s.device, range_levels) > 0;
}

PassParams pass_params(roc_eval_cuda *ev, int64_t row_begin, int64_t row_end, uint32_t *keys)
{
    const size_t counters = counters_max(ev);
    PassParams p{};
    p.n_gallery = ev->src.n_gallery;
    p.row_begin = row_begin;
    p.row_end = row_end;
    p.same_set = ev->src.same_set;
    p.row_offset = ev->src.row_offset;
    p.levels = ev->levels.get();
    p.n_levels = ev->n_levels;
    p.lut = ev->lut.get();
    p.lut_base = ev->lut_base;
    p.lut_shift = ev->lut_shift;
    p.at = ev->at;
    p.gap = ev->gap;
    p.gap_min = ev->gap_min;
    p.shared_gaps = size_t(ev->n_levels + 1) * 2 * sizeof(uint32_t) <= counters;
    p.part = ev->part;
    p.aside_keys = ev->aside_keys.get();
    p.aside_used = ev->aside_used.get();
    p.edges = ev->edges.get();
    p.n_bins = ev->n_bins;
    p.lo32 = ev->lo32;
    p.scale32 = ev->scale32;
    p.bins = ev->bins.get();
    p.shared_bins = shared_bins_bytes(ev->n_bins) <= counters;
    p.keys = keys;
    p.totals = ev->totals.get();
    p.block_top_key = ev->block_top_key.get();
    p.block_top_count = ev->block_top_count.get();
    return p;
}

/* Partitioned exact: the keys the last launch left in the ranges' segments
 * counted (drain_kernel), and the segments resized for the next. */
cudaError_t drain_ranges(roc_eval_cuda *ev)
{
    cudaStream_t stream = ev->arena.stream();
    const int n_ranges = ev->part.n_ranges;
    /* about two blocks a multiprocessor in all (two waves), each with at most
     * kMaxDrainParts parts; EXT_ROC_DRAIN_SLICES, where set, the blocks a
     * range (the tests make it 1, so that one block sees a range's keys) */
    const int64_t forced = env_tuning("EXT_ROC_DRAIN_SLICES", 1, 0);
    const int even = std::min(ev->part.n_blocks,
                              std::max(1, (2 * ext_sm_count() + n_ranges - 1) / n_ranges));
    const int slices = std::max(forced > 0 ? int(std::min<int64_t>(forced, ev->part.n_blocks))
                                           : even,
                                (ev->part.n_blocks + kMaxDrainParts - 1) / kMaxDrainParts);
    const DrainParams d{ev->levels.get(),         ev->range_first.get(),
                        ev->drain_index.get(),    ev->range_keys.get(),
                        ev->range_offset.get(),   ev->range_capacity.get(),
                        ev->range_block_used.get(), n_ranges,
                        ev->part.n_blocks,        ev->drain_bucket_bits, ev->at,
                        ev->gap,            ev->gap_min};
    const dim3 grid{unsigned(slices), unsigned(n_ranges)};
    const size_t shared = drain_shared_bytes(ev->range_levels, ev->drain_bucket_bits);
    if (ev->range_levels > kRangeLevels)
        drain_kernel<kWideRangeLevels><<<grid, kDrainThreads, shared, stream>>>(d);
    else
        drain_kernel<kRangeLevels><<<grid, kDrainThreads, shared, stream>>>(d);
    EXT_CUDA_TRY(cudaGetLastError());
    segment_kernel<<<1, kHistogram, 0, stream>>>(
        ev->range_reserved.get(), ev->range_capacity.get(), ev->range_offset.get(),
        ev->range_stage_layout.get(), ev->range_stage_owner.get(), n_ranges,
        ev->range_keys_total);
    return cudaGetLastError();
}

/* Room in `chunk` for `tiles` stored tiles. */
cudaError_t chunk_room(Buffer<float> &chunk, int64_t tiles)
{
    return chunk.size() < size_t(tiles * kTilePairs) ? chunk.allocate(size_t(tiles * kTilePairs))
                                                     : cudaSuccess;
}

/* The blocks of a feature pass's tile kernels for tiles [begin, end): two a
 * multiprocessor (their registers), persistent. */
int64_t tile_blocks(int64_t begin, int64_t end)
{
    return std::min<int64_t>(2 * ext_sm_count(), end - begin);
}

/* Tiles [q.tile_begin, q.tile_end) of a feature pass stored into `chunk`
 * (tile_kernel, at most `blocks` blocks). */
cudaError_t store_tiles(cudaStream_t stream, const Operands &op, const PassParams &q, float *chunk,
                        int64_t blocks = INT64_MAX)
{
    const int tile_shared = int(sizeof(FeatureTile::Shared));
    const unsigned n_tile_blocks =
        unsigned(std::min(blocks, tile_blocks(q.tile_begin, q.tile_end)));
    EXT_CUDA_TRY(cudaFuncSetAttribute(tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      tile_shared));
    tile_kernel<<<n_tile_blocks, FeatureTile::kThreads, tile_shared, stream>>>(op, q, chunk);
    return cudaGetLastError();
}

/* The evaluator's stream waits for the tiles stored ahead (before it reads
 * them, writes over them or over their operands). */
cudaError_t join_ahead(roc_eval_cuda *ev)
{
    if (!ev->ahead_pending)
        return cudaSuccess;
    ev->ahead_pending = false;
    return cudaStreamWaitEvent(ev->arena.stream(), ev->ahead_done, 0);
}

/* The same into the evaluator's chunk, unless it holds them already (stored
 * ahead: the first call's first chunk, the chunk after the probe). */
cudaError_t store_tiles(roc_eval_cuda *ev, const Operands &op, const PassParams &q)
{
    EXT_CUDA_TRY(join_ahead(ev));
    if (ev->stored.start(op, q) && ev->stored.tile_end == q.tile_end)
        return cudaSuccess;
    ev->stored = StoredTiles{};
    EXT_CUDA_TRY(chunk_room(ev->chunk, q.tile_end - q.tile_begin));
    EXT_CUDA_TRY(store_tiles(ev->arena.stream(), op, q, ev->chunk.get()));
    ev->stored = StoredTiles::of(op, q);
    return cudaSuccess;
}

/* The stored tiles [q.tile_begin, q.tile_end) of `chunk` counted
 * (count_tiles_kernel<kMode>, `blocks` blocks with `shared` bytes of
 * counters; kPartitioned: partition_kernel, its blocks set_ranges'); kAside's
 * keys set aside then counted where `aside_due` (count_aside_kernel, a block
 * for each warp of `blocks`). */
template <int kMode>
cudaError_t count_stored(cudaStream_t stream, const Operands &op, const PassParams &q,
                         float *chunk, int blocks, size_t shared, bool aside_due = false)
{
    if constexpr (kMode == kPartitioned) {
        partition_kernel_for(q.part.scale)
            <<<blocks, kPartitionThreads, RangeSorter::kSharedBytes, stream>>>(op, q, chunk);
    } else {
        count_tiles_kernel<kMode><<<blocks, kThreads, shared, stream>>>(op, q, chunk);
        if (kMode == kAside && aside_due) {
            EXT_CUDA_TRY(cudaGetLastError());
            count_aside_kernel<<<blocks * (kThreads / 32), kThreads, 0, stream>>>(q);
        }
    }
    return cudaGetLastError();
}

/* Launches one pass with a persistent grid: over rows [p.row_begin,
 * p.row_end) of the score matrix or of the features' operands `op`, or over
 * pairs [begin, begin + p.n_gallery) of a list (one "row" of p.n_gallery
 * pairs). The blocks' top keys are merged once, after the last launch. */
template <int kMode>
cudaError_t launch_pass(roc_eval_cuda *ev, const PassParams &p, int64_t list_begin,
                        const Operands *op, int64_t tile_from = 0, int64_t tile_to = -1)
{
    const roc_source &s = ev->src;
    const bool features = !s.list && s.score == nullptr;
    const bool listed = s.list && s.score == nullptr;
    cudaStream_t stream = ev->arena.stream();
    const size_t shared = counter_bytes(kMode, p);
    const int threads = kThreads;
    /* kPartitioned: the partition kernel's (set_ranges); kAside: its tile kernel's, below */
    int blocks = ev->part.n_blocks;
    if constexpr (kMode != kPartitioned) {
        const void *func = reinterpret_cast<const void *>(count_tiles_kernel<kMode>);
        if (kMode != kAside && !features) /* kAside: from features only */
            func = listed ? reinterpret_cast<const void *>(list_pass_kernel<kMode>)
                          : reinterpret_cast<const void *>(score_pass_kernel<kMode>);
        /* set even below 48 KB: the kernels' static shared memory counts too */
        EXT_CUDA_TRY(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(shared)));
        int per_sm = 0;
        EXT_CUDA_TRY(ext_blocks_per_sm(func, threads, shared, &per_sm));
        blocks = std::min(ev->pass_blocks, ext_sm_count() * per_sm);
    }
    auto merge_top = [&]() {
        if (kMode != kExact && kMode != kPartitioned && kMode != kAside)
            return cudaSuccess;
        merge_top_kernel<<<1, 32, 0, stream>>>(ev->block_top_key.get(),
                                              ev->block_top_count.get(), blocks,
                                              ev->top_key, ev->top_count);
        return cudaGetLastError();
    };
    if (features) {
        int64_t tiles_m, tiles_n;
        const int64_t tiles = tile_to < 0 ? feature_tiles(*op, p, &tiles_m, &tiles_n) : tile_to;
        /* chunks of tiles, each stored then counted (one stored ahead as it
         * is); partitioned, each drained after it */
        const int64_t step = std::min(chunk_tiles(kMode, tiles), tiles - tile_from);
        /* kAside: a segment for each warp of the count, counted (all of
         * them, one launch of count_aside_kernel) once the probe's share of
         * the pairs since the last time would fill a quarter of each; a
         * launch of it after every launch of the count, most of its blocks
         * with nothing due, took 1.6 ms of 233 at 1e10 (H100) */
        const size_t warps = size_t(blocks) * (kThreads / 32);
        const uint32_t segment = kMode == kAside ? uint32_t(ev->aside_keys.size() / warps) : 0;
        double aside_fill = 0;
        PassParams q = p;
        for (q.tile_end = tile_from; q.tile_end < tiles;) {
            q.tile_begin = q.tile_end;
            q.tile_end = std::min(q.tile_begin + step, tiles);
            if (ev->stored.start(*op, q) && ev->stored.tile_end < q.tile_end)
                q.tile_end = ev->stored.tile_end;
            q.tile_first = tile_from;
            q.aside_segment = segment;
            aside_fill += double(q.tile_end - q.tile_begin) * kTilePairs * ev->aside_share /
                          double(warps);
            const bool aside_due = q.tile_end == tiles || aside_fill >= segment / 4.0;
            if (aside_due)
                aside_fill = 0;
            EXT_CUDA_TRY(store_tiles(ev, *op, q));
            EXT_CUDA_TRY(
                count_stored<kMode>(stream, *op, q, ev->chunk.get(), blocks, shared, aside_due));
            if (kMode == kPartitioned)
                EXT_CUDA_TRY(drain_ranges(ev));
        }
        return merge_top();
    }
    if constexpr (kMode != kPartitioned && kMode != kAside) {
        if (listed)
            list_pass_kernel<kMode><<<blocks, threads, shared, stream>>>(ev->list, list_begin, p);
        else
            score_pass_kernel<kMode><<<blocks, threads, shared, stream>>>(
                s.list ? s.score + list_begin : s.score, p);
        EXT_CUDA_TRY(cudaGetLastError());
    }
    return merge_top();
}

/* The blocks of tile_kernel storing the first chunk ahead: two on all but
 * 1/16 of the multiprocessors, where the genuine pairs' kernels run beside
 * it (else they would wait for the whole chunk). At the blog size, H100:
 * 5.61 ms with 8 of 132 beside, 5.72 with 16 or 24, 5.78 with 32; on
 * another machine 5.82 with 4 and 6.48 with none. */
int64_t first_chunk_blocks()
{
    return 2 * std::max(1, ext_sm_count() - ext_sm_count() / 16);
}

/* The tiles the first launch of a feature pass over `tiles` tiles makes where
 * it probes (set_levels' probe_count), the first chunk stored ahead: seven
 * waves of first_chunk_blocks (within the partition's chunk), at most half
 * of them, at least one. */
int64_t probe_tiles(int64_t tiles)
{
    const int64_t chunk = std::min(chunk_tiles(kPartitioned, tiles), 7 * first_chunk_blocks());
    return std::max(int64_t(1), std::min(tiles / 2, chunk));
}

/* Tiles q of `op` stored on the ahead stream, once the evaluator's stream is
 * done with what it was given (the chunk's last count); with the operands
 * of its first block prepared there first where `first` (rows [op.m_base,
 * q.row_end), columns [op.n_begin, op.n_end); their room allocated). Every
 * buffer is allocated before, in the evaluator's stream's order. */
cudaError_t store_ahead(roc_eval_cuda *ev, const Operands &op, const PassParams &q, bool first,
                        int64_t blocks)
{
    FeatureOperands &f = ev->features;
    EXT_CUDA_TRY(join_ahead(ev));
    ev->stored = StoredTiles{};
    EXT_CUDA_TRY(chunk_room(ev->chunk, q.tile_end - q.tile_begin));
    EXT_CUDA_TRY(cudaEventRecord(ev->ahead_start, ev->arena.stream()));
    EXT_CUDA_TRY(cudaStreamWaitEvent(ev->ahead, ev->ahead_start, 0));
    if (first) {
        EXT_CUDA_TRY(prepare_block(f, f.q, op.m_base, q.row_end, ev->ahead));
        EXT_CUDA_TRY(prepare_block(f, f.g, op.n_begin, op.n_end, ev->ahead));
    }
    EXT_CUDA_TRY(store_tiles(ev->ahead, op, q, ev->chunk.get(), blocks));
    EXT_CUDA_TRY(cudaEventRecord(ev->ahead_done, ev->ahead));
    ev->ahead_pending = true;
    ev->stored = StoredTiles::of(op, q);
    return cudaSuccess;
}

/* The first add_rows call's first chunk (where the evaluator has an ahead
 * stream: the caller said the call's rows), as its first launch will count
 * it: the first block of query rows [0, qb) against the first chunk of the
 * gallery (over_feature_blocks'), the probe's tiles (exact; where it does
 * not probe, the rest of its first chunk follows), else a chunk of the
 * mode's size made in whole waves of first_chunk_blocks. */
cudaError_t store_first_tiles(roc_eval_cuda *ev)
{
    if (!ev->ahead)
        return cudaSuccess;
    FeatureOperands &f = ev->features;
    const int64_t qb = std::min(f.q.block_rows, std::min(ev->src.n_query, ev->src.step_rows));
    const int64_t gb = std::min(f.g.block_rows, f.g.n);
    EXT_CUDA_TRY(prepare_room(f, f.q, 0, qb));
    EXT_CUDA_TRY(prepare_room(f, f.g, 0, gb));
    const Operands op = block_operands(f, 0, qb, 0, gb);
    PassParams q = pass_params(ev, 0, qb, nullptr);
    int64_t tiles_m, tiles_n;
    const int64_t tiles = feature_tiles(op, q, &tiles_m, &tiles_n);
    const int64_t waves = 7 * first_chunk_blocks();
    q.tile_begin = 0;
    q.tile_end = ev->src.mode == kExact
                     ? probe_tiles(tiles)
                     : std::min({chunk_tiles(ev->src.mode, tiles), waves, tiles});
    /* room for the chunk after it too (stored ahead after the probe): a
     * buffer allocated then took up to 0.37 ms of the host's (H100) */
    EXT_CUDA_TRY(chunk_room(ev->chunk, std::min(chunk_tiles(kPartitioned, tiles), tiles)));
    return store_ahead(ev, op, q, true, first_chunk_blocks());
}

/* Curve mode: the rows' keys, sorted and run-length encoded, merged into the
 * distinct keys so far (concatenate, sort by key, add equal keys' counts). */
cudaError_t merge_keys(roc_eval_cuda *ev, Buffer<uint32_t> &keys, int64_t n)
{
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    Buffer<uint32_t> sorted(arena), cat_keys(arena), cat_sorted(arena);
    Buffer<unsigned long long> cat_counts(arena), cat_counts_sorted(arena);
    Buffer<int64_t> n_runs(arena);
    EXT_CUDA_TRY(sorted.allocate(n));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortKeys(tmp, bytes, keys.get(), sorted.get(), n, 0, 32,
                                              stream);
    }));
    keys.release();
    const int64_t total = ev->n_acc + n;
    EXT_CUDA_TRY(cat_keys.allocate(total));
    EXT_CUDA_TRY(cat_counts.allocate(total));
    EXT_CUDA_TRY(n_runs.allocate(1));
    /* the new keys' runs go after the distinct keys so far */
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRunLengthEncode::Encode(tmp, bytes, sorted.get(),
                                                  cat_keys.get() + ev->n_acc,
                                                  cat_counts.get() + ev->n_acc, n_runs.get(), n,
                                                  stream);
    }));
    sorted.release();
    int64_t new_runs = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&new_runs, n_runs.get(), sizeof new_runs,
                                 cudaMemcpyDeviceToHost, stream));
    if (ev->n_acc) {
        EXT_CUDA_TRY(cudaMemcpyAsync(cat_keys.get(), ev->acc_keys.get(),
                                     ev->n_acc * sizeof(uint32_t), cudaMemcpyDeviceToDevice,
                                     stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(cat_counts.get(), ev->acc_counts.get(),
                                     ev->n_acc * sizeof(unsigned long long),
                                     cudaMemcpyDeviceToDevice, stream));
    }
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    ev->acc_keys.release();
    ev->acc_counts.release();
    const int64_t n_cat = ev->n_acc + new_runs;
    ev->n_acc = 0;
    EXT_CUDA_TRY(cat_sorted.allocate(n_cat));
    EXT_CUDA_TRY(cat_counts_sorted.allocate(n_cat));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortPairs(tmp, bytes, cat_keys.get(), cat_sorted.get(),
                                               cat_counts.get(), cat_counts_sorted.get(), n_cat,
                                               0, 32, stream);
    }));
    cat_keys.release();
    cat_counts.release();
    EXT_CUDA_TRY(ev->acc_keys.allocate(n_cat));
    EXT_CUDA_TRY(ev->acc_counts.allocate(n_cat));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceReduce::ReduceByKey(tmp, bytes, cat_sorted.get(), ev->acc_keys.get(),
                                              cat_counts_sorted.get(), ev->acc_counts.get(),
                                              n_runs.get(), cuda::std::plus<>{}, n_cat, stream);
    }));
    EXT_CUDA_TRY(cudaMemcpyAsync(&ev->n_acc, n_runs.get(), sizeof ev->n_acc,
                                 cudaMemcpyDeviceToHost, stream));
    return cudaStreamSynchronize(stream);
}

/* Exact mode over n flat scores with many levels (kSortedLevels): sorted, the
 * pairs of one gap come together, so the level lookups run in key order and
 * each gap (or level) a chunk touches costs one atomic, instead of two
 * scattered ones a pair. Memory: buffers of kSortedChunk keys. */
cudaError_t count_sorted(roc_eval_cuda *ev, const PassParams &p, const float *score, int64_t n)
{
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    for (int64_t begin = 0; begin < n; begin += kSortedChunk) {
        const int64_t m = std::min(kSortedChunk, n - begin);
        Buffer<uint32_t> keys(arena), sorted(arena), unique(arena);
        Buffer<unsigned long long> counts(arena);
        Buffer<int64_t> n_runs(arena), slots(arena), unique_slots(arena);
        Buffer<RunCount> runs(arena), merged(arena);
        EXT_CUDA_TRY(keys.allocate(m));
        flat_keys_kernel<<<grid_for(m), kThreads, 0, stream>>>(score + begin, m, keys.get(),
                                                              ev->totals.get());
        EXT_CUDA_TRY(cudaGetLastError());
        EXT_CUDA_TRY(sorted.allocate(m));
        EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
            return cub::DeviceRadixSort::SortKeys(tmp, bytes, keys.get(), sorted.get(), m, 0, 32,
                                                  stream);
        }));
        keys.release();
        EXT_CUDA_TRY(unique.allocate(m));
        EXT_CUDA_TRY(counts.allocate(m));
        EXT_CUDA_TRY(n_runs.allocate(1));
        EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
            return cub::DeviceRunLengthEncode::Encode(tmp, bytes, sorted.get(), unique.get(),
                                                      counts.get(), n_runs.get(), m, stream);
        }));
        sorted.release();
        /* block 0's top slot takes the chunk's highest key, merged like a pass's */
        EXT_CUDA_TRY(cudaMemsetAsync(ev->block_top_count.get(), 0, sizeof(unsigned long long),
                                     stream));
        EXT_CUDA_TRY(slots.allocate(m));
        EXT_CUDA_TRY(runs.allocate(m));
        slot_of_runs_kernel<<<grid_for(m), kThreads, 0, stream>>>(unique.get(), counts.get(),
                                                                  n_runs.get(), p, slots.get(),
                                                                  runs.get());
        EXT_CUDA_TRY(cudaGetLastError());
        unique.release();
        counts.release();
        /* the runs of one slot are consecutive: one merged count a slot */
        int64_t host_runs = 0;
        EXT_CUDA_TRY(cudaMemcpyAsync(&host_runs, n_runs.get(), sizeof host_runs,
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaStreamSynchronize(stream));
        EXT_CUDA_TRY(unique_slots.allocate(host_runs));
        EXT_CUDA_TRY(merged.allocate(host_runs));
        EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
            return cub::DeviceReduce::ReduceByKey(tmp, bytes, slots.get(), unique_slots.get(),
                                                  runs.get(), merged.get(), n_runs.get(),
                                                  MergeRuns{}, host_runs, stream);
        }));
        count_slots_kernel<<<grid_for(host_runs), kThreads, 0, stream>>>(
            unique_slots.get(), merged.get(), n_runs.get(), p);
        EXT_CUDA_TRY(cudaGetLastError());
        merge_top_kernel<<<1, 32, 0, stream>>>(ev->block_top_key.get(), ev->block_top_count.get(),
                                              1, ev->top_key, ev->top_count);
        EXT_CUDA_TRY(cudaGetLastError());
    }
    return cudaSuccess;
}

/* A list's features for its kernels: as they are for dot, scaled to unit
 * length (row-major) for cosine; one copy when both sides are one array. */
cudaError_t prepare_list(roc_eval_cuda *ev)
{
    const roc_source &s = ev->src;
    PairList &list = ev->list;
    list = PairList{s.genuine, s.index_a, s.index_b, s.genuine_dtype, s.index_dtype,
                    s.score, s.feat_q, s.feat_g, s.dim, s.n_a, s.n_gallery};
    if (!s.feat_q || s.similarity != ROC_COSINE)
        return cudaSuccess;
    ExtDeviceArena &arena = ev->arena;
    const bool shared = s.feat_q == s.feat_g && s.n_a == s.n_gallery;
    const int64_t n_rows[2] = {s.n_a, s.n_gallery};
    const float *rows[2] = {s.feat_q, s.feat_g};
    Buffer<float> *scaled[2] = {&ev->scaled_a, &ev->scaled_b};
    for (int side = 0; side < (shared ? 1 : 2); side++) {
        const int64_t n = n_rows[side];
        Buffer<double> inverse(arena);
        EXT_CUDA_TRY(inverse.allocate(n));
        EXT_CUDA_TRY(scaled[side]->allocate(n * s.dim));
        EXT_CUDA_TRY(launch_inverse_norms(arena.stream(), rows[side], n, s.dim, inverse.get()));
        scale_rows_kernel<<<grid_for(n * s.dim), kThreads, 0, arena.stream()>>>(
            rows[side], n, s.dim, inverse.get(), scaled[side]->get());
        EXT_CUDA_TRY(cudaGetLastError());
    }
    list.a = ev->scaled_a.get();
    list.b = shared ? list.a : ev->scaled_b.get();
    return cudaSuccess;
}

cudaError_t create(roc_eval_cuda *ev, const roc_counts *counts, roc_genuine_levels *genuine,
                   roc_totals *totals, roc_bad_input *bad)
{
    const roc_source &s = ev->src;
    cudaStream_t stream = ev->arena.stream();
    if (s.list) {
        EXT_CUDA_TRY(prepare_list(ev));
        EXT_CUDA_TRY(find_list_genuine(ev, genuine, totals, bad));
    } else {
        if (s.feat_q) {
            EXT_CUDA_TRY(feature_setup(ev->arena, ev->features, s.feat_q, s.feat_g, s.n_query,
                                       s.n_gallery, s.dim, s.similarity, s.step_rows));
            if (s.step_rows > 0 && s.n_query > 0 && s.n_gallery > 0 &&
                (s.mode == kExact || s.mode == kBinned)) {
                EXT_CUDA_TRY(cudaStreamCreateWithFlags(&ev->ahead, cudaStreamNonBlocking));
                for (cudaEvent_t *e : {&ev->ahead_start, &ev->ahead_done})
                    EXT_CUDA_TRY(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
                EXT_CUDA_TRY(store_first_tiles(ev));
            }
        }
        EXT_CUDA_TRY(find_genuine(ev, genuine, totals));
    }
    if (bad->kind)
        return cudaSuccess;
    EXT_CUDA_TRY(ev->totals.allocate(2));
    ev->pass_blocks = ext_sm_count() * 8;
    if (s.mode == kBinned) {
        const roc_binned_counts &b = counts->binned;
        ev->n_bins = b.n_bins;
        ev->lo32 = b.lo32;
        ev->scale32 = b.scale32;
        EXT_CUDA_TRY(ev->edges.allocate(b.n_bins + 1));
        EXT_CUDA_TRY(cudaMemcpyAsync(ev->edges.get(), b.edges, (b.n_bins + 1) * sizeof(float),
                                     cudaMemcpyHostToDevice, stream));
    }
    return cudaStreamSynchronize(stream);
}

/* Keys the segments' buffer holds: a launch's pairs of the partitioned
 * count (chunk_tiles), and 30% more, since each range's segment is sized by
 * the last launch's keys and each partition block fills its own part of it
 * (1M x 65,000 hard, H100: 10% more left keys past their part, the
 * partition 5% slower; 30% and 66% more ran alike). A key past its part is
 * counted directly, so the counts are exact either way. At most 2^28 (1 GiB).
 * EXT_ROC_PARTITION_KIB, where set, replaces it (the tests make it small, so
 * that segments fill). */
int64_t partition_keys()
{
    const int64_t kib = env_tuning("EXT_ROC_PARTITION_KIB", 1, 0);
    /* both knobs bounded first: they may be any whole number, and the
     * segments' offsets are 32-bit */
    if (kib > 0)
        return std::min(kib, int64_t(1) << 23) * 1024 / int64_t(sizeof(uint32_t));
    const int64_t tiles = std::min(chunk_tiles(kPartitioned, INT64_MAX), int64_t(1) << 20);
    return std::min(tiles * kTilePairs * 13 / 10, int64_t(1) << 28);
}

/* range_axis (roc_count.cuh) on the host, to the bit: the product by a power
 * of two is exact in double, then truncated and saturated as the device's
 * conversion does. */
uint32_t host_range_axis(uint32_t key, float scale)
{
    if (!(scale > 0.0f))
        return key;
    const double x = std::trunc(double(roc_key_score(key)) * double(scale));
    const double limit = 2147483648.0; /* 2^31 */
    const int32_t v = x >= limit ? INT32_MAX : x < -limit ? INT32_MIN : int32_t(x);
    return uint32_t(v);
}

/* How sorted level keys fall into ranges for one axis of the index. */
struct RangeCut {
    float scale = 0.0f;
    uint32_t base = 0;
    int shift = 0;
    std::vector<uint32_t> first;  /* n_ranges + 1 */
    std::vector<uint16_t> index;  /* kRangeBuckets + 1 */
    int64_t split_buckets = 0;    /* buckets a range starts inside */
};

/* Ranges of at most `most` levels that end where buckets end, where the
 * range so far holds at least `min_fill` levels; else (a bucket of more
 * levels than a range, or a range not full enough) cut inside the bucket.
 * So there are at most U / min_fill + 1 ranges, and with min_fill above
 * `most` the ranges are `most` levels each, the last fewer. */
RangeCut cut_ranges(const uint32_t *keys, int64_t U, float scale, int64_t most,
                    int64_t min_fill, int64_t most_buckets)
{
    RangeCut c;
    c.scale = scale;
    c.base = host_range_axis(keys[0], scale);
    const uint32_t span = host_range_axis(keys[U - 1], scale) - c.base;
    while ((span >> c.shift) >= uint64_t(most_buckets))
        c.shift++;
    const int64_t n_buckets = int64_t(span >> c.shift) + 1;
    std::vector<uint32_t> bucket(U);
    for (int64_t i = 0; i < U; i++)
        bucket[i] = (host_range_axis(keys[i], scale) - c.base) >> c.shift;
    std::vector<bool> inside{false}; /* whether range r starts inside its bucket */
    c.first.push_back(0);
    for (int64_t j = 0; j < U;) {
        int64_t end = j; /* the end of the bucket of level j (or of its rest) */
        while (end < U && bucket[end] == bucket[j])
            end++;
        const int64_t start = c.first.back();
        if (end - start <= most) {
            j = end;
        } else if (j - start >= min_fill) { /* the range ends with the bucket before */
            c.first.push_back(uint32_t(j));
            inside.push_back(false);
        } else {
            j = start + most;
            c.first.push_back(uint32_t(j));
            inside.push_back(true);
        }
    }
    c.first.push_back(uint32_t(U));
    const int n_ranges = int(c.first.size()) - 1;
    /* each bucket's entry: the last range that starts before it, or at its
     * start; kAmbiguous where another starts inside it */
    c.index.assign(kRangeBuckets + 1, uint16_t(n_ranges - 1));
    int r = 0;
    for (int64_t b = 0; b < n_buckets; b++) {
        while (r + 1 < n_ranges && (bucket[c.first[r + 1]] < b ||
                                    (bucket[c.first[r + 1]] == b && !inside[r + 1])))
            r++;
        const bool split = r + 1 < n_ranges && bucket[c.first[r + 1]] == b;
        c.index[b] = uint16_t(r | (split ? kAmbiguous : 0));
        c.split_buckets += split;
    }
    return c;
}

/* The ranges of the sorted level keys (host) for partitioned counting: each
 * range's levels and lowest level, the index from a key to its range, the
 * segments' buffer and its segments, even at first. The index's buckets are
 * even in the score where that splits fewer of them (cosine scores: their
 * levels crowd few buckets of the key), else in the key (scores over many
 * binades); both with ranges at least half full, unless that makes more than
 * kMaxRanges. */
cudaError_t set_ranges(roc_eval_cuda *ev, const uint32_t *keys)
{
    cudaStream_t stream = ev->arena.stream();
    const int64_t U = ev->n_levels;
    /* EXT_ROC_RANGE_BUCKETS, for the tests: fewer buckets, crowded with levels */
    const int64_t buckets = std::min(env_tuning("EXT_ROC_RANGE_BUCKETS", 1, kRangeBuckets),
                                     int64_t(kRangeBuckets));
    const int most = range_levels_for(U, ev->src.device); /* can_partition's */
    RangeCut cut = cut_ranges(keys, U, 0.0f, most, most / 2, buckets);
    const float lo = roc_key_score(keys[0]), hi = roc_key_score(keys[U - 1]);
    const float largest = std::max(std::fabs(lo), std::fabs(hi));
    int exponent = 0;
    if (std::isfinite(largest) && largest > 0.0f) {
        std::frexp(largest, &exponent); /* largest < 2^exponent */
        if (exponent >= -96 && exponent <= 126) { /* 2^(30 - exponent): a normal float */
            RangeCut by_score =
                cut_ranges(keys, U, std::ldexp(1.0f, 30 - exponent), most, most / 2, buckets);
            if (by_score.split_buckets < cut.split_buckets)
                cut = std::move(by_score);
        }
    }
    if (cut.first.size() - 1 > size_t(kMaxRanges))
        cut = cut_ranges(keys, U, 0.0f, most, int64_t(most) + 1, buckets);
    const int n_ranges = int(cut.first.size()) - 1;
    std::vector<uint32_t> starts(n_ranges);
    for (int r = 0; r < n_ranges; r++)
        starts[r] = keys[cut.first[r]];
    ev->range_keys_total = partition_keys();
    const void *partition = reinterpret_cast<const void *>(partition_kernel_for(cut.scale));
    EXT_CUDA_TRY(cudaFuncSetAttribute(partition, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(RangeSorter::kSharedBytes)));
    int per_sm = 0;
    EXT_CUDA_TRY(ext_blocks_per_sm(partition, kPartitionThreads, RangeSorter::kSharedBytes,
                                   &per_sm));
    /* each keeps a Counter, and its top key in a slot of pass_blocks' */
    const int sorter_blocks = std::min(std::max(1, per_sm) * ext_sm_count(), ev->pass_blocks);
    EXT_CUDA_TRY(ev->range_first.allocate(n_ranges + 1));
    EXT_CUDA_TRY(ev->range_starts.allocate(n_ranges));
    EXT_CUDA_TRY(ev->range_index.allocate(kRangeBuckets + 1));
    EXT_CUDA_TRY(ev->drain_index.allocate(size_t(n_ranges) * kDrainIndexStride));
    ev->range_levels = most;
    ev->drain_bucket_bits = drain_bucket_bits(ev->src.device, most); /* can_partition: not 0 */
    EXT_CUDA_TRY(ev->range_keys.allocate(ev->range_keys_total));
    EXT_CUDA_TRY(ev->range_offset.allocate(n_ranges));
    EXT_CUDA_TRY(ev->range_capacity.allocate(n_ranges));
    EXT_CUDA_TRY(ev->range_reserved.allocate(n_ranges));
    EXT_CUDA_TRY(ev->range_stage_layout.allocate(n_ranges));
    EXT_CUDA_TRY(ev->range_stage_owner.allocate(kStageWords));
    EXT_CUDA_TRY(ev->range_block_used.allocate(size_t(sorter_blocks) * n_ranges));
    EXT_CUDA_TRY(cudaMemcpyAsync(ev->range_starts.get(), starts.data(),
                                 n_ranges * sizeof(uint32_t), cudaMemcpyHostToDevice, stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(ev->range_first.get(), cut.first.data(),
                                 cut.first.size() * sizeof(uint32_t), cudaMemcpyHostToDevice,
                                 stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(ev->range_index.get(), cut.index.data(),
                                 cut.index.size() * sizeof(uint16_t), cudaMemcpyHostToDevice,
                                 stream));
    EXT_CUDA_TRY(cudaMemsetAsync(ev->range_reserved.get(), 0, n_ranges * sizeof(uint32_t),
                                 stream));
    drain_index_kernel<<<n_ranges, kDrainThreads, 0, stream>>>(
        ev->levels.get(), ev->range_first.get(), ev->drain_bucket_bits, ev->drain_index.get());
    segment_kernel<<<1, kHistogram, 0, stream>>>(
        ev->range_reserved.get(), ev->range_capacity.get(), ev->range_offset.get(),
        ev->range_stage_layout.get(), ev->range_stage_owner.get(), n_ranges,
        ev->range_keys_total);
    EXT_CUDA_TRY(cudaGetLastError());
    EXT_CUDA_TRY(cudaFuncSetAttribute(drain_kernel_for(most),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(drain_shared_bytes(most, ev->drain_bucket_bits))));
    ev->part = RangePartition{n_ranges,
                              ev->range_first.get(),
                              cut.scale,
                              cut.base,
                              cut.shift,
                              ev->range_starts.get(),
                              ev->range_index.get(),
                              ev->range_keys.get(),
                              ev->range_offset.get(),
                              ev->range_capacity.get(),
                              sorter_blocks,
                              ev->range_block_used.get(),
                              ev->range_reserved.get(),
                              ev->range_stage_layout.get(),
                              ev->range_stage_owner.get()};
    /* the host vectors are copied before they go */
    return cudaStreamSynchronize(stream);
}

/* The level index's table: entry b is the first level at or above bucket b's
 * start (roc_level_index_build's, made here from the levels uploaded). */
__global__ void level_index_kernel(const uint32_t *levels, int64_t n_levels, uint32_t base,
                                   int shift, int64_t n_buckets, uint32_t *lut)
{
    for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b <= n_buckets;
         b += int64_t(gridDim.x) * blockDim.x) {
        lut[b] = uint32_t(first_level_from(levels, n_levels, roc_bucket_start(base, shift, b)));
    }
}

/* Keys the feature pass may set aside in one launch (exact mode with global
 * counters), shared out among its warps: 2^24 (64 MiB), or the evaluation's
 * pairs where fewer. The 1e10 workload (50,000 x 200,000, 0.2% of the pairs
 * above the lowest level) sets ~10^7 aside a launch, ~9,500 a warp of ~15,900
 * places on the H100; a warp's keys past its place are counted in the pass.
 * EXT_ROC_ASIDE_KEYS, where set, replaces it (the tests fill a small one). */
size_t aside_capacity(const roc_eval_cuda *ev)
{
    const int64_t forced = env_tuning("EXT_ROC_ASIDE_KEYS", 1, 0);
    if (forced > 0)
        return size_t(std::min(forced, int64_t(UINT32_MAX)));
    const int64_t pairs = ev->src.n_query * ev->src.n_gallery;
    return size_t(std::max(int64_t(1), std::min(pairs, int64_t(1) << 24)));
}

/* Zeroed counters for `levels` (exact), or for the bins; the totals too. */
cudaError_t set_levels(roc_eval_cuda *ev, const roc_genuine_levels *levels,
                       const roc_level_index *shape)
{
    cudaStream_t stream = ev->arena.stream();
    EXT_CUDA_TRY(cudaMemsetAsync(ev->totals.get(), 0, 2 * sizeof(unsigned long long), stream));
    if (ev->src.mode == kBinned) {
        EXT_CUDA_TRY(ev->bins.allocate(ev->n_bins + 2));
        EXT_CUDA_TRY(cudaMemsetAsync(ev->bins.get(), 0,
                                     (ev->n_bins + 2) * sizeof(unsigned long long), stream));
    }
    if (ev->src.mode != kExact)
        return cudaStreamSynchronize(stream);
    const int64_t U = levels->n_levels;
    ev->n_levels = U;
    ev->lut_base = shape->base;
    ev->lut_shift = shape->shift;
    EXT_CUDA_TRY(ev->levels.allocate(U));
    EXT_CUDA_TRY(ev->lut.allocate(U ? shape->n_buckets + 1 : 0));
    const size_t n = size_t(U) + 1, words = 2 * n + (n + 1) / 2; /* at, gap, gap_min */
    EXT_CUDA_TRY(ev->counters.allocate(words + 2));
    ev->at = ev->counters.get();
    ev->gap = ev->at + n;
    ev->gap_min = reinterpret_cast<uint32_t *>(ev->at + 2 * n);
    ev->top_count = ev->at + words;
    ev->top_key = reinterpret_cast<uint32_t *>(ev->at + words + 1);
    EXT_CUDA_TRY(ev->block_top_key.allocate(ev->pass_blocks));
    EXT_CUDA_TRY(ev->block_top_count.allocate(ev->pass_blocks));
    if (U) {
        EXT_CUDA_TRY(cudaMemcpyAsync(ev->levels.get(), levels->keys, U * sizeof(uint32_t),
                                     cudaMemcpyHostToDevice, stream));
        level_index_kernel<<<grid_for(shape->n_buckets + 1), kThreads, 0, stream>>>(
            ev->levels.get(), U, shape->base, shape->shift, shape->n_buckets, ev->lut.get());
        EXT_CUDA_TRY(cudaGetLastError());
    }
    EXT_CUDA_TRY(cudaMemsetAsync(ev->counters.get(), 0, (words + 2) * sizeof(unsigned long long),
                                 stream));
    EXT_CUDA_TRY(cudaMemsetAsync(ev->gap_min, 0xff, n * sizeof(uint32_t), stream));
    /* a second call (the distributed evaluation's gathered levels) starts
     * over: no ranges of the first levels survive it */
    ev->part = RangePartition{};
    ev->aside_keys.release();
    ev->aside_share = 0;
    const bool features = !ev->src.list && ev->src.score == nullptr;
    const int64_t forced = forced_partition_levels();
    ev->may_partition = forced < 0 && can_partition(ev, U);
    ev->probe_count = features && U > 0 &&
                      size_t(U + 1) * 2 * sizeof(uint32_t) > counters_max(ev);
    if (forced >= 0 && U > forced && can_partition(ev, U)) {
        ev->probe_count = false;
        EXT_CUDA_TRY(set_ranges(ev, levels->keys));
    }
    /* the host arrays are copied in before the caller may free them */
    return cudaStreamSynchronize(stream);
}

/* After the first tiles were counted directly (exact from features with
 * global counters): how to count the rest, by the share of their pairs at
 * or above the lowest level. Half or more: by partition, where
 * may_partition (a direct count costs such a pair 22-64 ps at 40,000 to 4M
 * levels, L2's scattered atomics; the partition ~8 ps every pair plus ~7
 * each it keeps). At least 1/65536: with those keys set aside (kAside),
 * which saved 5.6% at 1e10 (0.2% above) and, since its count reads the
 * stored tiles as binned's does, ~40 us of the blog size's 5.8 ms (0.03%
 * above: kExact's lookups of them, a few lanes of two warps in five, took
 * a quarter of its count's instructions; ncu, H100). Else directly, as the
 * probe did. The level count alone does not tell (1e10:
 * 200,000 levels, 0.2% of the pairs above; H100, dev/NOTES.md). One
 * synchronization an evaluation, while the tiles `next` (of op's) are
 * stored ahead where the evaluator has an ahead stream; the buffers only
 * where chosen. */
cudaError_t choose_count(roc_eval_cuda *ev, const Operands &op, const PassParams &next)
{
    ev->probe_count = false;
    cudaStream_t stream = ev->arena.stream();
    if (ev->ahead && next.tile_begin < next.tile_end)
        EXT_CUDA_TRY(store_ahead(ev, op, next, false, INT64_MAX));
    unsigned long long totals[2] = {0, 0}, below = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(totals, ev->totals.get(), sizeof totals, cudaMemcpyDeviceToHost,
                                 stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(&below, ev->gap, sizeof below, cudaMemcpyDeviceToHost,
                                 stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    const unsigned long long scored = totals[0] - totals[1], above = scored - below;
    if (ev->may_partition && scored > 0 && 2 * above >= scored) {
        std::vector<uint32_t> keys(size_t(ev->n_levels));
        EXT_CUDA_TRY(cudaMemcpyAsync(keys.data(), ev->levels.get(),
                                     keys.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                                     stream));
        EXT_CUDA_TRY(cudaStreamSynchronize(stream));
        return set_ranges(ev, keys.data());
    }
    if (above > 0 && above * 65536 >= scored) {
        ev->aside_share = double(above) / double(scored);
        EXT_CUDA_TRY(ev->aside_keys.allocate(aside_capacity(ev)));
        EXT_CUDA_TRY(
            ev->aside_used.allocate(size_t(ev->pass_blocks) * (kThreads / 32)));
    }
    return cudaSuccess;
}

} // namespace

// ----------------------------------------------------------------------------
// the backend's calls

extern "C" int roc_eval_cuda_create(roc_eval_cuda **out, const roc_source *src,
                                    const roc_counts *counts, roc_genuine_levels *genuine,
                                    roc_totals *totals, roc_bad_input *bad)
{
    *out = nullptr;
    *bad = roc_bad_input{ROC_BAD_NONE, -1};
    ExtDeviceGuard guard(src->device);
    EXT_CUDA_TRY(guard.error());
    roc_eval_cuda *ev = new (std::nothrow) roc_eval_cuda(*src);
    if (!ev)
        return cudaErrorMemoryAllocation;
    cudaError_t err = ev->arena.keep_freed_memory();
    if (err == cudaSuccess)
        err = create(ev, counts, genuine, totals, bad);
    if (err != cudaSuccess || bad->kind) {
        roc_eval_cuda_free(ev);
        return err;
    }
    *out = ev;
    return cudaSuccess;
}

extern "C" int roc_eval_cuda_set_levels(roc_eval_cuda *ev, const roc_genuine_levels *levels,
                                        const roc_level_index *shape)
{
    ExtDeviceGuard guard(ev->src.device);
    EXT_CUDA_TRY(guard.error());
    return set_levels(ev, levels, shape);
}

extern "C" int roc_eval_cuda_add_rows(roc_eval_cuda *ev, roc_counts *counts, int64_t row_begin,
                                      int64_t row_end)
{
    (void)counts; /* counted on the device; roc_eval_cuda_fetch copies them */
    ExtDeviceGuard guard(ev->src.device);
    EXT_CUDA_TRY(guard.error());
    EXT_CUDA_TRY(join_ahead(ev)); /* before the operands are prepared again */
    /* a list's pairs [row_begin, row_end) are one row of a pass */
    const bool list = ev->src.list;
    const int64_t n = list ? row_end - row_begin : (row_end - row_begin) * ev->src.n_gallery;
    Buffer<uint32_t> keys(ev->arena);
    if (ev->src.mode == kCurve) {
        EXT_CUDA_TRY(keys.allocate(n));
        EXT_CUDA_TRY(cudaMemsetAsync(keys.get(), 0, n * sizeof(uint32_t),
                                     ev->arena.stream())); /* NO_KEY */
    }
    PassParams p = list ? pass_params(ev, 0, 1, keys.get())
                        : pass_params(ev, row_begin, row_end, keys.get());
    if (list)
        p.n_gallery = n;
    if (list && ev->src.score && ev->src.mode == kExact && ev->n_levels > kSortedLevels)
        return count_sorted(ev, p, ev->src.score + row_begin, n);
    auto pass = [&](const PassParams &given, const Operands *op) -> cudaError_t {
        PassParams q = given;
        int64_t tile_from = 0;
        if (ev->probe_count && op) {
            /* probe_tiles' chunk (the first one stored ahead, within the
             * IFRT size's memory) counted directly; its pairs choose how the
             * rest are, while the next chunk is stored ahead. A wave of them
             * took a count launch of its own, 32 us where a chunk's count
             * takes ~10 us a wave (the blog size, H100). */
            int64_t tiles_m, tiles_n;
            const int64_t tiles = feature_tiles(*op, q, &tiles_m, &tiles_n);
            tile_from = probe_tiles(tiles);
            EXT_CUDA_TRY(launch_pass<kExact>(ev, q, row_begin, op, 0, tile_from));
            PassParams next = q;
            next.tile_begin = tile_from;
            next.tile_end = std::min(tile_from + chunk_tiles(kPartitioned, tiles), tiles);
            EXT_CUDA_TRY(choose_count(ev, *op, next));
            if (tile_from == tiles)
                return cudaSuccess;
        }
        /* choose_count may have set these up since `p` */
        q.part = ev->part;
        q.aside_keys = ev->aside_keys.get();
        q.aside_used = ev->aside_used.get();
        if (ev->src.mode == kCurve)
            return launch_pass<kCurve>(ev, q, row_begin, op);
        if (ev->src.mode == kExact && ev->part.n_ranges > 0 && op)
            return launch_pass<kPartitioned>(ev, q, row_begin, op, tile_from);
        if (ev->src.mode == kExact && ev->aside_keys.get() && op)
            return launch_pass<kAside>(ev, q, row_begin, op, tile_from);
        if (ev->src.mode == kExact)
            return launch_pass<kExact>(ev, q, row_begin, op, tile_from);
        return launch_pass<kBinned>(ev, q, row_begin, op);
    };
    if (!list && !ev->src.score) {
        EXT_CUDA_TRY(over_feature_blocks(
            ev->arena, ev->features, row_begin, row_end,
            [&](const Operands &op, int64_t begin, int64_t end) {
                PassParams q = p;
                q.row_begin = begin;
                q.row_end = end;
                if (q.keys) /* the key of pair (i, j) at (i - row_begin) G + j */
                    q.keys += (begin - row_begin) * ev->src.n_gallery;
                return pass(q, &op);
            }));
    } else {
        EXT_CUDA_TRY(pass(p, nullptr));
    }
    return ev->src.mode == kCurve ? merge_keys(ev, keys, n) : cudaSuccess;
}

extern "C" int roc_eval_cuda_fetch(roc_eval_cuda *ev, roc_counts *counts)
{
    ExtDeviceGuard guard(ev->src.device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = ev->arena.stream();
    unsigned long long host_totals[2] = {0, 0};
    EXT_CUDA_TRY(cudaMemcpyAsync(host_totals, ev->totals.get(), sizeof host_totals,
                                 cudaMemcpyDeviceToHost, stream));
    const int64_t U = ev->n_levels;
    roc_exact_counts *exact = &counts->exact;
    unsigned long long top[2] = {0, 0}; /* top_count, then top_key's word */
    if (ev->src.mode == kExact && U > 0) {
        /* at, gap and gap_min at once: the host's are one block laid out as
         * ev->counters (roc_counts_alloc) */
        const size_t n = size_t(U) + 1;
        EXT_CUDA_TRY(cudaMemcpyAsync(exact->at, ev->at, n * (2 * sizeof(uint64_t) + sizeof(uint32_t)),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(top, ev->top_count, sizeof top, cudaMemcpyDeviceToHost,
                                     stream));
    } else if (ev->src.mode == kBinned) {
        roc_binned_counts *binned = &counts->binned;
        std::vector<unsigned long long> bins(ev->n_bins + 2);
        EXT_CUDA_TRY(cudaMemcpyAsync(bins.data(), ev->bins.get(), bins.size() * sizeof(bins[0]),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaStreamSynchronize(stream));
        binned->below = bins[0];
        for (int64_t b = 0; b < ev->n_bins; b++)
            binned->all[b] = bins[b + 1];
        binned->above = bins[ev->n_bins + 1];
    } else if (ev->src.mode == kCurve) {
        roc_key_counts *keys = &counts->keys;
        uint32_t *host_keys = static_cast<uint32_t *>(ext_malloc(ev->n_acc * 4));
        uint64_t *host_counts = static_cast<uint64_t *>(ext_malloc(ev->n_acc * 8));
        if (!host_keys || !host_counts) {
            free(host_keys);
            free(host_counts);
            return cudaErrorMemoryAllocation;
        }
        EXT_CUDA_TRY(cudaMemcpyAsync(host_keys, ev->acc_keys.get(), ev->n_acc * sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(host_counts, ev->acc_counts.get(),
                                     ev->n_acc * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                                     stream));
        cudaError_t err = cudaStreamSynchronize(stream);
        if (err != cudaSuccess) {
            free(host_keys);
            free(host_counts);
            return err;
        }
        /* NaN and skipped pairs carried NO_KEY, the lowest key: drop its run */
        const int64_t skip = ev->n_acc > 0 && host_keys[0] == ROC_NO_KEY ? 1 : 0;
        memmove(host_keys, host_keys + skip, (ev->n_acc - skip) * sizeof(uint32_t));
        memmove(host_counts, host_counts + skip, (ev->n_acc - skip) * sizeof(uint64_t));
        free(keys->keys);
        free(keys->counts);
        *keys = roc_key_counts{ev->n_acc - skip, host_keys, host_counts};
    }
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    counts->totals.n_pairs = host_totals[0];
    counts->totals.n_nan = host_totals[1];
    if (ev->src.mode == kExact && U > 0) {
        exact->top_count = top[0];
        memcpy(&exact->top_key, &top[1], sizeof exact->top_key); /* ev->top_key's bytes */
    }
    return cudaSuccess;
}

extern "C" int64_t roc_eval_cuda_peak_bytes(const roc_eval_cuda *ev)
{
    return ev->arena.peak_bytes();
}

extern "C" void roc_eval_cuda_free(roc_eval_cuda *ev)
{
    if (!ev)
        return;
    ExtDeviceGuard guard(ev->src.device);
    delete ev; /* the buffers, then the arena (which waits for their frees) */
}

extern "C" int roc_scores_launch(const float *feat_q, const float *feat_g, int64_t n_query,
                                 int64_t n_gallery, int64_t dim, int similarity, float *score,
                                 int device, void *stream_ptr)
{
    if (n_query == 0 || n_gallery == 0)
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    ExtDeviceArena arena(static_cast<cudaStream_t>(stream_ptr));
    FeatureOperands features(arena);
    EXT_CUDA_TRY(feature_setup(arena, features, feat_q, feat_g, n_query, n_gallery, dim,
                               similarity, 0));
    Buffer<float> chunk(arena);
    EXT_CUDA_TRY(over_feature_blocks(
        arena, features, 0, n_query, [&](const Operands &op, int64_t begin, int64_t end) {
            PassParams p{};
            p.n_gallery = n_gallery;
            p.row_begin = begin;
            p.row_end = end;
            p.scores = score;
            int64_t tiles_m, tiles_n;
            const int64_t tiles = feature_tiles(op, p, &tiles_m, &tiles_n);
            const int64_t step = std::min(chunk_tiles(kStore, tiles), tiles);
            EXT_CUDA_TRY(chunk_room(chunk, step));
            for (int64_t t = 0; t < tiles; t += step) {
                p.tile_begin = t;
                p.tile_end = std::min(t + step, tiles);
                EXT_CUDA_TRY(store_tiles(arena.stream(), op, p, chunk.get()));
                EXT_CUDA_TRY(count_stored<kStore>(arena.stream(), op, p, chunk.get(),
                                                  ext_sm_count() * 2, 0));
            }
            return cudaSuccess;
        }));
    return cudaStreamSynchronize(arena.stream());
}
