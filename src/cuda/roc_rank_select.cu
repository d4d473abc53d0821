/*
 * roc_rank_select.cu: the rank count's top k and kept non-mated keys on the
 * GPU (roc_rank_select.cuh), the same as the CPU's (roc_rank_cpu.c).
 *
 * A block of whole query rows at a time, one thread block a row. An entry
 * (every pair the protocol keeps, mate or non-mate, NaN excluded) is the
 * 64-bit value key << 32 | (2^32 - 1 - j): the larger is the higher score,
 * then the lower index, so the top k are the k largest values. The row's
 * values above its k-th so far gather in shared memory; when nearly full
 * they are sorted (cub::BlockRadixSort) and merged with the k so far.
 *
 * The kept keys: each non-mated key of a query with a mate above the lowest
 * kept so far (once `keep` are held) is appended after them; after the
 * block, all are sorted descending (cub::DeviceRadixSort) and the first
 * `keep` stay. A block appends at most its pairs, so the buffer of keep +
 * block pairs never overflows.
 */
#include <math.h>
#include <stdint.h>

#include <algorithm>

#include "roc_rank_select.cuh"

namespace roc_gpu {

namespace {

constexpr int kSelectThreads = 256;
constexpr int kSelectItems = 8;
constexpr int kCandidates = kSelectThreads * kSelectItems;
static_assert(ROC_RANK_MAX_TOPK <= kCandidates, "a merge keeps the top k of the candidates");

struct SelectArgs {
    const float *scores;
    int64_t row0, n_gallery, row_offset;
    RankParams rank;
    int k;
    int64_t *topk_index; /* Q x k, by query */
    float *topk_score;
    bool keep;
    uint32_t kept_floor; /* keys above it are appended */
    uint32_t *kept;
    unsigned long long *n_kept;
};

/* What a row's thread block shares. */
struct RowTop {
    unsigned long long candidates[kCandidates];
    unsigned long long top[ROC_RANK_MAX_TOPK], merged[ROC_RANK_MAX_TOPK];
    int n_candidates, n_top;
    unsigned long long floor; /* the k-th value so far (0 until k are held) */
};

using BlockSort = cub::BlockRadixSort<unsigned long long, kSelectThreads, kSelectItems>;

/* The candidates sorted and merged into the row's top k; every thread calls
 * it, and it ends with the candidates emptied behind a barrier. */
__device__ void merge_candidates(RowTop &t, typename BlockSort::TempStorage &storage, int k)
{
    unsigned long long items[kSelectItems];
    for (int u = 0; u < kSelectItems; u++) {
        const int at = threadIdx.x * kSelectItems + u;
        items[u] = at < t.n_candidates ? t.candidates[at] : 0;
    }
    __syncthreads();
    BlockSort(storage).SortDescending(items);
    for (int u = 0; u < kSelectItems; u++)
        t.candidates[threadIdx.x * kSelectItems + u] = items[u];
    __syncthreads();
    if (threadIdx.x == 0) {
        const int n_new = min(t.n_candidates, k);
        int a = 0, b = 0, n = 0;
        while (n < k && (a < t.n_top || b < n_new))
            t.merged[n++] = b == n_new || (a < t.n_top && t.top[a] > t.candidates[b])
                                ? t.top[a++]
                                : t.candidates[b++];
        for (int u = 0; u < n; u++)
            t.top[u] = t.merged[u];
        t.n_top = n;
        t.floor = n == k ? t.top[k - 1] : 0;
        t.n_candidates = 0;
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kSelectThreads) select_kernel(SelectArgs a)
{
    __shared__ RowTop t;
    __shared__ typename BlockSort::TempStorage storage;
    const RankParams &p = a.rank;
    const int64_t i = a.row0 + blockIdx.x;
    const float *row = a.scores + int64_t(blockIdx.x) * a.n_gallery;
    const int64_t label_i = p.labels_q[i], cam_i = p.cams_q ? p.cams_q[i] : 0;
    const bool mated = p.first[i + 1] > p.first[i];
    const int lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        t.n_candidates = t.n_top = 0;
        t.floor = 0;
    }
    __syncthreads();
    for (int64_t base = 0; base < a.n_gallery; base += kSelectThreads) {
        const int64_t j = base + threadIdx.x;
        uint32_t key = 0;
        bool nonmate = false;
        if (j < a.n_gallery) {
            const float s = row[j];
            const int64_t label = p.labels_g[j], cam = p.cams_g ? p.cams_g[j] : 0;
            if (!isnan(s) && !rank_excluded(p, a.row_offset, i, j, label_i, cam_i, label, cam)) {
                key = roc_score_key(s);
                nonmate = label != label_i;
            }
        }
        const unsigned long long value =
            key ? (unsigned long long)key << 32 | (0xffffffffull - uint64_t(j)) : 0;
        if (a.k && value > t.floor)
            t.candidates[atomicAdd(&t.n_candidates, 1)] = value;
        /* the kept keys: one atomic a warp */
        const bool kept = a.keep && mated && nonmate && key > a.kept_floor;
        const unsigned warp = __ballot_sync(0xffffffffu, kept);
        if (warp) {
            const int leader = __ffs(warp) - 1;
            unsigned long long at = 0;
            if (lane == leader)
                at = atomicAdd(a.n_kept, (unsigned long long)__popc(warp));
            at = __shfl_sync(0xffffffffu, at, leader);
            if (kept)
                a.kept[at + __popc(warp & ((1u << lane) - 1))] = key;
        }
        __syncthreads();
        const bool full = t.n_candidates > kCandidates - kSelectThreads;
        __syncthreads();
        if (full)
            merge_candidates(t, storage, a.k);
    }
    if (a.k == 0)
        return;
    merge_candidates(t, storage, a.k);
    for (int u = threadIdx.x; u < a.k; u += kSelectThreads) {
        const bool held = u < t.n_top;
        a.topk_index[i * a.k + u] = held ? int64_t(0xffffffffull - (t.top[u] & 0xffffffffull)) : -1;
        a.topk_score[i * a.k + u] = held ? roc_key_score(uint32_t(t.top[u] >> 32)) : NAN;
    }
}

__global__ void fill_kernel(int64_t *index, float *score, int64_t n)
{
    for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
         t += int64_t(gridDim.x) * blockDim.x) {
        index[t] = -1;
        score[t] = NAN;
    }
}

} // namespace

