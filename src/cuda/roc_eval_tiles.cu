/*
 * roc_eval_tiles.cu: the tile product of the feature pass (tile_kernel,
 * roc_gemm.cuh's main loop) storing whole tiles into a chunk that a count
 * reads next; the stream that stores the first chunks ahead, beside the
 * genuine pairs' kernels and the host's work.
 */
#include <stdint.h>

#include <algorithm>

#include "roc_eval_state.cuh"

namespace roc_gpu {

namespace {

/*
 * The feature pass, in two kernels a chunk of tiles [p.tile_begin,
 * p.tile_end): tile_kernel computes the scores (FeatureTile::product) and
 * stores each tile whole, row-major, at chunk + (t - p.tile_begin)
 * kTilePairs; count_tiles_kernel counts them. In one kernel, the product and
 * the count were scheduled together, at the count's registers and
 * occupancy, and issued in fewer of the slots than the product alone; apart,
 * the product runs near the GEMM alone and the count after it (dev/NOTES.md,
 * tile product, "The count out of the tile kernel: tiles stored in chunks").
 */
__global__ void __launch_bounds__(FeatureTile::kThreads, 2)
    tile_kernel(const Operands op, const PassParams p, float *chunk)
{
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    FeatureTile::Shared &tiles = *reinterpret_cast<FeatureTile::Shared *>(shared_bytes);
    for_each_tile<true>(op, p, [&](int64_t t, int64_t m0, int64_t n0) {
        float acc[8][FeatureTile::kFragN];
        FeatureTile::product(op.a, op.lda, op.b, op.ldb, m0 - op.m_base, n0 - op.n_begin,
                             op.k_pad, tiles, acc);
        float *out = chunk + (t - p.tile_begin) * kTilePairs;
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < FeatureTile::kFragN; j += 4)
                /* through the intrinsic: a plain float4 assignment here came out as
                 * four 4-byte stores, which filled the LSU queue */
                __stcg(reinterpret_cast<float4 *>(
                           &out[FeatureTile::row(i) * roc_gemm::kBN + FeatureTile::col(j)]),
                       make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
    });
}

} // namespace

/* Room in `chunk` for `tiles` stored tiles. */
cudaError_t chunk_room(Buffer<float> &chunk, int64_t tiles)
{
    return chunk.size() < size_t(tiles * kTilePairs) ? chunk.allocate(size_t(tiles * kTilePairs))
                                                     : cudaSuccess;
}

/* The blocks of a feature pass's tile kernels for tiles [begin, end): two a
 * multiprocessor (their registers), persistent. */
int64_t tile_blocks(int64_t begin, int64_t end)
{
    return std::min<int64_t>(2 * ext_sm_count(), end - begin);
}

/* Tiles [q.tile_begin, q.tile_end) of a feature pass stored into `chunk`
 * (tile_kernel, at most `blocks` blocks). */
cudaError_t store_tiles(cudaStream_t stream, const Operands &op, const PassParams &q, float *chunk,
                        int64_t blocks)
{
    const int tile_shared = int(sizeof(FeatureTile::Shared));
    const unsigned n_tile_blocks =
        unsigned(std::min(blocks, tile_blocks(q.tile_begin, q.tile_end)));
    EXT_CUDA_TRY(cudaFuncSetAttribute(tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      tile_shared));
    tile_kernel<<<n_tile_blocks, FeatureTile::kThreads, tile_shared, stream>>>(op, q, chunk);
    return cudaGetLastError();
}

/* The evaluator's stream waits for the tiles stored ahead (before it reads
 * them, writes over them or over their operands). */
cudaError_t join_ahead(roc_eval_cuda *ev)
{
    if (!ev->tiles.ahead_pending)
        return cudaSuccess;
    ev->tiles.ahead_pending = false;
    return cudaStreamWaitEvent(ev->arena.stream(), ev->tiles.ahead_done, 0);
}

/* The same into the evaluator's chunk, unless it holds them already (stored
 * ahead: the first call's first chunk, the chunk after the probe). */
cudaError_t store_tiles(roc_eval_cuda *ev, const Operands &op, const PassParams &q)
{
    EXT_CUDA_TRY(join_ahead(ev));
    if (ev->tiles.stored.start(op, q) && ev->tiles.stored.tile_end == q.tile_end)
        return cudaSuccess;
    ev->tiles.stored = StoredTiles{};
    EXT_CUDA_TRY(chunk_room(ev->tiles.chunk, q.tile_end - q.tile_begin));
    EXT_CUDA_TRY(store_tiles(ev->arena.stream(), op, q, ev->tiles.chunk.get()));
    ev->tiles.stored = StoredTiles::of(op, q);
    return cudaSuccess;
}

/* Tiles q of `op` stored on the ahead stream, once the evaluator's stream is
 * done with what it was given (the chunk's last count); with the operands
 * of its first block prepared there first where `first` (rows [op.m_base,
 * q.row_end), columns [op.n_begin, op.n_end); their room allocated). Every
 * buffer is allocated before, in the evaluator's stream's order. */
cudaError_t store_ahead(roc_eval_cuda *ev, const Operands &op, const PassParams &q, bool first,
                        int64_t blocks)
{
    FeatureOperands &f = ev->features;
    EXT_CUDA_TRY(join_ahead(ev));
    ev->tiles.stored = StoredTiles{};
    EXT_CUDA_TRY(chunk_room(ev->tiles.chunk, q.tile_end - q.tile_begin));
    EXT_CUDA_TRY(cudaEventRecord(ev->tiles.ahead_start, ev->arena.stream()));
    EXT_CUDA_TRY(cudaStreamWaitEvent(ev->tiles.ahead, ev->tiles.ahead_start, 0));
    if (first) {
        EXT_CUDA_TRY(prepare_block(f, f.q, op.m_base, q.row_end, ev->tiles.ahead));
        EXT_CUDA_TRY(prepare_block(f, f.g, op.n_begin, op.n_end, ev->tiles.ahead));
    }
    EXT_CUDA_TRY(store_tiles(ev->tiles.ahead, op, q, ev->tiles.chunk.get(), blocks));
    EXT_CUDA_TRY(cudaEventRecord(ev->tiles.ahead_done, ev->tiles.ahead));
    ev->tiles.ahead_pending = true;
    ev->tiles.stored = StoredTiles::of(op, q);
    return cudaSuccess;
}

/* The first add_rows call's first chunk (where the evaluator has an ahead
 * stream: the caller said the call's rows), as its first launch will count
 * it: the first block of query rows [0, qb) against the first chunk of the
 * gallery (over_feature_blocks'), the probe's tiles (exact; where it does
 * not probe, the rest of its first chunk follows), else a chunk of the
 * mode's size made in whole waves of first_chunk_blocks. */
cudaError_t store_first_tiles(roc_eval_cuda *ev)
{
    if (!ev->tiles.ahead)
        return cudaSuccess;
    FeatureOperands &f = ev->features;
    const int64_t qb = std::min(f.q.block_rows, std::min(ev->src.n_query, ev->src.step_rows));
    const int64_t gb = std::min(f.g.block_rows, f.g.n);
    EXT_CUDA_TRY(prepare_room(f, f.q, 0, qb));
    EXT_CUDA_TRY(prepare_room(f, f.g, 0, gb));
    const Operands op = block_operands(f, 0, qb, 0, gb);
    PassParams q = pass_params(ev, 0, qb, nullptr);
    int64_t tiles_m, tiles_n;
    const int64_t tiles = feature_tiles(op, q, &tiles_m, &tiles_n);
    const int64_t waves = 7 * first_chunk_blocks();
    q.tile_begin = 0;
    q.tile_end = ev->plan.policy == Policy::kExact
                     ? probe_tiles(ev->plan.tuning, tiles)
                     : std::min({chunk_tiles(ev->plan.tuning, tiles), waves,
                                 tiles});
    /* room for the chunk after it too (stored ahead after the probe): a
     * buffer allocated then would hold the host up while the GPU waits */
    EXT_CUDA_TRY(chunk_room(ev->tiles.chunk,
                            std::min(chunk_tiles(ev->plan.tuning, tiles), tiles)));
    return store_ahead(ev, op, q, true, first_chunk_blocks());
}

} // namespace roc_gpu
