/*
 * roc_rank_kernel.cu: the rank count's GPU backend (the steps are in
 * roc_rank_eval.c, the calls in roc_rank_internal.h). create finds every
 * query's mates on the host from the labels (roc_rank_mates.c, the CPU's own
 * code), scores them on the device with the one pair score (roc_scores.cuh),
 * and keeps them by query on the device; add_rows runs the RankCount policy
 * (roc_rank_count.cuh) over the rows of the score matrix, or over the tile
 * product's stored chunks from features (roc_eval_tiles.cu), as the ROC
 * evaluator's passes run theirs; finish brings the counters to the host view.
 *
 * The pairs each query row counts, and so its non-mates, follow from the
 * labels alone (create counts them on the host): the pass counts only the
 * NaN non-mates among them. Memory beyond the inputs: O(P + Q) counters and
 * keys, int64 copies of the labels (and cameras), a chunk of stored tiles;
 * with topk or keep_nonmated also O(Q k) entries, the kept keys and a block
 * of rows' scores (roc_rank_select.cu).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "roc_eval_state.cuh"
#include "roc_rank_kernel.h"
#include "roc_rank_select.cuh"

using namespace roc_gpu;

struct roc_rank_cuda {
    roc_rank_source src;
    Tuning tuning;
    ExtDeviceArena arena; /* before every buffer: released after them */
    FeatureOperands features;
    Buffer<float> chunk;
    Buffer<float> block;          /* from features: a block of rows' scores for select */
    RankSelection select;         /* topk and keep_nonmated */
    int64_t select_rows = 0;      /* the rows of such a block */
    Buffer<int64_t> labels_q, labels_g, cams_q, cams_g, first;
    Buffer<uint32_t> mate_key, lowest;
    /* gap (P + Q), tied (P), best (Q), NaN non-mates (Q), one block */
    Buffer<unsigned long long> counters;
    int64_t n_mated = 0;
    std::vector<int64_t> counted; /* by query: the pairs the protocol keeps */
    std::vector<int64_t> own;     /* by query: its mates here (scored or NaN), of those */
    std::vector<uint8_t> done;    /* by query: its row counted */

    explicit roc_rank_cuda(const roc_rank_source &s)
        : src(s), arena(static_cast<cudaStream_t>(s.stream)), features(arena), chunk(arena),
          block(arena), select(arena), labels_q(arena), labels_g(arena), cams_q(arena), cams_g(arena), first(arena),
          mate_key(arena), lowest(arena), counters(arena)
    {
    }

    unsigned long long *gap() { return counters.get(); }
    unsigned long long *tied() { return gap() + n_mated + src.n_query; }
    unsigned long long *best() { return tied() + n_mated; }
    unsigned long long *nan_nonmates() { return best() + src.n_query; }
};

namespace {

/* Integers of `dtype` (EXT_INT32 or EXT_INT64) as int64. */
__global__ void widen_kernel(const void *x, int dtype, int64_t n, int64_t *out)
{
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
         t += int64_t(gridDim.x) * blockDim.x)
        out[t] = roc_int_at(x, dtype, t);
}

/* The candidate mates' scores: pair (row[t], index[t]) of the score matrix or
 * from the features (the pair score the tile product computes). */
__global__ void mate_score_kernel(const int64_t *row, const int64_t *index, int64_t n,
                                  const float *score, int64_t n_gallery,
                                  const FeatureRows features, float *out)
{
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
         t += int64_t(gridDim.x) * blockDim.x)
        out[t] = score ? score[row[t] * n_gallery + index[t]] : features.score(row[t], index[t]);
}

size_t element_bytes(int dtype)
{
    return dtype == EXT_INT32 ? 4 : 8;
}

/* A device array of n integers of `dtype` copied to `host` (its bytes). */
cudaError_t to_host(const void *device, int dtype, int64_t n, std::vector<char> &host,
                    cudaStream_t stream)
{
    host.resize(size_t(n) * element_bytes(dtype));
    return n ? cudaMemcpyAsync(host.data(), device, host.size(), cudaMemcpyDeviceToHost, stream)
             : cudaSuccess;
}

/* The same integers as int64 on the device. */
cudaError_t widened(const void *x, int dtype, int64_t n, Buffer<int64_t> &out,
                    cudaStream_t stream)
{
    EXT_CUDA_TRY(out.allocate(std::max<int64_t>(n, 1)));
    if (n)
        widen_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, dtype, n, out.get());
    return cudaGetLastError();
}

template <typename T>
cudaError_t upload(Buffer<T> &to, const T *from, int64_t n, cudaStream_t stream)
{
    EXT_CUDA_TRY(to.allocate(std::max<int64_t>(n, 1)));
    return n ? cudaMemcpyAsync(to.get(), from, n * sizeof(T), cudaMemcpyHostToDevice, stream)
             : cudaSuccess;
}