cudaError_t RankSelection::create(int64_t n_query, int k, int64_t keep, int64_t block_pairs)
{
    cudaStream_t stream = arena_.stream();
    n_query_ = n_query;
    k_ = k;
    keep_ = keep;
    if (k > 0) {
        const int64_t n = n_query * k;
        EXT_CUDA_TRY(topk_index_.allocate(std::max<int64_t>(n, 1)));
        EXT_CUDA_TRY(topk_score_.allocate(std::max<int64_t>(n, 1)));
        if (n)
            fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(topk_index_.get(),
                                                                topk_score_.get(), n);
        EXT_CUDA_TRY(cudaGetLastError());
    }
    if (keep > 0) {
        EXT_CUDA_TRY(kept_.allocate(keep + block_pairs));
        EXT_CUDA_TRY(sorted_.allocate(keep + block_pairs));
        EXT_CUDA_TRY(n_kept_.allocate(1));
    }
    return cudaSuccess;
}

cudaError_t RankSelection::add(const float *scores, int64_t row0, int64_t rows,
                               int64_t n_gallery, int64_t row_offset, const RankParams &rank)
{
    cudaStream_t stream = arena_.stream();
    if (rows == 0 || n_gallery == 0)
        return cudaSuccess;
    const unsigned long long held = static_cast<unsigned long long>(held_);
    if (keep_ > 0)
        EXT_CUDA_TRY(cudaMemcpyAsync(n_kept_.get(), &held, sizeof held, cudaMemcpyHostToDevice,
                                     stream));
    SelectArgs a{};
    a.scores = scores;
    a.row0 = row0;
    a.n_gallery = n_gallery;
    a.row_offset = row_offset;
    a.rank = rank;
    a.k = k_;
    a.topk_index = topk_index_.get();
    a.topk_score = topk_score_.get();
    a.keep = keep_ > 0;
    a.kept_floor = held_ == keep_ ? floor_ : 0;
    a.kept = kept_.get();
    a.n_kept = n_kept_.get();
    select_kernel<<<unsigned(rows), kSelectThreads, 0, stream>>>(a);
    EXT_CUDA_TRY(cudaGetLastError());
    if (keep_ == 0)
        return cudaSuccess;
    unsigned long long n = 0;
    EXT_CUDA_TRY(cudaMemcpyAsync(&n, n_kept_.get(), sizeof n, cudaMemcpyDeviceToHost, stream));
    EXT_CUDA_TRY(cudaStreamSynchronize(stream));
    if (n == held)
        return cudaSuccess;
    const int64_t count = static_cast<int64_t>(n);
    EXT_CUDA_TRY(cub_run(arena_, [&](void *tmp, size_t &bytes) {
        return cub::DeviceRadixSort::SortKeysDescending(tmp, bytes, kept_.get(), sorted_.get(),
                                                        count, 0, 32, stream);
    }));
    held_ = std::min(count, keep_);
    EXT_CUDA_TRY(cudaMemcpyAsync(kept_.get(), sorted_.get(), held_ * sizeof(uint32_t),
                                 cudaMemcpyDeviceToDevice, stream));
    if (held_ == keep_)
        EXT_CUDA_TRY(cudaMemcpyAsync(&floor_, sorted_.get() + (keep_ - 1), sizeof floor_,
                                     cudaMemcpyDeviceToHost, stream));
    return cudaStreamSynchronize(stream);
}

cudaError_t RankSelection::to_view(roc_rank_view *view)
{
    cudaStream_t stream = arena_.stream();
    const int64_t n = n_query_ * k_;
    if (n > 0) {
        EXT_CUDA_TRY(cudaMemcpyAsync(view->topk_index, topk_index_.get(), n * sizeof(int64_t),
                                     cudaMemcpyDeviceToHost, stream));
        EXT_CUDA_TRY(cudaMemcpyAsync(view->topk_score, topk_score_.get(), n * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream));
    }
    if (held_ > 0)
        EXT_CUDA_TRY(cudaMemcpyAsync(view->kept_keys, kept_.get(), held_ * sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost, stream));
    view->n_kept = held_;
    return cudaStreamSynchronize(stream);
}

} // namespace roc_gpu
