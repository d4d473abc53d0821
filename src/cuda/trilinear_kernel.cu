/*
 * trilinear_kernel.cu: trilinear interpolation forward, backward and double
 * backward on the GPU (the _ext.trilinear CUDA twins), for float32 and
 * float64, with the weights and their derivatives of trilinear_math.h.
 *
 * feats is (N, 8, F), points (N, 3), out and grad_out (N, F), all row-major.
 * A point's F features are split over a group of lanes of one warp (a power
 * of two, up to 32: enough lanes for the row, no more); each lane walks the
 * row in 16-byte vectors (float4 / double2) strided by the group, so a
 * warp's loads of one corner row are contiguous. The group reads the point
 * once (a broadcast), and grid-strides over points on a grid that fills the
 * device once. Rows whose length is not a multiple of the vector, or
 * misaligned pointers, take the same kernels with scalar accesses.
 *
 * Napkin math, N = 65,536, F = 256, float32 (feats 512 MiB, rows 64 MiB):
 *   forward   reads feats and points, writes out:                576 MiB
 *   backward  reads grad_out and feats, writes grad_feats and
 *             grad_points:                                       1088 MiB
 * At the ~3.0 TB/s a device-to-device copy reaches on an H100, about 0.20 ms
 * and 0.38 ms. grad_points sums over F: each lane keeps partial sums of its
 * vectors, and the group adds them with warp shuffles.
 *
 * The double backward has the backward's layout: it reads grad_out, feats
 * and grad_grad_feats, writes grad_grad_out and grad_feats (each where
 * given), and sums grad_points over F the same way; each corner's terms
 * (trilinear_corner_terms) come from the point and grad_grad_points[n]. Its
 * corner loop stays rolled, recomputing a corner's terms (about 30 flops) at
 * each vector: unrolled, the compiler keeps all 8 corners' terms live, 206
 * to 238 registers a thread in float64 (one block per multiprocessor),
 * against at most 80 rolled (sm_90).
 */
#include <stdint.h>

#include <algorithm>

#include "../ext_tensor.h"
#include "../trilinear_math.h"
#include "ext_cuda.cuh"
#include "trilinear_kernel.h"

