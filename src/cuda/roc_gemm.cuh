/*
 * roc_gemm.cuh: the fp32 tile product behind the feature pass, S = Aᵀ B one
 * 128 x 128 tile at a time, used by roc_eval_tiles.cu and timed apart by
 * dev/cuda/roc_gemm.cu.
 *
 * Operands are k-major and zero-padded: A_T is (k_pad, lda) with A_T[k][m] =
 * feature k of query m, B_T (k_pad, ldb) likewise for the gallery; k_pad is a
 * multiple of kBK (the k-slice a stage holds) and lda, ldb multiples of kBM, kBN. So every tile load is
 * whole 16-byte rows: cp.async copies them into shared memory, kStages deep,
 * with no transposition and no bounds checks.
 *
 * Tile<kWarpsN>: 2 x kWarpsN warps, each 64 rows x (128 / kWarpsN) columns of
 * the tile; a thread holds 8 rows {tm*4 .. +3, 32 + tm*4 .. +3} (tm = lane / 4)
 * and kFragN columns {tn*4 + 16 g .. +3} (tn = lane % 4) of its warp's part,
 * and per k reads them as 16-byte shared loads: 2 + kFragN / 4 loads for
 * 8 kFragN FMAs. Tile<2> (128 threads, 8 x 16 per thread) reuses each loaded
 * value more than Tile<4> (256 threads, 8 x 8); dev/cuda/roc_gemm.cu times both.
 * PipelinedTile, the feature pass's, is Tile<2> with CUTLASS's lane placement
 * and FMA order and the next k's operands loaded during this k's FMAs.
 *
 * Each score is one fmaf chain over k in order (roc_math.h's roc_dot_step,
 * from 0), exactly what a sequential dot product computes; padded k adds
 * 0 * 0, which changes nothing but the sign of a zero sum.
 */
#ifndef ROC_GEMM_CUH
#define ROC_GEMM_CUH

#include <stdint.h>

#include "../roc_math.h"

namespace roc_gemm {

constexpr int kBM = 128, kBN = 128;

/* kStages k-slices of kBK of both operands' tiles */
template <int kBK, int kStages> struct SharedTiles {
    float a[kStages][kBK][kBM];
    float b[kStages][kBK][kBN];
};

/* cp.async needs sm_80; before it (sm_75) the copy is a plain load and store,
 * complete when it returns, and the pipeline degenerates to one stage. */
__device__ __forceinline__ void copy16(float *shared, const float *global)
{
#if __CUDA_ARCH__ >= 800
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
#else
    *reinterpret_cast<float4 *>(shared) = __ldg(reinterpret_cast<const float4 *>(global));
#endif
}

__device__ __forceinline__ void commit()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int kPending> __device__ __forceinline__ void wait()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

template <int kWarpsN, int kBK = 16, int kStages = 3> struct Tile {
    using Shared = SharedTiles<kBK, kStages>;
    static constexpr int kThreads = 32 * 2 * kWarpsN;
    static constexpr int kSliceK = kBK, kSliceStages = kStages;
    static constexpr int kWarpCols = kBN / kWarpsN;
    static constexpr int kFragN = kWarpCols / 4;

    /* Row and column, within the tile, of accumulator acc[i][j] of this thread. */
    static __device__ __forceinline__ int row(int i)
    {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        return (warp / kWarpsN) * 64 + (i < 4 ? 0 : 32) + (lane / 4) * 4 + (i % 4);
    }
    static __device__ __forceinline__ int col(int j)
    {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        return (warp % kWarpsN) * kWarpCols + (j / 4) * 16 + (lane % 4) * 4 + (j % 4);
    }

    /* This thread's part of a stage's copy: rows r0 + kRowStep u (u < kCopies)
     * of the k-slice, 4 floats at column x of each; consecutive threads along a
     * row, 16 bytes each. */
    static constexpr int kRowStep = kThreads / (kBM / 4);
    static constexpr int kCopies = kBK / kRowStep;
    static_assert(kBM == kBN && kBK % kRowStep == 0, "whole rows of 16-byte copies");

    /* The copy addresses, set up once a tile and stepped by a slice: computed
     * afresh per slice, with a modulo for the stage, they cost more
     * instructions than the slice's copies (dev/NOTES.md, tile product). */
    struct StageCopy {
        const float *a_src, *b_src;
        int64_t a_row_step, b_row_step, a_slice, b_slice;
        float *a_dst, *b_dst;

        __device__ __forceinline__ StageCopy(const float *__restrict__ A_T, int64_t lda,
                                             const float *__restrict__ B_T, int64_t ldb,
                                             int64_t m0, int64_t n0, Shared &s)
        {
            const int r0 = threadIdx.x / (kBM / 4), x = (threadIdx.x % (kBM / 4)) * 4;
            a_src = A_T + r0 * lda + m0 + x;
            b_src = B_T + r0 * ldb + n0 + x;
            a_row_step = kRowStep * lda;
            b_row_step = kRowStep * ldb;
            a_slice = kBK * lda;
            b_slice = kBK * ldb;
            a_dst = &s.a[0][r0][x];
            b_dst = &s.b[0][r0][x];
        }

        /* the next slice into `stage` */
        __device__ __forceinline__ void load(int stage)
        {
#pragma unroll
            for (int u = 0; u < kCopies; u++) {
                copy16(a_dst + stage * (kBK * kBM) + u * (kRowStep * kBM), a_src + u * a_row_step);
                copy16(b_dst + stage * (kBK * kBN) + u * (kRowStep * kBN), b_src + u * b_row_step);
            }
            a_src += a_slice;
            b_src += b_slice;
        }
    };

    /* acc zeroed, and the copies of the first kStages - 1 of n_k slices issued */
    static __device__ __forceinline__ void start(StageCopy &copy, int n_k, float acc[8][kFragN])
    {
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < kFragN; j++)
                acc[i][j] = 0.0f;
#pragma unroll
        for (int stage = 0; stage < kStages - 1; stage++) {
            if (stage < n_k)
                copy.load(stage);
            commit();
        }
    }

