/*
 * roc_sorted.cu: counting by sorting. Curve mode: each call's keys sorted,
 * run-length encoded and merged into the distinct keys so far. Exact mode
 * over flat scores with many genuine levels: a chunk's keys sorted, so that
 * the pairs of one gap come together and each gap a chunk touches costs one
 * atomic.
 */
#include <stdint.h>

#include <algorithm>

#include <cub/device/device_merge.cuh>

#include "roc_eval_state.cuh"

namespace roc_gpu {

namespace {

/* Exact mode, flat scores with many levels: the chunk's keys (NaN: NO_KEY, counted),
 * to be sorted so that equal keys, and keys of one gap, come together. */
__global__ void flat_keys_kernel(const float *score, int64_t n, uint32_t *keys,
                                 unsigned long long *totals)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        atomicAdd(&totals[0], (unsigned long long)n);
    unsigned long long nan = 0;
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
         t += int64_t(gridDim.x) * blockDim.x) {
        const float s = __ldg(score + t);
        keys[t] = isnan(s) ? ROC_NO_KEY : roc_score_key(s);
        nan += isnan(s);
    }
    for (int offset = 16; offset > 0; offset /= 2)
        nan += __shfl_down_sync(0xffffffffu, nan, offset);
    if (threadIdx.x % 32 == 0 && nan)
        atomicAdd(&totals[1], nan);
}

/* Sorted runs of one key, merged by the slot they count into: a slot is 2 g
 * for gap g, 2 u + 1 for level u (ascending with the key), -1 for NaN. */
struct RunCount {
    unsigned long long count;
    uint32_t min_key;
    /* the struct's padding, named so that every write of a RunCount (each
     * one aggregate-initialized) writes it: CUB's reduction copies whole
     * structs, and compute-sanitizer's initcheck counts a read of padding
     * never written as a read of uninitialized memory */
    uint32_t unused;
};

struct MergeRuns {
    __device__ RunCount operator()(const RunCount &a, const RunCount &b) const
    {
        return RunCount{a.count + b.count, min(a.min_key, b.min_key)};
    }
};

/* Exact mode, sorted distinct keys with their counts: each run's slot, and
 * the highest key into block 0's top slot. */
__global__ void slot_of_runs_kernel(const uint32_t *keys, const unsigned long long *counts,
                                    const int64_t *n_runs, const PassParams p, int64_t *slots,
                                    RunCount *runs)
{
    const int64_t n = *n_runs;
    const uint32_t lowest = __ldg(p.levels), highest = __ldg(p.levels + p.n_levels - 1);
    for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < n;
         r += int64_t(gridDim.x) * blockDim.x) {
        const uint32_t key = keys[r];
        runs[r] = RunCount{counts[r], key};
        if (key == ROC_NO_KEY) { /* NaN pairs: counted with the keys */
            slots[r] = -1;
            continue;
        }
        int at = 0;
        int64_t g = key < lowest ? 0 : p.n_levels;
        if (key >= lowest && key <= highest)
            g = roc_find_level(p.levels, p.lut, p.lut_base, p.lut_shift, key, &at);
        slots[r] = 2 * g + at;
        if (r == n - 1) {
            p.block_top_key[0] = key;
            p.block_top_count[0] = counts[r];
        }
    }
}

/* One atomic a slot of the chunk: into its level or its gap (with the gap's
 * lowest key). */
__global__ void count_slots_kernel(const int64_t *slots, const RunCount *runs,
                                   const int64_t *n_slots, const PassParams p)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < *n_slots;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t slot = slots[i];
        if (slot < 0)
            continue;
        count_exact(p.at, p.gap, p.gap_min, slot / 2, slot % 2 != 0, runs[i].count,
                    runs[i].min_key);
    }
}

} // namespace

/* Curve mode: the rows' keys, sorted and run-length encoded, then merged
 * into the distinct keys so far (both sorted: a merge, then equal keys'
 * counts added), so that a step costs its own sort and one pass over the keys
 * so far, not a sort of them all. */
