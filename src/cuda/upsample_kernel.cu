/*
 * upsample_kernel.cu: bilinear resampling forward and backward on the GPU
 * (the _ext.upsample CUDA twins), for float32 and float64, with the taps of
 * upsample_math.h (the same indices and weights as the CPU code).
 *
 * Both kernels give each thread a fixed column and let it walk rows: the
 * column's horizontal taps (or runs of readers) are computed once per thread,
 * and only the row's vertical tap changes per step. Blocks are (x, y): x
 * threads across a row (a power of two, up to 256), y rows at a time; the
 * grid fills the device once.
 *
 * Forward: a thread makes kColumns outputs of each row it visits, a block
 * width apart, so a warp's loads read neighbouring input columns (a 64-byte
 * run for scale 2) and its stores fill whole 128-byte lines. Handing a
 * thread 4 adjacent outputs as one 16-byte store would space its lanes' loads
 * two columns apart and double the L1 wavefronts per load, for no gain in
 * DRAM traffic. A thread walks kChunkRows consecutive output rows of a plane
 * and keeps the two input rows it read last in registers: neighbouring output
 * rows share input rows, so for scale 2 it loads about 1.2 values an output
 * instead of 4 (the first version read all four through L1 and ran 10-20%
 * behind F.interpolate on the H100, bound by load instructions, not DRAM).
 *
 * Backward is a gather: thread (row, w) sums grad_output over the outputs
 * that read input (h, w). Along each axis those form one run (upsample_math.h),
 * found once per call by a small kernel that writes each input index's run
 * and each output index's two weights. Every grad_input element is written
 * once, in a fixed order: no zeroing pass, no atomics, deterministic. A
 * thread whose horizontal run is at most kCachedRun long (any scale factor
 * up to about 7) keeps the run's weights in registers.
 *
 * Napkin math, 8 x 64 x 256 x 256 float32 upsampled 2x (input 128 MiB,
 * output 512 MiB): forward reads 128 MiB and writes 512 MiB, backward reads
 * 512 MiB and writes 128 MiB; 640 MiB each way, about 0.22 ms at the ~3.0
 * TB/s of an H100's device-to-device copy.
 */
#include <stdint.h>

#include <algorithm>

#include "../ext_tensor.h"
#include "../upsample_math.h"
#include "ext_cuda.cuh"
#include "upsample_kernel.h"

namespace {

constexpr int kThreads = 256;
/* Blocks per SM the forward and backward kernels are compiled for. float32:
 * 4, at most 64 registers a thread without spilling, so 32 warps per SM keep
 * loads in flight (left to itself the backward takes 128 and runs 16).
 * float64 needs more registers: 2. */
template <typename T> constexpr int min_blocks() { return sizeof(T) == 4 ? 4 : 2; }
/* Output columns per forward thread: the vertical tap of a row is computed
 * once for them. */
constexpr int kColumns = 4;
/* Consecutive output rows of a plane per forward work item. */
constexpr int kChunkRows = 16;
/* Longest horizontal run of readers whose weights a backward thread keeps in
 * registers. */
constexpr int kCachedRun = 16;

// ----------------------------------------------------------------------------
// the axis helpers of upsample_math.h, by type

__device__ __forceinline__ upsample_tap_f32 tap_at(float r, int32_t o, int32_t in,
                                                   int32_t out, int32_t mode)
{
    return upsample_tap_f32_at(r, o, in, out, mode);
}
__device__ __forceinline__ upsample_tap_f64 tap_at(double r, int32_t o, int32_t in,
                                                   int32_t out, int32_t mode)
{
    return upsample_tap_f64_at(r, o, in, out, mode);
}
__device__ __forceinline__ upsample_readers readers_at(float r, int32_t s, int32_t in,
                                                       int32_t out, int32_t mode)
{
    return upsample_readers_f32(r, s, in, out, mode);
}
__device__ __forceinline__ upsample_readers readers_at(double r, int32_t s, int32_t in,
                                                       int32_t out, int32_t mode)
{
    return upsample_readers_f64(r, s, in, out, mode);
}
__device__ __forceinline__ void back_weights(float r, int32_t o, int32_t in, int32_t out,
                                             int32_t mode, float *as_i1, float *as_i0)
{
    upsample_back_weights_f32(r, o, in, out, mode, as_i1, as_i0);
}
__device__ __forceinline__ void back_weights(double r, int32_t o, int32_t in, int32_t out,
                                             int32_t mode, double *as_i1, double *as_i0)
{
    upsample_back_weights_f64(r, o, in, out, mode, as_i1, as_i0);
}
float ratio_of(float, int32_t in, int32_t out, int32_t mode, double scale)
{
    return upsample_ratio_f32(in, out, mode, scale);
}
double ratio_of(double, int32_t in, int32_t out, int32_t mode, double scale)
{
    return upsample_ratio_f64(in, out, mode, scale);
}

/* A thread's rows: row = plane * height + r, stepped by `step` rows at a time
 * without dividing per step. */
struct RowWalk {
    int64_t row, plane;
    int32_t r;
    int64_t step, step_planes;
    int32_t step_r, height;

