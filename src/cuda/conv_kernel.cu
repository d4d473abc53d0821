/*
 * conv_kernel.cu: the image convolution of conv.h on the GPU, forward and
 * backward, float and double.
 *
 * Correlation (the forward, and the backward to the image with the kernel
 * flipped): conv2d_tiled_kernel<T, R> for R <= 7, the radius a template
 * argument so that every loop over taps unrolls.
 *   - A block of 32 x 4 threads makes a tile 32 outputs wide and 4 * kRows
 *     tall of one plane; each thread makes kRows outputs stacked along y
 *     (for R <= 3, 16 for float, a 32 x 64 tile, and 8 for double; half
 *     that for R > 3, whose wider rows need the registers).
 *   - The block stages the input tile and its R-wide halo in shared memory
 *     (zero outside the image) with coalesced loads, and the plane's kernel
 *     beside it (flipped if asked).
 *   - Each thread copies a pass of kernel rows into registers (all K rows
 *     for K <= 7; 5, or 3 for double, at a time beyond) and walks the input
 *     rows its outputs need: each row's K values are read from shared memory
 *     once and used for every one of the thread's outputs that needs them, so
 *     kRows outputs cost about (kRows + K - 1) * K shared loads per pass for
 *     kRows * K * K FMAs (R = 3, float: 154 loads, 784 FMAs).
 * Napkin math (H100 SXM, fp32, 4096 x 4096): the image and the output are
 * 134 MB of DRAM traffic, 45 us at 3 TB/s; R = 3 is 0.82 G FMA, 25 us at 33
 * TFMA/s, so R <= 3 is memory-bound; R = 5 (2.0 G FMA, 61 us) and R = 7
 * (3.8 G FMA, 113 us) are FMA-bound.
 *
 * Backward to the kernel: conv2d_grad_kernel_tiled<T, R> for R <= 7, a block
 * of K warps, warp i owning kernel row i. Per 32 x 32 tile of grad_out (and
 * the image tile with its halo, both in shared memory) lane x sums, over the
 * tile's rows y, grad_out[y][x] * image[y + i - R][x + j - R] for the K
 * columns j of its row. A fixed grid strides over the tiles of each kernel's
 * planes; sums go to double between tiles, across the lanes at the end, and
 * out as one partial per block; conv2d_sum_partials_kernel adds the partials
 * in block order. No atomics: the result is the same from run to run.
 *
 * R > 7: conv2d_direct_kernel (an output per thread) and
 * conv2d_grad_kernel_direct (a tap per block), reading global memory
 * through the cache: correct for any R, not tuned.
 *
 * The seed's niv_conv (PyCUDA, 2016) differed: square images only, sizes
 * baked into the source by string formatting, every tap read from global
 * memory behind two bounds tests, buffers copied by hand, and no backward.
 */
#include <stdint.h>

#include <algorithm>

#include "../ext_tensor.h"
#include "conv_kernel.h"
#include "ext_cuda.cuh"

