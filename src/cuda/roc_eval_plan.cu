/*
 * roc_eval_plan.cu: the decisions of the evaluator's GPU backend (see
 * roc_eval_plan.cuh): the source and the policy, how exact mode counts, the
 * sizes, the tuning variables. Nothing else compares level counts with shared
 * memory or chooses a count.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "roc_count.cuh"
#include "roc_eval_state.cuh"
#include "roc_partition.cuh"

namespace roc_gpu {

namespace {

/* The tuning variable `name` where it is a whole number of at least `least`,
 * else 0 (unset, empty or not a number: atoll would read those as 0). */
int64_t env_whole(const char *name, int64_t least)
{
    const char *text = getenv(name);
    if (!text || !*text)
        return 0;
    char *end = nullptr;
    errno = 0;
    const long long value = strtoll(text, &end, 10);
    return errno == 0 && *end == '\0' && value >= least ? int64_t(value) : 0;
}

Steer env_steer()
{
    const char *text = getenv("EXT_ROC_STRATEGY");
    static const struct {
        const char *name;
        Steer steer;
    } names[] = {{"direct", Steer::kDirect},
                 {"aside", Steer::kAside},
                 {"partition", Steer::kPartition},
                 {"sorted", Steer::kSorted}};
    for (const auto &n : names)
        if (text && strcmp(text, n.name) == 0)
            return n.steer;
    return Steer::kAuto;
}

/* Bytes of private counters a block of the evaluator's pass may keep in
 * shared memory. */
size_t counters_max(const roc_eval_cuda *ev)
{
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ev->src.device) !=
        cudaSuccess)
        optin = 48 * 1024;
    const Source source = ev->plan.source;
    const bool features = source == Source::kFeatures || source == Source::kListFeatures;
    const size_t room = size_t(optin) > kStaticSharedMargin ? size_t(optin) - kStaticSharedMargin
                                                            : 0;
    return std::min(room, features ? kSharedCountersFeature : kSharedCountersScore);
}

/* Whether exact mode's counters of `n_levels` levels (a count and a lowest
 * key a gap) fit a block's shared memory. */
bool gaps_fit_shared(const roc_eval_cuda *ev, int64_t n_levels)
{
    return size_t(n_levels + 1) * 2 * sizeof(uint32_t) <= counters_max(ev);
}

/* Whether exact mode may count the feature pass's pairs by partition: more
 * levels than the shared counters hold, no more than the ranges hold, and room
 * for the partition's and the drain's shared memory. */
bool can_partition(const roc_eval_cuda *ev, int64_t n_levels)
{
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ev->src.device) !=
        cudaSuccess)
        optin = 0;
    const int range_levels = range_levels_for(ev->plan.tuning, n_levels, ev->src.device);
    return ev->plan.policy == Policy::kExact && ev->plan.source == Source::kFeatures &&
           !gaps_fit_shared(ev, n_levels) && n_levels <= int64_t(kMaxRanges) * range_levels &&
           RangeSorter::kSharedBytes + kStaticSharedMargin <= size_t(optin) &&
           drain_bucket_bits(ev->plan.tuning, ev->src.device, range_levels) > 0;
}

} // namespace

Tuning read_tuning()
{
    Tuning t;
    t.steer = env_steer();
    t.chunk_tiles = env_whole("EXT_ROC_CHUNK_TILES", 1);
    t.operand_kib = env_whole("EXT_ROC_OPERAND_KIB", 1);
    t.partition_kib = env_whole("EXT_ROC_PARTITION_KIB", 1);
    t.aside_keys = env_whole("EXT_ROC_ASIDE_KEYS", 1);
    t.range_levels = env_whole("EXT_ROC_RANGE_LEVELS", kRangeLevels);
    t.range_buckets = env_whole("EXT_ROC_RANGE_BUCKETS", 1);
    t.drain_bucket_bits = env_whole("EXT_ROC_DRAIN_BUCKET_BITS", kDrainBucketBitsMin);
    t.drain_slices = env_whole("EXT_ROC_DRAIN_SLICES", 1);
    t.select_pairs = env_whole("EXT_RANK_SELECT_PAIRS", 1);
    return t;
}

Source source_of(const roc_source &s)
{
    if (s.list)
        return s.score ? Source::kListScores : Source::kListFeatures;
    return s.score ? Source::kScoreMatrix : Source::kFeatures;
}

Policy policy_of(int roc_mode)
{
    switch (roc_mode) {
    case ROC_MODE_BINNED:
        return Policy::kBinned;
    case ROC_MODE_CURVE:
        return Policy::kCurve;
    default: /* roc_eval.c admits no other mode */
        return Policy::kExact;
    }
}

