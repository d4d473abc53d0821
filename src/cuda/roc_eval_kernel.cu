/*
 * roc_eval_kernel.cu: the evaluator on the GPU (the steps are in roc_eval.c).
 *
 * Genuine pairs: the gallery is sorted by label code (CUB, stable), so the
 * genuine partners of a query are one contiguous group. One thread per
 * genuine pair computes its score (read from the score matrix, or the dot
 * product with the same fmaf chain as the tiles below), then CUB sorts and
 * run-length encodes the keys into the distinct genuine levels, and the host
 * builds a lookup table over them.
 *
 * The counting pass reads the score matrix (warps over row segments) or
 * computes it tile by tile from the features (roc_gemm.cuh: fp32 FMA, k in
 * order, never stored) and hands every pair to a Counter: exact (the level or gap between
 * genuine keys: lookup table, then a short binary search), binned (numpy's
 * uniform bins) or curve (the pair's key into a buffer that CUB sorts and
 * merges into the distinct keys so far). Counters are private to a block in
 * shared memory where they fit, and added into 64-bit global ones at the end.
 */
#include <stdint.h>

#include <algorithm>
#include <vector>

#include <cub/cub.cuh>

#include "../roc_bins.h"
#include "ext_cuda.cuh"
#include "roc_gemm.cuh"
#include "roc_kernel.h"

namespace {

enum { kExact = 0, kBinned = 1, kCurve = 2, kStore = 3 };

constexpr int kThreads = 256;
constexpr int64_t kSegment = 2048;        /* columns of one warp's work item */
constexpr int kLutBits = 16;              /* lookup table: at most 2^16 buckets */
constexpr int kGroupRows = 8;             /* feature pass: row tiles that share column tiles */
constexpr int kStagedStride = 132;        /* a staged score row, padded against bank conflicts */
/* the feature pass's tile product (roc_gemm.cuh; dev/cuda/roc_gemm.cu chose it) */
using FeatureTile = roc_gemm::Tile<2>;
/* Private counters a block may keep in shared memory: the feature pass leaves
 * room for two blocks per multiprocessor beside their tiles (on a device with
 * less shared memory, what it has; see pass_params). */
constexpr size_t kSharedCountersScore = 96 * 1024;
constexpr size_t kSharedCountersFeature = 56 * 1024;
constexpr size_t kStaticSharedMargin = 1024; /* the kernels' own static shared memory */

// ----------------------------------------------------------------------------
// device memory, with the evaluator's peak recorded

template <typename T> struct DeviceArray {
    T *ptr = nullptr;
    size_t n = 0;
};

/* Stream-ordered allocations from a pool of the arena's own (when it has one),
 * which keeps freed memory for the next allocation instead of handing it back
 * to the driver at every synchronization: an evaluation allocates and frees
 * the same large buffers once per step. */
struct Arena {
    cudaStream_t stream = nullptr;
    cudaMemPool_t pool = nullptr;
    int64_t now = 0, peak = 0;

