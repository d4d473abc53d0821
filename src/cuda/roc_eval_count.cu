/*
 * roc_eval_count.cu: the direct counts. A pass over the score matrix (warps
 * over row segments), over a chunk of stored tiles of the feature pass, or
 * over a list's pairs hands every pair to a count policy (roc_count.cuh: the
 * kernels are templates over it, and know none); the keys AsideCount sets
 * aside are counted after (count_aside_kernel); the blocks' top keys are
 * merged at the end. Also pair_scores' epilogue (StoreScores), the exact
 * counters and the level index on the device (set_levels).
 */
#include <stdint.h>

#include <algorithm>

#include "roc_count.cuh"
#include "roc_rank_count.cuh"
#include "roc_eval_state.cuh"

namespace roc_gpu {

constexpr int64_t kSegment = 2048;        /* columns of one warp's work item */

namespace {

// ----------------------------------------------------------------------------
// counting passes

/* Warps take work items (row, segment of kSegment columns) of the score
 * matrix; lanes read 16-byte vectors of consecutive columns, after peeling
 * the columns before the segment's first 16-byte boundary. */
template <class Count>
__global__ void __launch_bounds__(kThreads)
    score_pass_kernel(const float *__restrict__ score, const PassParams p)
{
    extern __shared__ uint32_t shared[];
    Count counter(p, shared);
    counter.begin_block();
    const int lane = threadIdx.x % 32;
    const bool ordered = p.same_set == ROC_SAME_SET_ORDERED;
    const int64_t n_segments = (p.n_gallery + kSegment - 1) / kSegment;
    const int64_t n_items = (p.row_end - p.row_begin) * n_segments;
    const int64_t n_warps = int64_t(gridDim.x) * blockDim.x / 32;
    for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < n_items;
         item += n_warps) {
        const int64_t i = p.row_begin + item / n_segments;
        const int64_t diagonal = p.row_offset + i; /* one set: the pair with itself */
        int64_t c0 = (item % n_segments) * kSegment;
        const int64_t c1 = c0 + kSegment < p.n_gallery ? c0 + kSegment : p.n_gallery;
        if (p.same_set == ROC_SAME_SET_UNORDERED && c0 < diagonal + 1)
            c0 = diagonal + 1;
        if (c0 >= c1)
            continue;
        const float *row = score + i * p.n_gallery;
        const int64_t misaligned = (reinterpret_cast<uintptr_t>(row + c0) / 4) % 4;
        const int64_t body = c0 + (4 - misaligned) % 4 < c1 ? c0 + (4 - misaligned) % 4 : c1;
        const int64_t tail = body + (c1 - body) / 4 * 4;
        if (c0 + lane < body && !(ordered && c0 + lane == diagonal))
            counter.pair(i, c0 + lane, __ldg(row + c0 + lane));
        for (int64_t j = body + 4 * lane; j < tail; j += 4 * 32) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(row + j));
            const float s[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (!(ordered && j + u == diagonal))
                    counter.pair(i, j + u, s[u]);
        }
        if (tail + lane < c1 && !(ordered && tail + lane == diagonal))
            counter.pair(i, tail + lane, __ldg(row + tail + lane));
    }
    counter.end_block();
}

/* The chunk's tiles counted (see tile_kernel), a half tile at a time: a
 * thread's kHalfLoads 16-byte loads of it in flight together, then, in a
 * whole tile, the policy's count_whole over them all, then the quads it left
 * (all of them elsewhere), four pairs of a row each. Persistent blocks.
 * PartitionKeys' tiles go through roc_partition.cu's partition kernel. */
