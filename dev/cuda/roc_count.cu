/*
 * roc_count.cu: variants of the count of the feature pass's stored tiles, each
 * driving the library's count policies (src/cuda/roc_count.cuh), checked
 * against the CPU before it is timed beside a copy of the chunk (kept apart
 * from the library).
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Isrc dev/cuda/roc_count.cu -o build/roc_count
 *   ./build/roc_count [T U share [variants]]
 *   ./build/roc_count 0 200000 0.002 1,4,5   the library's chunk, variants 1, 4 and 5
 *
 * Input: a chunk of T stored tiles in roc_tiles.cuh's layout (kTilePairs
 * scores a tile, row-major, tile t at chunk + t kTilePairs), every tile whole,
 * filled on the device from a seeded hash: scores N(0, 0.05) (cosines of
 * random 512-D vectors spread ~0.044), one in 2^20 NaN, one in 2^20 exactly a
 * genuine level (at[]). U genuine levels (distinct keys): share 0, "easy",
 * evenly over [0.5, 0.95], above every impostor; share > 0, "hard", at upper
 * tail probabilities share, share (U - 1) / U, .., share / U of the scores,
 * so that `share` of the pairs lie at or above the lowest level, evenly over
 * its gaps. T 0: the library's chunk (7 waves of the tile product, 14 tiles
 * a multiprocessor). Without arguments: that T, U = 5,000 and 200,000 (the
 * gaps' counters in shared and in global memory: the plan keeps them in
 * shared memory where (U + 1) 8 bytes fit roc_eval_plan.cuh's 56 KB),
 * share 0, 0.002 and 0.5.
 *
 * Each variant is shaped like roc_eval_count.cu's count_tiles_kernel:
 * persistent blocks walking the tiles (roc_tiles.cuh's for_each_tile) a half
 * tile at a time, a thread's kHalfLoads 16-byte streamed loads in flight
 * together, the quads left to a policy's pairs in a loop not unrolled.
 *
 * variant 1: the lean bound: the same reads, the scores below the lowest
 *            level counted: the memory floor.
 * variant 2: ExactCount, every quad through pair(), one pair at a time.
 * variant 3: ExactCount, every quad through pairs() (lookups side by side).
 * variant 4: ExactCount as the library runs it: count_whole, then pairs()
 *            for the quads it leaves.
 * variant 5: AsideCount as variant 4, then the library's drain
 *            (AsideCount::drain) counts the keys set aside. The plan runs it only with
 *            global gaps, and from a share of 2^-16 up.
 * variant 6: BinnedCount, 1,024 uniform bins over [-1, 1] in shared memory,
 *            as variant 4.
 * variant 7: PartitionKeys' keys_to_partition, as roc_partition.cu's
 *            partition kernel calls it (blocks of kPartitionThreads, a tile
 *            at a time), the keys it keeps counted directly instead of staged
 *            for the drain: the partition kernel without its sorter.
 * Variants 2 to 4 count into shared or global gaps, as U decides.
 *
 * Check: each variant's counts against the CPU's count of the scores copied
 * back (a key's gap by bisection over the levels): gap[], at[], gap_min[],
 * the pairs and NaN totals, the top key and its count (the blocks' slots
 * merged here), the bins (roc_uniform_bin), the lean count; the first
 * differing index is printed and the run exits 1. ROC_SKIP_CHECK=1 times
 * without it. ROC_COUNT_BLOCKS: blocks a multiprocessor (default 2; 0: the
 * library's, as many as fit, at most 8).
 *
 * Timing: CUDA events around each variant's launches, after the counters'
 * reset and a flush of L2 (a memset of twice its size); median of 20 after
 * 3 warm-ups. A row: ms, pairs a ns, GB/s of the tile reads (4 T kTilePairs
 * bytes), and that over the GB/s of a cudaMemcpy of the chunk, device to
 * device, timed alike (its bytes read and written).
 *
 * Napkin math at T = 1,848 (an H100's 132 multiprocessors): 30.3M pairs,
 * 121 MB; at HBM3's 3.35 TB/s, 36 us, 840 pairs a ns. Measurements:
 * dev/NOTES.md, "direct count".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/roc_count.cuh"
#include "cuda/roc_eval_plan.cuh" /* the room for shared counters */
#include "cuda/roc_tiles.cuh"
#include "roc_math.h"

