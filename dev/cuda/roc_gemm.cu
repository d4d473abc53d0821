/*
 * roc_gemm.cu: variants of the feature pass's fp32 tile product, each checked
 * against the CPU before it is timed beside cuBLAS (kept apart from the library).
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Isrc [-I<CUTLASS>/include] dev/cuda/roc_gemm.cu \
 *       -lcublas -o build/roc_gemm
 *   (without cuBLAS's headers it builds without -lcublas and times the variants alone;
 *   CUTLASS's headers, e.g. pip's nvidia-cutlass under cutlass_library/source/include,
 *   add version 10)
 *   ./build/roc_gemm [Q G D]
 *
 * Every variant computes S = Xq Xgᵀ with each score one fmaf chain over k in
 * order, which the check demands bit for bit of a CPU fmaf chain (the
 * evaluator needs it: a genuine pair's score, computed apart, must equal the
 * same pair's score in its tile). cuBLAS is timed only (its order differs).
 *
 * version 1: the first library kernel: 128 x 128 x 8 tiles, row-major operands
 *            loaded with scalar loads and transposed into shared memory on the
 *            way, one buffer, 8 x 8 outputs per thread.
 * version 2: roc_gemm::Tile<4>: k-major zero-padded operands, cp.async 16-byte
 *            copies 3 stages deep, 8 warps of 64 x 32, 8 x 8 per thread, two
 *            blocks of 256 threads per multiprocessor (at most 128 registers).
 *            10,000 x 21,000 x 512 on the H100: 5.59 ms, 1.26x cuBLAS.
 * version 3: Tile<4> with one block per multiprocessor: 5.85 ms, 1.32x cuBLAS.
 * version 4: roc_gemm::Tile<2>: 4 warps of 64 x 64, 8 x 16 per thread (each
 *            loaded value feeds twice the FMAs), 128 threads, two blocks a
 *            multiprocessor. Expected: closer to cuBLAS, if version 2 waits on
 *            shared-memory loads.
 * version 5: Tile<2> with three blocks a multiprocessor (at most 168 registers).
 * version 6: Tile<2> with k-slices of 32, 3 stages (96 KB): half the barriers and
 *            cp.async waits per FMA.
 * version 7: Tile<2> with k-slices of 32, 2 stages (64 KB).
 * version 8: Tile<2> with k-slices of 8, 4 stages (32 KB): half the unrolled
 *            loop (ncu on version 4: 7% of the warps' stall samples were waits
 *            for instructions to be fetched; cuBLAS's kernel takes slices of 8).
 * version 9: Tile<2> with k-slices of 8, 6 stages (48 KB).
 *
 * version 10: CUTLASS's SIMT multistage main loop (threadblock::DefaultMma for
 *            Sm80: cp.async, 4 stages of 128 x 128 x 8, 4 warps of 64 x 64,
 *            8 x 16 a thread) on the same k-major operands (A column-major, B
 *            row-major), one block a tile, stored by its warp iterator.
 *            Expected: cuBLAS's issue rate, if cuBLAS's SIMT kernel is this
 *            one. Measured on the H100: 4.38-4.40 ms, 0.98-0.99x cuBLAS
 *            (50,000 x 200,000: 1.01x, version 4 1.07x), every sampled score
 *            bit for bit the CPU's chain. With warps of 32 x 64 (8 warps,
 *            8 x 8 a thread): 5.19 ms, 1.16x. In the feature pass in place of
 *            version 4 (dev/NOTES.md): not yet a gain.
 *
 * Versions 2 to 9 share roc_gemm.cuh's copy addressing: set up once per tile
 * and stepped by a slice (until 2026-11-22 it was computed afresh per slice:
 * version 4 then took 5.18 ms, 1.17x cuBLAS).
 *
 * version 11: Tile<2>'s loop after CUTLASS's (roc_gemm::PipelinedTile: CUTLASS's
 *            lane placement, FMAs in 2 x 2 serpentine blocks, the next k's
 *            operands loaded during this k's FMAs). H100, 10,000 x 21,000:
 *            4.66-4.68 ms, 1.04-1.05x cuBLAS, against version 4's 4.98-5.01
 *            ms (1.12x) and CUTLASS's 0.98x in the same runs; ncu: 320 M
 *            shared wavefronts against version 4's 534 M, dispatch stalls
 *            -25%. In the fused feature pass it did not pay (dev/NOTES.md,
 *            seventh pass); alone in tile_kernel it does, since the
 *            twenty-fourth pass (-1.8%).
 *
 *   ./build/roc_gemm Q G D 0,4,11   times only cuBLAS and versions 4 and 11
 *
 * versions 12 to 15: the product and the count in separate kernels, the way
 *            the library's feature pass runs since the twelfth pass
 *            (dev/NOTES.md): gemm_chunk stores chunks of ROC_CHUNK_WAVES
 *            (default 2) waves of whole tiles, count_chunk counts each chunk
 *            (the easy part of kAside's count: each score against the lowest
 *            level), checked against the host's count of version 4's scores.
 *            12: version 4's loop + the count; 13: version 11's + the count;
 *            14: version 11's, stored only; 15: the count only. H100, 1e10
 *            pairs, chunks of 8 waves: 13 1.044x cuBLAS, 14 0.979x, 15 14 ms.
 *            ROC_SKIP_CHECK=1 times without the check; ROC_COUNT_BLOCKS sets
 *            count_chunk's blocks a multiprocessor (default 2).
 *
 * Napkin math at 10,000 x 21,000 x 512: 2 Q G D = 215 GFLOP; at the H100's
 * fp32 rate (about 60 TFLOP/s at the clocks it holds under load) 3.6 ms;
 * cuBLAS's fp32 GEMM is the peer to meet.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#if __has_include(<cublas_v2.h>)
#include <cublas_v2.h>
#define HAVE_CUBLAS 1
#else
#define HAVE_CUBLAS 0 /* no cuBLAS headers: the variants alone, against version 1 */
#endif

