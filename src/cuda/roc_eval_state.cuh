/*
 * roc_eval_state.cuh: the evaluator's GPU backend, its device state
 * (roc_eval_cuda: the feature operands, the exact counters and level index,
 * the partition's ranges and segments, the keys set aside, the bins, the
 * curve's keys, the chunk of stored tiles and the stream that stores ahead)
 * and the entry points of the files that each hold one concern of it:
 *
 *   roc_eval_plan.cu      what to do: sizes, tuning, which count (the plan)
 *   roc_eval_operands.cu  the feature operands, prepared by block; cosine scaling
 *   roc_eval_genuine.cu   the genuine pairs and their distinct levels
 *   roc_eval_tiles.cu     the tile product, its chunks and the ahead stream
 *   roc_eval_count.cu     the direct counts (score matrix, tiles, lists), the
 *                         set-aside keys, the level index
 *   roc_partition.cu      the partitioned exact count (ranges, partition, drain)
 *   roc_sorted.cu         counting by sorting (flat scores with many levels, the curve)
 *   roc_rank_kernel.cu    the rank count's backend (1:N identification), over the
 *                         same passes with the RankCount policy
 *
 * roc_eval_kernel.cu holds the backend's calls. C++ only.
 */
#ifndef ROC_EVAL_STATE_CUH
#define ROC_EVAL_STATE_CUH

#include <stdint.h>

#include <algorithm>

#include <cub/cub.cuh>

extern "C" {
#include "../ext_check.h"
}
#include "ext_cuda.cuh"
#include "roc_eval_plan.cuh"
#include "roc_scores.cuh"

namespace roc_gpu {

template <typename T> using Buffer = ExtDeviceBuffer<T>;

/* A CUB device-wide call: size the scratch space, allocate it, run. */
template <typename Call> cudaError_t cub_run(ExtDeviceArena &arena, Call call)
{
    size_t bytes = 0;
    EXT_CUDA_TRY(call(nullptr, bytes));
    Buffer<char> scratch(arena);
    EXT_CUDA_TRY(scratch.allocate(bytes));
    return call(scratch.get(), bytes);
}

inline unsigned grid_for(int64_t n, int threads = kThreads)
{
    return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads,
                                                           int64_t(ext_sm_count()) * 32)));
}

inline int64_t round_up(int64_t n, int64_t multiple)
{
    return (n + multiple - 1) / multiple * multiple;
}

/* One side of the feature pass: its raw features (row-major), their inverse
 * norms (cosine), and which of its rows, [begin, end), `prepared` holds. */
struct FeatureSide {
    const float *x = nullptr;
    int64_t n = 0;
    int64_t block_rows = 0; /* rows a prepared block holds at most: whole tiles */
    Buffer<double> own_inverse;
    const double *inverse = nullptr; /* own_inverse, or the other side's for one set */
    Buffer<float> prepared;
    int64_t begin = 0, end = 0;

    explicit FeatureSide(ExtDeviceArena &arena) : own_inverse(arena), prepared(arena) {}
};

struct FeatureOperands {
    int64_t dim = 0, k_pad = 0;
    FeatureSide q, g;

    explicit FeatureOperands(ExtDeviceArena &arena) : q(arena), g(arena) {}
    FeatureRows rows() const { return FeatureRows{q.x, g.x, q.inverse, g.inverse, dim}; }
};

/* The tiles a feature pass's chunk holds, or will once the stream reaches
 * their tile_kernel: tiles [tile_begin, tile_end) of rows [row_begin,
 * row_end) of the operands from query row m_base and gallery columns
 * [n_begin, n_end). None where m_base < 0. */
struct StoredTiles {
    int64_t m_base = -1, n_begin = 0, n_end = 0, row_begin = 0, row_end = 0, tile_begin = 0,
            tile_end = 0;

    static StoredTiles of(const Operands &op, const PassParams &q)
    {
        return StoredTiles{op.m_base, op.n_begin, op.n_end, q.row_begin, q.row_end,
                           q.tile_begin, q.tile_end};
    }
    /* whether they are the tiles from q.tile_begin of the same rows and operands */
    bool start(const Operands &op, const PassParams &q) const
    {
        return m_base >= 0 && m_base == op.m_base && n_begin == op.n_begin && n_end == op.n_end &&
               row_begin == q.row_begin && row_end == q.row_end && tile_begin == q.tile_begin;
    }
};

} // namespace roc_gpu

