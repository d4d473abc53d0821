/*
 * roc_eval_kernel.cu: the calls of the evaluator's GPU backend (the steps are
 * in roc_eval.c, the calls in roc_internal.h): create (the operands, the
 * genuine pairs and their levels), set_levels (the counters), add_rows (a
 * pass of the count the plan chose over query rows or a list's pairs), fetch
 * (the counts to the host), and the scores from features as a matrix. The
 * state and the files that hold each concern: roc_eval_state.cuh.
 *
 * Device memory comes from the evaluator's arena (ext_cuda.cuh): every buffer
 * is released by its owner's scope, so an early error return leaks nothing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "roc_eval_state.cuh"

using namespace roc_gpu;

namespace {

cudaError_t create(roc_eval_cuda *ev, const roc_counts *counts, roc_genuine_levels *genuine,
                   roc_totals *totals, roc_bad_input *bad)
{
    const roc_source &s = ev->src;
    cudaStream_t stream = ev->arena.stream();
    ev->plan.source = source_of(s);
    ev->plan.policy = policy_of(s.mode);
    ev->plan.tuning = read_tuning();
    if (ev->plan.source == Source::kListScores || ev->plan.source == Source::kListFeatures) {
        EXT_CUDA_TRY(prepare_list(ev));
        EXT_CUDA_TRY(find_list_genuine(ev, genuine, totals, bad));
    } else {
        if (ev->plan.source == Source::kFeatures) {
            EXT_CUDA_TRY(feature_setup(ev->arena, ev->features, s.feat_q, s.feat_g, s.n_query,
                                       s.n_gallery, s.dim, s.similarity, s.step_rows,
                                       gallery_chunk_bytes(ev->plan.tuning)));
            if (s.step_rows > 0 && s.n_query > 0 && s.n_gallery > 0 &&
                (ev->plan.policy == Policy::kExact || ev->plan.policy == Policy::kBinned)) {
                EXT_CUDA_TRY(cudaStreamCreateWithFlags(&ev->tiles.ahead, cudaStreamNonBlocking));
                for (cudaEvent_t *e : {&ev->tiles.ahead_start, &ev->tiles.ahead_done})
                    EXT_CUDA_TRY(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
                EXT_CUDA_TRY(store_first_tiles(ev));
            }
        }
        EXT_CUDA_TRY(find_genuine(ev, genuine, totals));
    }
    if (bad->kind)
        return cudaSuccess;
    EXT_CUDA_TRY(ev->totals.allocate(2));
    ev->pass_blocks = ext_sm_count() * 8;
    if (ev->plan.policy == Policy::kBinned) {
        const roc_binned_counts &b = counts->binned;
        ev->binned.n_bins = b.n_bins;
        ev->binned.lo32 = b.lo32;
        ev->binned.scale32 = b.scale32;
        EXT_CUDA_TRY(ev->binned.edges.allocate(b.n_bins + 1));
        EXT_CUDA_TRY(cudaMemcpyAsync(ev->binned.edges.get(), b.edges,
                                     (b.n_bins + 1) * sizeof(float), cudaMemcpyHostToDevice,
                                     stream));
    }
    return cudaStreamSynchronize(stream);
}

} // namespace

// ----------------------------------------------------------------------------
// the backend's calls

extern "C" int roc_eval_cuda_create(roc_eval_cuda **out, const roc_source *src,
                                    const roc_counts *counts, roc_genuine_levels *genuine,
                                    roc_totals *totals, roc_bad_input *bad)
{
    *out = nullptr;
    *bad = roc_bad_input{ROC_BAD_NONE, -1};
    ExtDeviceGuard guard(src->device);
    EXT_CUDA_TRY(guard.error());
    roc_eval_cuda *ev = new (std::nothrow) roc_eval_cuda(*src);
    if (!ev)
        return cudaErrorMemoryAllocation;
    cudaError_t err = ev->arena.keep_freed_memory();
    if (err == cudaSuccess)
        err = create(ev, counts, genuine, totals, bad);
    if (err != cudaSuccess || bad->kind) {
        roc_eval_cuda_free(ev);
        return err;
    }
    *out = ev;
    return cudaSuccess;
}

extern "C" int roc_eval_cuda_set_levels(roc_eval_cuda *ev, const roc_genuine_levels *levels,
                                        const roc_level_index *shape, int found)
{
    ExtDeviceGuard guard(ev->src.device);
    EXT_CUDA_TRY(guard.error());
    return set_levels(ev, levels, shape, found != 0);
}

extern "C" int roc_eval_cuda_add_rows(roc_eval_cuda *ev, roc_counts *counts, int64_t row_begin,
                                      int64_t row_end)
{
    (void)counts; /* counted on the device; roc_eval_cuda_fetch copies them */
    ExtDeviceGuard guard(ev->src.device);
    EXT_CUDA_TRY(guard.error());
    EXT_CUDA_TRY(join_ahead(ev)); /* before the operands are prepared again */
    /* a list's pairs [row_begin, row_end) are one row of a pass */
    const bool list =
        ev->plan.source == Source::kListScores || ev->plan.source == Source::kListFeatures;
    const int64_t n = list ? row_end - row_begin : (row_end - row_begin) * ev->src.n_gallery;
    Buffer<uint32_t> keys(ev->arena);
    if (ev->plan.policy == Policy::kCurve) {
        EXT_CUDA_TRY(keys.allocate(n));
        EXT_CUDA_TRY(cudaMemsetAsync(keys.get(), 0, n * sizeof(uint32_t),
                                     ev->arena.stream())); /* NO_KEY */
    }
    PassParams p = list ? pass_params(ev, 0, 1, keys.get())
                        : pass_params(ev, row_begin, row_end, keys.get());
    if (list)
        p.n_gallery = n;
    if (ev->plan.strategy == Strategy::kSorted)
        return count_sorted(ev, p, ev->src.score + row_begin, n);
    auto pass = [&](const PassParams &given, const Operands *op) -> cudaError_t {
        PassParams q = given;
        int64_t tile_from = 0;
        if (ev->plan.probe && op) {
            /* probe_tiles' chunk (the first one stored ahead, within the
             * IFRT size's memory) counted directly; its pairs choose how the
             * rest are, while the next chunk is stored ahead. A probe of one
             * wave took a count launch of its own, three times a wave's
             * share of a chunk's (dev/NOTES.md, aside). */
            int64_t tiles_m, tiles_n;
            const int64_t tiles = feature_tiles(*op, q, &tiles_m, &tiles_n);
            tile_from = probe_tiles(ev->plan.tuning, tiles);
            EXT_CUDA_TRY(run_pass(ev, Policy::kExact, q, row_begin, op, 0, tile_from));
            PassParams next = q;
            next.tile_begin = tile_from;
            next.tile_end =
                std::min(tile_from + chunk_tiles(ev->plan.tuning, tiles), tiles);
            EXT_CUDA_TRY(after_probe(ev, *op, next));
            if (tile_from == tiles)
                return cudaSuccess;
        }
        /* after_probe may have set these up since `p` */
        q.part = ev->partition.view;
        q.aside_keys = ev->aside.keys.get();
        q.aside_used = ev->aside.used.get();
        return run_pass(ev, pass_policy(ev), q, row_begin, op, tile_from);
    };
    if (ev->plan.source == Source::kFeatures) {
        EXT_CUDA_TRY(over_feature_blocks(
            ev->arena, ev->features, row_begin, row_end,
            [&](const Operands &op, int64_t begin, int64_t end) {
                PassParams q = p;
                q.row_begin = begin;
                q.row_end = end;
                if (q.keys) /* the key of pair (i, j) at (i - row_begin) G + j */
                    q.keys += (begin - row_begin) * ev->src.n_gallery;
                return pass(q, &op);
            }));
    } else {
        EXT_CUDA_TRY(pass(p, nullptr));
    }
    return ev->plan.policy == Policy::kCurve ? merge_keys(ev, keys, n) : cudaSuccess;
}