    __device__ RowWalk(int32_t height_)
    {
        height = height_;
        row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
        step = int64_t(gridDim.y) * blockDim.y;
        plane = row / height;
        r = int32_t(row % height);
        step_planes = step / height;
        step_r = int32_t(step % height);
    }
    __device__ void next()
    {
        row += step;
        plane += step_planes;
        r += step_r;
        if (r >= height) {
            r -= height;
            plane++;
        }
    }
};

// ----------------------------------------------------------------------------
// kernels

/* The values of one input row at a thread's kColumns pairs of columns. */
template <typename T> struct InputRow {
    int32_t row = -1;
    T at_x0[kColumns], at_x1[kColumns];

    __device__ void load(const T *__restrict__ plane, int32_t r, int32_t in_w,
                         const int32_t *x0, const int32_t *x1)
    {
        row = r;
        const T *src = plane + int64_t(r) * in_w;
#pragma unroll
        for (int k = 0; k < kColumns; k++)
            at_x0[k] = src[x0[k]], at_x1[k] = src[x1[k]];
    }
};

/*
 * output (planes, out_h, out_w) from input (planes, in_h, in_w). Thread x of
 * block b makes, in every row it visits, the kColumns outputs
 * b * blockDim.x * kColumns + x + k * blockDim.x: a warp's loads then read
 * neighbouring input columns and its stores fill whole lines. Work items are
 * chunks of kChunkRows output rows of one plane; over a chunk the thread
 * keeps the input rows of the previous output row (top, bottom) and loads
 * only rows it does not hold. All lanes of a warp share the row when
 * blockDim.x >= 32, so the branches do not diverge.
 */
template <typename T>
__global__ void __launch_bounds__(kThreads, min_blocks<T>())
    upsample_forward_kernel(const T *__restrict__ input, T *__restrict__ output, int64_t planes,
                            int32_t in_h, int32_t in_w, int32_t out_h, int32_t out_w,
                            int32_t mode, T ratio_h, T ratio_w)
{
    const int64_t first = int64_t(blockIdx.x) * blockDim.x * kColumns + threadIdx.x;
    if (first >= out_w)
        return;
    int32_t x0[kColumns], x1[kColumns];
    T wx0[kColumns], wx1[kColumns];
    bool valid[kColumns];
#pragma unroll
    for (int k = 0; k < kColumns; k++) {
        const int64_t ow = first + int64_t(k) * blockDim.x;
        valid[k] = ow < out_w; /* the others read column 0's taps, in bounds, unused */
        const auto tw = tap_at(ratio_w, valid[k] ? int32_t(ow) : 0, in_w, out_w, mode);
        x0[k] = tw.i0, x1[k] = tw.i1, wx0[k] = tw.w0, wx1[k] = tw.w1;
    }
    const int64_t chunks_per_plane = (out_h + kChunkRows - 1) / kChunkRows;
    const int64_t items = planes * chunks_per_plane;
    for (int64_t item = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; item < items;
         item += int64_t(gridDim.y) * blockDim.y) {
        const int64_t plane = item / chunks_per_plane;
        const int32_t r0 = int32_t(item - plane * chunks_per_plane) * kChunkRows;
        const int32_t r1 = min(r0 + kChunkRows, out_h);
        const T *src = input + plane * in_h * in_w;
        T *dst = output + (plane * out_h + r0) * out_w + first;
        InputRow<T> top, bottom;
        for (int32_t r = r0; r < r1; r++, dst += out_w) {
            const auto th = tap_at(ratio_h, r, in_h, out_h, mode);
            if (th.i0 != top.row) {
                if (th.i0 == bottom.row)
                    top = bottom;
                else
                    top.load(src, th.i0, in_w, x0, x1);
            }
            if (th.i1 != bottom.row) {
                if (th.i1 == top.row)
                    bottom = top;
                else
                    bottom.load(src, th.i1, in_w, x0, x1);
            }
#pragma unroll
            for (int k = 0; k < kColumns; k++)
                if (valid[k])
                    dst[k * blockDim.x] =
                        th.w0 * (wx0[k] * top.at_x0[k] + wx1[k] * top.at_x1[k]) +
                        th.w1 * (wx0[k] * bottom.at_x0[k] + wx1[k] * bottom.at_x1[k]);
        }
    }
}

/*
 * The backward's tables: readers[0, in_h) and readers[in_h, in_h + in_w) are
 * the runs of the rows' and columns' readers; weights holds, per output row
 * then per output column, the weight it gives its i1 and its i0 input:
 * (as_i1_h, as_i0_h, as_i1_w, as_i0_w), of out_h, out_h, out_w, out_w.
 */
template <typename T>
__global__ void upsample_tables_kernel(int32_t in_h, int32_t in_w, int32_t out_h, int32_t out_w,
                                       int32_t mode, T ratio_h, T ratio_w,
                                       upsample_readers *__restrict__ readers,
                                       T *__restrict__ weights)
{
    const int64_t total = int64_t(in_h) + in_w + out_h + out_w;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += int64_t(gridDim.x) * blockDim.x) {
        int64_t k = i;
        if (k < in_h) {
            readers[k] = readers_at(ratio_h, int32_t(k), in_h, out_h, mode);
        } else if ((k -= in_h) < in_w) {
            readers[in_h + k] = readers_at(ratio_w, int32_t(k), in_w, out_w, mode);
        } else if ((k -= in_w) < out_h) {
            back_weights(ratio_h, int32_t(k), in_h, out_h, mode, &weights[k],
                         &weights[out_h + k]);
        } else {
            k -= out_h;
            back_weights(ratio_w, int32_t(k), in_w, out_w, mode, &weights[2 * out_h + k],
                         &weights[2 * out_h + out_w + k]);
        }
    }
}

