/*
 * roc_hist_kernel.cu: the legacy ROC histogram on the GPU (gpu_roc).
 *
 * score is (Q, G), row-major, read once. Warps take work items (row, segment
 * of kSegment columns): the row's label is read once, the segment with 16-byte
 * loads (peeling the few columns before the first 16-byte boundary of the row
 * and after the last). Each block counts into two private histograms in
 * shared memory (all pairs, genuine pairs; 32-bit counters: a block never sees
 * 2^31 pairs), then adds them into 64-bit global counters; the last block to
 * finish adds those into the caller's histo tensors, in their dtype, so that a
 * call is one memset, one kernel and the 8-byte read-back of the NaN count.
 * Indexing is 64-bit throughout, so Q x G may exceed 2^31.
 *
 * One 16-byte load a lane in flight, counted before the next: holding four
 * (dev/cuda/roc_hist.cu, version 2) was 18% slower than one (version 3) on
 * the H100, whatever the spread of the scores.
 *
 * The blog's kernel (2018) differed in ways that matter: 32-bit indices, bins
 * of out-of-range scores written out of bounds, float counters (exact only to
 * 2^24), a fixed 1024 x 1024 launch on the default stream. dev/cuda/roc_hist.cu
 * times the two.
 */
#include <stdint.h>

#include <algorithm>

#include "../ext_tensor.h"
#include "../roc_math.h"
#include "ext_cuda.cuh"
#include "roc_hist_kernel.h"

