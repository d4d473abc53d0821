/*
 * roc_partition.cu: the partitioned exact count, end to end. Where the
 * genuine levels are many and most pairs lie among them, the levels are cut
 * into ranges (set_ranges, on the host); the partition kernel reads the
 * feature pass's stored tiles, counts the pairs below the lowest level and
 * stages the other keys by range into the ranges' segments (RangeSorter,
 * roc_partition.cuh); the drain counts each range's keys in shared memory;
 * the segments are resized for the next launch (segment_kernel).
 */
#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "roc_count.cuh"
#include "roc_eval_state.cuh"
#include "roc_partition.cuh"

namespace roc_gpu {

namespace {

/*
 * Partitioned exact counting (roc_partition.cuh): the partition reads the chunk's
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
    PartitionKeys counter(p);
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
 * as fine (dev/NOTES.md, partition/drain, "The drain": it was bound by its shared accesses,
 * 7.3 a key, two of them the index's and ~3.3 the bisection's).
 */
constexpr int kDrainThreads = 1024;
/* a drain block's parts, one a thread in the scan of their sizes
 * (drain_ranges' slices see to it); no more, so that a wide range's drain
 * has room for an index of 2^13 buckets */
constexpr int kMaxDrainParts = 512;
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
 * drain's instructions (dev/NOTES.md, partition/drain). A block a range. */
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
 * drain's stalls: dev/NOTES.md, partition/drain). */
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

/* kLevels: the most levels a range holds (ev->partition.range_levels) */
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
     * turn left the block waiting on its busiest warp, and a warp the parts
     * of its share one after the other left many lanes idle where parts are
     * small. kKeys keys a lane at once, each step of their lookups side by
     * side (one at a time, the warps waited on each read). dev/NOTES.md,
     * partition/drain, "The drain", has each measured. */
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
         * each key's step (its divergence barriers and branches took most of
         * the loop's instructions). A finished key (a == z)
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
         * than on shared memory since its index holds both ends. */
        bool at[kKeys];
#pragma unroll
        for (int u = 0; u < kKeys; u++)
            at[u] = level[a[u]] == key[u];
        /* without a branch a key (with them, a key's count took several
         * times the instructions, and the drain waits on its arithmetic
         * pipe): a key on a level or past the share is counted in the lane's
         * spare slot. An impostor on a level (a few percent of them where
         * the levels are millions) is counted in global memory (a count of them in shared memory
         * took longer: dev/NOTES.md, partition/drain, "The drain"). */
#pragma unroll
        for (int u = 0; u < kKeys; u++) {
            const bool counted = t0 + u * stride < share_hi;
            const uint32_t i = counted && !at[u] ? a[u] : kDrainSpare + threadIdx.x % 32;
            count_gap(count, lowest, i, 1u, key[u]);
            if (counted && at[u])
                count_exact(d.at, d.gap, d.gap_min, first + a[u], true, 1ull, key[u]);
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j <= n_range; j += blockDim.x)
        if (count[j])
            count_gap(d.gap, d.gap_min, first + j, (unsigned long long)count[j], lowest[j]);
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

} // namespace

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
int drain_bucket_bits(const Tuning &tuning, int device, int range_levels)
{
    const int most = tuning.drain_bucket_bits > 0
                         ? int(std::min<int64_t>(tuning.drain_bucket_bits, kDrainBucketBitsMax))
                         : kDrainBucketBitsMax;
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

/* Partitioned exact: the keys the last launch left in the ranges' segments
 * counted (drain_kernel), and the segments resized for the next. */
cudaError_t drain_ranges(roc_eval_cuda *ev)
{
    cudaStream_t stream = ev->arena.stream();
    const int n_ranges = ev->partition.view.n_ranges;
    /* about two blocks a multiprocessor in all (two waves), each with at most
     * kMaxDrainParts parts; EXT_ROC_DRAIN_SLICES, where set, the blocks a
     * range (the tests make it 1, so that one block sees a range's keys) */
    const int64_t forced = ev->plan.tuning.drain_slices;
    const Partition &part = ev->partition;
    const int n_blocks = part.view.n_blocks;
    const int even =
        std::min(n_blocks, std::max(1, (2 * ext_sm_count() + n_ranges - 1) / n_ranges));
    const int slices = std::max(forced > 0 ? int(std::min<int64_t>(forced, n_blocks)) : even,
                                (n_blocks + kMaxDrainParts - 1) / kMaxDrainParts);
    const DrainParams d{ev->levels.keys.get(),  part.first.get(),    part.drain_index.get(),
                        part.keys.get(),        part.offset.get(),   part.capacity.get(),
                        part.block_used.get(),  n_ranges,            n_blocks,
                        part.drain_bucket_bits, ev->exact.at,        ev->exact.gap,
                        ev->exact.gap_min};
    const dim3 grid{unsigned(slices), unsigned(n_ranges)};
    const size_t shared = drain_shared_bytes(part.range_levels, part.drain_bucket_bits);
    if (part.range_levels > kRangeLevels)
        drain_kernel<kWideRangeLevels><<<grid, kDrainThreads, shared, stream>>>(d);
    else
        drain_kernel<kRangeLevels><<<grid, kDrainThreads, shared, stream>>>(d);
    EXT_CUDA_TRY(cudaGetLastError());
    segment_kernel<<<1, kHistogram, 0, stream>>>(
        ev->partition.reserved.get(), ev->partition.capacity.get(), ev->partition.offset.get(),
        ev->partition.stage_layout.get(), ev->partition.stage_owner.get(), n_ranges,
        ev->partition.keys_total);
    return cudaGetLastError();
}

cudaError_t launch_partition(cudaStream_t stream, const Operands &op, const PassParams &q,
                             const float *chunk, int blocks)
{
    partition_kernel_for(q.part.scale)
        <<<blocks, kPartitionThreads, RangeSorter::kSharedBytes, stream>>>(op, q, chunk);
    return cudaGetLastError();
}

/* range_axis (roc_pass.cuh) on the host, to the bit: the product by a power
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
    Partition &part = ev->partition;
    cudaStream_t stream = ev->arena.stream();
    const int64_t U = ev->levels.n;
    /* EXT_ROC_RANGE_BUCKETS, for the tests: fewer buckets, crowded with levels */
    const int64_t asked = ev->plan.tuning.range_buckets;
    const int64_t buckets = std::min(asked > 0 ? asked : int64_t(kRangeBuckets),
                                     int64_t(kRangeBuckets));
    const int most = range_levels_for(ev->plan.tuning, U, ev->src.device); /* can_partition's */
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
    part.keys_total = partition_keys(ev->plan.tuning);
    const void *partition = reinterpret_cast<const void *>(partition_kernel_for(cut.scale));
    EXT_CUDA_TRY(cudaFuncSetAttribute(partition, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(RangeSorter::kSharedBytes)));
    int per_sm = 0;
    EXT_CUDA_TRY(ext_blocks_per_sm(partition, kPartitionThreads, RangeSorter::kSharedBytes,
                                   &per_sm));
    /* each runs a count policy, and keeps its top key in a slot of pass_blocks' */
    const int sorter_blocks = std::min(std::max(1, per_sm) * ext_sm_count(), ev->pass_blocks);
    EXT_CUDA_TRY(part.first.allocate(n_ranges + 1));
    EXT_CUDA_TRY(part.starts.allocate(n_ranges));
    EXT_CUDA_TRY(part.index.allocate(kRangeBuckets + 1));
    EXT_CUDA_TRY(part.drain_index.allocate(size_t(n_ranges) * kDrainIndexStride));
    part.range_levels = most;
    part.drain_bucket_bits =
        drain_bucket_bits(ev->plan.tuning, ev->src.device, most); /* can_partition: not 0 */
    EXT_CUDA_TRY(part.keys.allocate(part.keys_total));
    EXT_CUDA_TRY(part.offset.allocate(n_ranges));
    EXT_CUDA_TRY(part.capacity.allocate(n_ranges));
    EXT_CUDA_TRY(part.reserved.allocate(n_ranges));
    EXT_CUDA_TRY(part.stage_layout.allocate(n_ranges));
    EXT_CUDA_TRY(part.stage_owner.allocate(kStageWords));
    EXT_CUDA_TRY(part.block_used.allocate(size_t(sorter_blocks) * n_ranges));
    EXT_CUDA_TRY(cudaMemcpyAsync(part.starts.get(), starts.data(),
                                 n_ranges * sizeof(uint32_t), cudaMemcpyHostToDevice, stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(part.first.get(), cut.first.data(),
                                 cut.first.size() * sizeof(uint32_t), cudaMemcpyHostToDevice,
                                 stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(part.index.get(), cut.index.data(),
                                 cut.index.size() * sizeof(uint16_t), cudaMemcpyHostToDevice,
                                 stream));
    EXT_CUDA_TRY(cudaMemsetAsync(part.reserved.get(), 0, n_ranges * sizeof(uint32_t),
                                 stream));
    drain_index_kernel<<<n_ranges, kDrainThreads, 0, stream>>>(
        ev->levels.keys.get(), part.first.get(), part.drain_bucket_bits,
        part.drain_index.get());
    segment_kernel<<<1, kHistogram, 0, stream>>>(
        part.reserved.get(), part.capacity.get(), part.offset.get(),
        part.stage_layout.get(), part.stage_owner.get(), n_ranges,
        part.keys_total);
    EXT_CUDA_TRY(cudaGetLastError());
    EXT_CUDA_TRY(cudaFuncSetAttribute(drain_kernel_for(most),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(drain_shared_bytes(most, part.drain_bucket_bits))));
    part.view = RangePartition{n_ranges,
                               part.first.get(),
                               cut.scale,
                               cut.base,
                               cut.shift,
                               part.starts.get(),
                               part.index.get(),
                               part.keys.get(),
                               part.offset.get(),
                               part.capacity.get(),
                               sorter_blocks,
                               part.block_used.get(),
                               part.reserved.get(),
                               part.stage_layout.get(),
                               part.stage_owner.get()};
    /* the host vectors are copied before they go */
    return cudaStreamSynchronize(stream);
}

} // namespace roc_gpu
