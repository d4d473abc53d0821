/*
 * gelu_kernel.cu: GELU forward and backward on the GPU (the _ext.gelu CUDA
 * twins), for float32 and float64, with the formulas of gelu_math.h.
 *
 * Elementwise and memory-bound: forward moves 2 elements per element (read x,
 * write y), backward 3 (read dy and x, write dx); 2^26 float32 elements are
 * 512 MiB and 768 MiB. So the kernel is written for bandwidth: 16-byte loads
 * and stores (float4 / double2) when every pointer is 16-byte aligned, each
 * thread keeping kUnroll of them in flight, grid-stride over a grid that
 * fills the device once. The < 4 (or < 2) elements past the last whole
 * vector are done by the first block. Misaligned pointers take the same
 * kernel with scalar accesses.
 */
#include <stdint.h>

#include <algorithm>

#include "../ext_tensor.h"
#include "../gelu_math.h"
#include "ext_cuda.cuh"
#include "gelu_kernel.h"

namespace {

constexpr int kThreads = 256;
/* Vectors each thread loads before it computes: enough bytes in flight per
 * thread to cover DRAM latency with a full-wave grid. */
constexpr int kUnroll = 4;

// ----------------------------------------------------------------------------
// kernels

__device__ __forceinline__ float gelu_value(float x, int approximate)
{
    return gelu_value_f32(x, approximate);
}
__device__ __forceinline__ double gelu_value(double x, int approximate)
{
    return gelu_value_f64(x, approximate);
}
__device__ __forceinline__ float gelu_slope(float x, int approximate)
{
    return gelu_slope_f32(x, approximate);
}
__device__ __forceinline__ double gelu_slope(double x, int approximate)
{
    return gelu_slope_f64(x, approximate);
}

/* out = GELU(x) (forward), or dy * GELU'(x) (kBackward); x, dy and out hold n
 * elements, read and written kVec at a time. The formula is a template
 * argument so that each kernel holds one of them. */
template <typename T, int kVec, int kApproximate, bool kBackward>
__global__ void __launch_bounds__(kThreads)
    gelu_kernel(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ out,
                int64_t n)
{
    using Vec = ExtVec<T, kVec>;
    const Vec *x_vec = reinterpret_cast<const Vec *>(x);
    const Vec *dy_vec = reinterpret_cast<const Vec *>(dy);
    Vec *out_vec = reinterpret_cast<Vec *>(out);
    const int64_t n_vec = n / kVec;
    const int64_t tile = int64_t(kThreads) * kUnroll;

    for (int64_t base = int64_t(blockIdx.x) * tile; base < n_vec;
         base += int64_t(gridDim.x) * tile) {
        Vec xs[kUnroll], dys[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int64_t i = base + u * kThreads + threadIdx.x;
            if (i < n_vec) {
                xs[u] = x_vec[i];
                if (kBackward)
                    dys[u] = dy_vec[i];
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int64_t i = base + u * kThreads + threadIdx.x;
            if (i >= n_vec)
                break;
            Vec result;
#pragma unroll
            for (int k = 0; k < kVec; k++)
                result.v[k] = kBackward ? dys[u].v[k] * gelu_slope(xs[u].v[k], kApproximate)
                                        : gelu_value(xs[u].v[k], kApproximate);
            out_vec[i] = result;
        }
    }

    /* the elements past the last whole vector */
    const int64_t tail = n_vec * kVec + threadIdx.x;
    if (blockIdx.x == 0 && tail < n)
        out[tail] = kBackward ? dy[tail] * gelu_slope(x[tail], kApproximate)
                              : gelu_value(x[tail], kApproximate);
}

// ----------------------------------------------------------------------------
// launcher

template <typename T, int kVec, int kApproximate, bool kBackward>
cudaError_t launch(const T *x, const T *dy, T *out, int64_t n, cudaStream_t stream)
{
    auto kernel = gelu_kernel<T, kVec, kApproximate, kBackward>;
    int64_t blocks = 0;
    EXT_CUDA_TRY(ext_full_wave(kernel, kThreads, 0, &blocks));
    const int64_t tile = int64_t(kThreads) * kUnroll;
    blocks = std::max<int64_t>(1, std::min(blocks, (n / kVec + tile - 1) / tile));
    kernel<<<unsigned(blocks), kThreads, 0, stream>>>(x, dy, out, n);
    return cudaGetLastError();
}

template <typename T, int kApproximate, bool kBackward>
cudaError_t dispatch_width(const T *x, const T *dy, T *out, int64_t n, cudaStream_t stream)
{
    if (ext_aligned16(x) && ext_aligned16(out) && (!kBackward || ext_aligned16(dy)))
        return launch<T, ext_vec16_width<T>(), kApproximate, kBackward>(x, dy, out, n, stream);
    return launch<T, 1, kApproximate, kBackward>(x, dy, out, n, stream);
}

template <typename T, bool kBackward>
cudaError_t dispatch(const void *x, const void *dy, void *out, int64_t n, int approximate,
                     int device, void *stream_ptr)
{
    if (n == 0)
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    const T *x_t = static_cast<const T *>(x), *dy_t = static_cast<const T *>(dy);
    T *out_t = static_cast<T *>(out);
    if (approximate == GELU_TANH)
        return dispatch_width<T, GELU_TANH, kBackward>(x_t, dy_t, out_t, n, stream);
    if (approximate == GELU_SIGMOID)
        return dispatch_width<T, GELU_SIGMOID, kBackward>(x_t, dy_t, out_t, n, stream);
    return dispatch_width<T, GELU_NONE, kBackward>(x_t, dy_t, out_t, n, stream);
}

} // namespace

extern "C" int gelu_forward_launch(const void *input, void *output, int dtype, int64_t n,
                                   int approximate, int device, void *stream)
{
    if (dtype == EXT_FLOAT32)
        return dispatch<float, false>(input, nullptr, output, n, approximate, device, stream);
    return dispatch<double, false>(input, nullptr, output, n, approximate, device, stream);
}

extern "C" int gelu_backward_launch(const void *grad_output, const void *input, void *grad_input,
                                    int dtype, int64_t n, int approximate, int device,
                                    void *stream)
{
    if (dtype == EXT_FLOAT32)
        return dispatch<float, true>(input, grad_output, grad_input, n, approximate, device,
                                     stream);
    return dispatch<double, true>(input, grad_output, grad_input, n, approximate, device,
                                  stream);
}