template <class Count>
__global__ void __launch_bounds__(kThreads)
    count_tiles_kernel(const Operands op, const PassParams p, const float *__restrict__ chunk)
{
    constexpr int kHalfLoads = kHalfTilePairs / 4 / kThreads;
    static_assert(kHalfLoads * 4 * kThreads == kHalfTilePairs, "whole half tiles");
    extern __shared__ uint32_t counters[];
    Count counter(p, counters);
    counter.begin_block();
    for_each_tile(op, p, [&](int64_t t, int64_t m0, int64_t n0) {
        const bool whole = whole_tile(op, p, m0, n0);
        const float4 *tile = reinterpret_cast<const float4 *>(chunk + (t - p.tile_begin) *
                                                                          kTilePairs);
        for (int half = 0; half < 2; half++) {
            float4 v[kHalfLoads];
#pragma unroll
            for (int u = 0; u < kHalfLoads; u++)
                v[u] = __ldcs(tile + half * (kHalfTilePairs / 4) + threadIdx.x + u * kThreads);
            counter.at_half_tile(m0, n0, half);
            const uint32_t done = whole ? counter.count_whole(v) : 0u;
            /* the quads left, a loop not unrolled: this kernel is bound by
             * fetching its instructions, and eight copies of the policies'
             * paths were slower still (dev/NOTES.md, direct count, "The
             * count of the stored tiles") */
#pragma unroll 1
            for (uint32_t left = ~done & ((1u << kHalfLoads) - 1); left; left &= left - 1) {
                const int u = __ffs(left) - 1;
                /* float4 f of the half tile: row f / 32, columns 4 (f % 32) .. + 3 */
                const int f = int(threadIdx.x) + u * kThreads;
                const float4 x = pick(v, u);
                const float s[4] = {x.x, x.y, x.z, x.w};
                int64_t row[4], col[4];
                bool use[4];
                quad_pairs(op, p, m0, n0, half * kHalfTileRows + f / 32, (f % 32) * 4, whole,
                           true, row, col, use);
                counter.pairs(row, col, s, use);
            }
        }
    });
    counter.end_block();
}

/* pair_scores' epilogue over the stored tiles, which count_tiles_kernel runs
 * as it runs a count policy: not a count, each pair's score written to its
 * place in p.scores, a (rows, n_gallery) matrix from query p.scores_row0. */
class StoreScores {
  public:
    __device__ StoreScores(const PassParams &p, uint32_t *) : p_(p) {}
    __device__ void begin_block() {}
    __device__ __forceinline__ void at_half_tile(int64_t, int64_t, int) {}
    template <int kN> __device__ __forceinline__ uint32_t count_whole(const float4 (&)[kN])
    {
        return 0;
    }
    template <int kN>
    __device__ __forceinline__ void pairs(const int64_t (&row)[kN], const int64_t (&col)[kN],
                                          const float (&s)[kN], const bool (&use)[kN])
    {
#pragma unroll
        for (int u = 0; u < kN; u++)
            if (use[u])
                p_.scores[(row[u] - p_.scores_row0) * p_.n_gallery + col[u]] = s[u];
    }
    __device__ void end_block() {}

  private:
    const PassParams &p_;
};

/* Merges the blocks' top keys into the running (key, count): one warp, each
 * lane a stride of the blocks, then the lanes (one thread walking a thousand
 * blocks was slow enough to see: dev/NOTES.md, direct count). */
__global__ void merge_top_kernel(const uint32_t *block_key, const unsigned long long *block_count,
                                 int n_blocks, uint32_t *top_key, unsigned long long *top_count)
{
    uint32_t key = 0;
    unsigned long long count = 0;
    if (threadIdx.x == 0) {
        key = *top_key;
        count = *top_count;
    }
    for (int b = threadIdx.x; b < n_blocks; b += 32)
        merge_top(key, count, block_key[b], block_count[b]);
    for (int offset = 16; offset > 0; offset /= 2)
        merge_top(key, count, __shfl_down_sync(0xffffffffu, key, offset),
                  __shfl_down_sync(0xffffffffu, count, offset));
    if (threadIdx.x == 0) {
        *top_key = key;
        *top_count = count;
    }
}