namespace {

constexpr int kThreads = 512;
/* Blocks of kThreads a multiprocessor is to hold: as many as its threads
 * allow (2048 on sm_80 and sm_90, 1024 on sm_75, 1536 on the others this
 * builds for), which caps a thread at 32 registers on sm_90. With one load in
 * flight a lane, occupancy is what keeps DRAM busy: on the H100, at 44
 * registers (2 blocks) the kernel ran 0.46 ms, at 32 (4 blocks) 0.33 ms
 * (dev/cuda/roc_hist.cu, versions 2 and 7). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 900
#define ROC_HIST_BLOCKS_PER_SM 4
#elif __CUDA_ARCH__ < 800
#define ROC_HIST_BLOCKS_PER_SM 2
#else
#define ROC_HIST_BLOCKS_PER_SM 3
#endif
constexpr int64_t kSegment = 2048;
/* A block's pairs stay below 2^31, so its 32-bit shared counters cannot wrap. */
constexpr int64_t kMaxPairsPerBlock = int64_t(1) << 31;

// ----------------------------------------------------------------------------
// kernels

/* Counts one pair into the block's (or, without shared memory, the global)
 * histograms. */
template <bool kShared>
__device__ __forceinline__ void count_pair(float score, bool genuine, int64_t nbins,
                                           unsigned int *block_counts,
                                           unsigned long long *counts, unsigned int &n_nan)
{
    if (isnan(score)) {
        n_nan++;
        return;
    }
    const int64_t bin = roc_legacy_bin(score, nbins);
    if (kShared) { /* nbins fits shared memory: 32-bit offsets */
        atomicAdd(&block_counts[int(bin)], 1u);
        if (genuine)
            atomicAdd(&block_counts[int(nbins) + int(bin)], 1u);
    } else {
        atomicAdd(&counts[bin], 1ull);
        if (genuine)
            atomicAdd(&counts[nbins + bin], 1ull);
    }
}

/* labels[c .. c + 3], with 16-byte loads when `aligned` (16-byte aligned at c). */
__device__ __forceinline__ void load4(const float *p, bool aligned, float out[4])
{
    if (aligned) {
        const float4 v = __ldg(reinterpret_cast<const float4 *>(p));
        out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    } else {
        for (int t = 0; t < 4; t++)
            out[t] = __ldg(p + t);
    }
}

__device__ __forceinline__ void load4(const int32_t *p, bool aligned, int32_t out[4])
{
    if (aligned) {
        const int4 v = __ldg(reinterpret_cast<const int4 *>(p));
        out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    } else {
        for (int t = 0; t < 4; t++)
            out[t] = __ldg(p + t);
    }
}

__device__ __forceinline__ void load4(const long long *p, bool aligned, long long out[4])
{
    if (aligned) {
        const longlong2 v = __ldg(reinterpret_cast<const longlong2 *>(p));
        const longlong2 w = __ldg(reinterpret_cast<const longlong2 *>(p) + 1);
        out[0] = v.x, out[1] = v.y, out[2] = w.x, out[3] = w.y;
    } else {
        for (int t = 0; t < 4; t++)
            out[t] = __ldg(p + t);
    }
}

/* The histo tensors and their dtypes: where the last block adds the counts. */
struct HistoOut {
    void *all, *genuine;
    int all_dtype, genuine_dtype;
};

/* histo[b] += counts[b] for the bins b = first, first + step, ... in histo's
 * dtype; a float32 bin is rounded once. */
__device__ void add_counts(void *histo, int dtype, const unsigned long long *counts,
                           int64_t nbins, int64_t first, int64_t step)
{
    for (int64_t b = first; b < nbins; b += step) {
        /* written by other blocks' atomics: read from L2, past this SM's L1 */
        const unsigned long long count = __ldcg(counts + b);
        if (dtype == EXT_FLOAT32) {
            float *h = static_cast<float *>(histo);
            h[b] = float(double(h[b]) + double(count));
        } else if (dtype == EXT_FLOAT64) {
            static_cast<double *>(histo)[b] += double(count);
        } else {
            static_cast<long long *>(histo)[b] += (long long)count;
        }
    }
}

/* The same, a grid's worth: after roc_hist_kernel<Label, false>, whose bins
 * are too many for one block to add. */
__global__ void add_counts_kernel(HistoOut out, const unsigned long long *counts, int64_t nbins)
{
    const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    const int64_t step = int64_t(gridDim.x) * blockDim.x;
    add_counts(out.all, out.all_dtype, counts, nbins, first, step);
    add_counts(out.genuine, out.genuine_dtype, counts + nbins, nbins, first, step);
}

/* counts is (2, nbins), then the NaN counter, then the count of finished
 * blocks. With the histograms in shared memory, the last block to finish
 * adds the counts into `out`; without, add_counts_kernel does. */
template <typename Label, bool kShared, bool kAligned>
__global__ void __launch_bounds__(kThreads, ROC_HIST_BLOCKS_PER_SM)
    roc_hist_kernel(const float *__restrict__ score, int64_t n_query, int64_t n_gallery,
                    const Label *__restrict__ labels_q, const Label *__restrict__ labels_g,
                    int64_t nbins, unsigned long long *__restrict__ counts, HistoOut out)
{
    extern __shared__ unsigned int block_counts[];
    if (kShared) {
        for (int64_t b = threadIdx.x; b < 2 * nbins; b += blockDim.x)
            block_counts[b] = 0;
        __syncthreads();
    }
    const int lane = threadIdx.x % 32;
    const int64_t n_segments = (n_gallery + kSegment - 1) / kSegment;
    const int64_t n_items = n_query * n_segments;
    const int64_t n_warps = int64_t(gridDim.x) * blockDim.x / 32;
    unsigned int n_nan = 0;
    for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < n_items;
         item += n_warps) {
        const int64_t row = item / n_segments;
        const int64_t c0 = (item % n_segments) * kSegment;
        const int64_t c1 = min(c0 + kSegment, n_gallery);
        const Label label = labels_q[row];
        const float *row_score = score + row * n_gallery;
        /* columns [c0, body) before the segment's first 16-byte boundary, [body,
         * tail) in 16-byte vectors, [tail, c1) after; with kAligned (G % 4 ==
         * 0, score and labels_g 16-byte aligned) body = c0 and tail = c1, and
         * the loop below is all there is (the kernel at its fewest registers) */
        const int64_t misaligned =
            kAligned ? 0 : (reinterpret_cast<uintptr_t>(row_score + c0) / 4) % 4;
        const int64_t body = kAligned ? c0 : min(c0 + (4 - misaligned) % 4, c1);
        const int64_t tail = kAligned ? c1 : body + (c1 - body) / 4 * 4;
        if (!kAligned && c0 + lane < body)
            count_pair<kShared>(row_score[c0 + lane], labels_g[c0 + lane] == label, nbins,
                                block_counts, counts, n_nan);
        const bool labels_aligned =
            kAligned || (reinterpret_cast<uintptr_t>(labels_g + body) % 16) == 0;
        for (int64_t c = body + 4 * lane; c < tail; c += 4 * 32) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(row_score + c));
            Label other[4];
            load4(labels_g + c, labels_aligned, other);
            count_pair<kShared>(v.x, other[0] == label, nbins, block_counts, counts, n_nan);
            count_pair<kShared>(v.y, other[1] == label, nbins, block_counts, counts, n_nan);
            count_pair<kShared>(v.z, other[2] == label, nbins, block_counts, counts, n_nan);
            count_pair<kShared>(v.w, other[3] == label, nbins, block_counts, counts, n_nan);
        }
        if (!kAligned && tail + lane < c1)
            count_pair<kShared>(row_score[tail + lane], labels_g[tail + lane] == label, nbins,
                                block_counts, counts, n_nan);
    }

    for (int offset = 16; offset > 0; offset /= 2)
        n_nan += __shfl_down_sync(0xffffffffu, n_nan, offset);
    if (lane == 0 && n_nan)
        atomicAdd(&counts[2 * nbins], (unsigned long long)n_nan);

    if (!kShared)
        return;
    __syncthreads();
    for (int64_t b = threadIdx.x; b < 2 * nbins; b += blockDim.x)
        if (block_counts[b])
            atomicAdd(&counts[b], (unsigned long long)block_counts[b]);

    /* every thread's additions are visible device-wide before the block says
     * it is done; the block that finishes last sees all of them */
    __threadfence();
    __syncthreads();
    const bool last_block = __syncthreads_or(
        threadIdx.x == 0 && atomicAdd(&counts[2 * nbins + 1], 1ull) == gridDim.x - 1);
    if (last_block) {
        add_counts(out.all, out.all_dtype, counts, nbins, threadIdx.x, blockDim.x);
        add_counts(out.genuine, out.genuine_dtype, counts + nbins, nbins, threadIdx.x,
                   blockDim.x);
    }
}

