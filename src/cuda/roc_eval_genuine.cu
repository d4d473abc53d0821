/*
 * roc_eval_genuine.cu: the genuine pairs and their distinct levels. All
 * pairs: the gallery is sorted by label (CUB, stable), so the genuine
 * partners of a query are one contiguous run, found by bisection; one thread
 * per genuine pair computes its key (from the score matrix, or the features'
 * FMA chain, roc_scores.cuh). A list: its flags and indices checked, then its
 * genuine pairs' keys. CUB then sorts and run-length encodes the keys into the
 * distinct levels, which go to the host.
 */
#include <stdint.h>
#include <string.h>

#include "roc_eval_state.cuh"

namespace roc_gpu {

namespace {

__global__ void iota_kernel(int64_t *out, int64_t n)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        out[i] = i;
}

__global__ void position_kernel(const int64_t *members, int64_t n, int64_t *position)
{
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
         t += int64_t(gridDim.x) * blockDim.x)
        position[members[t]] = t;
}

/* How query row i finds its genuine partners among the gallery sorted by
 * (label, index): members[t] is a gallery index, gallery entry j sits at
 * position[j], and row i's partners are members[first[i] ..], count[i] of
 * them (less the row itself for one set's ordered pairs: the position to
 * skip). One set: the query is the set's row row_offset + i. */
struct Partners {
    const int64_t *first, *position, *members;
    int64_t row_offset;
    int same_set;

    __device__ int64_t skip(int64_t i) const
    {
        return same_set == ROC_SAME_SET_ORDERED ? position[row_offset + i] : -1;
    }
};

/* The first of n ascending labels above `label` (upper), or at or above it. */
template <typename T>
__device__ int64_t label_bound(const T *sorted, int64_t n, T label, bool upper)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = (lo + hi) >> 1;
        if (sorted[mid] < label || (upper && sorted[mid] == label))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* first[i] and count[i] of each query row (count[n_query] = 0, for the scan). */
template <typename T>
__global__ void genuine_count_kernel(const T *labels_q, const T *labels_g, const T *sorted,
                                     int64_t n_gallery, const Partners partners, int64_t n_query,
                                     int64_t *first, int64_t *count)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i <= n_query;
         i += int64_t(gridDim.x) * blockDim.x) {
        if (i == n_query) {
            count[i] = 0;
            continue;
        }
        const int64_t self = partners.row_offset + i;
        const T label = partners.same_set ? labels_g[self] : labels_q[i];
        const int64_t begin = partners.same_set == ROC_SAME_SET_UNORDERED
                                  ? partners.position[self] + 1
                                  : label_bound(sorted, n_gallery, label, false);
        first[i] = begin;
        count[i] = label_bound(sorted, n_gallery, label, true) - begin -
                   (partners.same_set == ROC_SAME_SET_ORDERED);
    }
}

/* One thread per genuine pair: its key (or NO_KEY for NaN), from the score
 * matrix or the features. Small blocks (kGenuineThreads): each thread's score
 * from features is a chain of D steps, and a few thousand pairs in blocks of
 * 256 left most multiprocessors idle (dev/NOTES.md, genuine pass). */
constexpr int kGenuineThreads = 64;
__global__ void genuine_key_kernel(const Partners partners, int64_t n_query, int64_t n_gallery,
                                   const int64_t *offset, const float *score,
                                   const FeatureRows features, int64_t n_pairs, uint32_t *keys,
                                   unsigned long long *n_nan)
{
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_pairs;
         t += int64_t(gridDim.x) * blockDim.x) {
        int64_t lo = 0, hi = n_query; /* the query: last i with offset[i] <= t */
        while (lo < hi) {
            int64_t mid = (lo + hi + 1) >> 1;
            if (offset[mid] <= t)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int64_t i = lo, skip = partners.skip(i);
        int64_t m = partners.first[i] + (t - offset[i]);
        if (skip >= 0 && m >= skip)
            m++;
        const int64_t j = partners.members[m];
        const float s = score ? score[i * n_gallery + j] : features.score(i, j);
        if (isnan(s)) {
            keys[t] = ROC_NO_KEY;
            atomicAdd(n_nan, 1ull);
        } else {
            keys[t] = roc_score_key(s);
        }
    }
}