/* The keys AsideCount set aside, into the global counters (AsideCount::drain),
 * a block a warp's segment. Launched where the segments are due (launch_pass:
 * the segments keep their keys from launch to launch until then). */
__global__ void __launch_bounds__(kThreads) count_aside_kernel(const PassParams p)
{
    AsideCount::drain(p);
}

/* Counts pairs [begin, begin + p.n_gallery) of a list scored from features. */
template <class Count>
__global__ void __launch_bounds__(kThreads)
    list_pass_kernel(const PairList list, int64_t begin, const PassParams p)
{
    extern __shared__ uint32_t shared[];
    Count counter(p, shared);
    counter.begin_block();
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < p.n_gallery;
         t += int64_t(gridDim.x) * blockDim.x)
        counter.pair(0, t, list.score_of(begin + t));
    counter.end_block();
}

/* The level index's table (roc_math.h's roc_level_index_fill), made here
 * from the levels on the device, kLevelIndexRun entries a thread. */
constexpr int64_t kLevelIndexRun = 16;
__global__ void level_index_kernel(const uint32_t *levels, int64_t n_levels, uint32_t base,
                                   int shift, int64_t n_buckets, uint32_t *lut)
{
    for (int64_t b0 = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * kLevelIndexRun;
         b0 <= n_buckets; b0 += int64_t(gridDim.x) * blockDim.x * kLevelIndexRun)
        roc_level_index_fill(levels, n_levels, base, shift, b0,
                             min(b0 + kLevelIndexRun, n_buckets + 1), lut);
}

} // namespace

PassParams pass_params(roc_eval_cuda *ev, int64_t row_begin, int64_t row_end, uint32_t *keys)
{
    PassParams p{};
    p.n_gallery = ev->src.n_gallery;
    p.row_begin = row_begin;
    p.row_end = row_end;
    p.same_set = ev->src.same_set;
    p.row_offset = ev->src.row_offset;
    p.levels = ev->levels.keys.get();
    p.n_levels = ev->levels.n;
    p.lut = ev->levels.lut.get();
    p.lut_base = ev->levels.lut_base;
    p.lut_shift = ev->levels.lut_shift;
    p.at = ev->exact.at;
    p.gap = ev->exact.gap;
    p.gap_min = ev->exact.gap_min;
    p.shared_gaps = ev->plan.shared_gaps;
    p.part = ev->partition.view;
    p.aside_keys = ev->aside.keys.get();
    p.aside_used = ev->aside.used.get();
    p.edges = ev->binned.edges.get();
    p.n_bins = ev->binned.n_bins;
    p.lo32 = ev->binned.lo32;
    p.scale32 = ev->binned.scale32;
    p.bins = ev->binned.bins.get();
    p.shared_bins = ev->plan.shared_bins;
    p.keys = keys;
    p.totals = ev->totals.get();
    p.block_top_key = ev->exact.block_top_key.get();
    p.block_top_count = ev->exact.block_top_count.get();
    return p;
}

/* The blocks' top keys of a pass merged into the running top (merge_top_kernel). */
cudaError_t merge_block_tops(roc_eval_cuda *ev, int n_blocks)
{
    merge_top_kernel<<<1, 32, 0, ev->arena.stream()>>>(ev->exact.block_top_key.get(),
                                                       ev->exact.block_top_count.get(), n_blocks,
                                                       ev->exact.top_key, ev->exact.top_count);
    return cudaGetLastError();
}

/* The stored tiles [q.tile_begin, q.tile_end) of `chunk` counted
 * (count_tiles_kernel<Count>, `blocks` blocks with `shared` bytes of
 * counters; PartitionKeys: partition_kernel, its blocks set_ranges');
 * AsideCount's keys set aside then counted where `aside_due`
 * (count_aside_kernel, a block for each warp of `blocks`). */
