/*
 * pcl_kernel.cu: the PCL loss on the GPU, forward and backward (pcl.h has the
 * formulas; the shim pcl.c has checked every descriptor).
 *
 * Forward, two kernels on the caller's stream:
 *   1. pcl_proposals_kernel, a grid over the B proposals: checks each label
 *      (and, for a positive label, its cluster index), counts the label
 *      mismatches, and sums the background term of its proposals in double,
 *      one partial sum per block;
 *   2. pcl_finish_kernel, one block: adds the partials in a fixed order,
 *      checks pc_labels, adds the cluster terms, and writes loss = sum / B.
 * Backward, one kernel: a thread per element of grad (B, C), row-major, so
 * the writes are coalesced; the thread of column 0 checks its row's indices.
 *
 * The label verdict (the lowest offending index of each kind, by atomicMin,
 * so it equals the CPU's first; the mismatch count) lives in a small device
 * struct that the launcher reads back, so it returns once the stream is done.
 * No index from the data is dereferenced before it has been checked.
 *
 * The seed's kernels (2019) differed: blocks of 4 and 16 threads, printf from
 * the kernel on a mismatch, exit(-1) on a launch error, float only, the
 * upstream gradient ignored, and a bad gt_assignment read out of bounds.
 */
#include <stdint.h>

#include <algorithm>

#include "../ext_tensor.h"
#include "ext_cuda.cuh"
#include "pcl_kernel.h"

namespace {

constexpr int kThreads = 256;
/* The proposals kernel's grid, at most; fixed (not from the SM count) so the
 * order of the double sums, and the loss, is the same on every GPU. */
constexpr int kMaxProposalBlocks = 1024;
constexpr unsigned long long kNone = ~0ull;

/* The verdict as the kernels build it: lowest offending index of each kind
 * (kNone: none), mismatches counted. */
struct DeviceScan {
    unsigned long long bad_label;
    unsigned long long bad_assignment;
    unsigned long long bad_pc_label;
    unsigned long long first_mismatch;
    unsigned long long n_mismatch;
};

// ----------------------------------------------------------------------------
// device helpers

/* Element i of label-like data of `dtype` as a double (exact for indices). */
__device__ __forceinline__ double load_index(const void *data, int dtype, int64_t i)
{
    switch (dtype) {
    case EXT_FLOAT32: return static_cast<const float *>(data)[i];
    case EXT_FLOAT64: return static_cast<const double *>(data)[i];
    case EXT_INT32: return static_cast<const int32_t *>(data)[i];
    default: return double(static_cast<const long long *>(data)[i]);
    }
}

/* A whole number in [0, n); false for NaN. */
__device__ __forceinline__ bool is_index(double value, int64_t n)
{
    return value >= 0 && value < double(n) && value == floor(value);
}

__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return log(x); }

/* The block's total of v, in thread 0; every thread must call it. */
template <typename V> __device__ V block_sum(V v)
{
    __shared__ V warp_sums[kThreads / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    __syncthreads(); /* warp_sums may still be read by an earlier call */
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < int(blockDim.x >> 5) ? warp_sums[lane] : V(0);
        for (int offset = 16; offset > 0; offset /= 2)
            v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

// ----------------------------------------------------------------------------
// kernels

/* partial[blockIdx.x] = the block's share of the background term (L_0). */
template <typename T>
__global__ void __launch_bounds__(kThreads)
    pcl_proposals_kernel(pcl_problem p, double *__restrict__ partial, DeviceScan *scan)
{
    const T *probs = static_cast<const T *>(p.pcl_probs);
    const T *weights = static_cast<const T *>(p.cls_loss_weights);
    const bool background_present = load_index(p.im_labels, p.im_labels_dtype, 0) != 0;
    double sum = 0.0;
    unsigned long long n_mismatch = 0;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.n_proposals;
         i += int64_t(gridDim.x) * blockDim.x) {
        const double label = load_index(p.labels, p.labels_dtype, i);
        if (!is_index(label, p.n_classes)) {
            atomicMin(&scan->bad_label, (unsigned long long)i);
            continue;
        }
        if (label == 0) {
            if (background_present)
                sum -= double(weights[i]) * double(log_of(probs[i * p.n_classes]));
            continue;
        }
        const double cluster = load_index(p.gt_assignment, p.gt_assignment_dtype, i);
        if (!is_index(cluster, p.n_clusters)) {
            atomicMin(&scan->bad_assignment, (unsigned long long)i);
            continue;
        }
        if (load_index(p.im_labels, p.im_labels_dtype, int64_t(label)) != 0 &&
            load_index(p.pc_labels, p.pc_labels_dtype, int64_t(cluster)) != label) {
            n_mismatch++;
            atomicMin(&scan->first_mismatch, (unsigned long long)i);
        }
    }
    sum = block_sum(sum);
    n_mismatch = block_sum(n_mismatch);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = sum;
        if (n_mismatch)
            atomicAdd(&scan->n_mismatch, n_mismatch);
    }
}