/* Every query's mates: found on the host from the labels, scored here, kept
 * in the view (host) and by query on the device. */
cudaError_t find_mates(roc_rank_cuda *b, const char *caller, roc_rank_view *view)
{
    const roc_rank_source &s = b->src;
    cudaStream_t stream = b->arena.stream();
    std::vector<char> host[4];
    EXT_CUDA_TRY(to_host(s.labels_q, s.label_dtype, s.n_query, host[0], stream));
    EXT_CUDA_TRY(to_host(s.labels_g, s.label_dtype, s.n_gallery, host[1], stream));
    if (s.cams_q) {
        EXT_CUDA_TRY(to_host(s.cams_q, s.cam_dtype, s.n_query, host[2], stream));
        EXT_CUDA_TRY(to_host(s.cams_g, s.cam_dtype, s.n_gallery, host[3], stream));
    }
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    roc_rank_source on_host = s;
    on_host.labels_q = host[0].data();
    on_host.labels_g = host[1].data();
    on_host.cams_q = s.cams_q ? host[2].data() : nullptr;
    on_host.cams_g = s.cams_g ? host[3].data() : nullptr;
    roc_rank_candidates c{};
    if (roc_rank_candidates_make(&on_host, caller, &c))
        return cudaErrorMemoryAllocation;
    const int64_t n = c.slots[s.n_query];
    std::vector<float> scores(static_cast<size_t>(std::max<int64_t>(n, 1)));
    cudaError_t err = cudaSuccess;
    {
        Buffer<int64_t> row(b->arena), index(b->arena);
        Buffer<float> out(b->arena);
        if ((err = upload(row, c.row, n, stream)) || (err = upload(index, c.index, n, stream)) ||
            (err = out.allocate(std::max<int64_t>(n, 1))))
            goto done;
        if (n) {
            mate_score_kernel<<<grid_for(n), kThreads, 0, stream>>>(
                row.get(), index.get(), n, s.score, s.n_gallery, b->features.rows(), out.get());
            if ((err = cudaGetLastError()) ||
                (err = cudaMemcpyAsync(scores.data(), out.get(), n * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream)) ||
                (err = cudaStreamSynchronize(stream)))
                goto done;
        }
    }
    if (roc_rank_mates_adopt(&s, &c, scores.data(), caller, view)) {
        err = cudaErrorMemoryAllocation;
        goto done;
    }
    b->counted.assign(c.counted, c.counted + s.n_query);
done:
    roc_rank_candidates_free(&c);
    return err;
}

cudaError_t set_mates(roc_rank_cuda *b, const roc_rank_view *view);

cudaError_t create(roc_rank_cuda *b, const char *caller, roc_rank_view *view)
{
    const roc_rank_source &s = b->src;
    cudaStream_t stream = b->arena.stream();
    b->tuning = read_tuning();
    if (s.feat_q)
        EXT_CUDA_TRY(feature_setup(b->arena, b->features, s.feat_q, s.feat_g, s.n_query,
                                   s.n_gallery, s.dim, s.similarity, 0,
                                   gallery_chunk_bytes(b->tuning)));
    EXT_CUDA_TRY(find_mates(b, caller, view));
    const int64_t Q = s.n_query;
    b->done.assign(size_t(Q), 0);
    EXT_CUDA_TRY(widened(s.labels_q, s.label_dtype, Q, b->labels_q, stream));
    EXT_CUDA_TRY(widened(s.labels_g, s.label_dtype, s.n_gallery, b->labels_g, stream));
    if (s.cams_q) {
        EXT_CUDA_TRY(widened(s.cams_q, s.cam_dtype, Q, b->cams_q, stream));
        EXT_CUDA_TRY(widened(s.cams_g, s.cam_dtype, s.n_gallery, b->cams_g, stream));
    }
    b->own.resize(size_t(Q));
    for (int64_t i = 0; i < Q; i++)
        b->own[i] = view->first[i + 1] - view->first[i] + int64_t(view->nan_mates[i]);
    if (s.topk > 0 || s.keep_nonmated > 0) {
        /* rows of about select_pairs scores; from features whole row tiles of
         * the tile product */
        const int64_t pairs = b->tuning.select_pairs > 0 ? b->tuning.select_pairs
                                                         : int64_t(1) << 26;
        const int64_t G = std::max<int64_t>(s.n_gallery, 1);
        const int64_t tile = s.score ? 1 : roc_gemm::kBM;
        b->select_rows = std::max<int64_t>(tile, pairs / G / tile * tile);
        EXT_CUDA_TRY(b->select.create(Q, int(s.topk), s.keep_nonmated, b->select_rows * G));
        if (!s.score)
            EXT_CUDA_TRY(b->block.allocate(b->select_rows * G));
    }
    return set_mates(b, view);
}