/* Flags that are not 0/1 and indices that are not rows (the first position of
 * each, in bad[0..2]), and counts the genuine pairs (a warp's at once). */
__global__ void check_list_kernel(const PairList list, int64_t n, unsigned long long *bad,
                                  unsigned long long *n_genuine)
{
    for (int64_t t0 = blockIdx.x * int64_t(blockDim.x); t0 < n;
         t0 += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = t0 + threadIdx.x;
        int64_t flag = 0;
        if (t < n) {
            flag = roc_int_at(list.genuine, list.genuine_dtype, t);
            if (flag != 0 && flag != 1)
                atomicMin(&bad[0], (unsigned long long)t);
            if (list.index_a) {
                const int64_t ia = roc_int_at(list.index_a, list.index_dtype, t);
                const int64_t ib = roc_int_at(list.index_b, list.index_dtype, t);
                if (ia < 0 || ia >= list.n_a)
                    atomicMin(&bad[1], (unsigned long long)t);
                if (ib < 0 || ib >= list.n_b)
                    atomicMin(&bad[2], (unsigned long long)t);
            }
        }
        const unsigned genuine = __ballot_sync(0xffffffffu, flag == 1);
        if (threadIdx.x % 32 == 0 && genuine)
            atomicAdd(n_genuine, (unsigned long long)__popc(genuine));
    }
}

/* The keys (NO_KEY for NaN) of the genuine pairs, in any order: a warp takes
 * its slots at once. */
__global__ void list_genuine_key_kernel(const PairList list, int64_t n, uint32_t *keys,
                                        unsigned long long *fill, unsigned long long *n_nan)
{
    const int lane = threadIdx.x % 32;
    for (int64_t t0 = blockIdx.x * int64_t(blockDim.x); t0 < n;
         t0 += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = t0 + threadIdx.x;
        const bool genuine = t < n && roc_int_at(list.genuine, list.genuine_dtype, t) == 1;
        const unsigned mask = __ballot_sync(0xffffffffu, genuine);
        unsigned long long first = 0;
        if (lane == 0 && mask)
            first = atomicAdd(fill, (unsigned long long)__popc(mask));
        first = __shfl_sync(0xffffffffu, first, 0);
        if (genuine) {
            const float s = list.score_of(t);
            keys[first + __popc(mask & ((1u << lane) - 1))] = isnan(s) ? ROC_NO_KEY
                                                                        : roc_score_key(s);
            if (isnan(s))
                atomicAdd(n_nan, 1ull);
        }
    }
}

} // namespace

/* Finds the genuine pairs and their keys; leaves the distinct levels in
 * `genuine` (host arrays). */
cudaError_t levels_from_keys(roc_eval_cuda *ev, Buffer<uint32_t> &keys, int64_t n_pairs,
                             Buffer<unsigned long long> &nan, roc_genuine_levels *genuine,
                             roc_totals *totals);

/* The gallery sorted by label of type T (stable: members[t] is a gallery
 * index, position its inverse), then each query row's partners counted. */
template <typename T>
cudaError_t count_partners(ExtDeviceArena &arena, const roc_source &s, Buffer<int64_t> &members,
                           Buffer<int64_t> &position, Buffer<int64_t> &first,
                           Buffer<int64_t> &count)
{
    cudaStream_t stream = arena.stream();
    const int64_t Q = s.n_query, G = s.n_gallery;
    const T *labels_q = static_cast<const T *>(s.labels_q);
    const T *labels_g = static_cast<const T *>(s.labels_g);
    Buffer<T> sorted(arena);
    Buffer<int64_t> index(arena);
    EXT_CUDA_TRY(sorted.allocate(G));
    EXT_CUDA_TRY(index.allocate(G));
    iota_kernel<<<grid_for(G), kThreads, 0, stream>>>(index.get(), G);
    EXT_CUDA_TRY(cudaGetLastError());
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortPairs(tmp, bytes, labels_g, sorted.get(), index.get(),
                                               members.get(), G, 0, int(8 * sizeof(T)), stream);
    }));
    position_kernel<<<grid_for(G), kThreads, 0, stream>>>(members.get(), G, position.get());
    const Partners partners{first.get(), position.get(), members.get(), s.row_offset,
                            s.same_set};
    genuine_count_kernel<<<grid_for(Q + 1), kThreads, 0, stream>>>(
        labels_q, labels_g, sorted.get(), G, partners, Q, first.get(), count.get());
    return cudaGetLastError();
}

