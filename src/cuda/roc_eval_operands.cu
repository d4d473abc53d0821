/*
 * roc_eval_operands.cu: the feature pass's operands. For cosine, each row's
 * inverse norm in float64 (the CPU's IEEE operations); a block of rows
 * prepared k-major and padded to whole tiles (roc_gemm.cuh), scaled and
 * rounded to float32 as the CPU scales them; a list's features scaled to unit
 * length, row-major.
 */
#include <stdint.h>

#include <algorithm>

#include "roc_eval_state.cuh"

namespace roc_gpu {

namespace {

/* Cosine: 1 / sqrt(sum of squares) of each row, in float64 in index order
 * with the CPU's IEEE operations (no contraction). A warp takes 32 rows and
 * reads 32 columns of each at a time, coalesced, into shared memory; each lane
 * then sums its row's (a thread reading its own row made a warp's load touch
 * 32 rows D floats apart). The next 32 columns are loaded while a lane sums:
 * loaded in turn, each slice's loads and each of its 32 adds waited on the
 * one before. dev/NOTES.md, operands, has both measured. */
constexpr int kNormThreads = 128;
__global__ void __launch_bounds__(kNormThreads)
    inverse_norm_kernel(const float *x, int64_t n, int64_t dim, double *inverse)
{
    __shared__ float slices[kNormThreads / 32][32][33];
    float(*slice)[33] = slices[threadIdx.x / 32];
    const int lane = threadIdx.x % 32;
    const int64_t n_groups = (n + 31) / 32;
    for (int64_t group = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; group < n_groups;
         group += int64_t(gridDim.x) * blockDim.x / 32) {
        const int64_t r0 = group * 32;
        const int rows = int(min(int64_t(32), n - r0));
        /* column k0 + lane of each of the group's rows */
        float next[32];
        auto load = [&](int64_t k0) {
#pragma unroll
            for (int r = 0; r < 32; r++)
                next[r] = r < rows && k0 + lane < dim ? x[(r0 + r) * dim + k0 + lane] : 0.0f;
        };
        load(0);
        double sum = 0.0;
        for (int64_t k0 = 0; k0 < dim; k0 += 32) {
            __syncwarp();
#pragma unroll
            for (int r = 0; r < 32; r++)
                slice[r][lane] = next[r];
            __syncwarp();
            if (k0 + 32 < dim)
                load(k0 + 32);
            const int cols = int(min(int64_t(32), dim - k0));
#pragma unroll
            for (int c = 0; c < 32; c++) {
                if (c < cols)
                    sum = roc_square_step(sum, slice[lane][c]);
            }
        }
        if (lane < rows)
            inverse[r0 + lane] = roc_inverse_norm(sum);
    }
}

/* out (k_pad, ld), k-major: out[k][i] = x[i][k] (times inverse[i], rounded to
 * float32, for cosine), zero beyond n rows and dim columns. 32 x 32 blocks go
 * through shared memory so both the reads and the writes are coalesced. */
__global__ void prepare_kernel(const float *x, int64_t n, int64_t dim, const double *inverse,
                               float *out, int64_t ld, int64_t k_pad)
{
    __shared__ float block[32][33];
    const int64_t i0 = int64_t(blockIdx.x) * 32, k0 = int64_t(blockIdx.y) * 32;
    for (int r = threadIdx.y; r < 32; r += blockDim.y) {
        const int64_t i = i0 + r, k = k0 + threadIdx.x;
        float v = 0.0f;
        if (i < n && k < dim)
            v = inverse ? roc_cosine_value(x[i * dim + k], inverse[i]) : x[i * dim + k];
        block[r][threadIdx.x] = v;
    }
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += blockDim.y) {
        const int64_t k = k0 + r, i = i0 + threadIdx.x;
        if (k < k_pad && i < ld)
            out[k * ld + i] = block[threadIdx.x][r];
    }
}

/* Cosine for a list: out = x scaled to unit length, row-major, with the same
 * IEEE operations as prepare_kernel (and the CPU). */
__global__ void scale_rows_kernel(const float *x, int64_t n, int64_t dim, const double *inverse,
                                  float *out)
{
    for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * dim;
         e += int64_t(gridDim.x) * blockDim.x)
        out[e] = roc_cosine_value(x[e], inverse[e / dim]);
}

/* 1 / norm of each of the n rows of x (n, dim) into inverse. */
cudaError_t launch_inverse_norms(cudaStream_t stream, const float *x, int64_t n, int64_t dim,
                                 double *inverse)
{
    inverse_norm_kernel<<<grid_for((n + 31) / 32 * 32, kNormThreads), kNormThreads, 0, stream>>>(
        x, n, dim, inverse);
    return cudaGetLastError();
}

} // namespace

/* The sides' sizes and blocks, and for cosine their inverse norms (one set:
 * computed once). Where the caller said the rows of its calls (step_rows > 0),
 * a query block holds no more than one call's: its rows start anywhere in a
 * tile, so round_up(step_rows) + one tile of rows. At the IFRT size a call's
 * 6,607 rows take 13 MiB instead of the 128 MiB block, room the partitioned
 * count's buffers use. */