#include "cuda/roc_gemm.cuh"
#include "roc_math.h"

#include "harness.cuh"

#if __has_include(<cutlass/gemm/threadblock/default_mma.h>)
#include <cutlass/gemm/threadblock/default_mma.h>
#define HAVE_CUTLASS 1
#else
#define HAVE_CUTLASS 0 /* no CUTLASS headers: versions 1 to 9 */
#endif


constexpr int kVersions = 15;

// ----------------------------------------------------------------------------
// CPU reference: the sequential fmaf chain

float dot_in_order(const float *a, const float *b, int64_t dim)
{
    float acc = 0.0f;
    for (int64_t k = 0; k < dim; k++)
        acc = std::fma(a[k], b[k], acc);
    return acc;
}

// ----------------------------------------------------------------------------
// version 1: row-major operands, scalar loads transposed into shared memory

__global__ void __launch_bounds__(256) gemm_v1(const float *xq, const float *xg, int64_t M,
                                               int64_t N, int64_t D, float *S)
{
    __shared__ float tq[8][128], tg[8][128];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int load_row = threadIdx.x / 2, load_k = (threadIdx.x % 2) * 4;
    const int64_t m0 = int64_t(blockIdx.y) * 128, n0 = int64_t(blockIdx.x) * 128;
    float acc[8][8] = {};
    const int64_t qi = m0 + load_row, gj = n0 + load_row;
    for (int64_t k0 = 0; k0 < D; k0 += 8) {
        for (int q = 0; q < 4; q++) {
            const int64_t k = k0 + load_k + q;
            tq[load_k + q][load_row] = qi < M && k < D ? xq[qi * D + k] : 0.0f;
            tg[load_k + q][load_row] = gj < N && k < D ? xg[gj * D + k] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float a[8], b[8];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                a[r] = tq[k][ty * 4 + r];
                a[r + 4] = tq[k][64 + ty * 4 + r];
                b[r] = tg[k][tx * 4 + r];
                b[r + 4] = tg[k][64 + tx * 4 + r];
            }
#pragma unroll
            for (int m = 0; m < 8; m++)
#pragma unroll
                for (int n = 0; n < 8; n++)
                    acc[m][n] = fmaf(a[m], b[n], acc[m][n]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int m = 0; m < 8; m++)
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const int64_t i = m0 + (m < 4 ? ty * 4 + m : 64 + ty * 4 + m - 4);
            const int64_t j = n0 + (n < 4 ? tx * 4 + n : 64 + tx * 4 + n - 4);
            if (i < M && j < N)
                S[i * N + j] = acc[m][n];
        }
}

// ----------------------------------------------------------------------------
// versions 2 to 9 and 11: a tile product on prepared operands, persistent blocks