// ----------------------------------------------------------------------------
// the backend's device state

namespace roc_gpu {

/* What the plan decided (roc_eval_plan.cu): the source and policy, fixed at
 * create; the tuning variables, read at create; how exact mode counts, decided
 * when the levels are set and after the probe. */
struct Plan {
    Source source = Source::kScoreMatrix;
    Policy policy = Policy::kExact;
    Tuning tuning;
    Strategy strategy = Strategy::kDirect;
    bool probe = false, shared_gaps = false, shared_bins = false;
};

/* The genuine levels (exact mode) and their index on the device; the keys
 * create found, until set_levels takes them; the host's copy of the levels set
 * (the caller's, alive until the next set_levels). */
struct Levels {
    int64_t n = 0;
    Buffer<uint32_t> keys, found, lut;
    const uint32_t *host = nullptr;
    uint32_t lut_base = 0;
    int lut_shift = 0;

    explicit Levels(ExtDeviceArena &arena) : keys(arena), found(arena), lut(arena) {}
};

/* Exact mode's counters, one buffer laid out as the host's (roc_counts_alloc)
 * so that one copy fetches them: at[U + 1], gap[U + 1], gap_min[U + 1]
 * (32-bit), then top_count and top_key; and each pass block's top key. */
struct ExactCounters {
    Buffer<unsigned long long> block, block_top_count;
    Buffer<uint32_t> block_top_key;
    unsigned long long *at = nullptr, *gap = nullptr, *top_count = nullptr;
    uint32_t *gap_min = nullptr, *top_key = nullptr;

    explicit ExactCounters(ExtDeviceArena &arena)
        : block(arena), block_top_count(arena), block_top_key(arena)
    {
    }
};

/* The partitioned count (roc_partition.cu): the ranges of the levels, the
 * segments' buffer and the drain's index; view.n_ranges = 0 where not. */
struct Partition {
    RangePartition view{};
    Buffer<uint32_t> first, starts, keys, offset, capacity, block_used, reserved, stage_layout,
        drain_index;
    Buffer<uint2> stage_owner;
    Buffer<uint16_t> index;
    int drain_bucket_bits = 0;
    int range_levels = kRangeLevels; /* the most a range holds (range_levels_for) */
    int64_t keys_total = 0;

    explicit Partition(ExtDeviceArena &arena)
        : first(arena), starts(arena), keys(arena), offset(arena), capacity(arena),
          block_used(arena), reserved(arena), stage_layout(arena), drain_index(arena),
          stage_owner(arena), index(arena)
    {
    }
};

/* The keys the exact feature pass sets aside (roc_count.cuh's AsideCount),
 * each warp's count of them, and the probe's share of pairs at or above the
 * lowest level. */
struct Aside {
    Buffer<uint32_t> keys, used;
    double share = 0;

    explicit Aside(ExtDeviceArena &arena) : keys(arena), used(arena) {}
};

/* Binned mode: numpy.histogram's edges, and below, the bins, above. */
struct Binned {
    Buffer<float> edges;
    Buffer<unsigned long long> bins;
    int64_t n_bins = 0;
    float lo32 = 0, scale32 = 0;

    explicit Binned(ExtDeviceArena &arena) : edges(arena), bins(arena) {}
};

/* Curve mode: the distinct keys so far and their counts; between
 * curve_size and curve_points, the points found: from the highest key down,
 * the cumulative impostor and genuine pairs and whether each is kept. */
struct Curve {
    Buffer<uint32_t> keys;
    Buffer<unsigned long long> counts;
    int64_t n = 0;
    Buffer<unsigned long long> fps, tps;
    Buffer<uint8_t> kept;
    int64_t n_keys = 0, n_points = 0; /* the keys walked (NO_KEY's run left out), kept */