    cudaError_t create_pool(int device)
    {
        cudaMemPoolProps props = {};
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = device;
        EXT_CUDA_TRY(cudaMemPoolCreate(&pool, &props));
        uint64_t keep = UINT64_MAX;
        return cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    void destroy_pool()
    {
        if (pool)
            cudaMemPoolDestroy(pool);
        pool = nullptr;
    }

    template <typename T> cudaError_t alloc(DeviceArray<T> &a, size_t n)
    {
        release(a);
        const size_t bytes = std::max<size_t>(n, 1) * sizeof(T);
        void **ptr = reinterpret_cast<void **>(&a.ptr);
        cudaError_t err = pool ? cudaMallocFromPoolAsync(ptr, bytes, pool, stream)
                               : cudaMallocAsync(ptr, bytes, stream);
        if (err != cudaSuccess) {
            a.ptr = nullptr;
            return err;
        }
        a.n = n;
        now += int64_t(bytes);
        peak = std::max(peak, now);
        return cudaSuccess;
    }
    template <typename T> void release(DeviceArray<T> &a)
    {
        if (a.ptr) {
            cudaFreeAsync(a.ptr, stream);
            now -= int64_t(std::max<size_t>(a.n, 1) * sizeof(T));
        }
        a.ptr = nullptr;
        a.n = 0;
    }
};

/* A CUB device-wide call: size the scratch space, allocate it, run, free it. */
template <typename Call> cudaError_t cub_run(Arena &arena, Call call)
{
    size_t bytes = 0;
    EXT_CUDA_TRY(call(nullptr, bytes));
    DeviceArray<char> scratch;
    EXT_CUDA_TRY(arena.alloc(scratch, bytes));
    cudaError_t err = call(scratch.ptr, bytes);
    arena.release(scratch);
    return err;
}

// ----------------------------------------------------------------------------
// what a counting pass needs (by value, as a kernel argument)

struct PassParams {
    int64_t n_gallery, row_begin, row_end;
    int same_set;
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
    /* every mode */
    unsigned long long *totals; /* pairs, NaN pairs */
    uint32_t *block_top_key;
    unsigned long long *block_top_count;
};

/* Index of the first genuine level >= key (0 .. n_levels), and whether it
 * equals key; lowest and highest are the first and last levels. */
__device__ __forceinline__ int64_t find_level(const PassParams &p, uint32_t lowest,
                                              uint32_t highest, uint32_t key, bool &at)
{
    const uint32_t *levels = p.levels;
    at = false;
    if (key < lowest)
        return 0;
    if (key > highest)
        return p.n_levels;
    const uint32_t bucket = (key - p.lut_base) >> p.lut_shift;
    int64_t lo = __ldg(p.lut + bucket), hi = __ldg(p.lut + bucket + 1);
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (__ldg(levels + mid) < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    at = __ldg(levels + lo) == key;
    return lo;
}

/* Bytes of private counters (and, binned, the edges) a pass of `mode` keeps
 * in shared memory. */
size_t counter_bytes(int mode, const PassParams &p)
{
    if (mode == kExact && p.shared_gaps)
        return size_t(p.n_levels + 1) * 2 * sizeof(uint32_t);
    if (mode == kBinned && p.shared_bins)
        return size_t(p.n_bins + 2) * sizeof(uint32_t) + size_t(p.n_bins + 1) * sizeof(float);
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
        if (kMode == kExact && p.n_levels > 0) {
            lowest_ = __ldg(p.levels);
            highest_ = __ldg(p.levels + p.n_levels - 1);
        }
    }

    __device__ void begin_block()
    {
        if (kMode == kExact && p_.shared_gaps) {
            for (int64_t g = threadIdx.x; g <= p_.n_levels; g += blockDim.x) {
                shared_[g] = 0;
                shared_[p_.n_levels + 1 + g] = 0xffffffffu;
            }
        } else if (kMode == kBinned && p_.shared_bins) {
            float *edges = reinterpret_cast<float *>(shared_ + p_.n_bins + 2);
            for (int64_t b = threadIdx.x; b < p_.n_bins + 2; b += blockDim.x)
                shared_[b] = 0;
            for (int64_t b = threadIdx.x; b <= p_.n_bins; b += blockDim.x)
                edges[b] = p_.edges[b];
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
                atomicAdd(&shared_[shared_bin(s) + 1], 1u);
            else
                atomicAdd(&p_.bins[roc_uniform_bin(s, p_.edges, p_.n_bins, p_.lo32, p_.scale32) + 1],
                          1ull);
            return;
        }
        const uint32_t key = roc_score_key(s);
        if (key > top_key_ || top_count_ == 0) {
            top_key_ = key;
            top_count_ = 1;
        } else if (key == top_key_) {
            top_count_++;
        }
        bool at;
        const int g = int(find_level(p_, lowest_, highest_, key, at));
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
     * The common cases go without a branch per pair, so that the four pairs'
     * loads and atomics overlap: binned, bins whose edges (read for all four
     * first) hold the scores; exact, four scores below every genuine level. */
    __device__ __forceinline__ void pairs4(const int64_t (&row)[4], const int64_t (&col)[4],
                                           const float (&s)[4], const bool (&use)[4])
    {
        if (kMode == kBinned && p_.shared_bins) {
            const float *edges = reinterpret_cast<const float *>(shared_ + p_.n_bins + 2);
            int b[4];
            float lo[4], hi[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                b[u] = estimated_bin(s[u]);
                lo[u] = edges[b[u]];
                hi[u] = edges[b[u] + 1];
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (!use[u])
                    continue;
                n_pairs_++;
                if (isnan(s[u])) {
                    n_nan_++;
                    continue;
                }
                const int bin = bin_holds(s[u], b[u], lo[u], hi[u])
                                    ? b[u]
                                    : int(roc_uniform_bin(s[u], edges, p_.n_bins, p_.lo32,
                                                          p_.scale32));
                atomicAdd(&shared_[bin + 1], 1u);
            }
            return;
        }
        if (kMode == kExact) {
            uint32_t key[4];
            bool below = true;
#pragma unroll
            for (int u = 0; u < 4; u++) {
                key[u] = roc_score_key(s[u]);
                below = below && use[u] && !isnan(s[u]) && key[u] < lowest_;
            }
            if (below) { /* all four in gap 0 */
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const bool top = key[u] > top_key_ || top_count_ == 0;
                    top_count_ = top ? 1 : top_count_ + (key[u] == top_key_);
                    top_key_ = top ? key[u] : top_key_;
                }
                n_pairs_ += 4;
                if (run_gap_ != 0) {
                    flush_run();
                    run_gap_ = 0;
                }
                run_count_ += 4;
                run_min_ = min(run_min_, min(min(key[0], key[1]), min(key[2], key[3])));
                return;
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (use[u])
                pair(row[u], col[u], s[u]);
    }

    __device__ void end_block()
    {
        if (kMode == kStore)
            return;
        if (kMode == kExact)
            flush_run();
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
                if (shared_[b])
                    atomicAdd(&p_.bins[b], (unsigned long long)shared_[b]);
        }
    }

  private:
    /* The bin the score's position suggests, clamped into [0, n_bins) (the
     * conversion saturates and takes NaN to 0), so that its edges can be read. */
    __device__ __forceinline__ int estimated_bin(float s) const
    {
        return min(max(__float2int_rz((s - p_.lo32) * p_.scale32), 0), int(p_.n_bins) - 1);
    }

    /* Whether bin b, with edges lo and hi, holds the score: then b is
     * roc_uniform_bin's answer (no other bin can hold it). */
    __device__ __forceinline__ bool bin_holds(float s, int b, float lo, float hi) const
    {
        return lo <= s && (s < hi || (b == int(p_.n_bins) - 1 && s <= hi));
    }

    /* roc_uniform_bin's answer with the edges in shared memory: the estimated
     * bin when its two edges hold the score (nearly always), else
     * roc_uniform_bin's search. ncu, 10,000 x 21,000 from features: with the
     * search through generic loads every time, the binned count after the
     * tile product took 3.5x the warp time of storing the scores. */
    __device__ __forceinline__ int shared_bin(float s) const
    {
        const float *edges = reinterpret_cast<const float *>(shared_ + p_.n_bins + 2);
        const int b = estimated_bin(s);
        if (bin_holds(s, b, edges[b], edges[b + 1]))
            return b;
        return int(roc_uniform_bin(s, edges, p_.n_bins, p_.lo32, p_.scale32));
    }

    __device__ void flush_run()
    {
        if (run_count_ == 0)
            return;
        if (p_.shared_gaps) {
            atomicAdd(&shared_[run_gap_], run_count_);
            atomicMin(&shared_[p_.n_levels + 1 + run_gap_], run_min_);
        } else {
            atomicAdd(&p_.gap[run_gap_], (unsigned long long)run_count_);
            atomicMin(&p_.gap_min[run_gap_], run_min_);
        }
        run_count_ = 0;
        run_min_ = 0xffffffffu;
    }

    /* pairs and NaN pairs into the globals; the block's top key and its count
     * into the block's slot (merged after the kernel) */
    __device__ void reduce_totals()
    {
        __shared__ unsigned long long warp_pairs[kThreads / 32], warp_nan[kThreads / 32];
        __shared__ uint32_t warp_key[kThreads / 32];
        __shared__ unsigned long long warp_count[kThreads / 32];
        unsigned long long pairs = n_pairs_, nan = n_nan_, count = top_count_;
        uint32_t key = top_key_;
        for (int offset = 16; offset > 0; offset /= 2) {
            pairs += __shfl_down_sync(0xffffffffu, pairs, offset);
            nan += __shfl_down_sync(0xffffffffu, nan, offset);
            merge_top(key, count, __shfl_down_sync(0xffffffffu, key, offset),
                      __shfl_down_sync(0xffffffffu, count, offset));
        }
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (lane == 0) {
            warp_pairs[warp] = pairs;
            warp_nan[warp] = nan;
            warp_key[warp] = key;
            warp_count[warp] = count;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < int(blockDim.x / 32); w++) {
                pairs += warp_pairs[w];
                nan += warp_nan[w];
                merge_top(key, count, warp_key[w], warp_count[w]);
            }
            atomicAdd(&p_.totals[0], pairs);
            atomicAdd(&p_.totals[1], nan);
            if (kMode == kExact) {
                p_.block_top_key[blockIdx.x] = key;
                p_.block_top_count[blockIdx.x] = count;
            }
        }
    }

    static __device__ __forceinline__ void merge_top(uint32_t &key, unsigned long long &count,
                                                     uint32_t other_key,
                                                     unsigned long long other_count)
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

    const PassParams &p_;
    uint32_t *shared_;
    /* a thread sees far fewer than 2^32 pairs in one pass, and levels are < 2^31 */
    unsigned int n_pairs_ = 0, n_nan_ = 0, top_count_ = 0;
    uint32_t top_key_ = 0, lowest_ = 0, highest_ = 0;
    int run_gap_ = -1;
    uint32_t run_count_ = 0, run_min_ = 0xffffffffu;
};

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
    const int64_t n_segments = (p.n_gallery + kSegment - 1) / kSegment;
    const int64_t n_items = (p.row_end - p.row_begin) * n_segments;
    const int64_t n_warps = int64_t(gridDim.x) * blockDim.x / 32;
    for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < n_items;
         item += n_warps) {
        const int64_t i = p.row_begin + item / n_segments;
        int64_t c0 = (item % n_segments) * kSegment;
        const int64_t c1 = c0 + kSegment < p.n_gallery ? c0 + kSegment : p.n_gallery;
        if (p.same_set && c0 < i + 1)
            c0 = i + 1;
        if (c0 >= c1)
            continue;
        const float *row = score + i * p.n_gallery;
        const int64_t misaligned = (reinterpret_cast<uintptr_t>(row + c0) / 4) % 4;
        const int64_t body = c0 + (4 - misaligned) % 4 < c1 ? c0 + (4 - misaligned) % 4 : c1;
        const int64_t tail = body + (c1 - body) / 4 * 4;
        if (c0 + lane < body)
            counter.pair(i, c0 + lane, __ldg(row + c0 + lane));
        for (int64_t j = body + 4 * lane; j < tail; j += 4 * 32) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(row + j));
            counter.pair(i, j, v.x);
            counter.pair(i, j + 1, v.y);
            counter.pair(i, j + 2, v.z);
            counter.pair(i, j + 3, v.w);
        }
        if (tail + lane < c1)
            counter.pair(i, tail + lane, __ldg(row + tail + lane));
    }
    counter.end_block();
}

