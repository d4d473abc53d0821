/*
 * roc_eval_plan.cu: the decisions of the evaluator's GPU backend (see
 * roc_eval_plan.cuh): sizes, tuning variables and the count a pass runs.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "roc_eval_plan.cuh"
#include "roc_partition.cuh"

namespace roc_gpu {

/* The tuning variable `name` where it is a whole number of at least `least`,
 * else `fallback` (unset, empty or not a number: atoll would read those as 0). */
int64_t env_tuning(const char *name, int64_t least, int64_t fallback)
{
    const char *text = getenv(name);
    if (!text || !*text)
        return fallback;
    char *end = nullptr;
    errno = 0;
    const long long value = strtoll(text, &end, 10);
    return errno == 0 && *end == '\0' && value >= least ? int64_t(value) : fallback;
}

/* Tiles a launch of a `mode` feature pass over `tiles` tiles makes (and
 * stores before counting them): whole waves of tile_kernel (2
 * blocks a multiprocessor), 7 of them, 121 MB on an H100; 14 where the pass
 * has more than 4 such chunks to make, but for pair_scores. At 1e10 pairs,
 * 3.5 waves a launch took 14% longer than 7, and 14 waves 1.3% less; at the
 * blog size, 14 took 2-5% more than 7: a buffer past what the memory pool
 * keeps between calls (dev/NOTES.md, fourteenth pass). The partitioned count
 * drains after each launch, a fixed cost of its levels: 14 waves took 4.5%
 * less than 7 at 1M x 65,000 hard (twenty-second pass). EXT_ROC_CHUNK_TILES
 * sets it (the tests make it small). */
int64_t chunk_tiles(int mode, int64_t tiles)
{
    const int64_t wave = 2 * ext_sm_count();
    const bool large = mode != kStore && tiles > 4 * 14 * wave;
    const int64_t waves = large ? 14 : 7;
    return env_tuning("EXT_ROC_CHUNK_TILES", 1, waves * wave);
}

size_t gallery_chunk_bytes()
{
    const int64_t kib = env_tuning("EXT_ROC_OPERAND_KIB", 1, 0);
    return kib > 0 ? size_t(kib) << 10 : kGalleryChunkBytes;
}

/* Bytes of private counters a block of the evaluator's pass may keep in
 * shared memory. */
size_t counters_max(const roc_eval_cuda *ev)
{
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ev->src.device) !=
        cudaSuccess)
        optin = 48 * 1024;
    const bool features = ev->src.score == nullptr;
    const size_t room = size_t(optin) > kStaticSharedMargin ? size_t(optin) - kStaticSharedMargin
                                                            : 0;
    return std::min(room, features ? kSharedCountersFeature : kSharedCountersScore);
}

/* Where EXT_ROC_PARTITION_LEVELS is set (the tests make it 0): the levels
 * beyond which exact mode counts the feature pass's pairs by partition from
 * the first pair on. Else -1: the first operand block's pairs choose
 * (choose_count). */
int64_t forced_partition_levels()
{
    return env_tuning("EXT_ROC_PARTITION_LEVELS", 0, -1);
}

/* The most levels a range of the partitioned count holds for `n_levels`
 * levels: kWideRangeLevels from kWideRangesFrom levels, where the device has
 * the shared memory for its drain, else kRangeLevels. The partition's cost a
 * key grows with its ranges, the drain's with the levels a range holds (a
 * coarser index, more levels to read): at 3.5M levels (563 -> 253 ranges)
 * partition and drain took 795 -> 683 ms, at ~2.1M 379 -> 387, at 773,000
 * 111 -> 115, at 400,000 (2.6e11 pairs) 2,179 -> 2,510 (H100, dev/NOTES.md,
 * twenty-fifth pass). EXT_ROC_RANGE_LEVELS, set to either, chooses (the tests). */
constexpr int64_t kWideRangesFrom = int64_t(300) * kRangeLevels;

int range_levels_for(int64_t n_levels, int device)
{
    const int64_t forced = env_tuning("EXT_ROC_RANGE_LEVELS", kRangeLevels, 0);
    const bool wide = forced == kWideRangeLevels ||
                      (forced != kRangeLevels && n_levels >= kWideRangesFrom);
    return wide && drain_bucket_bits(device, kWideRangeLevels) > 0 ? kWideRangeLevels
                                                                   : kRangeLevels;
}

/* Whether exact mode may count the feature pass's pairs by partition:
 * features (not a score matrix or list), more levels than the shared counters
 * hold, no more than the ranges hold, and room for the partition's and the
 * drain's shared memory. */
bool can_partition(const roc_eval_cuda *ev, int64_t n_levels)
{
    const roc_source &s = ev->src;
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, s.device) !=
        cudaSuccess)
        optin = 0;
    const int range_levels = range_levels_for(n_levels, s.device);
    return s.mode == kExact && !s.list && s.score == nullptr &&
           size_t(n_levels + 1) * 2 * sizeof(uint32_t) > counters_max(ev) &&
           n_levels <= int64_t(kMaxRanges) * range_levels &&
           RangeSorter::kSharedBytes + kStaticSharedMargin <= size_t(optin) &&
           drain_bucket_bits(s.device, range_levels) > 0;
}

/* The blocks of tile_kernel storing the first chunk ahead: two on all but
 * 1/16 of the multiprocessors, where the genuine pairs' kernels run beside
 * it (else they would wait for the whole chunk). At the blog size, H100:
 * 5.61 ms with 8 of 132 beside, 5.72 with 16 or 24, 5.78 with 32; on
 * another machine 5.82 with 4 and 6.48 with none. */
