/*
 * roc_kernel.cu: the legacy ROC histogram on the GPU (gpu_roc).
 *
 * score is (Q, G), row-major, read once with 16-byte loads where aligned.
 * Each block counts a contiguous range of pairs into two private histograms
 * in shared memory (all pairs, genuine pairs; 32-bit counters, and a block
 * never sees 2^31 pairs), then adds them into 64-bit global counters. A last
 * small kernel adds those counters into the caller's histo tensors, in their
 * dtype. Indexing is 64-bit throughout, so Q x G may exceed 2^31.
 *
 * The blog's kernel (2018) differed in ways that matter: 32-bit indices, bins
 * computed from out-of-range scores written out of bounds, float counters
 * (exact only to 2^24), a fixed 1024 x 1024 launch on the default stream.
 */
#include <stdint.h>

#include <algorithm>

#include "../ext_tensor.h"
#include "../roc_bins.h"
#include "ext_cuda.cuh"
#include "roc_kernel.h"

namespace {

constexpr int kThreads = 512;
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
    int64_t bin = roc_legacy_bin(score, nbins);
    if (kShared) {
        atomicAdd(&block_counts[bin], 1u);
        if (genuine)
            atomicAdd(&block_counts[nbins + bin], 1u);
    } else {
        atomicAdd(&counts[bin], 1ull);
        if (genuine)
            atomicAdd(&counts[nbins + bin], 1ull);
    }
}

/*
 * Block b counts flat pairs [b * pairs_per_block, (b + 1) * pairs_per_block).
 * Thread t reads kVec consecutive pairs at a time, strided by the block; it
 * tracks its (row, column) incrementally, so no 64-bit division per pair.
 * counts is (2, nbins) then one NaN counter.
 */
template <typename Label, int kVec, bool kShared>
__global__ void __launch_bounds__(kThreads)
    roc_hist_kernel(const float *__restrict__ score, int64_t n_gallery, int64_t n_pairs,
                    int64_t pairs_per_block, const Label *__restrict__ labels_q,
                    const Label *__restrict__ labels_g, int64_t nbins,
                    unsigned long long *__restrict__ counts)
{
    extern __shared__ unsigned int block_counts[];
    if (kShared) {
        for (int64_t b = threadIdx.x; b < 2 * nbins; b += blockDim.x)
            block_counts[b] = 0;
        __syncthreads();
    }

    const int64_t begin = blockIdx.x * pairs_per_block;
    const int64_t end = begin + pairs_per_block < n_pairs ? begin + pairs_per_block : n_pairs;
    const int64_t step = int64_t(blockDim.x) * kVec;
    const int64_t step_rows = step / n_gallery, step_cols = step % n_gallery;
    int64_t k = begin + int64_t(threadIdx.x) * kVec;
    int64_t row = k / n_gallery, col = k % n_gallery;
    unsigned int n_nan = 0;

    for (; k < end; k += step) {
        float v[kVec];
        if (kVec == 4 && k + 4 <= end) {
            float4 q = __ldg(reinterpret_cast<const float4 *>(score + k));
            v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        } else {
#pragma unroll
            for (int t = 0; t < kVec; t++)
                v[t] = k + t < end ? score[k + t] : 0.0f;
        }
#pragma unroll
        for (int t = 0; t < kVec; t++) {
            if (k + t >= end)
                break;
            int64_t r = row, c = col + t;
            while (c >= n_gallery) { /* the kVec pairs may span rows */
                c -= n_gallery;
                r++;
            }
            count_pair<kShared>(v[t], labels_q[r] == labels_g[c], nbins, block_counts, counts,
                                n_nan);
        }
        row += step_rows;
        col += step_cols;
        if (col >= n_gallery) {
            col -= n_gallery;
            row++;
        }
    }

    for (int offset = 16; offset > 0; offset /= 2)
        n_nan += __shfl_down_sync(0xffffffffu, n_nan, offset);
    if ((threadIdx.x & 31) == 0 && n_nan)
        atomicAdd(&counts[2 * nbins], (unsigned long long)n_nan);

    if (kShared) {
        __syncthreads();
        for (int64_t b = threadIdx.x; b < 2 * nbins; b += blockDim.x)
            if (block_counts[b])
                atomicAdd(&counts[b], (unsigned long long)block_counts[b]);
    }
}

/* histo[b] += counts[b] in histo's dtype; a float32 bin is rounded once. */
__global__ void add_counts_kernel(void *histo, int dtype, const unsigned long long *counts,
                                  int64_t nbins)
{
    for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < nbins;
         b += int64_t(gridDim.x) * blockDim.x) {
        if (dtype == EXT_FLOAT32) {
            float *h = static_cast<float *>(histo);
            h[b] = float(double(h[b]) + double(counts[b]));
        } else if (dtype == EXT_FLOAT64) {
            static_cast<double *>(histo)[b] += double(counts[b]);
        } else {
            static_cast<long long *>(histo)[b] += (long long)counts[b];
        }
    }
}