/* The operands of the feature pass: features prepared k-major and padded
 * (roc_gemm.cuh), A for the queries and B for the gallery (the same for one
 * set). */
struct Operands {
    const float *a, *b;
    int64_t lda, ldb, k_pad;
};

/*
 * Scores from features, one 128 x 128 tile at a time (FeatureTile::product),
 * counted without being stored. Persistent blocks walk the tiles of rows
 * [row_begin, row_end) in groups of kGroupRows row tiles, column by column, so
 * the blocks running together share their gallery tiles in L2.
 */
template <int kMode>
__global__ void __launch_bounds__(FeatureTile::kThreads, 2)
    feature_pass_kernel(const Operands op, const PassParams p)
{
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    FeatureTile::Shared &tiles = *reinterpret_cast<FeatureTile::Shared *>(shared_bytes);
    Counter<kMode> counter(p, reinterpret_cast<uint32_t *>(shared_bytes +
                                                           sizeof(FeatureTile::Shared)));
    counter.begin_block();
    const int64_t first_tile = p.row_begin / roc_gemm::kBM;
    const int64_t tiles_m = (p.row_end - first_tile * roc_gemm::kBM + roc_gemm::kBM - 1) /
                            roc_gemm::kBM;
    const int64_t tiles_n = (p.n_gallery + roc_gemm::kBN - 1) / roc_gemm::kBN;
    for (int64_t t = blockIdx.x; t < tiles_m * tiles_n; t += gridDim.x) {
        const int64_t group = t / (kGroupRows * tiles_n);
        const int64_t rows_in_group = min(int64_t(kGroupRows), tiles_m - group * kGroupRows);
        const int64_t in_group = t - group * kGroupRows * tiles_n;
        const int64_t m0 = (first_tile + group * kGroupRows + in_group % rows_in_group) *
                           roc_gemm::kBM;
        const int64_t n0 = (in_group / rows_in_group) * roc_gemm::kBN;
        if (p.same_set && n0 + roc_gemm::kBN - 1 <= m0)
            continue; /* every column at or left of every row: below the diagonal */
        float acc[8][FeatureTile::kFragN];
        FeatureTile::product(op.a, op.lda, op.b, op.ldb, m0, n0, op.k_pad, tiles, acc);
        const bool whole = m0 >= p.row_begin && m0 + roc_gemm::kBM <= p.row_end &&
                           n0 + roc_gemm::kBN <= p.n_gallery &&
                           (!p.same_set || n0 >= m0 + roc_gemm::kBM);
        /* The tile goes through shared memory, 64 rows at a time (the first half
         * of the warps hold rows 0-63): the accumulators are then dead, and the
         * counting loop is small and reads consecutive columns. */
        float(*staged)[kStagedStride] = reinterpret_cast<float(*)[kStagedStride]>(shared_bytes);
        for (int half = 0; half < 2; half++) {
            if (int(threadIdx.x) / (FeatureTile::kThreads / 2) == half) {
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int j = 0; j < FeatureTile::kFragN; j += 4)
                        *reinterpret_cast<float4 *>(
                            &staged[FeatureTile::row(i) - half * 64][FeatureTile::col(j)]) =
                            make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            }
            __syncthreads();
            /* four pairs a step, their scores read first, so a thread has
             * several pairs in flight rather than one chain of dependent steps */
            constexpr int kStep = FeatureTile::kThreads;
            for (int e = threadIdx.x; e < 64 * roc_gemm::kBN; e += 4 * kStep) {
                float v[4];
#pragma unroll
                for (int u = 0; u < 4; u++)
                    v[u] = staged[(e + u * kStep) / roc_gemm::kBN][(e + u * kStep) % roc_gemm::kBN];
                int64_t row[4], col[4];
                bool use[4];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    row[u] = m0 + half * 64 + (e + u * kStep) / roc_gemm::kBN;
                    col[u] = n0 + (e + u * kStep) % roc_gemm::kBN;
                    use[u] = whole || (row[u] >= p.row_begin && row[u] < p.row_end &&
                                       col[u] < p.n_gallery && (!p.same_set || col[u] > row[u]));
                }
                counter.pairs4(row, col, v, use);
            }
            __syncthreads();
        }
    }
    counter.end_block();
}

/* Merges the blocks' top keys into the running (key, count). */
__global__ void merge_top_kernel(const uint32_t *block_key, const unsigned long long *block_count,
                                 int n_blocks, uint32_t *top_key, unsigned long long *top_count)
{
    uint32_t key = *top_key;
    unsigned long long count = *top_count;
    for (int b = 0; b < n_blocks; b++) {
        if (block_count[b] == 0)
            continue;
        if (count == 0 || block_key[b] > key) {
            key = block_key[b];
            count = block_count[b];
        } else if (block_key[b] == key) {
            count += block_count[b];
        }
    }
    *top_key = key;
    *top_count = count;
}