#include "harness.cuh"

using namespace roc_gpu; /* roc_tiles.cuh's names, and roc_count's */


constexpr int kVariants = 7;
constexpr int kBins = 1024;
constexpr int kHalfLoads = kHalfTilePairs / 4 / kThreads; /* a thread's float4s of a half tile */
constexpr int kTileLoads = kTilePairs / 4 / kPartitionThreads; /* ... of a tile, variant 7 */
constexpr int kRareBits = 20;  /* one score in 2^20 NaN, one in 2^20 on a level */
constexpr float kImpostorSd = 0.05f;

// ----------------------------------------------------------------------------
// the input

__device__ __forceinline__ uint64_t mix64(uint64_t x) /* splitmix64's finalizer */
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* chunk[i] for i < n: N(0, sd) by Box-Muller from a hash of (seed, i), or
 * rarely NaN or a level's score exactly. */
__global__ void fill_scores(float *chunk, int64_t n, uint64_t seed, float sd,
                            const uint32_t *levels, int64_t n_levels)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull * uint64_t(i + 1));
        const uint64_t rare = mix64(h);
        const uint32_t kind = uint32_t(rare >> (64 - kRareBits));
        float s;
        if (kind == 0) {
            s = __int_as_float(0x7fc00000);
        } else if (kind == 1) {
            s = roc_key_score(levels[rare % uint64_t(n_levels)]);
        } else {
            const float u1 = (float(h >> 40) + 1.0f) * 0x1p-24f; /* (0, 1] */
            const float u2 = float(h & 0xffffff) * 0x1p-24f;
            s = sd * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        }
        chunk[i] = s;
    }
}

/* The score whose upper-tail probability under N(0, sd) is `tail`, by bisection. */
double upper_quantile(double tail, double sd)
{
    double lo = -40, hi = 40;
    for (int step = 0; step < 64; step++) {
        const double mid = 0.5 * (lo + hi);
        *(0.5 * std::erfc(mid / std::sqrt(2.0)) > tail ? &lo : &hi) = mid;
    }
    return sd * 0.5 * (lo + hi);
}

/* U genuine levels, ascending distinct keys (see the file's comment). */
std::vector<uint32_t> make_levels(int64_t U, double share)
{
    std::vector<uint32_t> levels(U);
    for (int64_t k = 0; k < U; k++) {
        const double s = share > 0 ? upper_quantile(share * double(U - k) / double(U), kImpostorSd)
                                   : 0.5 + 0.45 * double(k) / double(U);
        levels[k] = roc_score_key(float(s));
    }
    std::sort(levels.begin(), levels.end());
    for (int64_t k = 1; k < U; k++) /* scores that round to one float: the next keys */
        levels[k] = std::max(levels[k], levels[k - 1] + 1);
    return levels;
}

/* The level index's table (roc_math.h's roc_level_index_fill) in the shape
 * roc_eval.c's roc_level_index_shape gives it: about four buckets a level, at
 * most 2^22, from the lowest level (*base) in steps of 2^*shift keys. */
std::vector<uint32_t> level_index(const std::vector<uint32_t> &levels, uint32_t *base, int *shift)
{
    const int64_t U = int64_t(levels.size());
    int64_t max_buckets = 256;
    while (max_buckets < 4 * U && max_buckets < (int64_t(1) << 22))
        max_buckets *= 2;
    const uint64_t span = levels[U - 1] - levels[0];
    for (*shift = 0; int64_t(span >> *shift) + 1 > max_buckets;)
        ++*shift;
    *base = levels[0];
    std::vector<uint32_t> lut(int64_t(span >> *shift) + 2); /* n_buckets + 1 */
    roc_level_index_fill(levels.data(), U, *base, *shift, 0, int64_t(lut.size()), lut.data());
    return lut;
}