/*
 * grad_input (planes, in_h, in_w) from grad_output (planes, out_h, out_w):
 * thread x owns input column w = x of every row it visits. When its
 * column's run of readers is at most kCachedRun long, the run's weights sit
 * in registers; a longer run reads them from the tables at each output row.
 */
template <typename T>
__global__ void __launch_bounds__(kThreads, min_blocks<T>())
    upsample_backward_kernel(const T *__restrict__ grad_output, T *__restrict__ grad_input,
                             int64_t planes, int32_t in_h, int32_t in_w, int32_t out_h,
                             int32_t out_w, const upsample_readers *__restrict__ readers,
                             const T *__restrict__ weights)
{
    const int32_t w = int32_t(blockIdx.x * blockDim.x + threadIdx.x);
    if (w >= in_w)
        return;
    const upsample_readers *readers_h = readers, *readers_w = readers + in_h;
    const T *as_i1_h = weights, *as_i0_h = weights + out_h;
    const T *as_i1_w = weights + 2 * out_h, *as_i0_w = as_i1_w + out_w;

    const upsample_readers rw = readers_w[w];
    const bool cached = rw.end - rw.first <= kCachedRun;
    T run_weights[kCachedRun];
#pragma unroll
    for (int k = 0; k < kCachedRun; k++) {
        const int32_t ow = rw.first + k;
        run_weights[k] = ow < rw.middle ? as_i1_w[ow] : (ow < rw.end ? as_i0_w[ow] : T(0));
    }

    const int64_t rows = planes * in_h;
    for (RowWalk walk(in_h); walk.row < rows; walk.next()) {
        const upsample_readers rh = readers_h[walk.r];
        const T *grad_plane = grad_output + walk.plane * out_h * out_w;
        T sum = T(0);
        for (int32_t oh = rh.first; oh < rh.end; oh++) {
            const T *grad_row = grad_plane + int64_t(oh) * out_w;
            T row_sum = T(0);
            if (cached) {
#pragma unroll
                for (int k = 0; k < kCachedRun; k++) {
                    if (rw.first + k >= rw.end)
                        break;
                    row_sum += run_weights[k] * grad_row[rw.first + k];
                }
            } else {
                for (int32_t ow = rw.first; ow < rw.middle; ow++)
                    row_sum += as_i1_w[ow] * grad_row[ow];
                for (int32_t ow = rw.middle; ow < rw.end; ow++)
                    row_sum += as_i0_w[ow] * grad_row[ow];
            }
            sum += (oh < rh.middle ? as_i1_h[oh] : as_i0_h[oh]) * row_sum;
        }
        grad_input[walk.row * in_w + w] = sum;
    }
}

// ----------------------------------------------------------------------------
// launchers

/* x threads across a row of `columns` (a power of two up to kThreads), y rows. */
dim3 block_for(int64_t columns)
{
    unsigned x = 1;
    while (x < unsigned(kThreads) && x < columns)
        x *= 2;
    return dim3(x, kThreads / x);
}

/* (x, y) blocks for `columns` and `rows`: x covers the columns, y adds rows
 * until the device is filled once (at most 65,535). */
template <typename Kernel>
cudaError_t grid_for(Kernel kernel, dim3 block, int64_t columns, int64_t rows, dim3 *grid)
{
    int64_t wave = 0;
    EXT_CUDA_TRY(ext_full_wave(kernel, kThreads, 0, &wave));
    const int64_t grid_x = (columns + block.x - 1) / block.x;
    int64_t grid_y = std::min((rows + block.y - 1) / block.y, std::max<int64_t>(1, wave / grid_x));
    grid_y = std::max<int64_t>(1, std::min<int64_t>(grid_y, 65535));
    *grid = dim3(unsigned(grid_x), unsigned(grid_y));
    return cudaSuccess;
}