/* The view's mate lists on the device (each query's keys, its lowest) and
 * counters for them, zeroed. */
cudaError_t set_mates(roc_rank_cuda *b, const roc_rank_view *view)
{
    const int64_t Q = b->src.n_query, P = view->n_mated;
    cudaStream_t stream = b->arena.stream();
    b->n_mated = P;
    std::vector<uint32_t> lowest(static_cast<size_t>(Q));
    for (int64_t i = 0; i < Q; i++)
        lowest[i] = view->first[i + 1] > view->first[i] ? view->mate_key[view->first[i]]
                                                        : 0xffffffffu;
    EXT_CUDA_TRY(upload(b->first, view->first, Q + 1, stream));
    EXT_CUDA_TRY(upload(b->mate_key, view->mate_key, P, stream));
    EXT_CUDA_TRY(upload(b->lowest, lowest.data(), Q, stream));
    const size_t words = size_t(2 * P + 3 * Q);
    EXT_CUDA_TRY(b->counters.allocate(std::max<size_t>(words, 1)));
    EXT_CUDA_TRY(cudaMemsetAsync(b->counters.get(), 0, words * sizeof(unsigned long long),
                                 stream));
    /* the host arrays are copied before this returns */
    return cudaStreamSynchronize(stream);
}

PassParams pass_params(roc_rank_cuda *b, int64_t row_begin, int64_t row_end)
{
    const roc_rank_source &s = b->src;
    PassParams p{};
    p.n_gallery = s.n_gallery;
    p.row_begin = row_begin;
    p.row_end = row_end;
    p.same_set = ROC_PAIRS_ALL; /* every (i, j): RankCount excludes the query's own row */
    p.row_offset = s.row_offset;
    RankParams &r = p.rank;
    r.labels_q = b->labels_q.get();
    r.labels_g = b->labels_g.get();
    r.cams_q = s.cams_q ? b->cams_q.get() : nullptr;
    r.cams_g = s.cams_q ? b->cams_g.get() : nullptr;
    r.same_set = s.same_set;
    r.has_junk = s.has_junk;
    r.junk = s.junk;
    r.first = b->first.get();
    r.mate_key = b->mate_key.get();
    r.lowest = b->lowest.get();
    r.gap = b->gap();
    r.tied = b->tied();
    r.best = b->best();
    r.nan_nonmates = b->nan_nonmates();
    return p;
}

/* The top k and kept keys of rows [begin, end), a block of rows at a time:
 * the score matrix's own rows, or the block's scores written by the tile
 * product (a second product of those rows: see dev/NOTES.md, "rank count"). */
cudaError_t select_rows(roc_rank_cuda *b, const RankParams &rank, int64_t begin, int64_t end)
{
    const roc_rank_source &s = b->src;
    cudaStream_t stream = b->arena.stream();
    const int64_t G = s.n_gallery;
    for (int64_t r0 = begin; r0 < end; r0 += b->select_rows) {
        const int64_t r1 = std::min(r0 + b->select_rows, end);
        const float *scores = s.score ? s.score + r0 * G : b->block.get();
        if (!s.score)
            EXT_CUDA_TRY(over_feature_blocks(
                b->arena, b->features, r0, r1,
                [&](const Operands &op, int64_t rows_begin, int64_t rows_end) {
                    PassParams q{};
                    q.n_gallery = G;
                    q.row_begin = rows_begin;
                    q.row_end = rows_end;
                    q.scores = b->block.get();
                    q.scores_row0 = r0;
                    int64_t tiles_m, tiles_n;
                    const int64_t tiles = feature_tiles(op, q, &tiles_m, &tiles_n);
                    const int64_t step = std::min(store_chunk_tiles(b->tuning), tiles);
                    EXT_CUDA_TRY(chunk_room(b->chunk, step));
                    for (int64_t t = 0; t < tiles; t += step) {
                        q.tile_begin = t;
                        q.tile_end = std::min(t + step, tiles);
                        EXT_CUDA_TRY(store_tiles(stream, op, q, b->chunk.get()));
                        EXT_CUDA_TRY(store_scores(stream, op, q, b->chunk.get(),
                                                  ext_sm_count() * 2));
                    }
                    return cudaSuccess;
                }));
        EXT_CUDA_TRY(b->select.add(scores, r0, r1 - r0, G, s.row_offset, rank));
    }
    return cudaSuccess;
}

/* The non-mates of rows [begin, end): the score matrix's rows, or the tile
 * product's chunks of each query block against each gallery chunk. */