// ----------------------------------------------------------------------------
// CPU reference

/* What a variant counts, as the host sees it: the exact counters (roc_internal.h's
 * roc_exact_counts), the bins (below, kBins bins, above), the pairs below the
 * lowest level. */
struct Counts {
    std::vector<unsigned long long> at, gap, bins, totals; /* totals: pairs, NaN */
    std::vector<uint32_t> gap_min;
    std::vector<unsigned long long> top; /* key, count */
    unsigned long long below = 0;
};

Counts reference(const std::vector<float> &score, const std::vector<uint32_t> &levels,
                 const std::vector<float> &edges)
{
    const int64_t U = int64_t(levels.size());
    Counts c;
    c.at.assign(U, 0);
    c.gap.assign(U + 1, 0);
    c.gap_min.assign(U + 1, 0xffffffffu);
    c.bins.assign(kBins + 2, 0);
    c.totals = {score.size(), 0};
    c.top = {0, 0};
    for (const float s : score) {
        if (std::isnan(s)) {
            c.totals[1]++;
            continue;
        }
        const uint32_t key = roc_score_key(s);
        const int64_t g = std::lower_bound(levels.begin(), levels.end(), key) - levels.begin();
        if (g < U && levels[g] == key) {
            c.at[g]++;
        } else {
            c.gap[g]++;
            c.gap_min[g] = std::min(c.gap_min[g], key);
        }
        c.below += g == 0 && levels[0] != key;
        if (key > c.top[0] || c.top[1] == 0)
            c.top = {key, 0};
        c.top[1] += key == c.top[0];
        c.bins[roc_uniform_bin(s, edges.data(), kBins, -1.0f, float(kBins / 2.0)) + 1]++;
    }
    return c;
}

/* The first index where got differs from want, reported; false there. */
template <typename T>
bool same(int variant, const char *what, const std::vector<T> &got, const std::vector<T> &want)
{
    for (size_t i = 0; i < want.size(); i++)
        if (got[i] != want[i]) {
            printf("variant %d: %s[%zu] = %llu, the CPU's %llu  WRONG\n", variant, what, i,
                   (unsigned long long)got[i], (unsigned long long)want[i]);
            return false;
        }
    return true;
}

// ----------------------------------------------------------------------------
// variant 1: the lean bound

/* The pairs below the lowest level into p.totals[0]. */
__global__ void __launch_bounds__(kThreads)
    lean_kernel(const Operands op, const PassParams p, const float *__restrict__ chunk)
{
    const float lowest = roc_key_score(__ldg(p.levels));
    uint32_t n = 0;
    for_each_tile(op, p, [&](int64_t t, int64_t, int64_t) {
        const float4 *tile = reinterpret_cast<const float4 *>(chunk + t * kTilePairs);
        for (int half = 0; half < 2; half++) {
            float4 v[kHalfLoads];
#pragma unroll
            for (int u = 0; u < kHalfLoads; u++)
                v[u] = __ldcs(tile + half * (kHalfTilePairs / 4) + threadIdx.x + u * kThreads);
#pragma unroll
            for (int u = 0; u < kHalfLoads; u++)
                n += (v[u].x < lowest) + (v[u].y < lowest) + (v[u].z < lowest) +
                     (v[u].w < lowest);
        }
    });
    for (int offset = 16; offset > 0; offset /= 2)
        n += __shfl_down_sync(0xffffffffu, n, offset);
    if (threadIdx.x % 32 == 0)
        atomicAdd(&p.totals[0], (unsigned long long)n);
}

// ----------------------------------------------------------------------------
// variants 2 to 6: a count policy over the tiles, as count_tiles_kernel runs it

/* How the quads of a half tile reach the policy: each through pair() four
 * times, each through pairs(), or (the library's) count_whole first and
 * pairs() for the quads it leaves. */
enum class Walk { kPairByPair, kQuads, kWhole };