namespace {

constexpr int kThreads = 256;

// ----------------------------------------------------------------------------
// kernels

__device__ __forceinline__ trilinear_point_f32 point_at(const float *p)
{
    return trilinear_point_f32_at(p);
}
__device__ __forceinline__ trilinear_point_f64 point_at(const double *p)
{
    return trilinear_point_f64_at(p);
}
__device__ __forceinline__ float value(const trilinear_point_f32 *q, const float *f)
{
    return trilinear_value_f32(q, f);
}
__device__ __forceinline__ double value(const trilinear_point_f64 *q, const double *f)
{
    return trilinear_value_f64(q, f);
}
__device__ __forceinline__ void slopes(const trilinear_point_f32 *q, const float *f, float *s)
{
    trilinear_slopes_f32(q, f, s);
}
__device__ __forceinline__ void slopes(const trilinear_point_f64 *q, const double *f, double *s)
{
    trilinear_slopes_f64(q, f, s);
}

/* out[n, :] for every point n; a group of 2^group_log2 lanes per point. */
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    trilinear_forward_kernel(const T *__restrict__ feats, const T *__restrict__ points,
                             T *__restrict__ out, int64_t n_points, int64_t n_feats,
                             int group_log2)
{
    using Vec = ExtVec<T, kVec>;
    const int64_t n_vecs = n_feats / kVec;
    const int group = 1 << group_log2;
    const int lane = threadIdx.x & (group - 1);
    const int64_t stride = (int64_t(gridDim.x) * kThreads) >> group_log2;

    for (int64_t n = (int64_t(blockIdx.x) * kThreads + threadIdx.x) >> group_log2; n < n_points;
         n += stride) {
        const auto q = point_at(points + 3 * n);
        const Vec *cube = reinterpret_cast<const Vec *>(feats + n * 8 * n_feats);  // (8, F)
        Vec *row = reinterpret_cast<Vec *>(out + n * n_feats);                     // (F,)
        for (int64_t i = lane; i < n_vecs; i += group) {
            Vec corner[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                corner[k] = cube[k * n_vecs + i];
            Vec result;
#pragma unroll
            for (int e = 0; e < kVec; e++) {
                T f[8];
#pragma unroll
                for (int k = 0; k < 8; k++)
                    f[k] = corner[k].v[e];
                result.v[e] = value(&q, f);
            }
            row[i] = result;
        }
    }
}

/*
 * grad_feats[n] and/or grad_points[n] for every point n. The loop runs while
 * the first point of the thread's warp is in range, so all 32 lanes run the
 * same iterations and take part in the shuffles; lanes past the last point
 * add zeros.
 */
template <typename T, int kVec, bool kGradFeats, bool kGradPoints>
__global__ void __launch_bounds__(kThreads)
    trilinear_backward_kernel(const T *__restrict__ grad_out, const T *__restrict__ feats,
                              const T *__restrict__ points, T *__restrict__ grad_feats,
                              T *__restrict__ grad_points, int64_t n_points, int64_t n_feats,
                              int group_log2)
{
    using Vec = ExtVec<T, kVec>;
    const int64_t n_vecs = n_feats / kVec;
    const int group = 1 << group_log2;
    const int lane = threadIdx.x & (group - 1);
    const int64_t stride = (int64_t(gridDim.x) * kThreads) >> group_log2;
    const int64_t first_thread = int64_t(blockIdx.x) * kThreads;
    int64_t n = (first_thread + threadIdx.x) >> group_log2;
    int64_t warp_first = (first_thread + (threadIdx.x & ~31u)) >> group_log2;

    for (; warp_first < n_points; n += stride, warp_first += stride) {
        T sum[3] = {T(0), T(0), T(0)};
        if (n < n_points) {
            const auto q = point_at(points + 3 * n);
            const Vec *grad_row = reinterpret_cast<const Vec *>(grad_out + n * n_feats);
            const Vec *cube = reinterpret_cast<const Vec *>(feats + n * 8 * n_feats);
            Vec *grad_cube =
                reinterpret_cast<Vec *>(grad_feats + (kGradFeats ? n * 8 * n_feats : 0));
            for (int64_t i = lane; i < n_vecs; i += group) {
                const Vec g = grad_row[i];
                if (kGradFeats) {
#pragma unroll
                    for (int k = 0; k < 8; k++) {
                        Vec r;
#pragma unroll
                        for (int e = 0; e < kVec; e++)
                            r.v[e] = q.corner[k] * g.v[e];
                        grad_cube[k * n_vecs + i] = r;
                    }
                }
                if (kGradPoints) {
                    Vec corner[8];
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        corner[k] = cube[k * n_vecs + i];
#pragma unroll
                    for (int e = 0; e < kVec; e++) {
                        T f[8], slope[3];
#pragma unroll
                        for (int k = 0; k < 8; k++)
                            f[k] = corner[k].v[e];
                        slopes(&q, f, slope);
#pragma unroll
                        for (int d = 0; d < 3; d++)
                            sum[d] += g.v[e] * slope[d];
                    }
                }
            }
        }
        if (kGradPoints) {
            for (int offset = group / 2; offset > 0; offset /= 2)
#pragma unroll
                for (int d = 0; d < 3; d++)
                    sum[d] += __shfl_xor_sync(0xffffffffu, sum[d], offset);
            if (lane == 0 && n < n_points)
#pragma unroll
                for (int d = 0; d < 3; d++)
                    grad_points[3 * n + d] = sum[d] / T(2);
        }
    }
}

__device__ __forceinline__ trilinear_corner_terms_f32 corner_terms(const trilinear_point_f32 *q,
                                                                  const float *dp, int k)
{
    return trilinear_corner_terms_f32_at(q, dp, k);
}
__device__ __forceinline__ trilinear_corner_terms_f64 corner_terms(const trilinear_point_f64 *q,
                                                                  const double *dp, int k)
{
    return trilinear_corner_terms_f64_at(q, dp, k);
}

/*
 * The double backward (trilinear.h) for every point n: grad_grad_out[n],
 * grad_feats[n] and grad_points[n], each skipped where NULL; the terms of a
 * NULL grad_grad_feats or grad_grad_points are left out (feats are read only
 * for grad_grad_points' terms). The point loop is the backward kernel's, so
 * that the whole warp takes part in the shuffles.
 */
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads) trilinear_double_backward_kernel(
    const T *__restrict__ grad_grad_feats, const T *__restrict__ grad_grad_points,
    const T *__restrict__ grad_out, const T *__restrict__ feats, const T *__restrict__ points,
    T *__restrict__ grad_grad_out, T *__restrict__ grad_feats, T *__restrict__ grad_points,
    int64_t n_points, int64_t n_feats, int group_log2)
{
    using Vec = ExtVec<T, kVec>;
    const int64_t n_vecs = n_feats / kVec;
    const int group = 1 << group_log2;
    const int lane = threadIdx.x & (group - 1);
    const int64_t stride = (int64_t(gridDim.x) * kThreads) >> group_log2;
    const int64_t first_thread = int64_t(blockIdx.x) * kThreads;
    int64_t n = (first_thread + threadIdx.x) >> group_log2;
    int64_t warp_first = (first_thread + (threadIdx.x & ~31u)) >> group_log2;

    for (; warp_first < n_points; n += stride, warp_first += stride) {
        T sum[3] = {T(0), T(0), T(0)};
        if (n < n_points) {
            const auto q = point_at(points + 3 * n);
            T dp[3] = {T(0), T(0), T(0)};
            if (grad_grad_points)
#pragma unroll
                for (int d = 0; d < 3; d++)
                    dp[d] = grad_grad_points[3 * n + d];
            const int64_t cube = n * 8 * n_feats, row = n * n_feats;
            const Vec *grad_row = reinterpret_cast<const Vec *>(grad_out + row);
            const Vec *feats_cube = reinterpret_cast<const Vec *>(feats + cube);
            const Vec *grad_grad_cube =
                reinterpret_cast<const Vec *>(grad_grad_feats ? grad_grad_feats + cube : nullptr);
            Vec *grad_cube = reinterpret_cast<Vec *>(grad_feats ? grad_feats + cube : nullptr);
            Vec *grad_grad_row =
                reinterpret_cast<Vec *>(grad_grad_out ? grad_grad_out + row : nullptr);
            for (int64_t i = lane; i < n_vecs; i += group) {
                const Vec g = grad_row[i];
                Vec value;
#pragma unroll
                for (int e = 0; e < kVec; e++)
                    value.v[e] = T(0);
#pragma unroll 1
                for (int k = 0; k < 8; k++) {
                    const auto c = corner_terms(&q, dp, k);
                    T point_term[kVec][3] = {};
                    if (grad_grad_cube) {
                        const Vec gg = grad_grad_cube[k * n_vecs + i];
#pragma unroll
                        for (int e = 0; e < kVec; e++) {
                            value.v[e] += gg.v[e] * c.weight;
#pragma unroll
                            for (int d = 0; d < 3; d++)
                                point_term[e][d] += gg.v[e] * c.slope[d];
                        }
                    }
                    if (grad_grad_points) {
                        const Vec corner = feats_cube[k * n_vecs + i];
#pragma unroll
                        for (int e = 0; e < kVec; e++) {
                            value.v[e] += corner.v[e] * c.along;
#pragma unroll
                            for (int d = 0; d < 3; d++)
                                point_term[e][d] += corner.v[e] * c.bend[d];
                        }
                    }
                    Vec r;
#pragma unroll
                    for (int e = 0; e < kVec; e++) {
                        r.v[e] = grad_grad_points ? g.v[e] * c.along : T(0);
#pragma unroll
                        for (int d = 0; d < 3; d++)
                            sum[d] += g.v[e] * point_term[e][d];
                    }
                    if (grad_cube)
                        grad_cube[k * n_vecs + i] = r;
                }
                if (grad_grad_row)
                    grad_grad_row[i] = value;
            }
        }
        if (grad_points) {
            for (int offset = group / 2; offset > 0; offset /= 2)
#pragma unroll
                for (int d = 0; d < 3; d++)
                    sum[d] += __shfl_xor_sync(0xffffffffu, sum[d], offset);
            if (lane == 0 && n < n_points)
#pragma unroll
                for (int d = 0; d < 3; d++)
                    grad_points[3 * n + d] = sum[d];
        }
    }
}

// ----------------------------------------------------------------------------
// launcher

/* log2 of the lanes per point: the smallest power of two that covers the
 * row's vectors, at most a warp. */
int group_log2_for(int64_t n_vecs)
{
    int log2 = 0;
    while (log2 < 5 && (int64_t(1) << log2) < n_vecs)
        log2++;
    return log2;
}

/* Blocks for n_points points: one full wave at most. */
template <typename Kernel>
cudaError_t grid_for(Kernel kernel, int64_t n_points, int group_log2, int64_t *blocks)
{
    EXT_CUDA_TRY(ext_full_wave(kernel, kThreads, 0, blocks));
    const int64_t points_per_block = kThreads >> group_log2;
    *blocks = std::max<int64_t>(1, std::min(*blocks, (n_points + points_per_block - 1) /
                                                         points_per_block));
    return cudaSuccess;
}

template <typename T, int kVec>
cudaError_t launch_forward(const T *feats, const T *points, T *out, int64_t n_points,
                           int64_t n_feats, cudaStream_t stream)
{
    auto kernel = trilinear_forward_kernel<T, kVec>;
    const int group_log2 = group_log2_for(n_feats / kVec);
    int64_t blocks = 0;
    EXT_CUDA_TRY(grid_for(kernel, n_points, group_log2, &blocks));
    kernel<<<unsigned(blocks), kThreads, 0, stream>>>(feats, points, out, n_points, n_feats,
                                                      group_log2);
    return cudaGetLastError();
}

template <typename T>
cudaError_t forward(const void *feats, const void *points, void *out, int64_t n_points,
                    int64_t n_feats, cudaStream_t stream)
{
    const T *feats_t = static_cast<const T *>(feats), *points_t = static_cast<const T *>(points);
    T *out_t = static_cast<T *>(out);
    constexpr int kWide = ext_vec16_width<T>();
    if (n_feats % kWide == 0 && ext_aligned16(feats) && ext_aligned16(out))
        return launch_forward<T, kWide>(feats_t, points_t, out_t, n_points, n_feats, stream);
    return launch_forward<T, 1>(feats_t, points_t, out_t, n_points, n_feats, stream);
}

template <typename T, int kVec, bool kGradFeats, bool kGradPoints>
cudaError_t launch_backward(const T *grad_out, const T *feats, const T *points, T *grad_feats,
                            T *grad_points, int64_t n_points, int64_t n_feats,
                            cudaStream_t stream)
{
    auto kernel = trilinear_backward_kernel<T, kVec, kGradFeats, kGradPoints>;
    const int group_log2 = group_log2_for(n_feats / kVec);
    int64_t blocks = 0;
    EXT_CUDA_TRY(grid_for(kernel, n_points, group_log2, &blocks));
    kernel<<<unsigned(blocks), kThreads, 0, stream>>>(grad_out, feats, points, grad_feats,
                                                      grad_points, n_points, n_feats, group_log2);
    return cudaGetLastError();
}

template <typename T, int kVec>
cudaError_t backward_width(const T *grad_out, const T *feats, const T *points, T *grad_feats,
                           T *grad_points, int64_t n_points, int64_t n_feats,
                           cudaStream_t stream)
{
    if (grad_feats && grad_points)
        return launch_backward<T, kVec, true, true>(grad_out, feats, points, grad_feats,
                                                    grad_points, n_points, n_feats, stream);
    if (grad_feats)
        return launch_backward<T, kVec, true, false>(grad_out, feats, points, grad_feats,
                                                     grad_points, n_points, n_feats, stream);
    return launch_backward<T, kVec, false, true>(grad_out, feats, points, grad_feats,
                                                 grad_points, n_points, n_feats, stream);
}

template <typename T>
cudaError_t backward(const void *grad_out, const void *feats, const void *points,
                     void *grad_feats, void *grad_points, int64_t n_points, int64_t n_feats,
                     cudaStream_t stream)
{
    const T *grad_out_t = static_cast<const T *>(grad_out);
    const T *feats_t = static_cast<const T *>(feats), *points_t = static_cast<const T *>(points);
    T *grad_feats_t = static_cast<T *>(grad_feats), *grad_points_t = static_cast<T *>(grad_points);
    constexpr int kWide = ext_vec16_width<T>();
    if (n_feats % kWide == 0 && ext_aligned16(grad_out) && ext_aligned16(feats) &&
        (!grad_feats || ext_aligned16(grad_feats)))
        return backward_width<T, kWide>(grad_out_t, feats_t, points_t, grad_feats_t,
                                        grad_points_t, n_points, n_feats, stream);
    return backward_width<T, 1>(grad_out_t, feats_t, points_t, grad_feats_t, grad_points_t,
                                n_points, n_feats, stream);
}

template <typename T, int kVec>
cudaError_t launch_double_backward(const T *grad_grad_feats, const T *grad_grad_points,
                                   const T *grad_out, const T *feats, const T *points,
                                   T *grad_grad_out, T *grad_feats, T *grad_points,
                                   int64_t n_points, int64_t n_feats, cudaStream_t stream)
{
    auto kernel = trilinear_double_backward_kernel<T, kVec>;
    const int group_log2 = group_log2_for(n_feats / kVec);
    int64_t blocks = 0;
    EXT_CUDA_TRY(grid_for(kernel, n_points, group_log2, &blocks));
    kernel<<<unsigned(blocks), kThreads, 0, stream>>>(grad_grad_feats, grad_grad_points,
                                                      grad_out, feats, points, grad_grad_out,
                                                      grad_feats, grad_points, n_points,
                                                      n_feats, group_log2);
    return cudaGetLastError();
}

/* 16-byte accesses when F is a multiple of the vector and every row tensor
 * given is 16-byte aligned. */
template <typename T>
cudaError_t double_backward(const void *grad_grad_feats, const void *grad_grad_points,
                            const void *grad_out, const void *feats, const void *points,
                            void *grad_grad_out, void *grad_feats, void *grad_points,
                            int64_t n_points, int64_t n_feats, cudaStream_t stream)
{
    const T *ins[5] = {static_cast<const T *>(grad_grad_feats),
                       static_cast<const T *>(grad_grad_points), static_cast<const T *>(grad_out),
                       static_cast<const T *>(feats), static_cast<const T *>(points)};
    T *outs[3] = {static_cast<T *>(grad_grad_out), static_cast<T *>(grad_feats),
                  static_cast<T *>(grad_points)};
    constexpr int kWide = ext_vec16_width<T>();
    const bool aligned = (!grad_grad_feats || ext_aligned16(grad_grad_feats)) &&
                         ext_aligned16(grad_out) && ext_aligned16(feats) &&
                         (!grad_grad_out || ext_aligned16(grad_grad_out)) &&
                         (!grad_feats || ext_aligned16(grad_feats));
    if (n_feats % kWide == 0 && aligned)
        return launch_double_backward<T, kWide>(ins[0], ins[1], ins[2], ins[3], ins[4], outs[0],
                                                outs[1], outs[2], n_points, n_feats, stream);
    return launch_double_backward<T, 1>(ins[0], ins[1], ins[2], ins[3], ins[4], outs[0], outs[1],
                                        outs[2], n_points, n_feats, stream);
}

} // namespace