// ----------------------------------------------------------------------------
// genuine pairs

__global__ void check_codes_kernel(const int32_t *codes, int64_t n, int64_t n_codes, int *bad)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        if (codes[i] < 0 || codes[i] >= n_codes)
            *bad = 1;
}

__global__ void iota_kernel(int64_t *out, int64_t n)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        out[i] = i;
}

/* start[c] = first position of code c among the sorted codes (c = 0 .. n_codes) */
__global__ void code_start_kernel(const int32_t *sorted_codes, int64_t n, int64_t n_codes,
                                  int64_t *start)
{
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c <= n_codes;
         c += int64_t(gridDim.x) * blockDim.x) {
        int64_t lo = 0, hi = n;
        while (lo < hi) {
            int64_t mid = (lo + hi) >> 1;
            if (sorted_codes[mid] < c)
                lo = mid + 1;
            else
                hi = mid;
        }
        start[c] = lo;
    }
}

__global__ void position_kernel(const int64_t *members, int64_t n, int64_t *position)
{
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
         t += int64_t(gridDim.x) * blockDim.x)
        position[members[t]] = t;
}

/* Genuine partners of query i: sorted positions [first, start[code + 1]). */
__device__ __forceinline__ int64_t first_partner(const int32_t *codes_q, const int64_t *start,
                                                 const int64_t *position, int same_set, int64_t i)
{
    return same_set ? position[i] + 1 : start[codes_q[i]];
}

__global__ void genuine_count_kernel(const int32_t *codes_q, int64_t n_query, int64_t n_codes,
                                     const int64_t *start, const int64_t *position,
                                     int same_set, int64_t *count)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i <= n_query;
         i += int64_t(gridDim.x) * blockDim.x) {
        if (i == n_query) {
            count[i] = 0;
            continue;
        }
        if (codes_q[i] < 0 || codes_q[i] >= n_codes) { /* reported by check_codes_kernel */
            count[i] = 0;
            continue;
        }
        const int64_t first = first_partner(codes_q, start, position, same_set, i);
        const int64_t end = start[codes_q[i] + 1];
        count[i] = end > first ? end - first : 0;
    }
}

/* One thread per genuine pair: its key (or NO_KEY for NaN). The dot product is
 * the fmaf chain of FeatureTile::product over the same prepared operands,
 * so the two agree bit for bit. */
__global__ void genuine_key_kernel(const int32_t *codes_q, int64_t n_query, int64_t n_gallery,
                                   const int64_t *start, const int64_t *position,
                                   const int64_t *members, const int64_t *offset, int same_set,
                                   const float *score, const Operands op, int64_t n_pairs,
                                   uint32_t *keys, unsigned long long *n_nan)
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
        const int64_t i = lo;
        const int64_t j =
            members[first_partner(codes_q, start, position, same_set, i) + (t - offset[i])];
        float s;
        if (score) {
            s = score[i * n_gallery + j];
        } else {
            s = 0.0f;
            for (int64_t k = 0; k < op.k_pad; k++)
                s = fmaf(op.a[k * op.lda + i], op.b[k * op.ldb + j], s);
        }
        if (isnan(s)) {
            keys[t] = ROC_NO_KEY;
            atomicAdd(n_nan, 1ull);
        } else {
            keys[t] = roc_score_key(s);
        }
    }
}

/* Cosine: 1 / sqrt(sum of squares) of each row, in float64 in index order
 * with the CPU's IEEE operations (no contraction). */
__global__ void inverse_norm_kernel(const float *x, int64_t n, int64_t dim, double *inverse)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        double sum = 0.0;
        for (int64_t k = 0; k < dim; k++) {
            const double v = x[i * dim + k];
            sum = __dadd_rn(sum, __dmul_rn(v, v));
        }
        inverse[i] = __ddiv_rn(1.0, __dsqrt_rn(sum));
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

unsigned grid_for(int64_t n, int threads = kThreads)
{
    return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads,
                                                           int64_t(ext_sm_count()) * 32)));
}

} // namespace

// ----------------------------------------------------------------------------
// the evaluator's device state

struct roc_eval_cuda {
    int mode = 0, same_set = 0, device = 0;
    cudaStream_t stream = nullptr;
    int64_t n_query = 0, n_gallery = 0, dim = 0;
    const float *score = nullptr;
    Arena arena;
    DeviceArray<float> prepared_q, prepared_g; /* the feature operands (roc_gemm.cuh) */
    Operands op{};
    /* exact: genuine levels, lookup table, counters */
    int64_t n_levels = 0;
    DeviceArray<uint32_t> levels, lut, gap_min, top_key, block_top_key;
    DeviceArray<unsigned long long> at, gap, top_count, block_top_count;
    uint32_t lut_base = 0;
    int lut_shift = 0;
    std::vector<uint32_t> host_lut; /* source of the lut's upload */
    /* binned */
    DeviceArray<float> edges;
    DeviceArray<unsigned long long> bins;
    int64_t n_bins = 0;
    float lo32 = 0, scale32 = 0;
    /* curve: the distinct keys so far */
    DeviceArray<uint32_t> acc_keys;
    DeviceArray<unsigned long long> acc_counts;
    int64_t n_acc = 0;
    /* pairs, NaN pairs */
    DeviceArray<unsigned long long> totals;
    int pass_blocks = 0;
};