    /* acc[i][j] = sum over k of A_T[k][m0 + row(i)] * B_T[k][n0 + col(j)], in k
     * order. Leaves shared memory free for the caller's next use. */
    static __device__ __forceinline__ void product(const float *__restrict__ A_T, int64_t lda,
                                                   const float *__restrict__ B_T, int64_t ldb,
                                                   int64_t m0, int64_t n0, int64_t k_pad,
                                                   Shared &s, float acc[8][kFragN])
    {
        const int a_col = row(0), b_col = col(0);
        const int n_k = int(k_pad / kBK);
        StageCopy copy(A_T, lda, B_T, ldb, m0, n0, s);
        start(copy, n_k, acc);
        int read = 0, write = kStages - 1; /* stages of slice kt and of slice kt + kStages - 1 */
        for (int kt = 0; kt < n_k; kt++) {
            wait<kStages - 2>();
            __syncthreads(); /* slice kt is in; slice kt - 1's stage is free for reuse */
            if (kt + kStages - 1 < n_k)
                copy.load(write);
            commit();
            write = write == kStages - 1 ? 0 : write + 1;
            const float(*tile_a)[kBM] = s.a[read];
            const float(*tile_b)[kBN] = s.b[read];
            read = read == kStages - 1 ? 0 : read + 1;
#pragma unroll
            for (int k = 0; k < kBK; k++) {
                const float4 a0 = *reinterpret_cast<const float4 *>(&tile_a[k][a_col]);
                const float4 a1 = *reinterpret_cast<const float4 *>(&tile_a[k][a_col + 32]);
                const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
                float b[kFragN];
#pragma unroll
                for (int g = 0; g < kFragN / 4; g++) {
                    const float4 v = *reinterpret_cast<const float4 *>(&tile_b[k][b_col + 16 * g]);
                    b[4 * g] = v.x;
                    b[4 * g + 1] = v.y;
                    b[4 * g + 2] = v.z;
                    b[4 * g + 3] = v.w;
                }
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int j = 0; j < kFragN; j++)
                        acc[i][j] = roc_dot_step(acc[i][j], a[i], b[j]);
            }
        }
        wait<0>();
        __syncthreads();
    }
};

/* The same tiles, copies and fmaf chains as Tile<2>, three things changed:
 * lanes placed as CUTLASS's (tm = (lane % 16) / 2, tn = (lane / 16) * 2 +
 * lane % 2), so a quarter warp's 16-byte loads take 2 shared wavefronts
 * instead of 3.3; FMAs in 2 x 2 blocks, rows serpentine; the next k's
 * operands loaded while this k's FMAs run, the barrier for the next slice
 * before the last k of this one. */