template <class Count, Walk kWalk>
__global__ void __launch_bounds__(kThreads)
    count_kernel(const Operands op, const PassParams p, const float *__restrict__ chunk)
{
    extern __shared__ uint32_t counters[];
    Count counter(p, counters);
    counter.begin_block();
    for_each_tile(op, p, [&](int64_t t, int64_t m0, int64_t n0) {
        const bool whole = whole_tile(op, p, m0, n0);
        const float4 *tile = reinterpret_cast<const float4 *>(chunk + t * kTilePairs);
        for (int half = 0; half < 2; half++) {
            float4 v[kHalfLoads];
#pragma unroll
            for (int u = 0; u < kHalfLoads; u++)
                v[u] = __ldcs(tile + half * (kHalfTilePairs / 4) + threadIdx.x + u * kThreads);
            uint32_t done = 0;
            if constexpr (kWalk == Walk::kWhole)
                done = whole ? counter.count_whole(v) : 0u;
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
                if constexpr (kWalk == Walk::kPairByPair) {
#pragma unroll
                    for (int c = 0; c < 4; c++)
                        if (use[c])
                            counter.pair(row[c], col[c], s[c]);
                } else {
                    counter.pairs(row, col, s, use);
                }
            }
        }
    });
    counter.end_block();
}

/* The keys AsideCount set aside, into the global counters: the library's
 * drain (AsideCount::drain), a block a warp's segment, as count_aside_kernel
 * runs it. */
__global__ void __launch_bounds__(kThreads) aside_drain(const PassParams p)
{
    AsideCount::drain(p);
}

// ----------------------------------------------------------------------------
// variant 7: PartitionKeys without the sorter

__global__ void __launch_bounds__(kPartitionThreads, 2)
    partition_tally(const Operands op, const PassParams p, const float *__restrict__ chunk)
{
    PartitionKeys counter(p);
    const uint32_t highest = __ldg(p.levels + p.n_levels - 1);
    for_each_tile(op, p, [&](int64_t t, int64_t, int64_t) {
        /* every tile is whole here: every pair of it counts */
        const float4 *tile = reinterpret_cast<const float4 *>(chunk + t * kTilePairs);
        float4 v[kTileLoads];
#pragma unroll
        for (int u = 0; u < kTileLoads; u++)
            v[u] = __ldcs(tile + threadIdx.x + u * kPartitionThreads);
        uint32_t key[4 * kTileLoads];
        if (counter.keys_to_partition<true>(v, tile + threadIdx.x, kPartitionThreads,
                                            0xffffffffu, key))
            /* a loop not unrolled, as the library's quads left: 32 inlined
             * lookups would make the kernel bound by fetching instructions */
#pragma unroll 1
            for (int i = 0; i < 4 * kTileLoads; i++)
                if (key[i] != ROC_NO_KEY)
                    count_directly(p, key[i], highest);
    });
    counter.end_block();
}

// ----------------------------------------------------------------------------

/* (key, count) becomes the higher of it and (k, c), as roc_pass.cuh's merge_top. */
void merge_top_host(std::vector<unsigned long long> &top, uint32_t k, unsigned long long c)
{
    if (c == 0)
        return;
    if (top[1] == 0 || k > top[0])
        top = {k, c};
    else if (k == top[0])
        top[1] += c;
}

/* A workload's device arrays, zeroed or copied from the host, freed with it. */
struct Arena {
    std::vector<void *> owned;
    template <typename T> T *array(size_t n)
    {
        void *p;
        CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
        CHECK(cudaMemset(p, 0, n * sizeof(T)));
        owned.push_back(p);
        return static_cast<T *>(p);
    }
    template <typename T> T *copy_of(const std::vector<T> &host)
    {
        T *p = array<T>(host.size());
        CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
        return p;
    }
    ~Arena()
    {
        for (void *p : owned)
            cudaFree(p);
    }
};