cudaError_t find_genuine(roc_eval_cuda *ev, roc_genuine_levels *genuine, roc_totals *totals)
{
    const roc_source &s = ev->src;
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    const int64_t Q = s.n_query, G = s.n_gallery;
    Buffer<int64_t> members(arena), position(arena), first(arena), count(arena), offset(arena);
    EXT_CUDA_TRY(members.allocate(G));
    EXT_CUDA_TRY(position.allocate(G));
    EXT_CUDA_TRY(first.allocate(Q));
    EXT_CUDA_TRY(count.allocate(Q + 1));
    EXT_CUDA_TRY(offset.allocate(Q + 1));
    EXT_CUDA_TRY(s.label_dtype == EXT_INT64
                     ? count_partners<int64_t>(arena, s, members, position, first, count)
                     : count_partners<int32_t>(arena, s, members, position, first, count));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceScan::ExclusiveSum(tmp, bytes, count.get(), offset.get(), Q + 1,
                                             stream);
    }));
    const Partners partners{first.get(), position.get(), members.get(), s.row_offset,
                            s.same_set};
    int64_t n_pairs = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&n_pairs, offset.get() + Q, sizeof n_pairs,
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));

    Buffer<uint32_t> keys(arena);
    Buffer<unsigned long long> nan(arena);
    EXT_CUDA_TRY(keys.allocate(n_pairs));
    EXT_CUDA_TRY(nan.allocate(1));
    EXT_CUDA_TRY(cudaMemsetAsync(nan.get(), 0, sizeof(unsigned long long), stream));
    genuine_key_kernel<<<grid_for(n_pairs, kGenuineThreads), kGenuineThreads, 0, stream>>>(
        partners, Q, G, offset.get(), s.score, ev->features.rows(), n_pairs, keys.get(),
        nan.get());
    EXT_CUDA_TRY(cudaGetLastError());
    for (Buffer<int64_t> *a : {&members, &position, &first, &count, &offset})
        a->release();
    return levels_from_keys(ev, keys, n_pairs, nan, genuine, totals);
}