cudaError_t feature_setup(ExtDeviceArena &arena, FeatureOperands &f, const float *feat_q,
                          const float *feat_g, int64_t n_query, int64_t n_gallery, int64_t dim,
                          int similarity, int64_t step_rows, size_t gallery_bytes)
{
    f.dim = dim;
    f.k_pad = round_up(dim, FeatureTile::kSliceK);
    const int64_t row_bytes = std::max<int64_t>(f.k_pad, 1) * int64_t(sizeof(float));
    FeatureSide *sides[2] = {&f.q, &f.g};
    const float *x[2] = {feat_q, feat_g};
    const int64_t n[2] = {n_query, n_gallery};
    const size_t bytes[2] = {gallery_bytes / 2, gallery_bytes};
    const bool one_set = feat_q == feat_g && n_query == n_gallery;
    for (int side = 0; side < 2; side++) {
        FeatureSide &to = *sides[side];
        to.x = x[side];
        to.n = n[side];
        to.block_rows = std::max<int64_t>(roc_gemm::kBM,
                                          int64_t(bytes[side]) / row_bytes / roc_gemm::kBM *
                                              roc_gemm::kBM);
        if (side == 0 && step_rows > 0)
            to.block_rows =
                std::min(to.block_rows, round_up(step_rows, roc_gemm::kBM) + roc_gemm::kBM);
        if (similarity != ROC_COSINE)
            continue;
        if (side == 1 && one_set) {
            to.inverse = f.q.inverse;
            continue;
        }
        EXT_CUDA_TRY(to.own_inverse.allocate(to.n));
        EXT_CUDA_TRY(launch_inverse_norms(arena.stream(), to.x, to.n, dim, to.own_inverse.get()));
        to.inverse = to.own_inverse.get();
    }
    return cudaSuccess;
}

/* Room in `side` for a block of rows [begin, end) prepared: once, the largest
 * block there is. */
cudaError_t prepare_room(const FeatureOperands &f, FeatureSide &side, int64_t begin, int64_t end)
{
    const int64_t ld = round_up(end - begin, roc_gemm::kBM);
    if (side.prepared.size() >= size_t(f.k_pad * ld))
        return cudaSuccess;
    return side.prepared.allocate(f.k_pad *
                                  std::min(side.block_rows, round_up(side.n, roc_gemm::kBM)));
}

/* Rows [begin, end) of `side` prepared (k-major, padded to whole tiles) on
 * `stream`, unless they are already. */
cudaError_t prepare_block(const FeatureOperands &f, FeatureSide &side, int64_t begin, int64_t end,
                          cudaStream_t stream)
{
    if (side.end > side.begin && side.begin == begin && side.end == end)
        return cudaSuccess;
    const int64_t ld = round_up(end - begin, roc_gemm::kBM);
    EXT_CUDA_TRY(prepare_room(f, side, begin, end));
    if (f.k_pad > 0) {
        const dim3 grid(unsigned(ld / 32), unsigned((f.k_pad + 31) / 32));
        prepare_kernel<<<grid, dim3(32, 8), 0, stream>>>(
            side.x + begin * f.dim, end - begin, f.dim,
            side.inverse ? side.inverse + begin : nullptr, side.prepared.get(), ld, f.k_pad);
        EXT_CUDA_TRY(cudaGetLastError());
    }
    side.begin = begin;
    side.end = end;
    return cudaSuccess;
}

/* The operands of query rows [qa, qb) and gallery columns [ga, gb), as
 * prepare_block left them. */
Operands block_operands(const FeatureOperands &f, int64_t qa, int64_t qb, int64_t ga, int64_t gb)
{
    return Operands{f.q.prepared.get(),  f.g.prepared.get(), round_up(qb - qa, roc_gemm::kBM),
                    round_up(gb - ga, roc_gemm::kBN), f.k_pad, qa, ga, gb};
}

/* A list's features for its kernels: as they are for dot, scaled to unit
 * length (row-major) for cosine; one copy when both sides are one array. */
cudaError_t prepare_list(roc_eval_cuda *ev)
{
    const roc_source &s = ev->src;
    PairList &list = ev->list.pairs;
    list = PairList{s.genuine, s.index_a, s.index_b, s.genuine_dtype, s.index_dtype,
                    s.score, s.feat_q, s.feat_g, s.dim, s.n_a, s.n_gallery};
    if (!s.feat_q || s.similarity != ROC_COSINE)
        return cudaSuccess;
    ExtDeviceArena &arena = ev->arena;
    const bool shared = s.feat_q == s.feat_g && s.n_a == s.n_gallery;
    const int64_t n_rows[2] = {s.n_a, s.n_gallery};
    const float *rows[2] = {s.feat_q, s.feat_g};
    Buffer<float> *scaled[2] = {&ev->list.scaled_a, &ev->list.scaled_b};
    for (int side = 0; side < (shared ? 1 : 2); side++) {
        const int64_t n = n_rows[side];
        Buffer<double> inverse(arena);
        EXT_CUDA_TRY(inverse.allocate(n));
        EXT_CUDA_TRY(scaled[side]->allocate(n * s.dim));
        EXT_CUDA_TRY(launch_inverse_norms(arena.stream(), rows[side], n, s.dim, inverse.get()));
        scale_rows_kernel<<<grid_for(n * s.dim), kThreads, 0, arena.stream()>>>(
            rows[side], n, s.dim, inverse.get(), scaled[side]->get());
        EXT_CUDA_TRY(cudaGetLastError());
    }
    list.a = ev->list.scaled_a.get();
    list.b = shared ? list.a : ev->list.scaled_b.get();
    return cudaSuccess;
}

} // namespace roc_gpu