cudaError_t add_rows(roc_rank_cuda *b, int64_t begin, int64_t end)
{
    const roc_rank_source &s = b->src;
    cudaStream_t stream = b->arena.stream();
    PassParams p = pass_params(b, begin, end);
    if (s.score) {
        EXT_CUDA_TRY(count_rank_matrix(stream, s.score, p));
    } else {
        EXT_CUDA_TRY(over_feature_blocks(
            b->arena, b->features, begin, end,
            [&](const Operands &op, int64_t rows_begin, int64_t rows_end) {
                PassParams q = p;
                q.row_begin = rows_begin;
                q.row_end = rows_end;
                int64_t tiles_m, tiles_n;
                const int64_t tiles = feature_tiles(op, q, &tiles_m, &tiles_n);
                const int64_t step = std::min(chunk_tiles(b->tuning, tiles), tiles);
                EXT_CUDA_TRY(chunk_room(b->chunk, step));
                for (int64_t t = 0; t < tiles; t += step) {
                    q.tile_begin = t;
                    q.tile_end = std::min(t + step, tiles);
                    EXT_CUDA_TRY(store_tiles(stream, op, q, b->chunk.get()));
                    EXT_CUDA_TRY(count_rank_tiles(stream, op, q, b->chunk.get()));
                }
                return cudaSuccess;
            }));
    }
    if (b->select.active())
        EXT_CUDA_TRY(select_rows(b, p.rank, begin, end));
    std::fill(b->done.begin() + begin, b->done.begin() + end, 1);
    return cudaStreamSynchronize(stream);
}

/* The counters into the view: the best non-mates, each counted row's
 * non-mates (its kept pairs less its mates and NaN non-mates), the gaps
 * turned into the non-mates above each mate (roc_rank_mates.c). */
cudaError_t finish(roc_rank_cuda *b, roc_rank_view *view)
{
    const int64_t Q = b->src.n_query, P = b->n_mated;
    cudaStream_t stream = b->arena.stream();
    std::vector<unsigned long long> host(static_cast<size_t>(2 * P + 3 * Q));
    if (!host.empty())
        EXT_CUDA_TRY(cudaMemcpyAsync(host.data(), b->counters.get(),
                                     host.size() * sizeof(unsigned long long),
                                     cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    const unsigned long long *gap = host.data(), *tied = gap + P + Q, *best = tied + P,
                             *nan = best + Q;
    uint64_t n_nan = 0;
    for (int64_t u = 0; u < P; u++)
        view->tied[u] = tied[u];
    for (int64_t i = 0; i < Q; i++) {
        view->best_key[i] = uint32_t(best[i] >> 32);
        view->best_index[i] = best[i] ? int64_t(0xffffffffull - (best[i] & 0xffffffffull)) : -1;
        view->n_nonmates[i] = b->done[i] ? uint64_t(b->counted[i] - b->own[i]) - nan[i] : 0;
        n_nan += nan[i];
    }
    view->totals[1] = n_nan;
    roc_rank_gaps_to_counts(view, reinterpret_cast<const uint64_t *>(gap));
    return b->select.active() ? b->select.to_view(view) : cudaSuccess;
}

} // namespace

// ----------------------------------------------------------------------------
// the backend's calls

extern "C" int roc_rank_cuda_create(roc_rank_cuda **out, const roc_rank_source *src,
                                    const char *caller, roc_rank_view *view)
{
    *out = nullptr;
    ExtDeviceGuard guard(src->device);
    EXT_CUDA_TRY(guard.error());
    roc_rank_cuda *b = new (std::nothrow) roc_rank_cuda(*src);
    if (b == nullptr)
        return cudaErrorMemoryAllocation;
    const cudaError_t err = create(b, caller, view);
    if (err != cudaSuccess) {
        delete b;
        return err;
    }
    *out = b;
    return cudaSuccess;
}

extern "C" int roc_rank_cuda_add_rows(roc_rank_cuda *b, roc_rank_view *view, int64_t begin,
                                      int64_t end)
{
    ExtDeviceGuard guard(b->src.device);
    EXT_CUDA_TRY(guard.error());
    EXT_CUDA_TRY(add_rows(b, begin, end));
    for (int64_t i = begin; i < end; i++)
        view->totals[0] += uint64_t(b->counted[i]);
    return cudaSuccess;
}

extern "C" int roc_rank_cuda_set_mates(roc_rank_cuda *b, const roc_rank_view *view)
{
    ExtDeviceGuard guard(b->src.device);
    EXT_CUDA_TRY(guard.error());
    return set_mates(b, view);
}

extern "C" int roc_rank_cuda_finish(roc_rank_cuda *b, roc_rank_view *view)
{
    ExtDeviceGuard guard(b->src.device);
    EXT_CUDA_TRY(guard.error());
    return finish(b, view);
}

extern "C" int64_t roc_rank_cuda_peak_bytes(const roc_rank_cuda *b)
{
    return b->arena.peak_bytes();
}

extern "C" void roc_rank_cuda_free(roc_rank_cuda *b)
{
    if (b == nullptr)
        return;
    ExtDeviceGuard guard(b->src.device);
    delete b;
}