namespace {

constexpr int kTileW = 32;          /* columns of a tile: one per lane */
constexpr int kWarps = 4;           /* warps of a correlation block */
constexpr int kMaxTiledRadius = 7;
constexpr int kGradTileH = 32;      /* rows of a grad_kernel tile (32 wide) */
constexpr int kDirectThreadsY = 8;  /* direct kernels: blocks of 32 x 8 */
constexpr int kMaxGridYZ = 65535;

/* Outputs per thread along y: 16 for float, 8 for double (twice the
 * registers), half that for R > 3 (whose K-wide rows take the registers). */
template <typename T, int R>
constexpr int kRowsPerThread = (sizeof(T) == 4 ? 16 : 8) / (R <= 3 ? 1 : 2);
template <typename T, int R> constexpr int kTileH = kWarps * kRowsPerThread<T, R>;
/* Kernel rows held in registers at once, for a side x side kernel of T. */
template <typename T, int side>
constexpr int kRowsPerPass = side <= 7 ? side : (sizeof(T) == 4 ? 5 : 3);


// ----------------------------------------------------------------------------
// device helpers

/* Weight (i, j) of the side x side kernel w, or of w flipped in both axes. */
template <typename T>
__device__ __forceinline__ T weight_at(const T *__restrict__ w, int side, int i, int j,
                                       bool flip)
{
    return flip ? __ldg(w + (side - 1 - i) * side + (side - 1 - j)) : __ldg(w + i * side + j);
}

/* The block's total of v, in thread 0; every thread of the block calls it. */
__device__ double block_sum(double v)
{
    __shared__ double warp_sums[32];
    const int thread = threadIdx.y * blockDim.x + threadIdx.x;
    const int lane = thread & 31, warp = thread >> 5;
    const int n_warps = (blockDim.x * blockDim.y + 31) / 32;
    for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    __syncthreads(); /* warp_sums may still be read from the previous call */
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < n_warps ? warp_sums[lane] : 0.0;
        for (int offset = 16; offset > 0; offset /= 2)
            v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

// ----------------------------------------------------------------------------
// kernels: correlation

/*
 * out (planes, height, width) = in correlated with the kernel of each plane
 * (plane p uses kernel + (p % channels) * K * K, flipped when `flip`).
 * Grid: x over 32-wide tiles; y and z stride over tile rows and planes.
 */
template <typename T, int R>
__global__ void __launch_bounds__(kTileW * kWarps)
    conv2d_tiled_kernel(const T *__restrict__ in, const T *__restrict__ kernel, int64_t channels,
                        bool flip, int height, int width, int64_t planes, T *__restrict__ out)
{
    constexpr int K = 2 * R + 1;
    constexpr int kRows = kRowsPerThread<T, R>, kTileRows = kTileH<T, R>;
    constexpr int kInH = kTileRows + 2 * R, kInW = kTileW + 2 * R;
    constexpr int kPass = kRowsPerPass<T, K>;
    __shared__ T tile[kInH][kInW]; /* tile[r][c] = in[y0 - R + r][x0 - R + c] */
    __shared__ T taps[K][K];       /* the plane's kernel, flipped if asked */

    const int lane = threadIdx.x, warp = threadIdx.y;
    const int x0 = blockIdx.x * kTileW, x = x0 + lane;
    const int first_row = warp * kRows; /* this thread's outputs: tile rows first_row + o */
    const int64_t plane_size = int64_t(height) * width;

    for (int64_t plane = blockIdx.z; plane < planes; plane += gridDim.z) {
        const T *src = in + plane * plane_size;
        const T *w = kernel + (plane % channels) * (K * K);
        for (int y0 = blockIdx.y * kTileRows; y0 < height; y0 += gridDim.y * kTileRows) {
            __syncthreads(); /* the previous tile's readers are done */
            for (int t = warp * kTileW + lane; t < K * K; t += kTileW * kWarps)
                taps[t / K][t % K] = weight_at(w, K, t / K, t % K, flip);
#pragma unroll
            for (int r = warp; r < kInH; r += kWarps) {
                const int y = y0 - R + r;
#pragma unroll
                for (int c = lane; c < kInW; c += kTileW) {
                    const int in_x = x0 - R + c;
                    const bool inside = y >= 0 && y < height && in_x >= 0 && in_x < width;
                    tile[r][c] = inside ? src[int64_t(y) * width + in_x] : T(0);
                }
            }
            __syncthreads();

            T acc[kRows];
#pragma unroll
            for (int o = 0; o < kRows; o++)
                acc[o] = T(0);
#pragma unroll
            for (int i0 = 0; i0 < K; i0 += kPass) {
                const int pass_end = i0 + kPass < K ? i0 + kPass : K;
                T weight[kPass][K];
#pragma unroll
                for (int p = 0; p < kPass; p++)
#pragma unroll
                    for (int j = 0; j < K; j++)
                        weight[p][j] = i0 + p < K ? taps[i0 + p][j] : T(0);
                /* tile row first_row + q feeds output o through kernel row q - o */
#pragma unroll
                for (int q = i0; q < pass_end + kRows - 1; q++) {
                    T v[K];
#pragma unroll
                    for (int j = 0; j < K; j++)
                        v[j] = tile[first_row + q][lane + j];
#pragma unroll
                    for (int o = 0; o < kRows; o++) {
                        const int i = q - o;
                        if (i >= i0 && i < pass_end) {
#pragma unroll
                            for (int j = 0; j < K; j++)
                                acc[o] += v[j] * weight[i - i0][j];
                        }
                    }
                }
            }

            if (x < width) {
#pragma unroll
                for (int o = 0; o < kRows; o++) {
                    const int y = y0 + first_row + o;
                    if (y < height)
                        out[plane * plane_size + int64_t(y) * width + x] = acc[o];
                }
            }
        }
    }
}

/* The same correlation for any radius: an output per thread, taps from
 * global memory (through L1), only those inside the image. Blocks 32 x 8. */
template <typename T>
__global__ void __launch_bounds__(kTileW * kDirectThreadsY)
    conv2d_direct_kernel(const T *__restrict__ in, const T *__restrict__ kernel, int64_t channels,
                         bool flip, int radius, int height, int width, int64_t planes,
                         T *__restrict__ out)
{
    const int side = 2 * radius + 1;
    const int x = blockIdx.x * kTileW + threadIdx.x;
    const int64_t plane_size = int64_t(height) * width;
    if (x >= width)
        return;
    const int j_begin = max(0, radius - x), j_end = min(side, width - x + radius);
    for (int64_t plane = blockIdx.z; plane < planes; plane += gridDim.z) {
        const T *src = in + plane * plane_size;
        const T *w = kernel + (plane % channels) * int64_t(side) * side;
        for (int y = blockIdx.y * kDirectThreadsY + threadIdx.y; y < height;
             y += gridDim.y * kDirectThreadsY) {
            const int i_begin = max(0, radius - y), i_end = min(side, height - y + radius);
            T acc = T(0);
            for (int i = i_begin; i < i_end; i++) {
                const T *row = src + int64_t(y + i - radius) * width;
                for (int j = j_begin; j < j_end; j++)
                    acc += weight_at(w, side, i, j, flip) * __ldg(row + (x + j - radius));
            }
            out[plane * plane_size + int64_t(y) * width + x] = acc;
        }
    }
}

// ----------------------------------------------------------------------------
// kernels: gradient of the kernel

/*
 * partial[(group, blockIdx.x), i, j] = this block's share of grad_kernel[group,
 * i, j]: the tiles blockIdx.x, blockIdx.x + gridDim.x, ... of the group's
 * planes (plane p * groups + group). Blocks of 32 x K threads: threadIdx.y is
 * the kernel row i.
 */
template <typename T, int R>
__global__ void __launch_bounds__(kTileW * (2 * R + 1))
    conv2d_grad_kernel_tiled(const T *__restrict__ image, const T *__restrict__ grad_out,
                             int height, int width, int64_t planes_per_group, int64_t groups,
                             int tiles_x, int tiles_y, double *__restrict__ partial)
{
    constexpr int K = 2 * R + 1;
    constexpr int kInH = kGradTileH + 2 * R, kInW = kTileW + 2 * R;
    __shared__ T grad_tile[kGradTileH][kTileW]; /* grad_out[y0 + r][x0 + c] */
    __shared__ T in_tile[kInH][kInW];           /* image[y0 - R + r][x0 - R + c] */

    const int lane = threadIdx.x, row = threadIdx.y;
    const int64_t plane_size = int64_t(height) * width;
    const int64_t tiles_per_plane = int64_t(tiles_x) * tiles_y;
    const int64_t tiles = planes_per_group * tiles_per_plane;

    for (int64_t group = blockIdx.y; group < groups; group += gridDim.y) {
        double total[K];
#pragma unroll
        for (int j = 0; j < K; j++)
            total[j] = 0.0;
        for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
            const int64_t p = t / tiles_per_plane;
            const int rest = int(t - p * tiles_per_plane);
            const int y0 = rest / tiles_x * kGradTileH, x0 = rest % tiles_x * kTileW;
            const int64_t offset = (p * groups + group) * plane_size;
            __syncthreads(); /* the previous tile's readers are done */
            for (int r = row; r < kGradTileH; r += K) {
                const int y = y0 + r, x = x0 + lane;
                grad_tile[r][lane] =
                    y < height && x < width ? grad_out[offset + int64_t(y) * width + x] : T(0);
            }
            for (int r = row; r < kInH; r += K) {
                const int y = y0 - R + r;
#pragma unroll
                for (int c = lane; c < kInW; c += kTileW) {
                    const int x = x0 - R + c;
                    const bool inside = y >= 0 && y < height && x >= 0 && x < width;
                    in_tile[r][c] = inside ? image[offset + int64_t(y) * width + x] : T(0);
                }
            }
            __syncthreads();

            T acc[K];
#pragma unroll
            for (int j = 0; j < K; j++)
                acc[j] = T(0);
            /* only outputs inside the image: a zero gradient outside it times an
             * infinite or NaN pixel of the halo would make a NaN no output has */
            const int rows = x0 + lane < width ? min(kGradTileH, height - y0) : 0;
#pragma unroll 4
            for (int y = 0; y < rows; y++) {
                const T g = grad_tile[y][lane];
#pragma unroll
                for (int j = 0; j < K; j++)
                    acc[j] += g * in_tile[y + row][lane + j];
            }
#pragma unroll
            for (int j = 0; j < K; j++)
                total[j] += double(acc[j]);
        }
#pragma unroll
        for (int j = 0; j < K; j++) {
            double v = total[j];
            for (int offset = 16; offset > 0; offset /= 2)
                v += __shfl_down_sync(0xffffffffu, v, offset);
            if (lane == 0)
                partial[((group * gridDim.x + blockIdx.x) * K + row) * K + j] = v;
        }
    }
}

/* grad_kernel[group, tap] = the sum of its `blocks` partials, in block order. */
template <typename T>
__global__ void conv2d_sum_partials_kernel(const double *__restrict__ partial, int64_t blocks,
                                           int64_t groups, int taps, T *__restrict__ grad_kernel)
{
    for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < groups * taps;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t group = idx / taps;
        const int tap = int(idx - group * taps);
        double sum = 0.0;
        for (int64_t b = 0; b < blocks; b++)
            sum += partial[(group * blocks + b) * taps + tap];
        grad_kernel[idx] = T(sum);
    }
}

