/*
 * roc_eval_plan.cuh: what the evaluator's GPU backend decides, and the one
 * place it is decided (roc_eval_plan.cu): the kind of source (fixed at
 * create), the count policy of the public mode, how exact mode counts
 * (plan_count), the sizes of chunks, blocks and buffers, and the tuning
 * variables, each read once (read_tuning). C++ only.
 *
 * The tuning variables, for tests and measurements (unset: the plan's own
 * choice; a value that is not a whole number in range counts as unset):
 *
 *   EXT_ROC_STRATEGY           exact counts: auto (the plan chooses), direct
 *                              (each pair looked up in the pass), aside (keys
 *                              above the lowest level set aside after the
 *                              probe), partition (partitioned from the first
 *                              pair, where the levels allow), sorted (a list's
 *                              scores counted by sorting)
 *   EXT_ROC_CHUNK_TILES        tiles stored and counted a launch
 *   EXT_ROC_OPERAND_KIB        a prepared gallery chunk (a query block: half)
 *   EXT_ROC_PARTITION_KIB      the partitioned count's segments
 *   EXT_ROC_ASIDE_KEYS         keys set aside a launch
 *   EXT_ROC_RANGE_LEVELS       levels a range holds: 8192 or 16384
 *   EXT_ROC_RANGE_BUCKETS      buckets of the partition's index (at most 8192)
 *   EXT_ROC_DRAIN_BUCKET_BITS  the drain's finest index (12 to 14 bits)
 *   EXT_ROC_DRAIN_SLICES       drain blocks a range
 */
#ifndef ROC_EVAL_PLAN_CUH
#define ROC_EVAL_PLAN_CUH

#include <stddef.h>
#include <stdint.h>

#include "roc_eval_kernel.h"
#include "roc_tiles.cuh"

namespace roc_gpu {

/* What the pairs come from, fixed at create. */
enum class Source {
    kScoreMatrix,  /* all pairs of a (Q, G) score matrix */
    kFeatures,     /* all pairs, scored from features by the tile product */
    kListScores,   /* a list of pairs with their scores */
    kListFeatures, /* a list of pairs scored from features one at a time */
};
Source source_of(const roc_source &s);

/* The count policy (roc_pass.cuh's Policy: exact, binned, curve) of a public
 * mode (roc.h: ROC_MODE_*), the one mapping between the two. */
Policy policy_of(int roc_mode);

/* How exact mode counts a pass's pairs. */
enum class Strategy {
    kDirect,      /* each pair looked up in the pass */
    kAside,       /* from features: keys at or above the lowest level set aside, counted after */
    kPartitioned, /* from features: keys partitioned by range of levels, then drained */
    kSorted,      /* a list's scores: a chunk's keys sorted, one atomic a gap */
};

/* EXT_ROC_STRATEGY's values */
enum class Steer { kAuto, kDirect, kAside, kPartition, kSorted };

/* The tuning variables (above), read once; 0 where unset. */
struct Tuning {
    Steer steer = Steer::kAuto;
    int64_t chunk_tiles = 0, operand_kib = 0, partition_kib = 0, aside_keys = 0,
            range_levels = 0, range_buckets = 0, drain_bucket_bits = 0, drain_slices = 0;
    /* the rank count's top k and kept keys: the scores of a block of rows
     * (RankSelection), about this many (0: 2^26) */
    int64_t select_pairs = 0;
};
Tuning read_tuning();

/* Private counters a block may keep in shared memory (on a device with less
 * shared memory, what it has). The counts from features stay at what the
 * feature pass's count held beside the tiles when it was one kernel, 7,167
 * levels: where more levels choose their count (plan_count) was measured
 * there. */
constexpr size_t kSharedCountersScore = 96 * 1024;
constexpr size_t kSharedCountersFeature = 56 * 1024;
constexpr size_t kStaticSharedMargin = 1024; /* the kernels' own static shared memory */
/* A list's scores with more genuine levels than this are counted sorted:
 * their counters no longer stay in L2, and two scattered atomics a pair cost
 * about a nanosecond each (4e9 pairs, 2.4e7 levels: 4.2 s). */
constexpr int64_t kSortedLevels = int64_t(1) << 20;
constexpr int64_t kSortedChunk = int64_t(1) << 26; /* pairs sorted at once: ~4 GiB of buffers */

/* Device memory each side's prepared block may take. The gallery goes in
 * chunks of columns and the queries in blocks of rows, each prepared (scaled,
 * k-major) when a pass needs it; a gallery of one chunk is prepared once.
 * 256 MiB chunks keep an evaluation at the IFRT size within ~1 GiB beyond its
 * inputs, the partitioned count's buffer included, while preparing the
 * gallery again at every step stays ~1% of the pass (dev/NOTES.md, operands). */
constexpr size_t kGalleryChunkBytes = size_t(256) << 20;

/* The counts of the probe: the first tiles of an exact feature pass counted
 * directly, their pairs scored (not NaN) and those at or above the lowest level. */
struct ProbeCounts {
    unsigned long long scored, above;
};

/* The one decision of how the pass counts, made when the levels are set
 * (probe null) and again after the probe: ev->plan.strategy, ev->plan.probe,
 * ev->plan.shared_gaps and ev->plan.shared_bins. */
void plan_count(roc_eval_cuda *ev, const ProbeCounts *probe);
/* The count policy a pass of the plan runs. */
Policy pass_policy(const roc_eval_cuda *ev);

/* Tiles a launch of a counting feature pass over `tiles` tiles stores. */
int64_t chunk_tiles(const Tuning &tuning, int64_t tiles);
/* Tiles a launch of pair_scores stores. */
int64_t store_chunk_tiles(const Tuning &tuning);
/* Device memory a prepared gallery chunk may take (a query block half). */
size_t gallery_chunk_bytes(const Tuning &tuning);
/* The most levels a range of the partitioned count holds. */
int range_levels_for(const Tuning &tuning, int64_t n_levels, int device);
/* The blocks of tile_kernel storing the first chunk ahead. */
int64_t first_chunk_blocks();
/* The tiles the first, probing launch of an exact feature pass counts. */
int64_t probe_tiles(const Tuning &tuning, int64_t tiles);
/* Keys the partition's segments hold. */
int64_t partition_keys(const Tuning &tuning);
/* Keys the feature pass may set aside in one launch. */
size_t aside_capacity(const roc_eval_cuda *ev);
/* After the probe: the plan again, and the buffers of what it chose. */
cudaError_t after_probe(roc_eval_cuda *ev, const Operands &op, const PassParams &next);

} // namespace roc_gpu

#endif /* ROC_EVAL_PLAN_CUH */