    explicit Curve(ExtDeviceArena &arena)
        : keys(arena), counts(arena), fps(arena), tps(arena), kept(arena)
    {
    }
};

/* The feature pass's chunk of stored tiles (tile_kernel) and which they are;
 * exact and binned from features, where the caller said the rows of its
 * add_rows calls (src.step_rows), tiles stored ahead on a stream of their own,
 * from ahead_start on the evaluator's stream until ahead_done (pending until
 * the evaluator's stream waits for it): the first call's first chunk, beside
 * the genuine pairs' kernels and the host's work up to that call, and the
 * chunk after the probe, while the host reads the probe's counts. */
struct Tiles {
    Buffer<float> chunk;
    StoredTiles stored{};
    cudaStream_t ahead = nullptr;
    cudaEvent_t ahead_start = nullptr, ahead_done = nullptr;
    bool ahead_pending = false;

    explicit Tiles(ExtDeviceArena &arena) : chunk(arena) {}
    ~Tiles() /* before the chunk goes: the tiles stored ahead are written */
    {
        if (ahead) {
            cudaStreamSynchronize(ahead);
            cudaStreamDestroy(ahead);
        }
        for (cudaEvent_t e : {ahead_start, ahead_done})
            if (e)
                cudaEventDestroy(e);
    }
};

/* A list of pairs as its kernels read it, and its features scaled for cosine. */
struct ListPairs {
    PairList pairs{};
    Buffer<float> scaled_a, scaled_b;

    explicit ListPairs(ExtDeviceArena &arena) : scaled_a(arena), scaled_b(arena) {}
};

} // namespace roc_gpu

struct roc_eval_cuda {
    roc_source src;
    roc_gpu::Plan plan;
    ExtDeviceArena arena; /* before every buffer: released after them */
    roc_gpu::FeatureOperands features; /* the feature pass's operands, prepared by block */
    roc_gpu::Levels levels;
    roc_gpu::ExactCounters exact;
    roc_gpu::Partition partition;
    roc_gpu::Aside aside;
    roc_gpu::Binned binned;
    roc_gpu::Curve curve;
    roc_gpu::Tiles tiles;
    roc_gpu::ListPairs list;
    roc_gpu::Buffer<unsigned long long> totals; /* pairs, NaN pairs */
    int pass_blocks = 0;

    explicit roc_eval_cuda(const roc_source &s)
        : src(s), arena(static_cast<cudaStream_t>(s.stream)), features(arena), levels(arena),
          exact(arena), partition(arena), aside(arena), binned(arena), curve(arena),
          tiles(arena), list(arena), totals(arena)
    {
    }
};

