/*
 * gelu_kernel.cu: GELU forward, backward and double backward on the GPU (the
 * _ext.gelu CUDA twins), for float32 and float64, with the formulas of
 * gelu_math.h.
 *
 * Elementwise and memory-bound: forward moves 2 elements per element (read x,
 * write y), backward 3 (read dy and x, write dx), double backward up to 5
 * (read ddx, dy and x, write ddy and dx); 2^26 float32 elements are 512 MiB,
 * 768 MiB and 1280 MiB. So one kernel, written for bandwidth, serves every
 * pass: 16-byte loads and stores (float4 / double2) when every pointer is
 * 16-byte aligned, each thread keeping kUnroll of them in flight,
 * grid-stride over a grid that fills the device once. The < 4 (or < 2)
 * elements past the last whole vector are done by the first block.
 * Misaligned pointers take the same kernel with scalar accesses. What one
 * element computes is a small pass functor (Value, Slope, Curvature,
 * SlopeAndCurvature) with its numbers of input and output streams.
 */
#include <stdint.h>

#include <algorithm>

#include "../ext_tensor.h"
#include "../gelu_math.h"
#include "ext_cuda.cuh"
#include "gelu_kernel.h"

namespace {

constexpr int kThreads = 256;
/* Vectors each thread loads (per input stream) before it computes: enough
 * bytes in flight per thread to cover DRAM latency with a full-wave grid. */
constexpr int kUnroll = 4;

// ----------------------------------------------------------------------------
// the passes: in[] holds kInputs elements (x first), out[] kOutputs

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
__device__ __forceinline__ float gelu_curvature(float x, int approximate)
{
    return gelu_curvature_f32(x, approximate);
}
__device__ __forceinline__ double gelu_curvature(double x, int approximate)
{
    return gelu_curvature_f64(x, approximate);
}

/* in {x} -> out {GELU(x)}: the forward. */
template <int kApproximate> struct Value {
    static constexpr int kInputs = 1, kOutputs = 1;
    template <typename T> __device__ static void apply(const T *in, T *out)
    {
        out[0] = gelu_value(in[0], kApproximate);
    }
};

/* in {x, g} -> out {g GELU'(x)}: the backward (g = dy), and the double
 * backward's gradient of dy alone (g = ddx). */
template <int kApproximate> struct Slope {
    static constexpr int kInputs = 2, kOutputs = 1;
    template <typename T> __device__ static void apply(const T *in, T *out)
    {
        out[0] = in[1] * gelu_slope(in[0], kApproximate);
    }
};

/* in {x, dy, ddx} -> out {ddx dy GELU''(x)}: the double backward's gradient
 * of x alone. */
template <int kApproximate> struct Curvature {
    static constexpr int kInputs = 3, kOutputs = 1;
    template <typename T> __device__ static void apply(const T *in, T *out)
    {
        out[0] = in[2] * in[1] * gelu_curvature(in[0], kApproximate);
    }
};

/* in {x, dy, ddx} -> out {ddx GELU'(x), ddx dy GELU''(x)}: both gradients of
 * the double backward in one pass over its inputs. */
template <int kApproximate> struct SlopeAndCurvature {
    static constexpr int kInputs = 3, kOutputs = 2;
    template <typename T> __device__ static void apply(const T *in, T *out)
    {
        out[0] = in[2] * gelu_slope(in[0], kApproximate);
        out[1] = in[2] * in[1] * gelu_curvature(in[0], kApproximate);
    }
};

// ----------------------------------------------------------------------------
// kernel

/* Pass over n elements: in0..in2 are its input streams (those past
 * Pass::kInputs unused), out0 and out1 its outputs (likewise), read and
 * written kVec elements at a time. */
template <typename T, int kVec, class Pass>
__global__ void __launch_bounds__(kThreads)
    gelu_kernel(const T *__restrict__ in0, const T *__restrict__ in1, const T *__restrict__ in2,
                T *__restrict__ out0, T *__restrict__ out1, int64_t n)
{
    using Vec = ExtVec<T, kVec>;
    constexpr int kIn = Pass::kInputs, kOut = Pass::kOutputs;
    const T *const in[3] = {in0, in1, in2};
    T *const out[2] = {out0, out1};
    const int64_t n_vec = n / kVec;
    const int64_t tile = int64_t(kThreads) * kUnroll;

    for (int64_t base = int64_t(blockIdx.x) * tile; base < n_vec;
         base += int64_t(gridDim.x) * tile) {
        Vec loaded[kUnroll][kIn];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int64_t i = base + u * kThreads + threadIdx.x;
            if (i < n_vec)
#pragma unroll
                for (int s = 0; s < kIn; s++)
                    loaded[u][s] = reinterpret_cast<const Vec *>(in[s])[i];
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int64_t i = base + u * kThreads + threadIdx.x;
            if (i >= n_vec)
                break;
            Vec result[kOut];
#pragma unroll
            for (int k = 0; k < kVec; k++) {
                T args[kIn], values[kOut];
#pragma unroll
                for (int s = 0; s < kIn; s++)
                    args[s] = loaded[u][s].v[k];
                Pass::apply(args, values);
#pragma unroll
                for (int s = 0; s < kOut; s++)
                    result[s].v[k] = values[s];
            }
#pragma unroll
            for (int s = 0; s < kOut; s++)
                reinterpret_cast<Vec *>(out[s])[i] = result[s];
        }
    }