int64_t first_chunk_blocks()
{
    return 2 * std::max(1, ext_sm_count() - ext_sm_count() / 16);
}

/* The tiles the first launch of a feature pass over `tiles` tiles makes where
 * it probes (set_levels' probe_count), the first chunk stored ahead: seven
 * waves of first_chunk_blocks (within the partition's chunk), at most half
 * of them, at least one. */
int64_t probe_tiles(int64_t tiles)
{
    const int64_t chunk = std::min(chunk_tiles(kPartitioned, tiles), 7 * first_chunk_blocks());
    return std::max(int64_t(1), std::min(tiles / 2, chunk));
}

/* Keys the segments' buffer holds: a launch's pairs of the partitioned
 * count (chunk_tiles), and 30% more, since each range's segment is sized by
 * the last launch's keys and each partition block fills its own part of it
 * (1M x 65,000 hard, H100: 10% more left keys past their part, the
 * partition 5% slower; 30% and 66% more ran alike). A key past its part is
 * counted directly, so the counts are exact either way. At most 2^28 (1 GiB).
 * EXT_ROC_PARTITION_KIB, where set, replaces it (the tests make it small, so
 * that segments fill). */
int64_t partition_keys()
{
    const int64_t kib = env_tuning("EXT_ROC_PARTITION_KIB", 1, 0);
    /* both knobs bounded first: they may be any whole number, and the
     * segments' offsets are 32-bit */
    if (kib > 0)
        return std::min(kib, int64_t(1) << 23) * 1024 / int64_t(sizeof(uint32_t));
    const int64_t tiles = std::min(chunk_tiles(kPartitioned, INT64_MAX), int64_t(1) << 20);
    return std::min(tiles * kTilePairs * 13 / 10, int64_t(1) << 28);
}

/* Keys the feature pass may set aside in one launch (exact mode with global
 * counters), shared out among its warps: 2^24 (64 MiB), or the evaluation's
 * pairs where fewer. The 1e10 workload (50,000 x 200,000, 0.2% of the pairs
 * above the lowest level) sets ~10^7 aside a launch, ~9,500 a warp of ~15,900
 * places on the H100; a warp's keys past its place are counted in the pass.
 * EXT_ROC_ASIDE_KEYS, where set, replaces it (the tests fill a small one). */
size_t aside_capacity(const roc_eval_cuda *ev)
{
    const int64_t forced = env_tuning("EXT_ROC_ASIDE_KEYS", 1, 0);
    if (forced > 0)
        return size_t(std::min(forced, int64_t(UINT32_MAX)));
    const int64_t pairs = ev->src.n_query * ev->src.n_gallery;
    return size_t(std::max(int64_t(1), std::min(pairs, int64_t(1) << 24)));
}

/* After the first tiles were counted directly (exact from features with
 * global counters): how to count the rest, by the share of their pairs at
 * or above the lowest level. Half or more: by partition, where
 * may_partition (a direct count costs such a pair 22-64 ps at 40,000 to 4M
 * levels, L2's scattered atomics; the partition ~8 ps every pair plus ~7
 * each it keeps). At least 1/65536: with those keys set aside (kAside),
 * which saved 5.6% at 1e10 (0.2% above) and, since its count reads the
 * stored tiles as binned's does, ~40 us of the blog size's 5.8 ms (0.03%
 * above: kExact's lookups of them, a few lanes of two warps in five, took
 * a quarter of its count's instructions; ncu, H100). Else directly, as the
 * probe did. The level count alone does not tell (1e10:
 * 200,000 levels, 0.2% of the pairs above; H100, dev/NOTES.md). One
 * synchronization an evaluation, while the tiles `next` (of op's) are
 * stored ahead where the evaluator has an ahead stream; the buffers only
 * where chosen. */
cudaError_t choose_count(roc_eval_cuda *ev, const Operands &op, const PassParams &next)
{
    ev->probe_count = false;
    cudaStream_t stream = ev->arena.stream();
    if (ev->ahead && next.tile_begin < next.tile_end)
        EXT_CUDA_TRY(store_ahead(ev, op, next, false, INT64_MAX));
    unsigned long long totals[2] = {0, 0}, below = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(totals, ev->totals.get(), sizeof totals, cudaMemcpyDeviceToHost,
                                 stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(&below, ev->gap, sizeof below, cudaMemcpyDeviceToHost,
                                 stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    const unsigned long long scored = totals[0] - totals[1], above = scored - below;
    if (ev->may_partition && scored > 0 && 2 * above >= scored) {
        std::vector<uint32_t> keys(size_t(ev->n_levels));
        EXT_CUDA_TRY(cudaMemcpyAsync(keys.data(), ev->levels.get(),
                                     keys.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                                     stream));
        EXT_CUDA_TRY(cudaStreamSynchronize(stream));
        return set_ranges(ev, keys.data());
    }
    if (above > 0 && above * 65536 >= scored) {
        ev->aside_share = double(above) / double(scored);
        EXT_CUDA_TRY(ev->aside_keys.allocate(aside_capacity(ev)));
        EXT_CUDA_TRY(
            ev->aside_used.allocate(size_t(ev->pass_blocks) * (kThreads / 32)));
    }
    return cudaSuccess;
}

} // namespace roc_gpu