// ----------------------------------------------------------------------------
// launcher

template <typename Label, int kVec, bool kShared>
cudaError_t launch_hist(const float *score, int64_t n_gallery, int64_t n_pairs,
                        const void *labels_q, const void *labels_g, int64_t nbins,
                        unsigned long long *counts, cudaStream_t stream)
{
    auto kernel = roc_hist_kernel<Label, kVec, kShared>;
    size_t shared = kShared ? size_t(2 * nbins) * sizeof(unsigned int) : 0;
    if (shared > 48 * 1024) {
        cudaError_t err = cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
        if (err != cudaSuccess)
            return err;
    }
    int per_sm = 0;
    cudaError_t err =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, shared);
    if (err != cudaSuccess)
        return err;
    /* Enough blocks to fill the GPU once, more if a block would see 2^31 pairs;
     * a block's range is a multiple of its stride so vector loads stay aligned. */
    const int64_t stride = int64_t(kThreads) * kVec;
    int64_t blocks = int64_t(ext_sm_count()) * (per_sm > 0 ? per_sm : 1);
    blocks = std::max(blocks, (n_pairs + kMaxPairsPerBlock - 1) / kMaxPairsPerBlock);
    blocks = std::min(blocks, (n_pairs + stride - 1) / stride);
    int64_t per_block = (n_pairs + blocks - 1) / blocks;
    per_block = (per_block + stride - 1) / stride * stride;
    blocks = (n_pairs + per_block - 1) / per_block;
    kernel<<<unsigned(blocks), kThreads, shared, stream>>>(
        score, n_gallery, n_pairs, per_block, static_cast<const Label *>(labels_q),
        static_cast<const Label *>(labels_g), nbins, counts);
    return cudaGetLastError();
}

template <typename Label>
cudaError_t dispatch_hist(const float *score, int64_t n_gallery, int64_t n_pairs,
                          const void *labels_q, const void *labels_g, int64_t nbins,
                          unsigned long long *counts, cudaStream_t stream)
{
    int device = 0, shared_max = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&shared_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (err != cudaSuccess)
        return err;
    const bool aligned = reinterpret_cast<uintptr_t>(score) % 16 == 0;
    const bool shared = size_t(2 * nbins) * sizeof(unsigned int) <= size_t(shared_max);
    if (aligned && shared)
        return launch_hist<Label, 4, true>(score, n_gallery, n_pairs, labels_q, labels_g, nbins,
                                           counts, stream);
    if (aligned)
        return launch_hist<Label, 4, false>(score, n_gallery, n_pairs, labels_q, labels_g, nbins,
                                            counts, stream);
    if (shared)
        return launch_hist<Label, 1, true>(score, n_gallery, n_pairs, labels_q, labels_g, nbins,
                                           counts, stream);
    return launch_hist<Label, 1, false>(score, n_gallery, n_pairs, labels_q, labels_g, nbins,
                                        counts, stream);
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

    /* (2, nbins) counters, then the NaN counter */
    ExtDeviceBuffer<unsigned long long> counts(stream);
    EXT_CUDA_TRY(counts.allocate(size_t(2 * nbins + 1)));
    EXT_CUDA_TRY(cudaMemsetAsync(counts.get(), 0, size_t(2 * nbins + 1) * sizeof(unsigned long long),
                                 stream));
    if (label_dtype == EXT_FLOAT32)
        EXT_CUDA_TRY(dispatch_hist<float>(score, n_gallery, n_pairs, labels_q, labels_g, nbins,
                                          counts.get(), stream));
    else if (label_dtype == EXT_INT32)
        EXT_CUDA_TRY(dispatch_hist<int32_t>(score, n_gallery, n_pairs, labels_q, labels_g, nbins,
                                            counts.get(), stream));
    else
        EXT_CUDA_TRY(dispatch_hist<long long>(score, n_gallery, n_pairs, labels_q, labels_g,
                                              nbins, counts.get(), stream));

    const unsigned add_blocks = unsigned(std::min<int64_t>((nbins + 255) / 256, 1024));
    add_counts_kernel<<<add_blocks, 256, 0, stream>>>(histo1, histo1_dtype, counts.get(), nbins);
    EXT_CUDA_TRY(cudaGetLastError());
    add_counts_kernel<<<add_blocks, 256, 0, stream>>>(histo2, histo2_dtype, counts.get() + nbins,
                                                      nbins);
    EXT_CUDA_TRY(cudaGetLastError());

    unsigned long long nan_host = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&nan_host, counts.get() + 2 * nbins, sizeof nan_host,
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    *n_nan = int64_t(nan_host);
    return cudaSuccess;
}