/* grad_kernel for any radius: a block per (group, tap), 32 x 8 threads
 * striding over the group's pixels; a double sum, reduced in the block. */
template <typename T>
__global__ void __launch_bounds__(kTileW * kDirectThreadsY)
    conv2d_grad_kernel_direct(const T *__restrict__ image, const T *__restrict__ grad_out,
                              int radius, int height, int width, int64_t planes_per_group,
                              int64_t groups, T *__restrict__ grad_kernel)
{
    const int side = 2 * radius + 1;
    const int64_t taps = int64_t(side) * side;
    const int64_t plane_size = int64_t(height) * width;
    for (int64_t task = blockIdx.x; task < groups * taps; task += gridDim.x) {
        const int64_t group = task / taps;
        const int tap = int(task - group * taps);
        const int i = tap / side, j = tap % side;
        double sum = 0.0;
        for (int64_t p = 0; p < planes_per_group; p++) {
            const int64_t offset = (p * groups + group) * plane_size;
            for (int y = threadIdx.y; y < height; y += kDirectThreadsY) {
                const int in_y = y + i - radius;
                if (in_y < 0 || in_y >= height)
                    continue;
                for (int x = threadIdx.x; x < width; x += kTileW) {
                    const int in_x = x + j - radius;
                    if (in_x >= 0 && in_x < width)
                        sum += double(grad_out[offset + int64_t(y) * width + x]) *
                               double(image[offset + int64_t(in_y) * width + in_x]);
                }
            }
        }
        sum = block_sum(sum);
        if (threadIdx.x == 0 && threadIdx.y == 0)
            grad_kernel[task] = T(sum);
    }
}