extern "C" int trilinear_forward_launch(const void *feats, const void *points, void *out,
                                        int dtype, int64_t n_points, int64_t n_feats, int device,
                                        void *stream_ptr)
{
    if (n_points == 0 || n_feats == 0)
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (dtype == EXT_FLOAT32)
        return forward<float>(feats, points, out, n_points, n_feats, stream);
    return forward<double>(feats, points, out, n_points, n_feats, stream);
}

extern "C" int trilinear_backward_launch(const void *grad_out, const void *feats,
                                         const void *points, void *grad_feats,
                                         void *grad_points, int dtype, int64_t n_points,
                                         int64_t n_feats, int device, void *stream_ptr)
{
    /* with F = 0, grad_points is still written (zeros); grad_feats is empty */
    if (n_points == 0 || (n_feats == 0 && grad_points == nullptr))
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (dtype == EXT_FLOAT32)
        return backward<float>(grad_out, feats, points, grad_feats, grad_points, n_points,
                               n_feats, stream);
    return backward<double>(grad_out, feats, points, grad_feats, grad_points, n_points, n_feats,
                            stream);
}

extern "C" int trilinear_double_backward_launch(const void *grad_grad_feats,
                                                const void *grad_grad_points,
                                                const void *grad_out, const void *feats,
                                                const void *points, void *grad_grad_out,
                                                void *grad_feats, void *grad_points, int dtype,
                                                int64_t n_points, int64_t n_feats, int device,
                                                void *stream_ptr)
{
    /* with F = 0, grad_points is still written (zeros); the rows are empty */
    if (n_points == 0 || (n_feats == 0 && grad_points == nullptr))
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (dtype == EXT_FLOAT32)
        return double_backward<float>(grad_grad_feats, grad_grad_points, grad_out, feats, points,
                                      grad_grad_out, grad_feats, grad_points, n_points, n_feats,
                                      stream);
    return double_backward<double>(grad_grad_feats, grad_grad_points, grad_out, feats, points,
                                   grad_grad_out, grad_feats, grad_points, n_points, n_feats,
                                   stream);
}