namespace {

/* Finds the genuine pairs and their keys; leaves the distinct levels in
 * `genuine` (host) and the levels + lookup table on the device. */
cudaError_t find_genuine(roc_eval_cuda *ev, const roc_eval_cuda_setup *s,
                         roc_genuine_levels *genuine, roc_totals *totals, int *bad_code)
{
    Arena &arena = ev->arena;
    cudaStream_t stream = ev->stream;
    const int64_t Q = s->n_query, G = s->n_gallery, L = s->n_codes;

    /* flags bad codes; the kernels below skip them, and the flag is read with
     * the pair count, before any pair is scored */
    DeviceArray<int> bad;
    EXT_CUDA_TRY(arena.alloc(bad, 1));
    EXT_CUDA_TRY(cudaMemsetAsync(bad.ptr, 0, sizeof(int), stream));
    check_codes_kernel<<<grid_for(Q), kThreads, 0, stream>>>(s->codes_q, Q, L, bad.ptr);
    check_codes_kernel<<<grid_for(G), kThreads, 0, stream>>>(s->codes_g, G, L, bad.ptr);
    EXT_CUDA_TRY(cudaGetLastError());

    /* the gallery sorted by code, stable: members[t] is a gallery index */
    DeviceArray<int32_t> sorted_codes;
    DeviceArray<int64_t> index, members, start, position, count, offset;
    EXT_CUDA_TRY(arena.alloc(sorted_codes, G));
    EXT_CUDA_TRY(arena.alloc(index, G));
    EXT_CUDA_TRY(arena.alloc(members, G));
    EXT_CUDA_TRY(arena.alloc(start, L + 1));
    EXT_CUDA_TRY(arena.alloc(position, G));
    EXT_CUDA_TRY(arena.alloc(count, Q + 1));
    EXT_CUDA_TRY(arena.alloc(offset, Q + 1));
    iota_kernel<<<grid_for(G), kThreads, 0, stream>>>(index.ptr, G);
    EXT_CUDA_TRY(cudaGetLastError());
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortPairs(tmp, bytes, s->codes_g, sorted_codes.ptr, index.ptr,
                                               members.ptr, G, 0, 32, stream);
    }));
    code_start_kernel<<<grid_for(L + 1), kThreads, 0, stream>>>(sorted_codes.ptr, G, L,
                                                                start.ptr);
    position_kernel<<<grid_for(G), kThreads, 0, stream>>>(members.ptr, G, position.ptr);
    genuine_count_kernel<<<grid_for(Q + 1), kThreads, 0, stream>>>(
        s->codes_q, Q, L, start.ptr, position.ptr, s->same_set, count.ptr);
    EXT_CUDA_TRY(cudaGetLastError());
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceScan::ExclusiveSum(tmp, bytes, count.ptr, offset.ptr, Q + 1, stream);
    }));
    int64_t n_pairs = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&n_pairs, offset.ptr + Q, sizeof n_pairs, cudaMemcpyDeviceToHost,
                                 stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(bad_code, bad.ptr, sizeof(int), cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    arena.release(bad);
    if (*bad_code)
        return cudaSuccess;

    DeviceArray<uint32_t> keys, sorted_keys, unique;
    DeviceArray<unsigned long long> nan, run_counts;
    DeviceArray<int64_t> n_runs;
    EXT_CUDA_TRY(arena.alloc(keys, n_pairs));
    EXT_CUDA_TRY(arena.alloc(sorted_keys, n_pairs));
    EXT_CUDA_TRY(arena.alloc(nan, 1));
    EXT_CUDA_TRY(cudaMemsetAsync(nan.ptr, 0, sizeof(unsigned long long), stream));
    genuine_key_kernel<<<grid_for(n_pairs), kThreads, 0, stream>>>(
        s->codes_q, Q, G, start.ptr, position.ptr, members.ptr, offset.ptr, s->same_set,
        ev->score, ev->op, n_pairs, keys.ptr, nan.ptr);
    EXT_CUDA_TRY(cudaGetLastError());
    for (DeviceArray<int64_t> *a : {&index, &members, &start, &position, &count, &offset})
        arena.release(*a);
    arena.release(sorted_codes);
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortKeys(tmp, bytes, keys.ptr, sorted_keys.ptr, n_pairs, 0,
                                              32, stream);
    }));
    arena.release(keys);
    /* runs of the sorted keys (a NaN pair's NO_KEY sorts first), copied whole
     * with their count and the NaN count: one synchronization */
    EXT_CUDA_TRY(arena.alloc(unique, n_pairs));
    EXT_CUDA_TRY(arena.alloc(run_counts, n_pairs));
    EXT_CUDA_TRY(arena.alloc(n_runs, 1));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRunLengthEncode::Encode(tmp, bytes, sorted_keys.ptr, unique.ptr,
                                                  run_counts.ptr, n_runs.ptr, n_pairs, stream);
    }));
    const int64_t capacity = std::max<int64_t>(n_pairs, 1);
    genuine->keys = static_cast<uint32_t *>(malloc(capacity * sizeof(uint32_t)));
    genuine->counts = static_cast<uint64_t *>(malloc(capacity * sizeof(uint64_t)));
    if (!genuine->keys || !genuine->counts)
        return cudaErrorMemoryAllocation;
    unsigned long long n_nan = 0;
    int64_t U = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&n_nan, nan.ptr, sizeof n_nan, cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(&U, n_runs.ptr, sizeof U, cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(genuine->keys, unique.ptr, n_pairs * sizeof(uint32_t),
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(genuine->counts, run_counts.ptr, n_pairs * sizeof(uint64_t),
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    if (n_pairs == 0)
        U = 0;
    if (n_nan > 0) { /* drop the NaN run */
        memmove(genuine->keys, genuine->keys + 1, (U - 1) * sizeof(uint32_t));
        memmove(genuine->counts, genuine->counts + 1, (U - 1) * sizeof(uint64_t));
        U--;
    }
    genuine->n_levels = U;
    for (DeviceArray<uint32_t> *a : {&sorted_keys, &unique})
        arena.release(*a);
    arena.release(run_counts);
    arena.release(n_runs);
    arena.release(nan);
    const int64_t n_valid = n_pairs - int64_t(n_nan);
    totals->n_genuine = uint64_t(n_valid);
    totals->n_nan_genuine = n_nan;
    ev->n_levels = U;
    return cudaSuccess;
}

/* Levels and their lookup table on the device: bucket b covers keys
 * [base + b << shift, base + (b + 1) << shift); lut[b] is the first level in
 * or after it, so a key's level lies in [lut[b], lut[b + 1]]. */
cudaError_t upload_levels(roc_eval_cuda *ev, const roc_genuine_levels *genuine)
{
    const int64_t U = genuine->n_levels;
    if (U == 0)
        return cudaSuccess;
    const uint32_t base = genuine->keys[0], span = genuine->keys[U - 1] - base;
    int shift = 0;
    while ((uint64_t(span) >> shift) + 1 > (uint64_t(1) << kLutBits))
        shift++;
    const int64_t n_buckets = int64_t(uint64_t(span) >> shift) + 1;
    std::vector<uint32_t> &lut = ev->host_lut;
    lut.assign(n_buckets + 1, 0);
    int64_t level = 0;
    for (int64_t b = 0; b <= n_buckets; b++) {
        const uint64_t bucket_start = uint64_t(base) + (uint64_t(b) << shift);
        while (level < U && genuine->keys[level] < bucket_start)
            level++;
        lut[b] = uint32_t(level);
    }
    ev->lut_base = base;
    ev->lut_shift = shift;
    EXT_CUDA_TRY(ev->arena.alloc(ev->levels, U));
    EXT_CUDA_TRY(ev->arena.alloc(ev->lut, lut.size()));
    EXT_CUDA_TRY(cudaMemcpyAsync(ev->levels.ptr, genuine->keys, U * sizeof(uint32_t),
                                 cudaMemcpyHostToDevice, ev->stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(ev->lut.ptr, lut.data(), lut.size() * sizeof(uint32_t),
                                 cudaMemcpyHostToDevice, ev->stream));
    return cudaSuccess; /* host_lut lives as long as the evaluator */
}

PassParams pass_params(roc_eval_cuda *ev, int64_t row_begin, int64_t row_end, uint32_t *keys)
{
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ev->device) !=
        cudaSuccess)
        optin = 48 * 1024;
    const size_t tiles = ev->score ? 0 : sizeof(FeatureTile::Shared);
    const size_t room = size_t(optin) > tiles + kStaticSharedMargin
                            ? size_t(optin) - tiles - kStaticSharedMargin : 0;
    const size_t counters_max =
        std::min(room, ev->score ? kSharedCountersScore : kSharedCountersFeature);
    PassParams p{};
    p.n_gallery = ev->n_gallery;
    p.row_begin = row_begin;
    p.row_end = row_end;
    p.same_set = ev->same_set;
    p.levels = ev->levels.ptr;
    p.n_levels = ev->n_levels;
    p.lut = ev->lut.ptr;
    p.lut_base = ev->lut_base;
    p.lut_shift = ev->lut_shift;
    p.at = ev->at.ptr;
    p.gap = ev->gap.ptr;
    p.gap_min = ev->gap_min.ptr;
    p.shared_gaps = size_t(ev->n_levels + 1) * 2 * sizeof(uint32_t) <= counters_max;
    p.edges = ev->edges.ptr;
    p.n_bins = ev->n_bins;
    p.lo32 = ev->lo32;
    p.scale32 = ev->scale32;
    p.bins = ev->bins.ptr;
    p.shared_bins = size_t(ev->n_bins + 2) * 4 + size_t(ev->n_bins + 1) * 4 <= counters_max;
    p.keys = keys;
    p.totals = ev->totals.ptr;
    p.block_top_key = ev->block_top_key.ptr;
    p.block_top_count = ev->block_top_count.ptr;
    return p;
}

/* Launches one pass over rows [row_begin, row_end) with a persistent grid. */
template <int kMode> cudaError_t launch_pass(roc_eval_cuda *ev, const PassParams &p)
{
    const size_t shared = counter_bytes(kMode, p) +
                          (ev->score ? 0 : sizeof(FeatureTile::Shared));
    const int threads = ev->score ? kThreads : FeatureTile::kThreads;
    const void *func = ev->score ? reinterpret_cast<const void *>(score_pass_kernel<kMode>)
                                 : reinterpret_cast<const void *>(feature_pass_kernel<kMode>);
    /* set even below 48 KB: the kernels' static shared memory counts too */
    EXT_CUDA_TRY(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(shared)));
    int per_sm = 0;
    EXT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, func, threads, shared));
    const int blocks = std::min(ev->pass_blocks, ext_sm_count() * std::max(per_sm, 1));
    if (ev->score)
        score_pass_kernel<kMode><<<blocks, threads, shared, ev->stream>>>(ev->score, p);
    else
        feature_pass_kernel<kMode><<<blocks, threads, shared, ev->stream>>>(ev->op, p);
    EXT_CUDA_TRY(cudaGetLastError());
    if (kMode == kExact) {
        merge_top_kernel<<<1, 1, 0, ev->stream>>>(ev->block_top_key.ptr,
                                                   ev->block_top_count.ptr, blocks,
                                                   ev->top_key.ptr, ev->top_count.ptr);
        EXT_CUDA_TRY(cudaGetLastError());
    }
    return cudaSuccess;
}

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