// ----------------------------------------------------------------------------
// launchers

template <typename T, int R>
cudaError_t correlate_tiled(const conv_geometry &g, const T *in, const T *kernel, bool flip,
                            T *out, cudaStream_t stream)
{
    const int64_t tiles_x = (g.width + kTileW - 1) / kTileW;
    const int64_t tiles_y = (g.height + kTileH<T, R> - 1) / kTileH<T, R>;
    const dim3 grid(unsigned(tiles_x), unsigned(std::min<int64_t>(tiles_y, kMaxGridYZ)),
                    unsigned(std::min<int64_t>(g.planes, kMaxGridYZ)));
    conv2d_tiled_kernel<T, R><<<grid, dim3(kTileW, kWarps), 0, stream>>>(
        in, kernel, g.channels, flip, int(g.height), int(g.width), g.planes, out);
    return cudaGetLastError();
}

template <typename T>
cudaError_t correlate(const conv_geometry &g, const T *in, const T *kernel, bool flip, T *out,
                      cudaStream_t stream)
{
    switch (g.radius) {
    case 0: return correlate_tiled<T, 0>(g, in, kernel, flip, out, stream);
    case 1: return correlate_tiled<T, 1>(g, in, kernel, flip, out, stream);
    case 2: return correlate_tiled<T, 2>(g, in, kernel, flip, out, stream);
    case 3: return correlate_tiled<T, 3>(g, in, kernel, flip, out, stream);
    case 4: return correlate_tiled<T, 4>(g, in, kernel, flip, out, stream);
    case 5: return correlate_tiled<T, 5>(g, in, kernel, flip, out, stream);
    case 6: return correlate_tiled<T, 6>(g, in, kernel, flip, out, stream);
    case 7: return correlate_tiled<T, 7>(g, in, kernel, flip, out, stream);
    default: break;
    }
    static_assert(kMaxTiledRadius == 7, "the switch above lists the tiled radii");
    const int64_t tiles_x = (g.width + kTileW - 1) / kTileW;
    const int64_t tiles_y = (g.height + kDirectThreadsY - 1) / kDirectThreadsY;
    const dim3 grid(unsigned(tiles_x), unsigned(std::min<int64_t>(tiles_y, kMaxGridYZ)),
                    unsigned(std::min<int64_t>(g.planes, kMaxGridYZ)));
    conv2d_direct_kernel<T><<<grid, dim3(kTileW, kDirectThreadsY), 0, stream>>>(
        in, kernel, g.channels, flip, g.radius, int(g.height), int(g.width), g.planes, out);
    return cudaGetLastError();
}

