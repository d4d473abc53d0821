/*
 * roc_curve_points.cu: scikit-learn's roc_curve points of the curve mode's
 * counts (roc_eval_curve_size / roc_eval_curve_points, roc.h), built where
 * they were counted: the distinct keys ascending with their pairs
 * (ev->curve), the genuine levels among them. From the highest key down:
 * each key's step (its impostor and genuine pairs), kept by
 * roc_sklearn_keeps as the host's summary keeps it; the steps summed
 * (two scans) into the cumulative pairs; the kept points compacted into the
 * caller's arrays. Only the points leave the device.
 */
#include <stdint.h>

#include <cuda/std/iterator>

#include "roc_eval_state.cuh"

namespace roc_gpu {

namespace {

/* Position t from the highest key down (key n_keys - 1 - t of the ascending
 * keys): its impostor and genuine pairs, the genuine ones the count of its
 * level (found among the ascending levels; 0 where it is none). A key
 * with fewer pairs than its level's genuine ones is counted in *wrong. */
__global__ void steps_kernel(const uint32_t *keys, const unsigned long long *counts,
                             int64_t n_keys, const uint32_t *levels,
                             const unsigned long long *level_counts, int64_t n_levels,
                             unsigned long long *impostors, unsigned long long *genuine,
                             unsigned long long *wrong)
{
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_keys;
         t += int64_t(gridDim.x) * blockDim.x) {
        const int64_t i = n_keys - 1 - t;
        const uint32_t key = keys[i];
        const int64_t lo = roc_first_key_at_least(levels, n_levels, key);
        const unsigned long long gen = lo < n_levels && levels[lo] == key ? level_counts[lo] : 0;
        const unsigned long long all = counts[i];
        if (all < gen)
            atomicAdd(wrong, 1ull);
        impostors[t] = all >= gen ? all - gen : 0;
        genuine[t] = gen;
    }
}

/* Whether the point at position t stays: the first, the last, every one
 * with every_point, else where its step differs from the next one's. */
__global__ void kept_kernel(const unsigned long long *impostors, const unsigned long long *genuine,
                            int64_t n_keys, bool every_point, uint8_t *kept)
{
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_keys;
         t += int64_t(gridDim.x) * blockDim.x)
        kept[t] = every_point || t == 0 || t == n_keys - 1 ||
                  roc_sklearn_keeps(impostors[t], genuine[t], impostors[t + 1], genuine[t + 1]);
}

} // namespace

cudaError_t curve_size(roc_eval_cuda *ev, const roc_genuine_levels *levels, bool every_point,
                       int64_t *n_points, uint64_t *n_genuine, uint64_t *n_all)
{
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    Curve &c = ev->curve;
    c.fps.release();
    c.tps.release();
    c.kept.release();
    *n_points = 0;
    *n_genuine = *n_all = 0;
    /* NaN and skipped pairs carry NO_KEY, the lowest key: its run is no point */
    uint32_t lowest = ROC_NO_KEY + 1;
    if (c.n > 0)
        EXT_CUDA_TRY(cudaMemcpyAsync(&lowest, c.keys.get(), sizeof lowest,
                                     cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    const int64_t skip = c.n > 0 && lowest == ROC_NO_KEY ? 1 : 0;
    const int64_t n = c.n - skip;
    c.n_keys = n;
    c.n_points = 0;
    if (n == 0)
        return cudaSuccess;
    Buffer<uint32_t> level_keys(arena);
    Buffer<unsigned long long> level_counts(arena), wrong(arena), n_kept(arena);
    const int64_t U = levels->n_levels;
    EXT_CUDA_TRY(level_keys.allocate(std::max<int64_t>(U, 1)));
    EXT_CUDA_TRY(level_counts.allocate(std::max<int64_t>(U, 1)));
    if (U > 0) {
        EXT_CUDA_TRY(cudaMemcpyAsync(level_keys.get(), levels->keys, U * sizeof(uint32_t),
                                     cudaMemcpyHostToDevice, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(level_counts.get(), levels->counts, U * sizeof(uint64_t),
                                     cudaMemcpyHostToDevice, stream));
    }
    EXT_CUDA_TRY(wrong.allocate(1));
    EXT_CUDA_TRY(cudaMemsetAsync(wrong.get(), 0, sizeof(unsigned long long), stream));
    EXT_CUDA_TRY(c.fps.allocate(n));
    EXT_CUDA_TRY(c.tps.allocate(n));
    EXT_CUDA_TRY(c.kept.allocate(n));
    steps_kernel<<<grid_for(n), kThreads, 0, stream>>>(c.keys.get() + skip,
                                                       c.counts.get() + skip, n,
                                                       level_keys.get(), level_counts.get(), U,
                                                       c.fps.get(), c.tps.get(), wrong.get());
    EXT_CUDA_TRY(cudaGetLastError());
    kept_kernel<<<grid_for(n), kThreads, 0, stream>>>(c.fps.get(), c.tps.get(), n, every_point,
                                                      c.kept.get());
    EXT_CUDA_TRY(cudaGetLastError());
    /* the steps summed in place, from the highest key down */
    for (Buffer<unsigned long long> *steps : {&c.fps, &c.tps})
        EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
            return cub::DeviceScan::InclusiveSum(tmp, bytes, steps->get(), steps->get(), n,
                                                 stream);
        }));
    EXT_CUDA_TRY(n_kept.allocate(1));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceReduce::Reduce(tmp, bytes, c.kept.get(), n_kept.get(), n,
                                         cuda::std::plus<>{}, 0ull, stream);
    }));
    unsigned long long host[4] = {0, 0, 0, 0}; /* kept, wrong, impostors, genuine */
    EXT_CUDA_TRY(cudaMemcpyAsync(&host[0], n_kept.get(), sizeof host[0],
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(&host[1], wrong.get(), sizeof host[1],
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(&host[2], c.fps.get() + n - 1, sizeof host[2],
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(&host[3], c.tps.get() + n - 1, sizeof host[3],
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    if (host[1] != 0) /* counts that contradict the levels: roc_eval.c's check refuses them */
        host[3] = ~0ull;
    c.n_points = int64_t(host[0]);
    *n_points = c.n_points;
    *n_genuine = host[3];
    *n_all = host[2] + host[3];
    return cudaSuccess;
}

cudaError_t curve_points(roc_eval_cuda *ev, uint32_t *keys, uint64_t *fps, uint64_t *tps)
{
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    Curve &c = ev->curve;
    const int64_t n = c.n_keys;
    if (n > 0) {
        Buffer<int64_t> n_selected(arena);
        EXT_CUDA_TRY(n_selected.allocate(1));
        /* the keys from the highest down: the ascending keys reversed (past
         * NO_KEY's run, which is the lowest) */
        const uint32_t *ascending = c.keys.get() + (c.n - n);
        auto descending = cuda::std::make_reverse_iterator(ascending + n);
        EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
            return cub::DeviceSelect::Flagged(tmp, bytes, descending, c.kept.get(), keys,
                                              n_selected.get(), n, stream);
        }));
        const unsigned long long *sums[2] = {c.fps.get(), c.tps.get()};
        uint64_t *outs[2] = {fps, tps};
        for (int k = 0; k < 2; k++)
            EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
                return cub::DeviceSelect::Flagged(
                    tmp, bytes, sums[k], c.kept.get(),
                    reinterpret_cast<unsigned long long *>(outs[k]), n_selected.get(), n,
                    stream);
            }));
        EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    }
    c.fps.release();
    c.tps.release();
    c.kept.release();
    return cudaSuccess;
}

} // namespace roc_gpu