struct PipelinedTile : Tile<2> {
    static __device__ __forceinline__ int row(int i)
    {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        return (warp / 2) * 64 + (i < 4 ? 0 : 32) + ((lane % 16) / 2) * 4 + (i % 4);
    }
    static __device__ __forceinline__ int col(int j)
    {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        return (warp % 2) * kWarpCols + (j / 4) * 16 + ((lane / 16) * 2 + lane % 2) * 4 + (j % 4);
    }
    struct Fragment {
        float a[8], b[kFragN];
    };
    static __device__ __forceinline__ void load_fragment(const float (*tile_a)[kBM],
                                                         const float (*tile_b)[kBN],
                                                         int k, int a_col, int b_col, Fragment &f)
    {
        const float4 a0 = *reinterpret_cast<const float4 *>(&tile_a[k][a_col]);
        const float4 a1 = *reinterpret_cast<const float4 *>(&tile_a[k][a_col + 32]);
        f.a[0] = a0.x, f.a[1] = a0.y, f.a[2] = a0.z, f.a[3] = a0.w;
        f.a[4] = a1.x, f.a[5] = a1.y, f.a[6] = a1.z, f.a[7] = a1.w;
#pragma unroll
        for (int g = 0; g < kFragN / 4; g++) {
            const float4 v = *reinterpret_cast<const float4 *>(&tile_b[k][b_col + 16 * g]);
            f.b[4 * g] = v.x, f.b[4 * g + 1] = v.y, f.b[4 * g + 2] = v.z, f.b[4 * g + 3] = v.w;
        }
    }
    static __device__ __forceinline__ void fma_fragment(const Fragment &f, float acc[8][kFragN])
    {
#pragma unroll
        for (int j = 0; j < kFragN; j += 2)
#pragma unroll
            for (int i0 = 0; i0 < 8; i0 += 2) {
                const int i = (j % 4) ? 8 - 2 - i0 : i0;
                acc[i][j] = roc_dot_step(acc[i][j], f.a[i], f.b[j]);
                acc[i + 1][j] = roc_dot_step(acc[i + 1][j], f.a[i + 1], f.b[j]);
                acc[i + 1][j + 1] = roc_dot_step(acc[i + 1][j + 1], f.a[i + 1], f.b[j + 1]);
                acc[i][j + 1] = roc_dot_step(acc[i][j + 1], f.a[i], f.b[j + 1]);
            }
    }
    static __device__ __forceinline__ void product(const float *__restrict__ A_T, int64_t lda,
                                                   const float *__restrict__ B_T, int64_t ldb,
                                                   int64_t m0, int64_t n0, int64_t k_pad,
                                                   Shared &s, float acc[8][kFragN])
    {
        constexpr int kBK = kSliceK, kStages = kSliceStages;
        const int a_col = row(0), b_col = col(0);
        const int n_k = int(k_pad / kBK);
        StageCopy copy(A_T, lda, B_T, ldb, m0, n0, s);
        start(copy, n_k, acc);
        wait<kStages - 2>();
        __syncthreads(); /* slice 0 is in */
        int read = 0, write = kStages - 1; /* stages of slice kt and of slice kt + kStages - 1 */
        Fragment f[2];
        load_fragment(s.a[0], s.b[0], 0, a_col, b_col, f[0]);
        for (int kt = 0; kt < n_k; kt++) {
            if (kt + kStages - 1 < n_k)
                copy.load(write); /* into slice kt - 1's stage, free since the last barrier */
            commit();
            write = write == kStages - 1 ? 0 : write + 1;
#pragma unroll
            for (int k = 0; k < kBK; k++) {
                if (k == kBK - 1) {
                    wait<kStages - 2>();
                    __syncthreads(); /* slice kt + 1 is in; slice kt's reads are issued */
                    read = read == kStages - 1 ? 0 : read + 1;
                }
                if (k < kBK - 1 || kt + 1 < n_k)
                    load_fragment(s.a[read], s.b[read], (k + 1) % kBK, a_col, b_col,
                                  f[(k + 1) % 2]);
                fma_fragment(f[k % 2], acc);
            }
        }
        wait<0>();
        __syncthreads();
    }
};

} // namespace roc_gemm

#endif /* ROC_GEMM_CUH */