template <typename Tile, int kMinBlocks>
__global__ void __launch_bounds__(Tile::kThreads, kMinBlocks)
    gemm_tiles(const float *a_t, int64_t lda, const float *b_t, int64_t ldb, int64_t k_pad,
               int64_t M, int64_t N, float *S)
{
    extern __shared__ __align__(16) unsigned char shared[];
    typename Tile::Shared &tiles = *reinterpret_cast<typename Tile::Shared *>(shared);
    const int64_t tiles_n = (N + roc_gemm::kBN - 1) / roc_gemm::kBN;
    const int64_t tiles_m = (M + roc_gemm::kBM - 1) / roc_gemm::kBM;
    for (int64_t t = blockIdx.x; t < tiles_m * tiles_n; t += gridDim.x) {
        const int64_t group = t / (8 * tiles_n);
        const int64_t rows = tiles_m - group * 8 < 8 ? tiles_m - group * 8 : 8;
        const int64_t in_group = t - group * 8 * tiles_n;
        const int64_t m0 = (group * 8 + in_group % rows) * roc_gemm::kBM;
        const int64_t n0 = (in_group / rows) * roc_gemm::kBN;
        float acc[8][Tile::kFragN];
        Tile::product(a_t, lda, b_t, ldb, m0, n0, k_pad, tiles, acc);
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < Tile::kFragN; j++) {
                const int64_t row = m0 + Tile::row(i), col = n0 + Tile::col(j);
                if (row < M && col < N)
                    S[row * N + col] = acc[i][j];
            }
    }
}

using Tile4 = roc_gemm::Tile<4>;
using Tile2 = roc_gemm::Tile<2>;
template <int kBK, int kStages> using Tile2K = roc_gemm::Tile<2, kBK, kStages>;

// ----------------------------------------------------------------------------
// version 11: Tile<2>'s loop after CUTLASS's SIMT main loop

/* roc_gemm.cuh's PipelinedTile, the library's since the twenty-fourth pass */
using PipelinedTile = roc_gemm::PipelinedTile;

// ----------------------------------------------------------------------------
// versions 12 to 15: the tile product and the count in separate kernels

/* Tile t's origin in the tile order of gemm_tiles (groups of 8 row tiles,
 * column by column). */
__device__ __forceinline__ void tile_origin(int64_t t, int64_t tiles_m, int64_t tiles_n,
                                            int64_t &m0, int64_t &n0)
{
    const int64_t group = t / (8 * tiles_n);
    const int64_t rows = tiles_m - group * 8 < 8 ? tiles_m - group * 8 : 8;
    const int64_t in_group = t - group * 8 * tiles_n;
    m0 = (group * 8 + in_group % rows) * roc_gemm::kBM;
    n0 = (in_group / rows) * roc_gemm::kBN;
}

/* Tiles [t_begin, t_end) stored whole, row-major, tile t at chunk + (t -
 * t_begin) kBM kBN: a chunk sized to stay in L2 for the count kernel. */
template <typename Tile>
__global__ void __launch_bounds__(Tile::kThreads, 2)
    gemm_chunk(const float *a_t, int64_t lda, const float *b_t, int64_t ldb, int64_t k_pad,
               int64_t tiles_m, int64_t tiles_n, int64_t t_begin, int64_t t_end, float *chunk)
{
    extern __shared__ __align__(16) unsigned char shared[];
    typename Tile::Shared &tiles = *reinterpret_cast<typename Tile::Shared *>(shared);
    for (int64_t t = t_begin + blockIdx.x; t < t_end; t += gridDim.x) {
        int64_t m0, n0;
        tile_origin(t, tiles_m, tiles_n, m0, n0);
        float acc[8][Tile::kFragN];
        Tile::product(a_t, lda, b_t, ldb, m0, n0, k_pad, tiles, acc);
        float *out = chunk + (t - t_begin) * (roc_gemm::kBM * roc_gemm::kBN);
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < Tile::kFragN; j += 4)
                *reinterpret_cast<float4 *>(&out[Tile::row(i) * roc_gemm::kBN + Tile::col(j)]) =
                    make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
    }
}

/* What the count kernel finds: pairs below the lowest level (the run of gap
 * 0, and its lowest key), pairs at or above it (the library sets those aside),
 * NaN scores, and the highest key. */