// ----------------------------------------------------------------------------
// launcher

template <typename Label, bool kShared, bool kAligned>
cudaError_t launch_hist(const float *score, int64_t n_query, int64_t n_gallery,
                        const void *labels_q, const void *labels_g, int64_t nbins,
                        unsigned long long *counts, const HistoOut &out, cudaStream_t stream)
{
    auto kernel = roc_hist_kernel<Label, kShared, kAligned>;
    const size_t shared = kShared ? size_t(2 * nbins) * sizeof(unsigned int) : 0;
    if (shared > 48 * 1024)
        EXT_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(shared)));
    int per_sm = 0;
    EXT_CUDA_TRY(
        ext_blocks_per_sm(reinterpret_cast<const void *>(kernel), kThreads, shared, &per_sm));
    /* enough blocks to fill the GPU once, more if a block would see 2^31 pairs,
     * and no more than there are work items */
    const int64_t n_pairs = n_query * n_gallery;
    const int64_t n_items = n_query * ((n_gallery + kSegment - 1) / kSegment);
    int64_t blocks = int64_t(ext_sm_count()) * per_sm;
    blocks = std::max(blocks, (n_pairs + kMaxPairsPerBlock - 1) / kMaxPairsPerBlock * 2);
    blocks = std::min(blocks, (n_items + kThreads / 32 - 1) / (kThreads / 32));
    kernel<<<unsigned(blocks), kThreads, shared, stream>>>(
        score, n_query, n_gallery, static_cast<const Label *>(labels_q),
        static_cast<const Label *>(labels_g), nbins, counts, out);
    EXT_CUDA_TRY(cudaGetLastError());
    if (!kShared) {
        const unsigned add_blocks = unsigned(std::min<int64_t>((nbins + 255) / 256, 1024));
        add_counts_kernel<<<add_blocks, 256, 0, stream>>>(out, counts, nbins);
    }
    return cudaGetLastError();
}

template <typename Label>
cudaError_t dispatch_hist(const float *score, int64_t n_query, int64_t n_gallery,
                          const void *labels_q, const void *labels_g, int64_t nbins,
                          unsigned long long *counts, const HistoOut &out, cudaStream_t stream)
{
    int device = 0, shared_max = 0;
    EXT_CUDA_TRY(cudaGetDevice(&device));
    EXT_CUDA_TRY(cudaDeviceGetAttribute(&shared_max, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                        device));
    const bool shared = size_t(2 * nbins) * sizeof(unsigned int) <= size_t(shared_max);
    const bool aligned = n_gallery % 4 == 0 && ext_aligned16(score) && ext_aligned16(labels_g);
    if (shared && aligned)
        return launch_hist<Label, true, true>(score, n_query, n_gallery, labels_q, labels_g, nbins,
                                              counts, out, stream);
    if (shared)
        return launch_hist<Label, true, false>(score, n_query, n_gallery, labels_q, labels_g,
                                               nbins, counts, out, stream);
    return launch_hist<Label, false, false>(score, n_query, n_gallery, labels_q, labels_g, nbins,
                                            counts, out, stream);
}

} // namespace

extern "C" int roc_hist_launch(const float *score, int64_t n_query, int64_t n_gallery,
                               const void *labels_q, const void *labels_g, int label_dtype,
                               int64_t nbins, void *histo1, int histo1_dtype, void *histo2,
                               int histo2_dtype, int device, void *stream_ptr, int64_t *n_nan)
{
    *n_nan = 0;
    const int64_t n_pairs = n_query * n_gallery;
    if (n_pairs == 0)
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);

    /* (2, nbins) counters, the NaN counter, the finished-block counter */
    const size_t n_counters = size_t(2 * nbins + 2);
    ExtDeviceArena arena(stream);
    ExtDeviceBuffer<unsigned long long> counts(arena);
    EXT_CUDA_TRY(counts.allocate(n_counters));
    EXT_CUDA_TRY(
        cudaMemsetAsync(counts.get(), 0, n_counters * sizeof(unsigned long long), stream));
    const HistoOut out{histo1, histo2, histo1_dtype, histo2_dtype};
    if (label_dtype == EXT_FLOAT32)
        EXT_CUDA_TRY(dispatch_hist<float>(score, n_query, n_gallery, labels_q, labels_g, nbins,
                                          counts.get(), out, stream));
    else if (label_dtype == EXT_INT32)
        EXT_CUDA_TRY(dispatch_hist<int32_t>(score, n_query, n_gallery, labels_q, labels_g, nbins,
                                            counts.get(), out, stream));
    else
        EXT_CUDA_TRY(dispatch_hist<long long>(score, n_query, n_gallery, labels_q, labels_g,
                                              nbins, counts.get(), out, stream));

    unsigned long long nan_host = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&nan_host, counts.get() + 2 * nbins, sizeof nan_host,
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    *n_nan = int64_t(nan_host);
    return cudaSuccess;
}