template <typename T, int R>
cudaError_t grad_kernel_tiled(const conv_geometry &g, const T *image, const T *grad_out,
                              T *grad_kernel, cudaStream_t stream)
{
    constexpr int K = 2 * R + 1;
    auto tiled = conv2d_grad_kernel_tiled<T, R>;
    int per_sm = 0;
    EXT_CUDA_TRY(ext_blocks_per_sm(reinterpret_cast<const void *>(tiled), kTileW * K, 0, &per_sm));
    const int64_t groups = g.channels, planes_per_group = g.planes / g.channels;
    const int64_t tiles_x = (g.width + kTileW - 1) / kTileW;
    const int64_t tiles_y = (g.height + kGradTileH - 1) / kGradTileH;
    const int64_t tiles = planes_per_group * tiles_x * tiles_y;
    /* one wave of blocks in all, shared among the groups */
    const int64_t grid_y = std::min<int64_t>(groups, kMaxGridYZ);
    const int64_t wave = int64_t(ext_sm_count()) * per_sm;
    const int64_t blocks = std::max<int64_t>(1, std::min((wave + grid_y - 1) / grid_y, tiles));

    ExtDeviceArena arena(stream);
    ExtDeviceBuffer<double> partial(arena);
    EXT_CUDA_TRY(partial.allocate(size_t(groups * blocks * K * K)));
    tiled<<<dim3(unsigned(blocks), unsigned(grid_y)), dim3(kTileW, K), 0, stream>>>(
        image, grad_out, int(g.height), int(g.width), planes_per_group, groups, int(tiles_x),
        int(tiles_y), partial.get());
    EXT_CUDA_TRY(cudaGetLastError());
    const int64_t outputs = groups * K * K;
    const unsigned sum_blocks = unsigned(std::min<int64_t>((outputs + 255) / 256, 4096));
    conv2d_sum_partials_kernel<T><<<sum_blocks, 256, 0, stream>>>(partial.get(), blocks, groups,
                                                                   K * K, grad_kernel);
    return cudaGetLastError();
}