/* One block: *loss = (partials + cluster terms L_1 .. L_{C-1}) / B. */
template <typename T>
__global__ void __launch_bounds__(kThreads)
    pcl_finish_kernel(pcl_problem p, const double *__restrict__ partial, int n_partial,
                      DeviceScan *scan, T *loss)
{
    const T *pc_probs = static_cast<const T *>(p.pc_probs);
    const T *pc_weights = static_cast<const T *>(p.img_cls_loss_weights);
    double sum = 0.0;
    for (int b = threadIdx.x; b < n_partial; b += blockDim.x)
        sum += partial[b];
    for (int64_t k = threadIdx.x; k < p.n_clusters; k += blockDim.x) {
        const double label = load_index(p.pc_labels, p.pc_labels_dtype, k);
        if (!is_index(label, p.n_classes)) {
            atomicMin(&scan->bad_pc_label, (unsigned long long)k);
            continue;
        }
        if (label > 0 && load_index(p.im_labels, p.im_labels_dtype, int64_t(label)) != 0)
            sum -= double(pc_weights[k]) * double(log_of(pc_probs[k]));
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0)
        *loss = T(sum / double(p.n_proposals));
}

/* grad (B, C) by the seed's rule, times grad_loss / B; also checks pc_labels
 * (grid-stride over P), so the backward refuses what the forward refuses. */
template <typename T>
__global__ void __launch_bounds__(kThreads)
    pcl_backward_kernel(pcl_problem p, const T *__restrict__ grad_loss, T *__restrict__ grad,
                        DeviceScan *scan)
{
    const T *probs = static_cast<const T *>(p.pcl_probs);
    const T *weights = static_cast<const T *>(p.cls_loss_weights);
    const T *pc_probs = static_cast<const T *>(p.pc_probs);
    const T *pc_weights = static_cast<const T *>(p.img_cls_loss_weights);
    const T scale = *grad_loss / T(p.n_proposals);
    const int64_t n_classes = p.n_classes, n_elements = p.n_proposals * n_classes;
    const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;

    for (int64_t idx = first; idx < n_elements; idx += stride) {
        const int64_t i = idx / n_classes, c = idx - i * n_classes;
        const double label = load_index(p.labels, p.labels_dtype, i);
        const bool label_ok = is_index(label, n_classes);
        double cluster = 0.0;
        bool cluster_ok = true;
        if (label_ok && label > 0) {
            cluster = load_index(p.gt_assignment, p.gt_assignment_dtype, i);
            cluster_ok = is_index(cluster, p.n_clusters);
        }
        if (c == 0 && !label_ok)
            atomicMin(&scan->bad_label, (unsigned long long)i);
        else if (c == 0 && !cluster_ok)
            atomicMin(&scan->bad_assignment, (unsigned long long)i);

        T value = 0;
        if (label_ok && cluster_ok && label == double(c) &&
            load_index(p.im_labels, p.im_labels_dtype, c) != 0) {
            if (c == 0) {
                value = -weights[i] / probs[idx] * scale;
            } else {
                const int64_t k = int64_t(cluster);
                const T count = T(load_index(p.pc_count, p.pc_count_dtype, k));
                value = -pc_weights[k] / (count * pc_probs[k]) * scale;
            }
        }
        grad[idx] = value;
    }
    for (int64_t k = first; k < p.n_clusters; k += stride)
        if (!is_index(load_index(p.pc_labels, p.pc_labels_dtype, k), n_classes))
            atomicMin(&scan->bad_pc_label, (unsigned long long)k);
}

// ----------------------------------------------------------------------------
// launchers

/* Every index field to kNone, the mismatch count to 0. */
cudaError_t reset_scan(DeviceScan *scan, cudaStream_t stream)
{
    EXT_CUDA_TRY(cudaMemsetAsync(scan, 0xff, sizeof *scan, stream));
    return cudaMemsetAsync(&scan->n_mismatch, 0, sizeof scan->n_mismatch, stream);
}

