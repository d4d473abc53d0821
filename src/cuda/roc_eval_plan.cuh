/*
 * roc_eval_plan.cuh: what the evaluator's GPU backend decides: the sizes of
 * its chunks, blocks and buffers, its tuning variables, and which count it
 * runs (roc_eval_plan.cu). C++ only.
 */
#ifndef ROC_EVAL_PLAN_CUH
#define ROC_EVAL_PLAN_CUH

#include <stddef.h>
#include <stdint.h>

#include "roc_eval_state.cuh"

namespace roc_gpu {

/* Private counters a block may keep in shared memory (on a device with less
 * shared memory, what it has; see pass_params). The feature pass's stay at
 * what its count held beside the tiles when it was one kernel, 7,167 levels:
 * where more levels choose their count (choose_count) was measured there. */
constexpr size_t kSharedCountersScore = 96 * 1024;
constexpr size_t kSharedCountersFeature = 56 * 1024;
constexpr size_t kStaticSharedMargin = 1024; /* the kernels' own static shared memory */
/* Flat scores with more genuine levels than this are counted sorted
 * (count_sorted): their counters no longer stay in L2, and two scattered
 * atomics a pair cost about a nanosecond each (4e9 pairs, 2.4e7 levels: 4.2 s). */
constexpr int64_t kSortedLevels = int64_t(1) << 20;
constexpr int64_t kSortedChunk = int64_t(1) << 26; /* pairs sorted at once: ~4 GiB of buffers */

/* Device memory each side's prepared block may take. The gallery goes in
 * chunks of columns and the queries in blocks of rows, each prepared (scaled,
 * k-major) when a pass needs it; a gallery of one chunk is prepared once. With
 * whole copies of both, the IFRT size (1M x 2.6M, D = 512) took 7.0 GiB
 * beyond its inputs; 256 MiB chunks leave room for the partitioned count's
 * buffer within ~1 GiB, and preparing the gallery again at every step stays
 * ~1% of the pass either way. EXT_ROC_OPERAND_KIB, where set, replaces the
 * gallery's (the queries get half): less memory, more preparation. */
constexpr size_t kGalleryChunkBytes = size_t(256) << 20;

/* The tuning variable `name` where it is a whole number of at least `least`,
 * else `fallback`. */
int64_t env_tuning(const char *name, int64_t least, int64_t fallback);
/* Tiles a launch of a `mode` feature pass over `tiles` tiles stores. */
int64_t chunk_tiles(int mode, int64_t tiles);
/* Device memory a prepared gallery chunk may take (a query block half). */
size_t gallery_chunk_bytes();
/* Bytes of private counters a block of the pass may keep in shared memory. */
size_t counters_max(const roc_eval_cuda *ev);
/* The levels beyond which exact mode partitions from the first pair, or -1. */
int64_t forced_partition_levels();
/* The most levels a range of the partitioned count holds. */
int range_levels_for(int64_t n_levels, int device);
/* Whether exact mode may count the feature pass's pairs by partition. */
bool can_partition(const roc_eval_cuda *ev, int64_t n_levels);
/* The blocks of tile_kernel storing the first chunk ahead. */
int64_t first_chunk_blocks();
/* The tiles the first, probing launch of an exact feature pass counts. */
int64_t probe_tiles(int64_t tiles);
/* Keys the partition's segments hold. */
int64_t partition_keys();
/* Keys the feature pass may set aside in one launch. */
size_t aside_capacity(const roc_eval_cuda *ev);
/* After the probe: how exact mode counts the rest of the feature pass. */
cudaError_t choose_count(roc_eval_cuda *ev, const Operands &op, const PassParams &next);

} // namespace roc_gpu

#endif /* ROC_EVAL_PLAN_CUH */