template <class Count>
cudaError_t count_stored(cudaStream_t stream, const Operands &op, const PassParams &q,
                         float *chunk, int blocks, size_t shared, bool aside_due)
{
    if constexpr (Count::kPolicy == Policy::kPartitioned) {
        return launch_partition(stream, op, q, chunk, blocks);
    } else {
        count_tiles_kernel<Count><<<blocks, kThreads, shared, stream>>>(op, q, chunk);
        if (Count::kPolicy == Policy::kAside && aside_due) {
            EXT_CUDA_TRY(cudaGetLastError());
            count_aside_kernel<<<blocks * (kThreads / 32), kThreads, 0, stream>>>(q);
        }
    }
    return cudaGetLastError();
}

/* The scores of the stored tiles [q.tile_begin, q.tile_end) of `chunk` into
 * q.scores, a (rows, n_gallery) matrix (pair_scores). */
cudaError_t store_scores(cudaStream_t stream, const Operands &op, const PassParams &q,
                         float *chunk, int blocks)
{
    count_tiles_kernel<StoreScores><<<blocks, kThreads, 0, stream>>>(op, q, chunk);
    return cudaGetLastError();
}

/* Launches one pass with a persistent grid: over rows [p.row_begin,
 * p.row_end) of the score matrix or of the features' operands `op`, or over
 * pairs [begin, begin + p.n_gallery) of a list (one "row" of p.n_gallery
 * pairs). The blocks' top keys are merged once, after the last launch. */
template <class Count>
cudaError_t launch_pass(roc_eval_cuda *ev, const PassParams &p, int64_t list_begin,
                        const Operands *op, int64_t tile_from = 0, int64_t tile_to = -1)
{
    const roc_source &s = ev->src;
    const bool features = ev->plan.source == Source::kFeatures;
    const bool listed = ev->plan.source == Source::kListFeatures;
    cudaStream_t stream = ev->arena.stream();
    const size_t shared = Count::shared_bytes(p);
    const int threads = kThreads;
    /* PartitionKeys: the partition kernel's (set_ranges); else the count's, below */
    int blocks = ev->partition.view.n_blocks;
    if constexpr (Count::kPolicy != Policy::kPartitioned) {
        const void *func = reinterpret_cast<const void *>(count_tiles_kernel<Count>);
        if constexpr (Count::kPolicy != Policy::kAside) /* AsideCount: from features only */
            if (!features)
                func = listed ? reinterpret_cast<const void *>(list_pass_kernel<Count>)
                              : reinterpret_cast<const void *>(score_pass_kernel<Count>);
        /* set even below 48 KB: the kernels' static shared memory counts too */
        EXT_CUDA_TRY(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(shared)));
        int per_sm = 0;
        EXT_CUDA_TRY(ext_blocks_per_sm(func, threads, shared, &per_sm));
        blocks = std::min(ev->pass_blocks, ext_sm_count() * per_sm);
    }
    auto merge_top = [&]() {
        return Count::kTracksTop ? merge_block_tops(ev, blocks) : cudaSuccess;
    };
    if (features) {
        int64_t tiles_m, tiles_n;
        const int64_t tiles = tile_to < 0 ? feature_tiles(*op, p, &tiles_m, &tiles_n) : tile_to;
        /* chunks of tiles, each stored then counted (one stored ahead as it
         * is); partitioned, each drained after it */
        const int64_t step =
            std::min(chunk_tiles(ev->plan.tuning, tiles), tiles - tile_from);
        /* AsideCount: a segment for each warp of the count, counted (all of
         * them, one launch of count_aside_kernel) once the probe's share of
         * the pairs since the last time would fill a quarter of each, not
         * after every launch of the count, when most of its blocks had
         * nothing due (dev/NOTES.md, aside) */
        const size_t warps = size_t(blocks) * (kThreads / 32);
        const uint32_t segment =
            Count::kPolicy == Policy::kAside ? uint32_t(ev->aside.keys.size() / warps) : 0;
        double aside_fill = 0;
        PassParams q = p;
        for (q.tile_end = tile_from; q.tile_end < tiles;) {
            q.tile_begin = q.tile_end;
            q.tile_end = std::min(q.tile_begin + step, tiles);
            if (ev->tiles.stored.start(*op, q) && ev->tiles.stored.tile_end < q.tile_end)
                q.tile_end = ev->tiles.stored.tile_end;
            q.tile_first = tile_from;
            q.aside_segment = segment;
            aside_fill += double(q.tile_end - q.tile_begin) * kTilePairs * ev->aside.share /
                          double(warps);
            const bool aside_due = q.tile_end == tiles || aside_fill >= segment / 4.0;
            if (aside_due)
                aside_fill = 0;
            EXT_CUDA_TRY(store_tiles(ev, *op, q));
            EXT_CUDA_TRY(count_stored<Count>(stream, *op, q, ev->tiles.chunk.get(), blocks, shared,
                                             aside_due));
            if (Count::kPolicy == Policy::kPartitioned)
                EXT_CUDA_TRY(drain_ranges(ev));
        }
        return merge_top();
    }
    if constexpr (Count::kPolicy != Policy::kPartitioned && Count::kPolicy != Policy::kAside) {
        if (listed)
            list_pass_kernel<Count><<<blocks, threads, shared, stream>>>(ev->list.pairs,
                                                                         list_begin, p);
        else
            score_pass_kernel<Count><<<blocks, threads, shared, stream>>>(
                s.list ? s.score + list_begin : s.score, p);
        EXT_CUDA_TRY(cudaGetLastError());
    }
    return merge_top();
}