/* features x (n, dim) -> out (k_pad, ld), k-major, zero-padded; scaled to unit
 * length for cosine. */
cudaError_t prepare(Arena &arena, const float *x, int64_t n, int64_t dim, bool cosine,
                    int64_t ld, int64_t k_pad, DeviceArray<float> &out)
{
    DeviceArray<double> inverse;
    if (cosine) {
        EXT_CUDA_TRY(arena.alloc(inverse, n));
        inverse_norm_kernel<<<grid_for(n), kThreads, 0, arena.stream>>>(x, n, dim, inverse.ptr);
        EXT_CUDA_TRY(cudaGetLastError());
    }
    EXT_CUDA_TRY(arena.alloc(out, k_pad * ld));
    if (k_pad > 0) {
        const dim3 grid(unsigned(ld / 32), unsigned((k_pad + 31) / 32));
        prepare_kernel<<<grid, dim3(32, 8), 0, arena.stream>>>(x, n, dim, inverse.ptr, out.ptr,
                                                               ld, k_pad);
        EXT_CUDA_TRY(cudaGetLastError());
    }
    arena.release(inverse);
    return cudaSuccess;
}

/* Both operands of the feature pass (one, shared, for one set). */
cudaError_t prepare_operands(Arena &arena, const float *feat_q, const float *feat_g,
                             int64_t n_query, int64_t n_gallery, int64_t dim, int similarity,
                             int same_set, DeviceArray<float> &prepared_q,
                             DeviceArray<float> &prepared_g, Operands &op)
{
    const bool cosine = similarity == ROC_COSINE;
    op.k_pad = round_up(dim, FeatureTile::kSliceK);
    op.lda = round_up(std::max<int64_t>(n_query, 1), roc_gemm::kBM);
    op.ldb = round_up(std::max<int64_t>(n_gallery, 1), roc_gemm::kBN);
    EXT_CUDA_TRY(prepare(arena, feat_q, n_query, dim, cosine, op.lda, op.k_pad, prepared_q));
    op.a = op.b = prepared_q.ptr;
    if (!same_set) {
        EXT_CUDA_TRY(prepare(arena, feat_g, n_gallery, dim, cosine, op.ldb, op.k_pad,
                             prepared_g));
        op.b = prepared_g.ptr;
    }
    return cudaSuccess;
}

/* Curve mode: the rows' keys, sorted and run-length encoded, merged into the
 * distinct keys so far (concatenate, sort by key, add equal keys' counts). */