template <typename T> std::vector<T> to_host(const T *d, size_t n)
{
    std::vector<T> h(n);
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

struct Device {
    int sms, per_sm; /* per_sm: ROC_COUNT_BLOCKS, 0 for the occupancy */
    size_t counters_room; /* a block's shared counters, as the plan allows them */
    float *flush;
    size_t flush_bytes;
    cudaEvent_t start, stop;
};

/* Median of 20 runs after 3 (events around `body`, after `reset` and a flush of L2). */
template <typename Reset, typename Body> float median_ms(const Device &dev, Reset reset, Body body)
{
    std::vector<float> times;
    for (int rep = 0; rep < 23; rep++) {
        reset();
        CHECK(cudaMemsetAsync(dev.flush, rep, dev.flush_bytes));
        CHECK(cudaEventRecord(dev.start));
        body();
        CHECK(cudaEventRecord(dev.stop));
        CHECK(cudaEventSynchronize(dev.stop));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, dev.start, dev.stop));
        if (rep >= 3)
            times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

/* Blocks of `kernel` in the grid: dev.per_sm a multiprocessor, or (0) as many
 * as fit, at most 8 (the library's pass_blocks). */
int grid_of(const Device &dev, const void *kernel, int threads, size_t shared)
{
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)));
    int per_sm = dev.per_sm;
    if (per_sm == 0) {
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared));
        per_sm = std::min(per_sm, 8);
    }
    return dev.sms * std::max(per_sm, 1);
}