/* One pass of the plan's policy: the policy's name mapped to its functor. */
cudaError_t run_pass(roc_eval_cuda *ev, Policy policy, const PassParams &p, int64_t list_begin,
                     const Operands *op, int64_t tile_from, int64_t tile_to)
{
    switch (policy) {
    case Policy::kExact:
        return launch_pass<ExactCount>(ev, p, list_begin, op, tile_from, tile_to);
    case Policy::kBinned:
        return launch_pass<BinnedCount>(ev, p, list_begin, op, tile_from, tile_to);
    case Policy::kCurve:
        return launch_pass<CurveKeys>(ev, p, list_begin, op, tile_from, tile_to);
    case Policy::kAside:
        return launch_pass<AsideCount>(ev, p, list_begin, op, tile_from, tile_to);
    case Policy::kPartitioned:
        return launch_pass<PartitionKeys>(ev, p, list_begin, op, tile_from, tile_to);
    }
    return cudaErrorInvalidValue;
}

/* The rank count's passes (roc_rank_kernel.cu), persistent grids of the
 * count's blocks: rows [p.row_begin, p.row_end) of a score matrix, or the
 * stored tiles [q.tile_begin, q.tile_end) of `chunk`. */
template <typename Kernel> cudaError_t persistent_blocks(Kernel kernel, int *blocks)
{
    int per_sm = 0;
    EXT_CUDA_TRY(ext_blocks_per_sm(reinterpret_cast<const void *>(kernel), kThreads, 0, &per_sm));
    *blocks = ext_sm_count() * std::max(per_sm, 1);
    return cudaSuccess;
}

cudaError_t count_rank_matrix(cudaStream_t stream, const float *score, const PassParams &p)
{
    int blocks = 0;
    EXT_CUDA_TRY(persistent_blocks(score_pass_kernel<RankCount>, &blocks));
    score_pass_kernel<RankCount><<<blocks, kThreads, 0, stream>>>(score, p);
    return cudaGetLastError();
}

cudaError_t count_rank_tiles(cudaStream_t stream, const Operands &op, const PassParams &q,
                             float *chunk)
{
    int blocks = 0;
    EXT_CUDA_TRY(persistent_blocks(count_tiles_kernel<RankCount>, &blocks));
    count_tiles_kernel<RankCount><<<blocks, kThreads, 0, stream>>>(op, q, chunk);
    return cudaGetLastError();
}