struct ChunkCounts {
    unsigned long long below, above, nan;
    unsigned int below_min, top;
};

/* The easy exact count of kAside over a chunk: persistent blocks of 256
 * threads, a tile at a time, a thread's 16 float4 loads of it in flight
 * together; scores compared as floats with the lowest level's score (a NaN
 * fails both compares), counts in 32 bits per thread, one atomic a block.
 * (The first version, a block a tile with 4 loads in flight and 64-bit
 * atomics per warp, took 27-31 ms at 1e10: dev/NOTES.md.) */
__global__ void __launch_bounds__(256)
    count_chunk(const float *chunk, int64_t tiles_m, int64_t tiles_n, int64_t t_begin,
                int64_t n_chunk_tiles, int64_t M, int64_t N, float lowest, ChunkCounts *counts)
{
    constexpr int kVectors = roc_gemm::kBM * roc_gemm::kBN / 4, kLoads = kVectors / 256;
    uint32_t below = 0, above = 0, nan = 0;
    float below_min = INFINITY, top = -INFINITY;
    for (int64_t t = blockIdx.x; t < n_chunk_tiles; t += gridDim.x) {
        int64_t m0, n0;
        tile_origin(t_begin + t, tiles_m, tiles_n, m0, n0);
        const bool whole = m0 + roc_gemm::kBM <= M && n0 + roc_gemm::kBN <= N;
        const float4 *tile = reinterpret_cast<const float4 *>(chunk) + t * kVectors;
        float4 v[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; u++)
            v[u] = __ldcs(tile + threadIdx.x + u * 256);
#pragma unroll
        for (int u = 0; u < kLoads; u++) {
            const int f = threadIdx.x + u * 256;
            const float s[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const bool use = whole || (m0 + f / 32 < M && n0 + (f % 32) * 4 + c < N);
                const bool is_below = use && s[c] < lowest, is_above = use && s[c] >= lowest;
                below += is_below;
                above += is_above;
                nan += use && !is_below && !is_above;
                below_min = fminf(below_min, is_below ? s[c] : INFINITY);
                top = fmaxf(top, use ? s[c] : -INFINITY);
            }
        }
    }
    __shared__ uint32_t block_counts[3];
    __shared__ uint32_t block_min, block_top;
    if (threadIdx.x == 0)
        block_counts[0] = block_counts[1] = block_counts[2] = 0, block_min = 0xffffffffu,
        block_top = 0;
    __syncthreads();
    for (int d = 16; d > 0; d /= 2) {
        below += __shfl_xor_sync(0xffffffffu, below, d);
        above += __shfl_xor_sync(0xffffffffu, above, d);
        nan += __shfl_xor_sync(0xffffffffu, nan, d);
        below_min = fminf(below_min, __shfl_xor_sync(0xffffffffu, below_min, d));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, d));
    }
    if (threadIdx.x % 32 == 0) {
        atomicAdd(&block_counts[0], below);
        atomicAdd(&block_counts[1], above);
        atomicAdd(&block_counts[2], nan);
        if (below)
            atomicMin(&block_min, roc_score_key(below_min));
        if (top != -INFINITY)
            atomicMax(&block_top, roc_score_key(top));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicAdd(&counts->below, (unsigned long long)block_counts[0]);
        atomicAdd(&counts->above, (unsigned long long)block_counts[1]);
        atomicAdd(&counts->nan, (unsigned long long)block_counts[2]);
        atomicMin(&counts->below_min, block_min);
        atomicMax(&counts->top, block_top);
    }
}

// ----------------------------------------------------------------------------
// version 10: CUTLASS's SIMT main loop, scores stored by its warp iterator

#if HAVE_CUTLASS
using CutlassMma = typename cutlass::gemm::threadblock::DefaultMma<
    float, cutlass::layout::ColumnMajor, 1, float, cutlass::layout::RowMajor, 1, float,
    cutlass::layout::RowMajor, cutlass::arch::OpClassSimt, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<128, 128, 8>, cutlass::gemm::GemmShape<64, 64, 8>,
    cutlass::gemm::GemmShape<1, 1, 1>, 4, cutlass::arch::OpMultiplyAdd>::ThreadblockMma;