namespace roc_gpu {

// ----------------------------------------------------------------------------
// the concerns' entry points

/* roc_eval_operands.cu: the sides' sizes, blocks and inverse norms; a block
 * of rows prepared (k-major, padded, scaled for cosine); the operands of a
 * query block against a gallery chunk; a list's features scaled. */
cudaError_t feature_setup(ExtDeviceArena &arena, FeatureOperands &f, const float *feat_q,
                          const float *feat_g, int64_t n_query, int64_t n_gallery, int64_t dim,
                          int similarity, int64_t step_rows, size_t gallery_bytes);
cudaError_t prepare_room(const FeatureOperands &f, FeatureSide &side, int64_t begin, int64_t end);
cudaError_t prepare_block(const FeatureOperands &f, FeatureSide &side, int64_t begin, int64_t end,
                          cudaStream_t stream);
Operands block_operands(const FeatureOperands &f, int64_t qa, int64_t qb, int64_t ga, int64_t gb);
cudaError_t prepare_list(roc_eval_cuda *ev);

/* launch(op, begin, end) for query rows [begin, end) against every gallery
 * chunk, over all of rows [row_begin, row_end) in blocks: the blocks' and
 * chunks' operands prepared first. The chunk prepared last goes first, so
 * that consecutive calls on a gallery of one chunk prepare it once. */
template <typename Launch>
cudaError_t over_feature_blocks(ExtDeviceArena &arena, FeatureOperands &f, int64_t row_begin,
                                int64_t row_end, Launch launch)
{
    const int64_t n_chunks = (f.g.n + f.g.block_rows - 1) / f.g.block_rows;
    for (int64_t qa = row_begin / roc_gemm::kBM * roc_gemm::kBM; qa < row_end;
         qa += f.q.block_rows) {
        const int64_t qb = std::min(qa + f.q.block_rows, row_end);
        EXT_CUDA_TRY(prepare_block(f, f.q, qa, qb, arena.stream()));
        const int64_t first = f.g.end > f.g.begin ? f.g.begin / f.g.block_rows : 0;
        for (int64_t c = 0; c < n_chunks; c++) {
            const int64_t ga = (first + c) % n_chunks * f.g.block_rows;
            const int64_t gb = std::min(ga + f.g.block_rows, f.g.n);
            EXT_CUDA_TRY(prepare_block(f, f.g, ga, gb, arena.stream()));
            EXT_CUDA_TRY(launch(block_operands(f, qa, qb, ga, gb), std::max(row_begin, qa), qb));
        }
    }
    return cudaSuccess;
}

/* roc_eval_genuine.cu: the genuine pairs (all pairs, or a list's after
 * checking it) and their distinct levels, into host arrays. */
cudaError_t find_genuine(roc_eval_cuda *ev, roc_genuine_levels *genuine, roc_totals *totals);
cudaError_t find_list_genuine(roc_eval_cuda *ev, roc_genuine_levels *genuine, roc_totals *totals,
                              roc_bad_input *bad_input);

/* roc_eval_tiles.cu: tiles stored (tile_kernel), into a chunk or ahead. */
cudaError_t chunk_room(Buffer<float> &chunk, int64_t tiles);
cudaError_t store_tiles(cudaStream_t stream, const Operands &op, const PassParams &q, float *chunk,
                        int64_t blocks = INT64_MAX);
cudaError_t join_ahead(roc_eval_cuda *ev);
cudaError_t store_tiles(roc_eval_cuda *ev, const Operands &op, const PassParams &q);
cudaError_t store_ahead(roc_eval_cuda *ev, const Operands &op, const PassParams &q, bool first,
                        int64_t blocks);
cudaError_t store_first_tiles(roc_eval_cuda *ev);

/* roc_eval_count.cu: the counters and level index for the genuine levels,
 * a pass's parameters, one pass of a count policy, the stored scores, the
 * rank count's passes. */
cudaError_t set_levels(roc_eval_cuda *ev, const roc_genuine_levels *levels,
                       const roc_level_index *shape, bool found);
PassParams pass_params(roc_eval_cuda *ev, int64_t row_begin, int64_t row_end, uint32_t *keys);
cudaError_t run_pass(roc_eval_cuda *ev, Policy policy, const PassParams &p, int64_t list_begin,
                     const Operands *op, int64_t tile_from = 0, int64_t tile_to = -1);
cudaError_t merge_block_tops(roc_eval_cuda *ev, int n_blocks);
cudaError_t store_scores(cudaStream_t stream, const Operands &op, const PassParams &q,
                         float *chunk, int blocks);
cudaError_t count_rank_matrix(cudaStream_t stream, const float *score, const PassParams &p);
cudaError_t count_rank_tiles(cudaStream_t stream, const Operands &op, const PassParams &q,
                             float *chunk);

/* roc_partition.cu: the ranges of the levels and their segments, the
 * partition of stored tiles, the drain of the segments. */
int drain_bucket_bits(const Tuning &tuning, int device, int range_levels);
cudaError_t set_ranges(roc_eval_cuda *ev, const uint32_t *keys);
cudaError_t launch_partition(cudaStream_t stream, const Operands &op, const PassParams &q,
                             const float *chunk, int blocks);
cudaError_t drain_ranges(roc_eval_cuda *ev);

/* roc_curve_points.cu: scikit-learn's points of the curve's keys, found,
 * then written to device arrays. */
cudaError_t curve_size(roc_eval_cuda *ev, const roc_genuine_levels *levels, bool every_point,
                       int64_t *n_points, uint64_t *n_genuine, uint64_t *n_all);
cudaError_t curve_points(roc_eval_cuda *ev, uint32_t *keys, uint64_t *fps, uint64_t *tps);

/* roc_sorted.cu: the curve's keys merged; flat scores counted sorted. */
cudaError_t merge_keys(roc_eval_cuda *ev, Buffer<uint32_t> &keys, int64_t n);
cudaError_t count_sorted(roc_eval_cuda *ev, const PassParams &p, const float *score, int64_t n);

} // namespace roc_gpu

#endif /* ROC_EVAL_STATE_CUH */