/*
 * Exact mode counts a pair directly (a lookup of its gap among the levels)
 * into shared counters where the gaps fit, else into global ones. From
 * features with more levels than that, the first tiles (the probe) are
 * counted directly, and their pairs choose how the rest are, by the share at
 * or above the lowest level (the level count alone does not tell: many
 * levels can sit above nearly every pair). Half or more: by partition, where
 * the levels allow it (a direct count of such a pair is L2's scattered
 * atomics, a cost that grows with the levels; the partition's is small on
 * every pair plus a little on each it keeps). At least 1/65536: with those
 * keys set aside, counted after the pass's count. Else directly, as the probe
 * did. A list's scores with more than
 * kSortedLevels levels are counted by sorting. dev/NOTES.md, "direct count",
 * "aside" and "partition/drain", has the measurements.
 */
void plan_count(roc_eval_cuda *ev, const ProbeCounts *probe)
{
    const int64_t U = ev->levels.n;
    const Steer steer = ev->plan.tuning.steer;
    ev->plan.probe = false;
    ev->plan.strategy = Strategy::kDirect;
    ev->plan.shared_gaps = gaps_fit_shared(ev, U);
    ev->plan.shared_bins = shared_bins_bytes(ev->binned.n_bins) <= counters_max(ev);
    if (ev->plan.policy != Policy::kExact || U == 0)
        return;
    if (ev->plan.source == Source::kListScores) {
        if (U > kSortedLevels || steer == Steer::kSorted)
            ev->plan.strategy = Strategy::kSorted;
        return;
    }
    if (ev->plan.source != Source::kFeatures || ev->plan.shared_gaps || steer == Steer::kDirect)
        return;
    if (!probe) {
        if (steer == Steer::kPartition && can_partition(ev, U))
            ev->plan.strategy = Strategy::kPartitioned;
        else
            ev->plan.probe = true;
        return;
    }
    const unsigned long long scored = probe->scored, above = probe->above;
    if (steer == Steer::kAuto && can_partition(ev, U) && scored > 0 && 2 * above >= scored)
        ev->plan.strategy = Strategy::kPartitioned;
    else if (above > 0 && (steer == Steer::kAside || above * 65536 >= scored))
        ev->plan.strategy = Strategy::kAside;
}

Policy pass_policy(const roc_eval_cuda *ev)
{
    if (ev->plan.policy != Policy::kExact)
        return ev->plan.policy;
    switch (ev->plan.strategy) {
    case Strategy::kAside:
        return Policy::kAside;
    case Strategy::kPartitioned:
        return Policy::kPartitioned;
    default:
        return Policy::kExact;
    }
}

/* Tiles a launch of a counting feature pass over `tiles` tiles makes (and
 * stores before counting them): whole waves of tile_kernel (2 blocks a
 * multiprocessor), 7 of them; 14 where the pass has more than 4 such chunks
 * to make (dev/NOTES.md, "tile product": 7 waves against 3.5 and 14 at 1e10
 * pairs and the blog size; the partitioned count drains after each launch, a
 * fixed cost 14 waves halve). pair_scores' chunks stay at 7 waves
 * (store_chunk_tiles). */
int64_t chunk_tiles(const Tuning &tuning, int64_t tiles)
{
    if (tuning.chunk_tiles > 0)
        return tuning.chunk_tiles;
    const int64_t wave = 2 * ext_sm_count();
    return (tiles > 4 * 14 * wave ? 14 : 7) * wave;
}

int64_t store_chunk_tiles(const Tuning &tuning)
{
    return tuning.chunk_tiles > 0 ? tuning.chunk_tiles : 7 * 2 * int64_t(ext_sm_count());
}

size_t gallery_chunk_bytes(const Tuning &tuning)
{
    return tuning.operand_kib > 0 ? size_t(tuning.operand_kib) << 10 : kGalleryChunkBytes;
}

/* The most levels a range of the partitioned count holds for `n_levels`
 * levels: kWideRangeLevels from kWideRangesFrom levels, where the device has
 * the shared memory for its drain, else kRangeLevels. The partition's cost a
 * key grows with its ranges, the drain's with the levels a range holds (a
 * coarser index, more levels to read): dev/NOTES.md, "partition/drain",
 * measured both from 400,000 to 3.5M levels. */
constexpr int64_t kWideRangesFrom = int64_t(300) * kRangeLevels;