cudaError_t merge_keys(roc_eval_cuda *ev, Buffer<uint32_t> &keys, int64_t n)
{
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    Curve &c = ev->curve;
    Buffer<uint32_t> sorted(arena), run_keys(arena), merged_keys(arena);
    Buffer<unsigned long long> run_counts(arena), merged_counts(arena);
    Buffer<int64_t> n_runs(arena);
    EXT_CUDA_TRY(sorted.allocate(n));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortKeys(tmp, bytes, keys.get(), sorted.get(), n, 0, 32,
                                              stream);
    }));
    keys.release();
    EXT_CUDA_TRY(run_keys.allocate(n));
    EXT_CUDA_TRY(run_counts.allocate(n));
    EXT_CUDA_TRY(n_runs.allocate(1));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRunLengthEncode::Encode(tmp, bytes, sorted.get(), run_keys.get(),
                                                  run_counts.get(), n_runs.get(), n, stream);
    }));
    sorted.release();
    int64_t new_runs = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&new_runs, n_runs.get(), sizeof new_runs,
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    if (c.n == 0) { /* the first step's runs are the distinct keys */
        c.keys = std::move(run_keys);
        c.counts = std::move(run_counts);
        c.n = new_runs;
        return cudaSuccess;
    }
    const int64_t n_cat = c.n + new_runs;
    EXT_CUDA_TRY(merged_keys.allocate(n_cat));
    EXT_CUDA_TRY(merged_counts.allocate(n_cat));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceMerge::MergePairs(tmp, bytes, c.keys.get(), c.counts.get(), c.n,
                                            run_keys.get(), run_counts.get(), new_runs,
                                            merged_keys.get(), merged_counts.get(),
                                            cuda::std::less<>{}, stream);
    }));
    run_keys.release();
    run_counts.release();
    c.keys.release();
    c.counts.release();
    c.n = 0;
    EXT_CUDA_TRY(c.keys.allocate(n_cat));
    EXT_CUDA_TRY(c.counts.allocate(n_cat));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceReduce::ReduceByKey(tmp, bytes, merged_keys.get(), c.keys.get(),
                                              merged_counts.get(), c.counts.get(), n_runs.get(),
                                              cuda::std::plus<>{}, n_cat, stream);
    }));
    EXT_CUDA_TRY(cudaMemcpyAsync(&c.n, n_runs.get(), sizeof c.n, cudaMemcpyDeviceToHost,
                                 stream));
    return cudaStreamSynchronize(stream);
}

/* Exact mode over n flat scores with many levels (kSortedLevels): sorted, the
 * pairs of one gap come together, so the level lookups run in key order and
 * each gap (or level) a chunk touches costs one atomic, instead of two
 * scattered ones a pair. Memory: buffers of kSortedChunk keys. */
cudaError_t count_sorted(roc_eval_cuda *ev, const PassParams &p, const float *score, int64_t n)
{
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    for (int64_t begin = 0; begin < n; begin += kSortedChunk) {
        const int64_t m = std::min(kSortedChunk, n - begin);
        Buffer<uint32_t> keys(arena), sorted(arena), unique(arena);
        Buffer<unsigned long long> counts(arena);
        Buffer<int64_t> n_runs(arena), slots(arena), unique_slots(arena);
        Buffer<RunCount> runs(arena), merged(arena);
        EXT_CUDA_TRY(keys.allocate(m));
        flat_keys_kernel<<<grid_for(m), kThreads, 0, stream>>>(score + begin, m, keys.get(),
                                                              ev->totals.get());
        EXT_CUDA_TRY(cudaGetLastError());
        EXT_CUDA_TRY(sorted.allocate(m));
        EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
            return cub::DeviceRadixSort::SortKeys(tmp, bytes, keys.get(), sorted.get(), m, 0, 32,
                                                  stream);
        }));
        keys.release();
        EXT_CUDA_TRY(unique.allocate(m));
        EXT_CUDA_TRY(counts.allocate(m));
        EXT_CUDA_TRY(n_runs.allocate(1));
        EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
            return cub::DeviceRunLengthEncode::Encode(tmp, bytes, sorted.get(), unique.get(),
                                                      counts.get(), n_runs.get(), m, stream);
        }));
        sorted.release();
        /* block 0's top slot takes the chunk's highest key, merged like a pass's */
        EXT_CUDA_TRY(cudaMemsetAsync(ev->exact.block_top_count.get(), 0, sizeof(unsigned long long),
                                     stream));
        EXT_CUDA_TRY(slots.allocate(m));
        EXT_CUDA_TRY(runs.allocate(m));
        slot_of_runs_kernel<<<grid_for(m), kThreads, 0, stream>>>(unique.get(), counts.get(),
                                                                  n_runs.get(), p, slots.get(),
                                                                  runs.get());
        EXT_CUDA_TRY(cudaGetLastError());
        unique.release();
        counts.release();
        /* the runs of one slot are consecutive: one merged count a slot */
        int64_t host_runs = 0;
        EXT_CUDA_TRY(cudaMemcpyAsync(&host_runs, n_runs.get(), sizeof host_runs,
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaStreamSynchronize(stream));
        EXT_CUDA_TRY(unique_slots.allocate(host_runs));
        EXT_CUDA_TRY(merged.allocate(host_runs));
        EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
            return cub::DeviceReduce::ReduceByKey(tmp, bytes, slots.get(), unique_slots.get(),
                                                  runs.get(), merged.get(), n_runs.get(),
                                                  MergeRuns{}, host_runs, stream);
        }));
        count_slots_kernel<<<grid_for(host_runs), kThreads, 0, stream>>>(
            unique_slots.get(), merged.get(), n_runs.get(), p);
        EXT_CUDA_TRY(cudaGetLastError());
        EXT_CUDA_TRY(merge_block_tops(ev, 1));
    }
    return cudaSuccess;
}

} // namespace roc_gpu