cudaError_t merge_keys(roc_eval_cuda *ev, DeviceArray<uint32_t> &keys, int64_t n)
{
    Arena &arena = ev->arena;
    cudaStream_t stream = ev->stream;
    DeviceArray<uint32_t> sorted, cat_keys, cat_sorted;
    DeviceArray<unsigned long long> cat_counts, cat_counts_sorted;
    DeviceArray<int64_t> n_runs;
    EXT_CUDA_TRY(arena.alloc(sorted, n));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortKeys(tmp, bytes, keys.ptr, sorted.ptr, n, 0, 32, stream);
    }));
    arena.release(keys);
    const int64_t total = ev->n_acc + n;
    EXT_CUDA_TRY(arena.alloc(cat_keys, total));
    EXT_CUDA_TRY(arena.alloc(cat_counts, total));
    EXT_CUDA_TRY(arena.alloc(n_runs, 1));
    /* the new keys' runs go after the distinct keys so far */
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRunLengthEncode::Encode(tmp, bytes, sorted.ptr, cat_keys.ptr + ev->n_acc,
                                                  cat_counts.ptr + ev->n_acc, n_runs.ptr, n,
                                                  stream);
    }));
    arena.release(sorted);
    int64_t new_runs = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&new_runs, n_runs.ptr, sizeof new_runs, cudaMemcpyDeviceToHost,
                                 stream));
    if (ev->n_acc) {
        EXT_CUDA_TRY(cudaMemcpyAsync(cat_keys.ptr, ev->acc_keys.ptr, ev->n_acc * sizeof(uint32_t),
                                     cudaMemcpyDeviceToDevice, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(cat_counts.ptr, ev->acc_counts.ptr,
                                     ev->n_acc * sizeof(unsigned long long),
                                     cudaMemcpyDeviceToDevice, stream));
    }
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    arena.release(ev->acc_keys);
    arena.release(ev->acc_counts);
    const int64_t n_cat = ev->n_acc + new_runs;
    EXT_CUDA_TRY(arena.alloc(cat_sorted, n_cat));
    EXT_CUDA_TRY(arena.alloc(cat_counts_sorted, n_cat));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortPairs(tmp, bytes, cat_keys.ptr, cat_sorted.ptr,
                                               cat_counts.ptr, cat_counts_sorted.ptr, n_cat, 0, 32,
                                               stream);
    }));
    arena.release(cat_keys);
    arena.release(cat_counts);
    EXT_CUDA_TRY(arena.alloc(ev->acc_keys, n_cat));
    EXT_CUDA_TRY(arena.alloc(ev->acc_counts, n_cat));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceReduce::ReduceByKey(tmp, bytes, cat_sorted.ptr, ev->acc_keys.ptr,
                                              cat_counts_sorted.ptr, ev->acc_counts.ptr,
                                              n_runs.ptr, cuda::std::plus<>{}, n_cat, stream);
    }));
    EXT_CUDA_TRY(cudaMemcpyAsync(&ev->n_acc, n_runs.ptr, sizeof ev->n_acc, cudaMemcpyDeviceToHost,
                                 stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    arena.release(cat_sorted);
    arena.release(cat_counts_sorted);
    arena.release(n_runs);
    return cudaSuccess;
}

cudaError_t create(roc_eval_cuda *ev, const roc_eval_cuda_setup *s, roc_genuine_levels *genuine,
                   roc_totals *totals, int *bad_code)
{
    Arena &arena = ev->arena;
    if (s->feat_q)
        EXT_CUDA_TRY(prepare_operands(arena, s->feat_q, s->feat_g, s->n_query, s->n_gallery,
                                      s->dim, s->similarity, s->same_set, ev->prepared_q,
                                      ev->prepared_g, ev->op));
    EXT_CUDA_TRY(find_genuine(ev, s, genuine, totals, bad_code));
    if (*bad_code)
        return cudaSuccess;
    EXT_CUDA_TRY(arena.alloc(ev->totals, 2));
    EXT_CUDA_TRY(cudaMemsetAsync(ev->totals.ptr, 0, 2 * sizeof(unsigned long long), ev->stream));
    ev->pass_blocks = ext_sm_count() * 8;
    if (s->mode == kExact) {
        const int64_t U = ev->n_levels;
        EXT_CUDA_TRY(upload_levels(ev, genuine));
        EXT_CUDA_TRY(arena.alloc(ev->at, U + 1));
        EXT_CUDA_TRY(arena.alloc(ev->gap, U + 1));
        EXT_CUDA_TRY(arena.alloc(ev->gap_min, U + 1));
        EXT_CUDA_TRY(arena.alloc(ev->top_key, 1));
        EXT_CUDA_TRY(arena.alloc(ev->top_count, 1));
        EXT_CUDA_TRY(arena.alloc(ev->block_top_key, ev->pass_blocks));
        EXT_CUDA_TRY(arena.alloc(ev->block_top_count, ev->pass_blocks));
        EXT_CUDA_TRY(cudaMemsetAsync(ev->at.ptr, 0, (U + 1) * sizeof(unsigned long long),
                                     ev->stream));
        EXT_CUDA_TRY(cudaMemsetAsync(ev->gap.ptr, 0, (U + 1) * sizeof(unsigned long long),
                                     ev->stream));
        EXT_CUDA_TRY(cudaMemsetAsync(ev->gap_min.ptr, 0xff, (U + 1) * sizeof(uint32_t),
                                     ev->stream));
        EXT_CUDA_TRY(cudaMemsetAsync(ev->top_key.ptr, 0, sizeof(uint32_t), ev->stream));
        EXT_CUDA_TRY(cudaMemsetAsync(ev->top_count.ptr, 0, sizeof(unsigned long long),
                                     ev->stream));
    } else if (s->mode == kBinned) {
        const roc_binned_counts *b = s->binned;
        ev->n_bins = b->n_bins;
        ev->lo32 = b->lo32;
        ev->scale32 = b->scale32;
        EXT_CUDA_TRY(arena.alloc(ev->edges, b->n_bins + 1));
        EXT_CUDA_TRY(arena.alloc(ev->bins, b->n_bins + 2));
        EXT_CUDA_TRY(cudaMemcpyAsync(ev->edges.ptr, b->edges, (b->n_bins + 1) * sizeof(float),
                                     cudaMemcpyHostToDevice, ev->stream));
        EXT_CUDA_TRY(cudaMemsetAsync(ev->bins.ptr, 0, (b->n_bins + 2) * sizeof(unsigned long long),
                                     ev->stream));
    }
    return cudaStreamSynchronize(ev->stream);
}

} // namespace

// ----------------------------------------------------------------------------
// launchers

extern "C" int roc_eval_cuda_create(roc_eval_cuda **out, const roc_eval_cuda_setup *setup,
                                    roc_genuine_levels *genuine, roc_totals *totals,
                                    int *bad_code)
{
    *out = nullptr;
    *bad_code = 0;
    ExtDeviceGuard guard(setup->device);
    EXT_CUDA_TRY(guard.error());
    roc_eval_cuda *ev = new (std::nothrow) roc_eval_cuda;
    if (!ev)
        return cudaErrorMemoryAllocation;
    ev->mode = setup->mode;
    ev->same_set = setup->same_set;
    ev->device = setup->device;
    ev->stream = static_cast<cudaStream_t>(setup->stream);
    ev->arena.stream = ev->stream;
    cudaError_t pool_err = ev->arena.create_pool(setup->device);
    if (pool_err != cudaSuccess) {
        roc_eval_cuda_free(ev);
        return pool_err;
    }
    ev->n_query = setup->n_query;
    ev->n_gallery = setup->n_gallery;
    ev->dim = setup->dim;
    ev->score = setup->score;
    cudaError_t err = create(ev, setup, genuine, totals, bad_code);
    if (err != cudaSuccess || *bad_code) {
        roc_eval_cuda_free(ev);
        return err;
    }
    *out = ev;
    return cudaSuccess;
}