extern "C" int roc_eval_cuda_curve_size(roc_eval_cuda *ev, const roc_genuine_levels *levels,
                                        int every_point, int64_t *n_points, uint64_t *n_genuine,
                                        uint64_t *n_all)
{
    ExtDeviceGuard guard(ev->src.device);
    EXT_CUDA_TRY(guard.error());
    return curve_size(ev, levels, every_point != 0, n_points, n_genuine, n_all);
}

extern "C" int roc_eval_cuda_curve_points(roc_eval_cuda *ev, void *keys, void *fps, void *tps)
{
    ExtDeviceGuard guard(ev->src.device);
    EXT_CUDA_TRY(guard.error());
    return curve_points(ev, static_cast<uint32_t *>(keys), static_cast<uint64_t *>(fps),
                        static_cast<uint64_t *>(tps));
}

extern "C" int roc_eval_cuda_fetch(roc_eval_cuda *ev, roc_counts *counts)
{
    ExtDeviceGuard guard(ev->src.device);
    EXT_CUDA_TRY(guard.error());
    cudaStream_t stream = ev->arena.stream();
    unsigned long long host_totals[2] = {0, 0};
    EXT_CUDA_TRY(cudaMemcpyAsync(host_totals, ev->totals.get(), sizeof host_totals,
                                 cudaMemcpyDeviceToHost, stream));
    const int64_t U = ev->levels.n;
    roc_exact_counts *exact = &counts->exact;
    unsigned long long top[2] = {0, 0}; /* top_count, then top_key's word */
    if (ev->plan.policy == Policy::kExact && U > 0) {
        /* at, gap and gap_min at once: the host's are one block laid out as
         * ev->exact.block (roc_counts_alloc) */
        const size_t n = size_t(U) + 1;
        EXT_CUDA_TRY(cudaMemcpyAsync(exact->at, ev->exact.at,
                                     n * (2 * sizeof(uint64_t) + sizeof(uint32_t)),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(top, ev->exact.top_count, sizeof top, cudaMemcpyDeviceToHost,
                                     stream));
    } else if (ev->plan.policy == Policy::kBinned) {
        roc_binned_counts *binned = &counts->binned;
        std::vector<unsigned long long> bins(ev->binned.n_bins + 2);
        EXT_CUDA_TRY(cudaMemcpyAsync(bins.data(), ev->binned.bins.get(),
                                     bins.size() * sizeof(bins[0]), cudaMemcpyDeviceToHost,
                                     stream));
        EXT_CUDA_TRY(cudaStreamSynchronize(stream));
        binned->below = bins[0];
        for (int64_t b = 0; b < ev->binned.n_bins; b++)
            binned->all[b] = bins[b + 1];
        binned->above = bins[ev->binned.n_bins + 1];
    } else if (ev->plan.policy == Policy::kCurve) {
        roc_key_counts *keys = &counts->keys;
        uint32_t *host_keys = static_cast<uint32_t *>(ext_malloc(ev->curve.n * 4));
        uint64_t *host_counts = static_cast<uint64_t *>(ext_malloc(ev->curve.n * 8));
        if (!host_keys || !host_counts) {
            free(host_keys);
            free(host_counts);
            return cudaErrorMemoryAllocation;
        }
        EXT_CUDA_TRY(cudaMemcpyAsync(host_keys, ev->curve.keys.get(),
                                     ev->curve.n * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                                     stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(host_counts, ev->curve.counts.get(),
                                     ev->curve.n * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                                     stream));
        cudaError_t err = cudaStreamSynchronize(stream);
        if (err != cudaSuccess) {
            free(host_keys);
            free(host_counts);
            return err;
        }
        /* NaN and skipped pairs carried NO_KEY, the lowest key: drop its run */
        const int64_t skip = ev->curve.n > 0 && host_keys[0] == ROC_NO_KEY ? 1 : 0;
        memmove(host_keys, host_keys + skip, (ev->curve.n - skip) * sizeof(uint32_t));
        memmove(host_counts, host_counts + skip, (ev->curve.n - skip) * sizeof(uint64_t));
        free(keys->keys);
        free(keys->counts);
        *keys = roc_key_counts{ev->curve.n - skip, host_keys, host_counts};
    }
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    counts->totals.n_pairs = host_totals[0];
    counts->totals.n_nan = host_totals[1];
    if (ev->plan.policy == Policy::kExact && U > 0) {
        exact->top_count = top[0];
        memcpy(&exact->top_key, &top[1], sizeof exact->top_key); /* ev->exact.top_key's bytes */
    }
    return cudaSuccess;
}

extern "C" int64_t roc_eval_cuda_peak_bytes(const roc_eval_cuda *ev)
{
    return ev->arena.peak_bytes();
}

extern "C" void roc_eval_cuda_free(roc_eval_cuda *ev)
{
    if (!ev)
        return;
    ExtDeviceGuard guard(ev->src.device);
    delete ev; /* the buffers, then the arena (which waits for their frees) */
}

extern "C" int64_t roc_eval_cuda_row_tile(void) { return roc_gemm::kBM; }

extern "C" int roc_scores_launch(const float *feat_q, const float *feat_g, int64_t n_query,
                                 int64_t n_gallery, int64_t dim, int similarity, float *score,
                                 int device, void *stream_ptr)
{
    if (n_query == 0 || n_gallery == 0)
        return cudaSuccess;
    ExtDeviceGuard guard(device);
    EXT_CUDA_TRY(guard.error());
    ExtDeviceArena arena(static_cast<cudaStream_t>(stream_ptr));
    FeatureOperands features(arena);
    const Tuning tuning = read_tuning();
    EXT_CUDA_TRY(feature_setup(arena, features, feat_q, feat_g, n_query, n_gallery, dim,
                               similarity, 0, gallery_chunk_bytes(tuning)));
    Buffer<float> chunk(arena);
    EXT_CUDA_TRY(over_feature_blocks(
        arena, features, 0, n_query, [&](const Operands &op, int64_t begin, int64_t end) {
            PassParams p{};
            p.n_gallery = n_gallery;
            p.row_begin = begin;
            p.row_end = end;
            p.scores = score;
            int64_t tiles_m, tiles_n;
            const int64_t tiles = feature_tiles(op, p, &tiles_m, &tiles_n);
            const int64_t step = std::min(store_chunk_tiles(tuning), tiles);
            EXT_CUDA_TRY(chunk_room(chunk, step));
            for (int64_t t = 0; t < tiles; t += step) {
                p.tile_begin = t;
                p.tile_end = std::min(t + step, tiles);
                EXT_CUDA_TRY(store_tiles(arena.stream(), op, p, chunk.get()));
                EXT_CUDA_TRY(store_scores(arena.stream(), op, p, chunk.get(),
                                          ext_sm_count() * 2));
            }
            return cudaSuccess;
        }));
    return cudaStreamSynchronize(arena.stream());
}