/* The genuine pairs of a list and their keys, after checking the list. */
cudaError_t find_list_genuine(roc_eval_cuda *ev, roc_genuine_levels *genuine, roc_totals *totals,
                              roc_bad_input *bad_input)
{
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    const int64_t N = ev->src.n_query;
    /* bad[0..2]: first bad flag, index_a, index_b; [3]: genuine pairs; [4]: filled; [5]: NaN */
    Buffer<unsigned long long> tally(arena);
    EXT_CUDA_TRY(tally.allocate(6));
    EXT_CUDA_TRY(cudaMemsetAsync(tally.get(), 0xff, 3 * sizeof(unsigned long long), stream));
    EXT_CUDA_TRY(cudaMemsetAsync(tally.get() + 3, 0, 3 * sizeof(unsigned long long), stream));
    check_list_kernel<<<grid_for(N), kThreads, 0, stream>>>(ev->list.pairs, N, tally.get(),
                                                            tally.get() + 3);
    EXT_CUDA_TRY(cudaGetLastError());
    unsigned long long host[4];
    EXT_CUDA_TRY(cudaMemcpyAsync(host, tally.get(), sizeof host, cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    static const int kinds[3] = {ROC_BAD_GENUINE, ROC_BAD_INDEX_A, ROC_BAD_INDEX_B};
    for (int k = 0; k < 3; k++)
        if (host[k] != ~0ull) {
            *bad_input = roc_bad_input{kinds[k], int64_t(host[k])};
            return cudaSuccess;
        }
    const int64_t n_pairs = int64_t(host[3]);
    Buffer<uint32_t> keys(arena);
    Buffer<unsigned long long> nan(arena);
    EXT_CUDA_TRY(keys.allocate(n_pairs));
    EXT_CUDA_TRY(nan.allocate(1));
    EXT_CUDA_TRY(cudaMemsetAsync(nan.get(), 0, sizeof(unsigned long long), stream));
    list_genuine_key_kernel<<<grid_for(N, kGenuineThreads), kGenuineThreads, 0, stream>>>(
        ev->list.pairs, N, keys.get(), tally.get() + 4, nan.get());
    EXT_CUDA_TRY(cudaGetLastError());
    return levels_from_keys(ev, keys, n_pairs, nan, genuine, totals);
}

/* The distinct genuine levels of n_pairs genuine keys (NaN pairs: NO_KEY, nan
 * of them), on the host. */
cudaError_t levels_from_keys(roc_eval_cuda *ev, Buffer<uint32_t> &keys, int64_t n_pairs,
                             Buffer<unsigned long long> &nan, roc_genuine_levels *genuine,
                             roc_totals *totals)
{
    ExtDeviceArena &arena = ev->arena;
    cudaStream_t stream = arena.stream();
    Buffer<uint32_t> sorted_keys(arena);
    EXT_CUDA_TRY(sorted_keys.allocate(n_pairs));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortKeys(tmp, bytes, keys.get(), sorted_keys.get(), n_pairs,
                                              0, 32, stream);
    }));
    keys.release();
    /* runs of the sorted keys (a NaN pair's NO_KEY sorts first), copied whole
     * with their count and the NaN count: one synchronization */
    Buffer<uint32_t> unique(arena);
    Buffer<unsigned long long> run_counts(arena);
    Buffer<int64_t> n_runs(arena);
    EXT_CUDA_TRY(unique.allocate(n_pairs));
    EXT_CUDA_TRY(run_counts.allocate(n_pairs));
    EXT_CUDA_TRY(n_runs.allocate(1));
    EXT_CUDA_TRY(cub_run(arena, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRunLengthEncode::Encode(tmp, bytes, sorted_keys.get(), unique.get(),
                                                  run_counts.get(), n_runs.get(), n_pairs,
                                                  stream);
    }));
    unsigned long long n_nan = 0;
    int64_t U = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&n_nan, nan.get(), sizeof n_nan, cudaMemcpyDeviceToHost,
                                 stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(&U, n_runs.get(), sizeof U, cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    if (n_pairs == 0)
        U = 0;
    /* the runs only: the buffers' tails were never written */
    genuine->keys = static_cast<uint32_t *>(ext_malloc(U * sizeof(uint32_t)));
    genuine->counts = static_cast<uint64_t *>(ext_malloc(U * sizeof(uint64_t)));
    if (!genuine->keys || !genuine->counts)
        return cudaErrorMemoryAllocation;
    EXT_CUDA_TRY(cudaMemcpyAsync(genuine->keys, unique.get(), U * sizeof(uint32_t),
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaMemcpyAsync(genuine->counts, run_counts.get(), U * sizeof(uint64_t),
                                 cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    if (n_nan > 0) { /* drop the NaN run */
        memmove(genuine->keys, genuine->keys + 1, (U - 1) * sizeof(uint32_t));
        memmove(genuine->counts, genuine->counts + 1, (U - 1) * sizeof(uint64_t));
        U--;
    }
    /* the distinct keys stay on the device for set_levels (stream order: the
     * copy precedes unique's free) */
    EXT_CUDA_TRY(ev->levels.found.allocate(U));
    EXT_CUDA_TRY(cudaMemcpyAsync(ev->levels.found.get(), unique.get() + (n_nan > 0 ? 1 : 0),
                                 U * sizeof(uint32_t), cudaMemcpyDeviceToDevice, stream));
    genuine->n_levels = U;
    totals->n_genuine = uint64_t(n_pairs) - n_nan;
    totals->n_nan_genuine = n_nan;
    return cudaSuccess;
}

} // namespace roc_gpu