extern "C" int roc_eval_cuda_add_rows(roc_eval_cuda *ev, int64_t row_begin, int64_t row_end)
{
    ExtDeviceGuard guard(ev->device);
    EXT_CUDA_TRY(guard.error());
    if (ev->mode == kExact && ev->n_levels == 0)
        return cudaSuccess; /* no genuine pairs: summarize says so */
    if (ev->mode == kCurve) {
        const int64_t n = (row_end - row_begin) * ev->n_gallery;
        DeviceArray<uint32_t> keys;
        EXT_CUDA_TRY(ev->arena.alloc(keys, n));
        EXT_CUDA_TRY(cudaMemsetAsync(keys.ptr, 0, n * sizeof(uint32_t), ev->stream)); /* NO_KEY */
        EXT_CUDA_TRY(launch_pass<kCurve>(ev, pass_params(ev, row_begin, row_end, keys.ptr)));
        return merge_keys(ev, keys, n);
    }
    const PassParams p = pass_params(ev, row_begin, row_end, nullptr);
    if (ev->mode == kExact)
        return launch_pass<kExact>(ev, p);
    return launch_pass<kBinned>(ev, p);
}

extern "C" int roc_eval_cuda_fetch(roc_eval_cuda *ev, roc_exact_counts *exact,
                                   roc_binned_counts *binned, roc_key_counts *keys,
                                   roc_totals *totals)
{
    ExtDeviceGuard guard(ev->device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = ev->stream;
    unsigned long long host_totals[2] = {0, 0};
    EXT_CUDA_TRY(cudaMemcpyAsync(host_totals, ev->totals.ptr, sizeof host_totals,
                                 cudaMemcpyDeviceToHost, stream));
    const int64_t U = ev->n_levels;
    if (ev->mode == kExact && U > 0) {
        EXT_CUDA_TRY(cudaMemcpyAsync(exact->at, ev->at.ptr, U * sizeof(uint64_t),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(exact->gap, ev->gap.ptr, (U + 1) * sizeof(uint64_t),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(exact->gap_min, ev->gap_min.ptr, (U + 1) * sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(&exact->top_key, ev->top_key.ptr, sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(&exact->top_count, ev->top_count.ptr, sizeof(uint64_t),
                                     cudaMemcpyDeviceToHost, stream));
    } else if (ev->mode == kBinned) {
        std::vector<unsigned long long> bins(ev->n_bins + 2);
        EXT_CUDA_TRY(cudaMemcpyAsync(bins.data(), ev->bins.ptr, bins.size() * sizeof(bins[0]),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaStreamSynchronize(stream));
        binned->below = bins[0];
        for (int64_t b = 0; b < ev->n_bins; b++)
            binned->all[b] = bins[b + 1];
        binned->above = bins[ev->n_bins + 1];
    } else if (ev->mode == kCurve) {
        free(keys->keys);
        free(keys->counts);
        keys->n_keys = 0;
        keys->keys = static_cast<uint32_t *>(malloc(std::max<int64_t>(ev->n_acc, 1) * 4));
        keys->counts = static_cast<uint64_t *>(malloc(std::max<int64_t>(ev->n_acc, 1) * 8));
        if (!keys->keys || !keys->counts)
            return cudaErrorMemoryAllocation;
        EXT_CUDA_TRY(cudaMemcpyAsync(keys->keys, ev->acc_keys.ptr, ev->n_acc * sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(keys->counts, ev->acc_counts.ptr, ev->n_acc * sizeof(uint64_t),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaStreamSynchronize(stream));
        /* NaN and skipped pairs carried NO_KEY, the lowest key: drop its run */
        int64_t skip = ev->n_acc > 0 && keys->keys[0] == ROC_NO_KEY ? 1 : 0;
        memmove(keys->keys, keys->keys + skip, (ev->n_acc - skip) * sizeof(uint32_t));
        memmove(keys->counts, keys->counts + skip, (ev->n_acc - skip) * sizeof(uint64_t));
        keys->n_keys = ev->n_acc - skip;
    }
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    totals->n_pairs = host_totals[0];
    totals->n_nan = host_totals[1];
    return cudaSuccess;
}

extern "C" int64_t roc_eval_cuda_peak_bytes(const roc_eval_cuda *ev) { return ev->arena.peak; }

extern "C" void roc_eval_cuda_free(roc_eval_cuda *ev)
{
    if (!ev)
        return;
    {
        ExtDeviceGuard guard(ev->device);
        Arena &a = ev->arena;
        for (DeviceArray<float> *x : {&ev->prepared_q, &ev->prepared_g, &ev->edges})
            a.release(*x);
        for (DeviceArray<uint32_t> *x : {&ev->levels, &ev->lut, &ev->gap_min, &ev->top_key,
                                         &ev->block_top_key, &ev->acc_keys})
            a.release(*x);
        for (DeviceArray<unsigned long long> *x : {&ev->at, &ev->gap, &ev->top_count,
                                                   &ev->block_top_count, &ev->bins,
                                                   &ev->acc_counts, &ev->totals})
            a.release(*x);
        cudaStreamSynchronize(ev->stream);
        a.destroy_pool();
    }
    delete ev;
}

extern "C" int roc_scores_launch(const float *feat_q, const float *feat_g, int64_t n_query,
                                 int64_t n_gallery, int64_t dim, int similarity, float *score,
                                 int device, void *stream_ptr)
{
    if (n_query == 0 || n_gallery == 0)
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    Arena arena;
    arena.stream = static_cast<cudaStream_t>(stream_ptr);
    DeviceArray<float> prepared_q, prepared_g;
    Operands op{};
    cudaError_t err = prepare_operands(arena, feat_q, feat_g, n_query, n_gallery, dim,
                                       similarity, 0, prepared_q, prepared_g, op);
    if (err == cudaSuccess) {
        PassParams p{};
        p.n_gallery = n_gallery;
        p.row_begin = 0;
        p.row_end = n_query;
        p.scores = score;
        const size_t shared = sizeof(FeatureTile::Shared);
        err = cudaFuncSetAttribute(feature_pass_kernel<kStore>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
        if (err == cudaSuccess) {
            feature_pass_kernel<kStore><<<ext_sm_count() * 2, FeatureTile::kThreads, shared,
                                          arena.stream>>>(op, p);
            err = cudaGetLastError();
        }
    }
    arena.release(prepared_q);
    arena.release(prepared_g);
    if (err != cudaSuccess)
        return err;
    return cudaStreamSynchronize(arena.stream);
}