int range_levels_for(const Tuning &tuning, int64_t n_levels, int device)
{
    const int64_t forced = tuning.range_levels;
    const bool wide = forced == kWideRangeLevels ||
                      (forced != kRangeLevels && n_levels >= kWideRangesFrom);
    return wide && drain_bucket_bits(tuning, device, kWideRangeLevels) > 0 ? kWideRangeLevels
                                                                           : kRangeLevels;
}

/* The blocks of tile_kernel storing the first chunk ahead: two on all but
 * 1/16 of the multiprocessors, where the genuine pairs' kernels run beside
 * it (else they would wait for the whole chunk; dev/NOTES.md, "tile
 * product", measured 4 to 32 left beside it). */
int64_t first_chunk_blocks()
{
    return 2 * std::max(1, ext_sm_count() - ext_sm_count() / 16);
}

/* The tiles the first launch of a feature pass over `tiles` tiles makes where
 * it probes, the first chunk stored ahead: seven waves of first_chunk_blocks
 * (within the partition's chunk), at most half of them, at least one. */
int64_t probe_tiles(const Tuning &tuning, int64_t tiles)
{
    const int64_t chunk =
        std::min(chunk_tiles(tuning, tiles), 7 * first_chunk_blocks());
    return std::max(int64_t(1), std::min(tiles / 2, chunk));
}

/* Keys the segments' buffer holds: a launch's pairs of the partitioned count
 * (chunk_tiles), and 30% more, since each range's segment is sized by the
 * last launch's keys and each partition block fills its own part of it
 * (less left more keys past their part, more ran no faster: dev/NOTES.md,
 * partition/drain, "Launch size and segments"). A key past its part is counted directly,
 * so the counts are exact either way. At most 2^28 (1 GiB). */
int64_t partition_keys(const Tuning &tuning)
{
    /* both bounded first: they may be any whole number, and the segments'
     * offsets are 32-bit */
    if (tuning.partition_kib > 0)
        return std::min(tuning.partition_kib, int64_t(1) << 23) * 1024 /
               int64_t(sizeof(uint32_t));
    const int64_t tiles =
        std::min(chunk_tiles(tuning, INT64_MAX), int64_t(1) << 20);
    return std::min(tiles * kTilePairs * 13 / 10, int64_t(1) << 28);
}

/* Keys the feature pass may set aside in one launch (exact mode with global
 * counters), shared out among its warps: 2^24 (64 MiB), or the evaluation's
 * pairs where fewer; a launch at the hard 1e10 workload fills about 60% of
 * it (dev/NOTES.md, aside). A warp's keys past its place are counted in the
 * pass. */
size_t aside_capacity(const roc_eval_cuda *ev)
{
    if (ev->plan.tuning.aside_keys > 0)
        return size_t(std::min(ev->plan.tuning.aside_keys, int64_t(UINT32_MAX)));
    const int64_t pairs = ev->src.n_query * ev->src.n_gallery;
    return size_t(std::max(int64_t(1), std::min(pairs, int64_t(1) << 24)));
}

/* After the first tiles were counted directly: their counts to the host (one
 * synchronization an evaluation, while the tiles `next` of op's are stored
 * ahead where the evaluator has an ahead stream), the plan again, and the
 * buffers of the count it chose. */
cudaError_t after_probe(roc_eval_cuda *ev, const Operands &op, const PassParams &next)
{
    cudaStream_t stream = ev->arena.stream();
    if (ev->tiles.ahead && next.tile_begin < next.tile_end)
        EXT_CUDA_TRY(store_ahead(ev, op, next, false, INT64_MAX));
    unsigned long long totals[2] = {0, 0}, below = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(totals, ev->totals.get(), sizeof totals, cudaMemcpyDeviceToHost,
                                 stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(&below, ev->exact.gap, sizeof below, cudaMemcpyDeviceToHost,
                                 stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    const unsigned long long scored = totals[0] - totals[1];
    const ProbeCounts probe{scored, scored - below};
    plan_count(ev, &probe);
    if (ev->plan.strategy == Strategy::kPartitioned)
        return set_ranges(ev, ev->levels.host);
    if (ev->plan.strategy == Strategy::kAside) {
        ev->aside.share = double(probe.above) / double(probe.scored);
        EXT_CUDA_TRY(ev->aside.keys.allocate(aside_capacity(ev)));
        EXT_CUDA_TRY(ev->aside.used.allocate(size_t(ev->pass_blocks) * (kThreads / 32)));
    }
    return cudaSuccess;
}

} // namespace roc_gpu