/* S_pad (lda x ldb, row-major) = A Bᵀ on the padded operands: grid (ldb / 128, lda / 128) */
__global__ void __launch_bounds__(32 * CutlassMma::WarpCount::kCount)
    gemm_cutlass(const float *a_t, int64_t lda, const float *b_t, int64_t ldb, int64_t k_pad,
                 float *S_pad)
{
    using Mma = CutlassMma;
    extern __shared__ __align__(16) unsigned char shared[];
    typename Mma::SharedStorage &storage = *reinterpret_cast<typename Mma::SharedStorage *>(shared);
    const int m0 = int(blockIdx.y) * 128, n0 = int(blockIdx.x) * 128;
    const int thread = threadIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const typename Mma::IteratorA::Params params_a{cutlass::layout::ColumnMajor(int(lda))};
    const typename Mma::IteratorB::Params params_b{cutlass::layout::RowMajor(int(ldb))};
    typename Mma::IteratorA iterator_a(params_a, const_cast<float *>(a_t),
                                       {int(lda), int(k_pad)}, thread, {m0, 0});
    typename Mma::IteratorB iterator_b(params_b, const_cast<float *>(b_t),
                                       {int(k_pad), int(ldb)}, thread, {0, n0});
    Mma mma(storage, thread, warp, lane);
    typename Mma::FragmentC acc;
    acc.clear();
    mma(int(k_pad / Mma::Shape::kK), acc, iterator_a, iterator_b, acc);
    typename Mma::Operator::IteratorC iterator_c({S_pad, cutlass::layout::RowMajor(int(ldb))},
                                                 lane);
    iterator_c.add_tile_offset({int(blockIdx.y) * Mma::WarpCount::kM + warp % Mma::WarpCount::kM,
                                int(blockIdx.x) * Mma::WarpCount::kN + warp / Mma::WarpCount::kM});
    iterator_c.store(acc);
}
#endif

// ----------------------------------------------------------------------------

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

/* x (n, dim) row-major -> (k_pad, ld) k-major, zero-padded */
std::vector<float> k_major(const std::vector<float> &x, int64_t n, int64_t dim, int64_t ld,
                           int64_t k_pad)
{
    std::vector<float> out(size_t(k_pad * ld), 0.0f);
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < dim; k++)
            out[k * ld + i] = x[i * dim + k];
    return out;
}

int main(int argc, char **argv)
{
    const int64_t M = argc > 3 ? atoll(argv[1]) : 10000;
    const int64_t N = argc > 3 ? atoll(argv[2]) : 21000;
    const int64_t D = argc > 3 ? atoll(argv[3]) : 512;
    /* optional 4th argument: the versions to run, e.g. 4,10 (cuBLAS is 0) */
    std::vector<bool> chosen(kVersions + 1, argc <= 4);
    if (argc > 4)
        for (char *v = argv[4], *end;; v = end + 1) {
            const long version = strtol(v, &end, 10);
            if (end == v || version < 0 || version > kVersions)
                return fprintf(stderr, "versions: 0 to %d, comma-separated\n", kVersions), 2;
            chosen[version] = true;
            if (*end != ',')
                break;
        }
    std::mt19937 gen(7);
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(float(D)));
    std::vector<float> xq(M * D), xg(N * D);
    for (auto &v : xq)
        v = normal(gen);
    for (auto &v : xg)
        v = normal(gen);
    const int64_t k_pad = round_up(D, 32), lda = round_up(M, 128),
                  ldb = round_up(N, 128);
    std::vector<float> aT = k_major(xq, M, D, lda, k_pad), bT = k_major(xg, N, D, ldb, k_pad);

    float *d_xq, *d_xg, *d_at, *d_bt, *d_s;
    CHECK(cudaMalloc(&d_xq, xq.size() * 4));
    CHECK(cudaMalloc(&d_xg, xg.size() * 4));
    CHECK(cudaMalloc(&d_at, aT.size() * 4));
    CHECK(cudaMalloc(&d_bt, bT.size() * 4));
    CHECK(cudaMalloc(&d_s, size_t(M * N) * 4));
    float *d_s_pad; /* version 10's output: whole tiles */
    CHECK(cudaMalloc(&d_s_pad, size_t(lda * ldb) * 4));
    CHECK(cudaMemcpy(d_xq, xq.data(), xq.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_xg, xg.data(), xg.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_at, aT.data(), aT.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_bt, bT.data(), bT.size() * 4, cudaMemcpyHostToDevice));
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int shared = int(sizeof(roc_gemm::SharedTiles<16, 3>));
    const int shared32x3 = int(sizeof(roc_gemm::SharedTiles<32, 3>));
    const int shared32x2 = int(sizeof(roc_gemm::SharedTiles<32, 2>));
    const int shared8x4 = int(sizeof(roc_gemm::SharedTiles<8, 4>));
    const int shared8x6 = int(sizeof(roc_gemm::SharedTiles<8, 6>));
    constexpr auto kMaxShared = cudaFuncAttributeMaxDynamicSharedMemorySize;
    CHECK(cudaFuncSetAttribute(gemm_tiles<Tile4, 2>, kMaxShared, shared));
    CHECK(cudaFuncSetAttribute(gemm_tiles<Tile4, 1>, kMaxShared, shared));
    CHECK(cudaFuncSetAttribute(gemm_tiles<Tile2, 2>, kMaxShared, shared));
    CHECK(cudaFuncSetAttribute(gemm_tiles<PipelinedTile, 2>, kMaxShared, shared));
    CHECK(cudaFuncSetAttribute(gemm_tiles<Tile2, 3>, kMaxShared, shared));
    CHECK(cudaFuncSetAttribute(gemm_tiles<Tile2K<32, 3>, 2>, kMaxShared, shared32x3));
    CHECK(cudaFuncSetAttribute(gemm_tiles<Tile2K<32, 2>, 2>, kMaxShared, shared32x2));
    CHECK(cudaFuncSetAttribute(gemm_tiles<Tile2K<8, 4>, 2>, kMaxShared, shared8x4));
    CHECK(cudaFuncSetAttribute(gemm_tiles<Tile2K<8, 6>, 2>, kMaxShared, shared8x6));