/* Element i of device data of `dtype` as a double, for a message. */
cudaError_t fetch_value(const void *data, int dtype, int64_t i, cudaStream_t stream, double *out)
{
    size_t size = dtype == EXT_FLOAT32 || dtype == EXT_INT32 ? 4 : 8;
    unsigned char bytes[8];
    EXT_CUDA_TRY(cudaMemcpyAsync(bytes, static_cast<const unsigned char *>(data) + i * size,
                                 size, cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    if (dtype == EXT_FLOAT32)
        *out = *reinterpret_cast<float *>(bytes);
    else if (dtype == EXT_FLOAT64)
        *out = *reinterpret_cast<double *>(bytes);
    else if (dtype == EXT_INT32)
        *out = *reinterpret_cast<int32_t *>(bytes);
    else
        *out = double(*reinterpret_cast<long long *>(bytes));
    return cudaSuccess;
}

/* Waits for the stream, then copies the verdict into *out, with the values
 * of the offending elements. */
cudaError_t read_scan(const pcl_problem &p, const DeviceScan *device_scan, cudaStream_t stream,
                      pcl_scan *out)
{
    DeviceScan scan;
    EXT_CUDA_TRY(cudaMemcpyAsync(&scan, device_scan, sizeof scan, cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    auto index = [](unsigned long long v) { return v == kNone ? int64_t(-1) : int64_t(v); };
    *out = pcl_scan{};
    out->bad_label = index(scan.bad_label);
    out->bad_assignment = index(scan.bad_assignment);
    out->bad_pc_label = index(scan.bad_pc_label);
    out->first_mismatch = index(scan.first_mismatch);
    out->n_mismatch = int64_t(scan.n_mismatch);
    if (out->bad_label >= 0)
        EXT_CUDA_TRY(fetch_value(p.labels, p.labels_dtype, out->bad_label, stream,
                                 &out->bad_label_value));
    if (out->bad_assignment >= 0)
        EXT_CUDA_TRY(fetch_value(p.gt_assignment, p.gt_assignment_dtype, out->bad_assignment,
                                 stream, &out->bad_assignment_value));
    if (out->bad_pc_label >= 0)
        EXT_CUDA_TRY(fetch_value(p.pc_labels, p.pc_labels_dtype, out->bad_pc_label, stream,
                                 &out->bad_pc_label_value));
    return cudaSuccess;
}

template <typename T>
cudaError_t forward(const pcl_problem &p, T *loss, DeviceScan *scan, cudaStream_t stream)
{
    const int blocks = int(std::min<int64_t>((p.n_proposals + kThreads - 1) / kThreads,
                                             kMaxProposalBlocks));
    ExtDeviceArena arena(stream);
    ExtDeviceBuffer<double> partial(arena);
    EXT_CUDA_TRY(partial.allocate(size_t(blocks)));
    pcl_proposals_kernel<T><<<blocks, kThreads, 0, stream>>>(p, partial.get(), scan);
    EXT_CUDA_TRY(cudaGetLastError());
    pcl_finish_kernel<T><<<1, kThreads, 0, stream>>>(p, partial.get(), blocks, scan, loss);
    return cudaGetLastError();
}

template <typename T>
cudaError_t backward(const pcl_problem &p, const T *grad_loss, T *grad, DeviceScan *scan,
                     cudaStream_t stream)
{
    const int64_t work = std::max(p.n_proposals * p.n_classes, p.n_clusters);
    const int64_t blocks = std::min<int64_t>((work + kThreads - 1) / kThreads,
                                             int64_t(ext_sm_count()) * 8);
    pcl_backward_kernel<T><<<unsigned(blocks), kThreads, 0, stream>>>(p, grad_loss, grad, scan);
    return cudaGetLastError();
}

} // namespace

extern "C" int pcl_forward_launch(const pcl_problem *problem, void *loss, int device,
                                  void *stream_ptr, pcl_scan *scan)
{
    *scan = pcl_scan{-1, -1, -1, 0.0, 0.0, 0.0, 0, -1};
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    ExtDeviceArena arena(stream);
    ExtDeviceBuffer<DeviceScan> device_scan(arena);
    EXT_CUDA_TRY(device_scan.allocate(1));
    EXT_CUDA_TRY(reset_scan(device_scan.get(), stream));
    if (problem->dtype == EXT_FLOAT32)
        EXT_CUDA_TRY(forward(*problem, static_cast<float *>(loss), device_scan.get(), stream));
    else
        EXT_CUDA_TRY(forward(*problem, static_cast<double *>(loss), device_scan.get(), stream));
    return read_scan(*problem, device_scan.get(), stream, scan);
}

extern "C" int pcl_backward_launch(const pcl_problem *problem, const void *grad_loss,
                                   void *grad_probs, int device, void *stream_ptr,
                                   pcl_scan *scan)
{
    *scan = pcl_scan{-1, -1, -1, 0.0, 0.0, 0.0, 0, -1};
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    ExtDeviceArena arena(stream);
    ExtDeviceBuffer<DeviceScan> device_scan(arena);
    EXT_CUDA_TRY(device_scan.allocate(1));
    EXT_CUDA_TRY(reset_scan(device_scan.get(), stream));
    if (problem->dtype == EXT_FLOAT32)
        EXT_CUDA_TRY(backward(*problem, static_cast<const float *>(grad_loss),
                              static_cast<float *>(grad_probs), device_scan.get(), stream));
    else
        EXT_CUDA_TRY(backward(*problem, static_cast<const double *>(grad_loss),
                              static_cast<double *>(grad_probs), device_scan.get(), stream));
    return read_scan(*problem, device_scan.get(), stream, scan);
}