/* Zeroed counters for `levels` (exact), or for the bins; the totals too; and
 * the plan's count. `found`: the levels are those create found, whose keys
 * are on the device already (one process: the levels cross the bus once,
 * to the host). */
cudaError_t set_levels(roc_eval_cuda *ev, const roc_genuine_levels *levels,
                       const roc_level_index *shape, bool found)
{
    cudaStream_t stream = ev->arena.stream();
    EXT_CUDA_TRY(cudaMemsetAsync(ev->totals.get(), 0, 2 * sizeof(unsigned long long), stream));
    if (ev->plan.policy == Policy::kBinned) {
        EXT_CUDA_TRY(ev->binned.bins.allocate(ev->binned.n_bins + 2));
        EXT_CUDA_TRY(cudaMemsetAsync(ev->binned.bins.get(), 0,
                                     (ev->binned.n_bins + 2) * sizeof(unsigned long long), stream));
    }
    if (ev->plan.policy != Policy::kExact) {
        ev->levels.found.release();
        plan_count(ev, nullptr);
        return cudaStreamSynchronize(stream);
    }
    const int64_t U = levels->n_levels;
    ev->levels.n = U;
    ev->levels.host = levels->keys;
    ev->levels.lut_base = shape->base;
    ev->levels.lut_shift = shape->shift;
    /* the keys create found are on the device already: one process's levels
     * cross the bus once, to the host */
    const bool on_device = found && size_t(U) == ev->levels.found.size();
    if (on_device)
        ev->levels.keys = std::move(ev->levels.found);
    else
        EXT_CUDA_TRY(ev->levels.keys.allocate(U));
    ev->levels.found.release();
    EXT_CUDA_TRY(ev->levels.lut.allocate(U ? shape->n_buckets + 1 : 0));
    const size_t n = size_t(U) + 1, words = 2 * n + (n + 1) / 2; /* at, gap, gap_min */
    EXT_CUDA_TRY(ev->exact.block.allocate(words + 2));
    ev->exact.at = ev->exact.block.get();
    ev->exact.gap = ev->exact.at + n;
    ev->exact.gap_min = reinterpret_cast<uint32_t *>(ev->exact.at + 2 * n);
    ev->exact.top_count = ev->exact.at + words;
    ev->exact.top_key = reinterpret_cast<uint32_t *>(ev->exact.at + words + 1);
    EXT_CUDA_TRY(ev->exact.block_top_key.allocate(ev->pass_blocks));
    EXT_CUDA_TRY(ev->exact.block_top_count.allocate(ev->pass_blocks));
    if (U) {
        if (!on_device)
            EXT_CUDA_TRY(cudaMemcpyAsync(ev->levels.keys.get(), levels->keys, U * sizeof(uint32_t),
                                         cudaMemcpyHostToDevice, stream));
        level_index_kernel<<<grid_for((shape->n_buckets + kLevelIndexRun) / kLevelIndexRun),
                             kThreads, 0, stream>>>(
            ev->levels.keys.get(), U, shape->base, shape->shift, shape->n_buckets,
            ev->levels.lut.get());
        EXT_CUDA_TRY(cudaGetLastError());
    }
    EXT_CUDA_TRY(cudaMemsetAsync(ev->exact.block.get(), 0, (words + 2) * sizeof(unsigned long long),
                                 stream));
    EXT_CUDA_TRY(cudaMemsetAsync(ev->exact.gap_min, 0xff, n * sizeof(uint32_t), stream));
    /* a second call (the distributed evaluation's gathered levels) starts
     * over: no ranges of the first levels survive it */
    ev->partition.view = RangePartition{};
    ev->aside.keys.release();
    ev->aside.share = 0;
    plan_count(ev, nullptr);
    if (ev->plan.strategy == Strategy::kPartitioned)
        EXT_CUDA_TRY(set_ranges(ev, levels->keys));
    /* the host arrays are copied in before the caller may free them */
    return cudaStreamSynchronize(stream);
}

} // namespace roc_gpu