template <typename T>
cudaError_t kernel_gradient(const conv_geometry &g, const T *image, const T *grad_out,
                            T *grad_kernel, cudaStream_t stream)
{
    switch (g.radius) {
    case 0: return grad_kernel_tiled<T, 0>(g, image, grad_out, grad_kernel, stream);
    case 1: return grad_kernel_tiled<T, 1>(g, image, grad_out, grad_kernel, stream);
    case 2: return grad_kernel_tiled<T, 2>(g, image, grad_out, grad_kernel, stream);
    case 3: return grad_kernel_tiled<T, 3>(g, image, grad_out, grad_kernel, stream);
    case 4: return grad_kernel_tiled<T, 4>(g, image, grad_out, grad_kernel, stream);
    case 5: return grad_kernel_tiled<T, 5>(g, image, grad_out, grad_kernel, stream);
    case 6: return grad_kernel_tiled<T, 6>(g, image, grad_out, grad_kernel, stream);
    case 7: return grad_kernel_tiled<T, 7>(g, image, grad_out, grad_kernel, stream);
    default: break;
    }
    const int64_t side = 2 * g.radius + 1;
    const int64_t tasks = g.channels * side * side;
    const unsigned blocks = unsigned(std::min<int64_t>(tasks, int64_t(ext_sm_count()) * 16));
    conv2d_grad_kernel_direct<T><<<blocks, dim3(kTileW, kDirectThreadsY), 0, stream>>>(
        image, grad_out, g.radius, int(g.height), int(g.width), g.planes / g.channels,
        g.channels, grad_kernel);
    return cudaGetLastError();
}

} // namespace

extern "C" int conv2d_correlate_launch(const conv_geometry *geometry, const void *in,
                                       const void *kernel, int flip, void *out, int device,
                                       void *stream_ptr)
{
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (geometry->dtype == EXT_FLOAT32)
        return correlate(*geometry, static_cast<const float *>(in),
                         static_cast<const float *>(kernel), flip != 0,
                         static_cast<float *>(out), stream);
    return correlate(*geometry, static_cast<const double *>(in),
                     static_cast<const double *>(kernel), flip != 0, static_cast<double *>(out),
                     stream);
}

extern "C" int conv2d_grad_kernel_launch(const conv_geometry *geometry, const void *image,
                                         const void *grad_out, void *grad_kernel, int device,
                                         void *stream_ptr)
{
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (geometry->dtype == EXT_FLOAT32)
        return kernel_gradient(*geometry, static_cast<const float *>(image),
                               static_cast<const float *>(grad_out),
                               static_cast<float *>(grad_kernel), stream);
    return kernel_gradient(*geometry, static_cast<const double *>(image),
                           static_cast<const double *>(grad_out),
                           static_cast<double *>(grad_kernel), stream);
}
