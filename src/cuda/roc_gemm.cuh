/*
 * roc_gemm.cuh: the fp32 tile product behind the feature pass, S = Aᵀ B one
 * 128 x 128 tile at a time, used by roc_eval_kernel.cu and timed apart by
 * dev/cuda/roc_gemm.cu (version 2 there).
 *
 * Operands are k-major and zero-padded: A_T is (k_pad, lda) with A_T[k][m] =
 * feature k of query m, B_T (k_pad, ldb) likewise for the gallery; k_pad is a
 * multiple of kBK and lda, ldb multiples of kBM, kBN. So every tile load is
 * whole 16-byte rows: cp.async copies them into shared memory, kStages deep,
 * with no transposition and no bounds checks.
 *
 * 256 threads = 8 warps of 64 x 32 outputs (2 along M, 4 along N); a thread
 * holds 8 x 8 accumulators, rows {tm*4 .. +3, 32 + tm*4 .. +3} and columns
 * {tn*4 .. +3, 16 + tn*4 .. +3} of its warp's tile, and per k reads them as
 * four 16-byte shared loads for 64 FMAs. Each score is one fmaf chain over k
 * in order (acc = fmaf(a_k, b_k, acc), from 0), exactly what a sequential
 * dot product computes; padded k adds 0 * 0, which changes nothing but the
 * sign of a zero sum.
 */
#ifndef ROC_GEMM_CUH
#define ROC_GEMM_CUH

#include <stdint.h>

namespace roc_gemm {

constexpr int kBM = 128, kBN = 128, kBK = 16, kStages = 3, kThreads = 256;

struct SharedTiles {
    float a[kStages][kBK][kBM];
    float b[kStages][kBK][kBN];
};

/* Row and column, within the tile, of accumulator acc[i][j] of this thread. */
__device__ __forceinline__ int tile_row(int i)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    return (warp / 4) * 64 + (i < 4 ? 0 : 32) + (lane / 4) * 4 + (i % 4);
}

__device__ __forceinline__ int tile_col(int j)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    return (warp % 4) * 32 + (j < 4 ? 0 : 16) + (lane % 4) * 4 + (j % 4);
}

__device__ __forceinline__ void copy16(float *shared, const float *global)
{
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending> __device__ __forceinline__ void wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

/* Stage `stage` <- k-slice [k0, k0 + kBK) of both tiles: 2 x 512 16-byte
 * copies, each thread two of each, consecutive threads along a row. */
__device__ __forceinline__ void load_stage(SharedTiles &s, int stage, const float *A_T,
                                           int64_t lda, const float *B_T, int64_t ldb,
                                           int64_t m0, int64_t n0, int64_t k0)
{
#pragma unroll
    for (int c = threadIdx.x; c < kBK * kBM / 4; c += kThreads) {
        const int row = c / (kBM / 4), col = (c % (kBM / 4)) * 4;
        copy16(&s.a[stage][row][col], A_T + (k0 + row) * lda + m0 + col);
        copy16(&s.b[stage][row][col], B_T + (k0 + row) * ldb + n0 + col);
    }
}

/* acc[i][j] = sum over k of A_T[k][m0 + tile_row(i)] * B_T[k][n0 + tile_col(j)],
 * accumulated in k order. Leaves shared memory free for the caller's next use. */
__device__ __forceinline__ void tile_product(const float *__restrict__ A_T, int64_t lda,
                                             const float *__restrict__ B_T, int64_t ldb,
                                             int64_t m0, int64_t n0, int64_t k_pad,
                                             SharedTiles &s, float acc[8][8])
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int a_col = (warp / 4) * 64 + (lane / 4) * 4, b_col = (warp % 4) * 32 + (lane % 4) * 4;
    const int n_k = int(k_pad / kBK);
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[i][j] = 0.0f;
#pragma unroll
    for (int stage = 0; stage < kStages - 1; stage++) {
        if (stage < n_k)
            load_stage(s, stage, A_T, lda, B_T, ldb, m0, n0, int64_t(stage) * kBK);
        commit();
    }
    for (int kt = 0; kt < n_k; kt++) {
        wait<kStages - 2>();
        __syncthreads(); /* slice kt is in; slice kt - 1's stage is free for reuse */
        const int next = kt + kStages - 1;
        if (next < n_k)
            load_stage(s, next % kStages, A_T, lda, B_T, ldb, m0, n0, int64_t(next) * kBK);
        commit();
        const int stage = kt % kStages;
#pragma unroll
        for (int k = 0; k < kBK; k++) {
            const float4 a0 = *reinterpret_cast<const float4 *>(&s.a[stage][k][a_col]);
            const float4 a1 = *reinterpret_cast<const float4 *>(&s.a[stage][k][a_col + 32]);
            const float4 b0 = *reinterpret_cast<const float4 *>(&s.b[stage][k][b_col]);
            const float4 b1 = *reinterpret_cast<const float4 *>(&s.b[stage][k][b_col + 16]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    }
    wait<0>();
    __syncthreads();
}

} // namespace roc_gemm

#endif /* ROC_GEMM_CUH */