    /* the elements past the last whole vector */
    const int64_t tail = n_vec * kVec + threadIdx.x;
    if (blockIdx.x == 0 && tail < n) {
        T args[kIn], values[kOut];
#pragma unroll
        for (int s = 0; s < kIn; s++)
            args[s] = in[s][tail];
        Pass::apply(args, values);
#pragma unroll
        for (int s = 0; s < kOut; s++)
            out[s][tail] = values[s];
    }
}

// ----------------------------------------------------------------------------
// launcher

/* The pointers of one call: in[0] = x, then the pass' other inputs. */
template <typename T> struct Streams {
    const T *in[3];
    T *out[2];
};

template <typename T, int kVec, class Pass>
cudaError_t launch(const Streams<T> &s, int64_t n, cudaStream_t stream)
{
    auto kernel = gelu_kernel<T, kVec, Pass>;
    int64_t blocks = 0;
    EXT_CUDA_TRY(ext_full_wave(kernel, kThreads, 0, &blocks));
    const int64_t tile = int64_t(kThreads) * kUnroll;
    blocks = std::max<int64_t>(1, std::min(blocks, (n / kVec + tile - 1) / tile));
    kernel<<<unsigned(blocks), kThreads, 0, stream>>>(s.in[0], s.in[1], s.in[2], s.out[0],
                                                      s.out[1], n);
    return cudaGetLastError();
}

/* 16-byte accesses when every stream the pass touches is 16-byte aligned. */
template <typename T, class Pass>
cudaError_t dispatch_width(const Streams<T> &s, int64_t n, cudaStream_t stream)
{
    bool aligned = true;
    for (int i = 0; i < Pass::kInputs; i++)
        aligned = aligned && ext_aligned16(s.in[i]);
    for (int i = 0; i < Pass::kOutputs; i++)
        aligned = aligned && ext_aligned16(s.out[i]);
    if (aligned)
        return launch<T, ext_vec16_width<T>(), Pass>(s, n, stream);
    return launch<T, 1, Pass>(s, n, stream);
}

template <typename T, template <int> class Pass>
cudaError_t dispatch(const Streams<T> &s, int64_t n, int approximate, int device,
                     void *stream_ptr)
{
    if (n == 0)
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (approximate == GELU_TANH)
        return dispatch_width<T, Pass<GELU_TANH>>(s, n, stream);
    if (approximate == GELU_SIGMOID)
        return dispatch_width<T, Pass<GELU_SIGMOID>>(s, n, stream);
    return dispatch_width<T, Pass<GELU_NONE>>(s, n, stream);
}

template <typename T>
cudaError_t double_backward(const void *grad_grad_input, const void *grad_output,
                            const void *input, void *grad_grad_output, void *grad_input,
                            int64_t n, int approximate, int device, void *stream)
{
    const T *x = static_cast<const T *>(input), *dy = static_cast<const T *>(grad_output);
    const T *ddx = static_cast<const T *>(grad_grad_input);
    T *ddy = static_cast<T *>(grad_grad_output), *dx = static_cast<T *>(grad_input);
    if (ddy && dx)
        return dispatch<T, SlopeAndCurvature>({{x, dy, ddx}, {ddy, dx}}, n, approximate, device,
                                              stream);
    if (dx)
        return dispatch<T, Curvature>({{x, dy, ddx}, {dx, nullptr}}, n, approximate, device,
                                      stream);
    return dispatch<T, Slope>({{x, ddx, nullptr}, {ddy, nullptr}}, n, approximate, device,
                              stream);
}

} // namespace

extern "C" int gelu_forward_launch(const void *input, void *output, int dtype, int64_t n,
                                   int approximate, int device, void *stream)
{
    if (dtype == EXT_FLOAT32)
        return dispatch<float, Value>(
            {{static_cast<const float *>(input), nullptr, nullptr},
             {static_cast<float *>(output), nullptr}},
            n, approximate, device, stream);
    return dispatch<double, Value>(
        {{static_cast<const double *>(input), nullptr, nullptr},
         {static_cast<double *>(output), nullptr}},
        n, approximate, device, stream);
}

extern "C" int gelu_backward_launch(const void *grad_output, const void *input, void *grad_input,
                                    int dtype, int64_t n, int approximate, int device,
                                    void *stream)
{
    if (dtype == EXT_FLOAT32)
        return dispatch<float, Slope>(
            {{static_cast<const float *>(input), static_cast<const float *>(grad_output),
              nullptr},
             {static_cast<float *>(grad_input), nullptr}},
            n, approximate, device, stream);
    return dispatch<double, Slope>(
        {{static_cast<const double *>(input), static_cast<const double *>(grad_output), nullptr},
         {static_cast<double *>(grad_input), nullptr}},
        n, approximate, device, stream);
}

extern "C" int gelu_double_backward_launch(const void *grad_grad_input, const void *grad_output,
                                           const void *input, void *grad_grad_output,
                                           void *grad_input, int dtype, int64_t n,
                                           int approximate, int device, void *stream)
{
    if (dtype == EXT_FLOAT32)
        return double_backward<float>(grad_grad_input, grad_output, input, grad_grad_output,
                                      grad_input, n, approximate, device, stream);
    return double_backward<double>(grad_grad_input, grad_output, input, grad_grad_output,
                                   grad_input, n, approximate, device, stream);
}