#if HAVE_CUTLASS
    const int shared_cutlass = int(sizeof(typename CutlassMma::SharedStorage));
    CHECK(cudaFuncSetAttribute(gemm_cutlass, kMaxShared, shared_cutlass));
    const dim3 tiles(unsigned(ldb / 128), unsigned(lda / 128));
#endif
#if HAVE_CUBLAS
    cublasHandle_t handle;
    cublasCreate(&handle);
#endif
    /* versions 12 to 15: chunks of ROC_CHUNK_WAVES (default 2) waves of tiles */
    const int64_t tiles_m = lda / 128, tiles_n = ldb / 128, n_tiles = tiles_m * tiles_n;
    const char *waves_env = getenv("ROC_CHUNK_WAVES");
    const int64_t chunk_tiles = std::min<int64_t>(n_tiles, 2 * sms * (waves_env ? atoi(waves_env) : 2));
    float *d_chunk;
    ChunkCounts *d_counts;
    CHECK(cudaMalloc(&d_chunk, size_t(chunk_tiles) * 128 * 128 * 4));
    CHECK(cudaMemset(d_chunk, 0, size_t(chunk_tiles) * 128 * 128 * 4));
    CHECK(cudaMalloc(&d_counts, sizeof(ChunkCounts)));
    CHECK(cudaFuncSetAttribute(gemm_chunk<Tile2>, kMaxShared, shared));
    CHECK(cudaFuncSetAttribute(gemm_chunk<PipelinedTile>, kMaxShared, shared));
    /* ROC_COUNT_BLOCKS: the count kernel's blocks a multiprocessor (default 2) */
    const int64_t count_blocks =
        sms * (getenv("ROC_COUNT_BLOCKS") ? atoi(getenv("ROC_COUNT_BLOCKS")) : 2);
    const uint32_t lowest = roc_score_key(0.13f); /* ~0.2% of N(0, 1 / D) scores above */
    auto run_chunks = [&](int version) {
        const ChunkCounts zero = {0, 0, 0, 0xffffffffu, 0};
        CHECK(cudaMemcpyAsync(d_counts, &zero, sizeof zero, cudaMemcpyHostToDevice));
        for (int64_t t0 = 0; t0 < n_tiles; t0 += chunk_tiles) {
            const int64_t t1 = std::min(n_tiles, t0 + chunk_tiles);
            const unsigned blocks = unsigned(std::min<int64_t>(2 * sms, t1 - t0));
            if (version == 12)
                gemm_chunk<Tile2><<<blocks, 128, shared>>>(d_at, lda, d_bt, ldb, k_pad, tiles_m,
                                                           tiles_n, t0, t1, d_chunk);
            else if (version == 13 || version == 14)
                gemm_chunk<PipelinedTile><<<blocks, 128, shared>>>(
                    d_at, lda, d_bt, ldb, k_pad, tiles_m, tiles_n, t0, t1, d_chunk);
            if (version != 14)
                count_chunk<<<unsigned(std::min<int64_t>(t1 - t0, count_blocks)), 256>>>(
                    d_chunk, tiles_m, tiles_n, t0, t1 - t0, M, N, roc_key_score(lowest),
                    d_counts);
        }
    };
    printf("chunks of %lld tiles (%.1f MB), %lld tiles\n", (long long)chunk_tiles,
           chunk_tiles * 65536 / 1e6, (long long)n_tiles);

    auto run = [&](int version) {
        if (version == 0) { /* cuBLAS, column-major: S^T (N x M) = Xg (N x D) Xq^T */
#if HAVE_CUBLAS
            const float one = 1.0f, zero = 0.0f;
            cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(D), &one, d_xg,
                        int(D), d_xq, int(D), &zero, d_s, int(N));
#endif
        } else if (version == 1) {
            gemm_v1<<<dim3(unsigned((N + 127) / 128), unsigned((M + 127) / 128)), 256>>>(
                d_xq, d_xg, M, N, D, d_s);
        } else if (version == 2) {
            gemm_tiles<Tile4, 2><<<sms * 2, 256, shared>>>(d_at, lda, d_bt, ldb, k_pad, M, N, d_s);
        } else if (version == 3) {
            gemm_tiles<Tile4, 1><<<sms, 256, shared>>>(d_at, lda, d_bt, ldb, k_pad, M, N, d_s);
        } else if (version == 4) {
            gemm_tiles<Tile2, 2><<<sms * 2, 128, shared>>>(d_at, lda, d_bt, ldb, k_pad, M, N, d_s);
        } else if (version == 5) {
            gemm_tiles<Tile2, 3><<<sms * 3, 128, shared>>>(d_at, lda, d_bt, ldb, k_pad, M, N, d_s);
        } else if (version == 6) {
            gemm_tiles<Tile2K<32, 3>, 2>
                <<<sms * 2, 128, shared32x3>>>(d_at, lda, d_bt, ldb, k_pad, M, N, d_s);
        } else if (version == 7) {
            gemm_tiles<Tile2K<32, 2>, 2>
                <<<sms * 2, 128, shared32x2>>>(d_at, lda, d_bt, ldb, k_pad, M, N, d_s);
        } else if (version == 8) {
            gemm_tiles<Tile2K<8, 4>, 2>
                <<<sms * 2, 128, shared8x4>>>(d_at, lda, d_bt, ldb, k_pad, M, N, d_s);
        } else if (version == 9) {
            gemm_tiles<Tile2K<8, 6>, 2>
                <<<sms * 2, 128, shared8x6>>>(d_at, lda, d_bt, ldb, k_pad, M, N, d_s);
        } else if (version == 11) {
            gemm_tiles<PipelinedTile, 2>
                <<<sms * 2, 128, shared>>>(d_at, lda, d_bt, ldb, k_pad, M, N, d_s);
        } else if (version >= 12) {
            run_chunks(version);
        } else {
#if HAVE_CUTLASS
            gemm_cutlass<<<tiles, 32 * CutlassMma::WarpCount::kCount, shared_cutlass>>>(
                d_at, lda, d_bt, ldb, k_pad, d_s_pad);
#endif
        }
        CHECK(cudaGetLastError());
    };

    /* check: 4096 random pairs, bit for bit against the CPU's fmaf chain */
    /* ROC_SKIP_CHECK=1 times without the check (run it at a smaller size) */
    const bool check = !getenv("ROC_SKIP_CHECK") || atoi(getenv("ROC_SKIP_CHECK")) == 0;
    std::vector<float> S(check ? size_t(M * N) : 0);
    bool counted = false; /* the host's count of S (version 4's, checked bit for bit) */
    ChunkCounts want = {0, 0, 0, 0xffffffffu, 0};
    for (int version = 1; version <= kVersions; version++) {
        if (!check || (version == 10 && !HAVE_CUTLASS) || !chosen[version] || version >= 14)
            continue;
        if (version >= 12) { /* its counts against the host's count of version 4's scores */
            if (!counted) {
                run(4);
                CHECK(cudaMemcpy(S.data(), d_s, S.size() * 4, cudaMemcpyDeviceToHost));
                for (const float v : S) {
                    const uint32_t key = roc_score_key(v);
                    if (std::isnan(v)) {
                        want.nan++;
                    } else if (key >= lowest) {
                        want.above++;
                        want.top = std::max(want.top, key);
                    } else {
                        want.below++;
                        want.below_min = std::min(want.below_min, key);
                        want.top = std::max(want.top, key);
                    }
                }
                counted = true;
            }
            run(version);
            ChunkCounts got;
            CHECK(cudaMemcpy(&got, d_counts, sizeof got, cudaMemcpyDeviceToHost));
            const bool same = got.below == want.below && got.above == want.above &&
                              got.nan == want.nan && got.below_min == want.below_min &&
                              got.top == want.top;
            printf("version %d: below %llu above %llu nan %llu min %08x top %08x (host: %llu "
                   "%llu %llu %08x %08x)%s\n", version, got.below, got.above, got.nan,
                   got.below_min, got.top, want.below, want.above, want.nan, want.below_min,
                   want.top, same ? "  OK" : "  WRONG");
            if (!same)
                return 1;
            continue;
        }
        CHECK(cudaMemset(d_s, 0xff, size_t(M * N) * 4)); /* poison: NaN everywhere */
        run(version);
        if (version == 10) /* the padded scores' first M rows and N columns */
            CHECK(cudaMemcpy2D(d_s, N * 4, d_s_pad, ldb * 4, N * 4, M, cudaMemcpyDeviceToDevice));
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(S.data(), d_s, S.size() * 4, cudaMemcpyDeviceToHost));
        int64_t bad = 0, unwritten = 0, first_bad = -1;
        double max_rel = 0;
        for (int64_t t = 0; t < M * N; t++)
            unwritten += std::isnan(S[t]);
        std::uniform_int_distribution<int64_t> pick(0, M * N - 1);
        for (int trial = 0; trial < 4096; trial++) {
            const int64_t t = trial < 2 ? (trial ? M * N - 1 : 0) : pick(gen);
            const int64_t i = t / N, j = t % N;
            const float ref = dot_in_order(&xq[i * D], &xg[j * D], D);
            double exact = 0;
            for (int64_t k = 0; k < D; k++)
                exact += double(xq[i * D + k]) * double(xg[j * D + k]);
            max_rel = std::max(max_rel, std::fabs(double(S[t]) - exact) / (std::fabs(exact) + 1e-30));
            if (S[t] != ref && !(S[t] == 0 && ref == 0)) {
                bad++;
                if (first_bad < 0)
                    first_bad = t;
            }
        }
        printf("version %d: %lld of 4096 sampled scores differ from the CPU fmaf chain (first at "
               "%lld), %lld unwritten, max rel. error vs float64 %.2e%s\n", version,
               (long long)bad, (long long)first_bad, (long long)unwritten, max_rel,
               bad || unwritten ? "  WRONG" : "  OK");
        if (bad || unwritten)
            return 1;
    }

    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    const double flop = 2.0 * M * N * D;
    printf("%lld x %lld x %lld (%.1f GFLOP)\n", (long long)M, (long long)N, (long long)D,
           flop / 1e9);
    printf("variant | ms (median of 15) | TFLOP/s | time / %s\n",
           HAVE_CUBLAS ? "cuBLAS" : "first row");
    float cublas_ms = 0;
    for (int version = HAVE_CUBLAS ? 0 : 1; version <= kVersions; version++) {
        if ((version == 10 && !HAVE_CUTLASS) || (version && !chosen[version]))
            continue;
        std::vector<float> times;
        for (int rep = 0; rep < 18; rep++) {
            CHECK(cudaEventRecord(start));
            run(version);
            CHECK(cudaEventRecord(stop));
            CHECK(cudaEventSynchronize(stop));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, start, stop));
            if (rep >= 3)
                times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        const float ms = times[times.size() / 2];
        if (cublas_ms == 0) /* the first row timed: cuBLAS where it is built in */
            cublas_ms = ms;
        printf("%7s | %17.3f | %7.1f | %.3f\n", version ? std::to_string(version).c_str() : "cuBLAS",
               ms, flop / ms / 1e9, ms / cublas_ms);
    }
    return 0;
}