/* One workload: the chunk filled, each chosen variant checked then timed. */
int run_workload(const Device &dev, int64_t T, int64_t U, double share,
                 const std::vector<bool> &chosen, bool check)
{
    const int64_t n_pairs = T * kTilePairs;
    const double bytes = double(n_pairs) * sizeof(float);
    const std::vector<uint32_t> levels = make_levels(U, share);
    std::vector<float> edges(kBins + 1); /* numpy.histogram's, as roc_eval.c makes them */
    for (int b = 0; b < kBins; b++)
        edges[b] = float(double(b) * (2.0 / kBins) - 1.0);
    edges[kBins] = 1.0f;

    /* the tiles: kGroupRows rows of tiles by enough columns, every tile whole */
    const int64_t tiles_n = (T + kGroupRows - 1) / kGroupRows;
    const Operands op{nullptr, nullptr, 0, 0, 0, 0, 0, tiles_n * roc_gemm::kBN};
    const int max_blocks = dev.sms * 8, max_warps = max_blocks * (kPartitionThreads / 32);
    const size_t aside_capacity = size_t(std::min<int64_t>(n_pairs, int64_t(1) << 24));
    Arena mem;
    PassParams p{};
    p.n_gallery = op.n_end;
    p.row_end = int64_t(kGroupRows) * roc_gemm::kBM;
    p.levels = mem.copy_of(levels);
    p.n_levels = U;
    p.lut = mem.copy_of(level_index(levels, &p.lut_base, &p.lut_shift));
    p.at = mem.array<unsigned long long>(U);
    p.gap = mem.array<unsigned long long>(U + 1);
    p.gap_min = mem.array<uint32_t>(U + 1);
    p.edges = mem.copy_of(edges);
    p.n_bins = kBins;
    p.lo32 = -1.0f;
    p.scale32 = float(kBins / 2.0);
    p.bins = mem.array<unsigned long long>(kBins + 2);
    p.shared_bins = shared_bins_bytes(kBins) <= dev.counters_room;
    p.aside_keys = mem.array<uint32_t>(aside_capacity);
    p.aside_used = mem.array<uint32_t>(max_warps);
    p.tile_end = T;
    p.totals = mem.array<unsigned long long>(2);
    p.block_top_key = mem.array<uint32_t>(max_blocks);
    p.block_top_count = mem.array<unsigned long long>(max_blocks);
    p.shared_gaps = 1; /* then as the plan decides: where those shared counters fit the room */
    p.shared_gaps = ExactCount::shared_bytes(p) <= dev.counters_room;
    float *chunk = mem.array<float>(n_pairs), *copy = mem.array<float>(n_pairs);
    fill_scores<<<dev.sms * 8, 256>>>(chunk, n_pairs, 2018, kImpostorSd, p.levels, U);
    CHECK(cudaGetLastError());

    printf("\n%lld tiles (%.1f MB), %lld levels (gaps in %s memory), lowest %.4f, share %g",
           (long long)T, bytes / 1e6, (long long)U, p.shared_gaps ? "shared" : "global",
           roc_key_score(levels[0]), share);
    Counts want;
    if (check) {
        want = reference(to_host(chunk, n_pairs), levels, edges);
        const double scored = double(want.totals[0] - want.totals[1]);
        printf(" (%.4g at or above the lowest level, %llu NaN)", (scored - want.below) / scored,
               want.totals[1]);
    }
    printf("\n");

    /* each variant's kernel (5: then aside_drain), threads and shared memory */
    struct Kernel {
        void (*func)(const Operands, const PassParams, const float *);
        int threads;
        size_t shared;
    };
    const size_t exact_shared = ExactCount::shared_bytes(p);
    const Kernel kernels[kVariants + 1] = {
        {nullptr, 0, 0},
        {lean_kernel, kThreads, 0},
        {count_kernel<ExactCount, Walk::kPairByPair>, kThreads, exact_shared},
        {count_kernel<ExactCount, Walk::kQuads>, kThreads, exact_shared},
        {count_kernel<ExactCount, Walk::kWhole>, kThreads, exact_shared},
        {count_kernel<AsideCount, Walk::kWhole>, kThreads, AsideCount::shared_bytes(p)},
        {count_kernel<BinnedCount, Walk::kWhole>, kThreads, BinnedCount::shared_bytes(p)},
        {partition_tally, kPartitionThreads, 0},
    };
    auto reset = [&](int variant) {
        CHECK(cudaMemsetAsync(p.totals, 0, 2 * sizeof(unsigned long long)));
        if (variant == 6) {
            CHECK(cudaMemsetAsync(p.bins, 0, (kBins + 2) * sizeof(unsigned long long)));
        } else if (variant != 1) {
            CHECK(cudaMemsetAsync(p.at, 0, U * sizeof(unsigned long long)));
            CHECK(cudaMemsetAsync(p.gap, 0, (U + 1) * sizeof(unsigned long long)));
            CHECK(cudaMemsetAsync(p.gap_min, 0xff, (U + 1) * sizeof(uint32_t)));
        }
    };
    auto run = [&](int variant, int blocks) {
        const Kernel &k = kernels[variant];
        PassParams q = p; /* AsideCount: a segment for each warp of the grid */
        q.aside_segment = uint32_t(aside_capacity / (size_t(blocks) * (kThreads / 32)));
        k.func<<<blocks, k.threads, k.shared>>>(op, q, chunk);
        CHECK(cudaGetLastError());
        if (variant == 5)
            aside_drain<<<blocks * (kThreads / 32), kThreads>>>(q);
        CHECK(cudaGetLastError());
    };
    /* a variant's counts against the CPU's */
    auto checked = [&](int variant, int blocks) {
        reset(variant);
        run(variant, blocks);
        CHECK(cudaDeviceSynchronize());
        bool ok;
        if (variant == 1) {
            ok = same(variant, "below", to_host(p.totals, 1),
                      std::vector<unsigned long long>{want.below});
        } else if (variant == 6) {
            ok = same(variant, "totals", to_host(p.totals, 2), want.totals) &&
                 same(variant, "bins", to_host(p.bins, kBins + 2), want.bins);
        } else {
            std::vector<unsigned long long> top = {0, 0};
            const auto keys = to_host(p.block_top_key, blocks);
            const auto counts = to_host(p.block_top_count, blocks);
            for (int b = 0; b < blocks; b++)
                merge_top_host(top, keys[b], counts[b]);
            ok = same(variant, "totals", to_host(p.totals, 2), want.totals) &&
                 same(variant, "at", to_host(p.at, U), want.at) &&
                 same(variant, "gap", to_host(p.gap, U + 1), want.gap) &&
                 same(variant, "gap_min", to_host(p.gap_min, U + 1), want.gap_min) &&
                 same(variant, "top (key, count)", top, want.top);
        }
        if (ok)
            printf("variant %d: OK\n", variant);
        return ok;
    };

    std::vector<int> grid(kVariants + 1, 0);
    for (int v = 1; v <= kVariants; v++)
        if (chosen[v]) {
            grid[v] = grid_of(dev, (const void *)kernels[v].func, kernels[v].threads,
                              kernels[v].shared);
            if (check && !checked(v, grid[v]))
                return 1;
        }
    const float copy_ms = median_ms(dev, [] {}, [&] {
        CHECK(cudaMemcpyAsync(copy, chunk, size_t(bytes), cudaMemcpyDeviceToDevice));
    });
    const double copy_gbs = 2 * bytes / copy_ms / 1e6;
    printf("copy (device to device): %.3f ms, %.0f GB/s read and written\n", copy_ms, copy_gbs);
    printf("variant | blocks | ms (median of 20) | pairs/ns | GB/s read | / copy\n");
    for (int v = 1; v <= kVariants; v++) {
        if (!chosen[v])
            continue;
        const float ms = median_ms(dev, [&] { reset(v); }, [&] { run(v, grid[v]); });
        const double gbs = bytes / ms / 1e6;
        printf("%7d | %6d | %17.3f | %8.1f | %9.0f | %.3f\n", v, grid[v], ms, n_pairs / (ms * 1e6),
               gbs, gbs / copy_gbs);
    }
    return 0;
}