template <typename T>
cudaError_t forward(const void *input, void *output, int64_t planes, int32_t in_h, int32_t in_w,
                    int32_t out_h, int32_t out_w, int32_t mode, double scale_h, double scale_w,
                    cudaStream_t stream)
{
    auto kernel = upsample_forward_kernel<T>;
    const int64_t columns = (int64_t(out_w) + kColumns - 1) / kColumns;
    const int64_t chunks = planes * ((int64_t(out_h) + kChunkRows - 1) / kChunkRows);
    const dim3 block = block_for(columns);
    dim3 grid;
    EXT_CUDA_TRY(grid_for(kernel, block, columns, chunks, &grid));
    kernel<<<grid, block, 0, stream>>>(static_cast<const T *>(input), static_cast<T *>(output),
                                       planes, in_h, in_w, out_h, out_w, mode,
                                       ratio_of(T(), in_h, out_h, mode, scale_h),
                                       ratio_of(T(), in_w, out_w, mode, scale_w));
    return cudaGetLastError();
}

template <typename T>
cudaError_t launch_backward(const T *grad_output, T *grad_input, int64_t planes, int32_t in_h,
                            int32_t in_w, int32_t out_h, int32_t out_w,
                            const upsample_readers *readers, const T *weights,
                            cudaStream_t stream)
{
    auto kernel = upsample_backward_kernel<T>;
    const dim3 block = block_for(in_w);
    dim3 grid;
    EXT_CUDA_TRY(grid_for(kernel, block, in_w, planes * in_h, &grid));
    kernel<<<grid, block, 0, stream>>>(grad_output, grad_input, planes, in_h, in_w, out_h, out_w,
                                       readers, weights);
    return cudaGetLastError();
}

template <typename T>
cudaError_t backward(const void *grad_output, void *grad_input, int64_t planes, int32_t in_h,
                     int32_t in_w, int32_t out_h, int32_t out_w, int32_t mode, double scale_h,
                     double scale_w, cudaStream_t stream)
{
    const T ratio_h = ratio_of(T(), in_h, out_h, mode, scale_h);
    const T ratio_w = ratio_of(T(), in_w, out_w, mode, scale_w);
    ExtDeviceArena arena(stream);
    ExtDeviceBuffer<upsample_readers> readers(arena);
    ExtDeviceBuffer<T> weights(arena);
    EXT_CUDA_TRY(readers.allocate(size_t(in_h) + size_t(in_w)));
    EXT_CUDA_TRY(weights.allocate(2 * (size_t(out_h) + size_t(out_w))));
    const int64_t entries = int64_t(in_h) + in_w + out_h + out_w;
    const int64_t table_blocks = std::min<int64_t>((entries + 255) / 256, 1024);
    upsample_tables_kernel<T><<<unsigned(table_blocks), 256, 0, stream>>>(
        in_h, in_w, out_h, out_w, mode, ratio_h, ratio_w, readers.get(), weights.get());
    EXT_CUDA_TRY(cudaGetLastError());

    return launch_backward<T>(static_cast<const T *>(grad_output), static_cast<T *>(grad_input),
                              planes, in_h, in_w, out_h, out_w, readers.get(), weights.get(),
                              stream);
}

} // namespace

extern "C" int upsample_forward_launch(const void *input, void *output, int dtype,
                                       int64_t planes, int32_t in_h, int32_t in_w,
                                       int32_t out_h, int32_t out_w, int32_t mode,
                                       double scale_h, double scale_w, int device,
                                       void *stream_ptr)
{
    if (planes == 0)
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (dtype == EXT_FLOAT32)
        return forward<float>(input, output, planes, in_h, in_w, out_h, out_w, mode, scale_h,
                              scale_w, stream);
    return forward<double>(input, output, planes, in_h, in_w, out_h, out_w, mode, scale_h,
                           scale_w, stream);
}

extern "C" int upsample_backward_launch(const void *grad_output, void *grad_input, int dtype,
                                        int64_t planes, int32_t in_h, int32_t in_w,
                                        int32_t out_h, int32_t out_w, int32_t mode,
                                        double scale_h, double scale_w, int device,
                                        void *stream_ptr)
{
    if (planes == 0)
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (dtype == EXT_FLOAT32)
        return backward<float>(grad_output, grad_input, planes, in_h, in_w, out_h, out_w, mode,
                               scale_h, scale_w, stream);
    return backward<double>(grad_output, grad_input, planes, in_h, in_w, out_h, out_w, mode,
                            scale_h, scale_w, stream);
}