int main(int argc, char **argv)
{
    Device dev{};
    int optin = 0, l2 = 0;
    CHECK(cudaDeviceGetAttribute(&dev.sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    /* roc_eval_plan.cu's counters_max for a pass from features */
    dev.counters_room = std::min(size_t(optin) - kStaticSharedMargin, kSharedCountersFeature);
    const char *blocks_env = getenv("ROC_COUNT_BLOCKS");
    dev.per_sm = blocks_env ? std::min(std::max(atoi(blocks_env), 0), 8) : 2;
    dev.flush_bytes = 2 * size_t(l2);
    CHECK(cudaMalloc(&dev.flush, dev.flush_bytes));
    CHECK(cudaEventCreate(&dev.start));
    CHECK(cudaEventCreate(&dev.stop));

    /* T 0: the library's chunk, 7 waves of the tile product's 2 blocks a multiprocessor */
    int64_t T = argc > 3 ? atoll(argv[1]) : 0;
    T = T > 0 ? T : 14 * int64_t(dev.sms);
    const int64_t U = argc > 3 ? atoll(argv[2]) : 0;
    const double share = argc > 3 ? atof(argv[3]) : 0;
    if (argc > 3 && (U < 1 || U >= (int64_t(1) << 31) || !(share >= 0 && share < 1)))
        return fprintf(stderr, "usage: %s [T U share [variants]]: U from 1 to 2^31 - 1, "
                               "share in [0, 1)\n", argv[0]), 2;
    /* optional 4th argument: the variants to run, e.g. 1,4,5 */
    std::vector<bool> chosen(kVariants + 1, argc <= 4);
    if (argc > 4)
        for (char *v = argv[4], *end;; v = end + 1) {
            const long variant = strtol(v, &end, 10);
            if (end == v || variant < 1 || variant > kVariants)
                return fprintf(stderr, "variants: 1 to %d, comma-separated\n", kVariants), 2;
            chosen[variant] = true;
            if (*end != ',')
                break;
        }
    /* ROC_SKIP_CHECK=1 times without the check */
    const bool check = !getenv("ROC_SKIP_CHECK") || atoi(getenv("ROC_SKIP_CHECK")) == 0;
    printf("%d multiprocessors, %s blocks a multiprocessor, %d KB of L2\n", dev.sms,
           dev.per_sm ? std::to_string(dev.per_sm).c_str() : "the occupancy's", l2 / 1024);
    if (argc > 3)
        return run_workload(dev, T, U, share, chosen, check);
    for (const int64_t levels : {int64_t(5000), int64_t(200000)})
        for (const double tail : {0.0, 0.002, 0.5})
            if (run_workload(dev, T, levels, tail, chosen, check))
                return 1;
    return 0;
}
