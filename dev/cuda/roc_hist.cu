/*
 * roc_hist.cu: variants of the legacy ROC histogram kernel, each checked
 * against a CPU reference before it is timed (kept apart from the library).
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Isrc dev/cuda/roc_hist.cu dev/cuda/roc_blog.cu \
 *        src/cuda/roc_hist_kernel.cu src/cuda/ext_cuda.cu -o build/roc_hist && ./build/roc_hist [Q G]
 *
 * version 0: the blog's kernel (2018) as published (dev/cuda/roc_blog.cu):
 *            <<<1024, 1024>>>, float counters, 32-bit indices, a div and a mod
 *            per pair.
 * version 1: the first library kernel: a flat range of pairs per block, each
 *            thread 4 pairs a step with one 16-byte load, (row, col) advanced
 *            incrementally, 32-bit shared counters flushed into 64-bit ones.
 * version 2: the library's kernel now (src/cuda/roc_hist_kernel.cu, through its
 *            launcher, so with its allocation, final add and NaN read-back):
 *            warps over (row, 2048-column segment) items, the row's label read
 *            once, 16-byte loads with the row's misaligned ends peeled. It has
 *            been: 4 loads a lane in flight at 44 registers (0.38 ms); then 1
 *            in flight (0.46: 2 blocks a multiprocessor); then 32 registers
 *            for 4 blocks (0.38, spilling); now a branch-free loop for aligned
 *            rows, as version 7.
 * versions 3-6: version 2's walk (aligned rows only, float labels) with
 *            kCopies copies of the all-pairs counters, lane l counting into
 *            copy l % kCopies, copy r of bin b at word b * kCopies + r: with
 *            32 copies no two lanes of a warp ever touch one bank, so hot bins
 *            cost neither same-address nor bank conflicts.
 *            3: 1 copy, 1 load in flight; 4: 32 copies, 4 in flight, 1024
 *            threads; 5: 32 copies, 1 in flight; 6: 16 copies, 4 in flight,
 *            512 threads; 7: version 3 with nbins a kernel argument, as in
 *            the library.
 * version 8: version 7 (512 threads, 4 blocks a multiprocessor) with the
 *            lane's next 16-byte score load issued before it counts the
 *            current one.
 * The timed list below holds the versions of the latest question; every
 * version stays runnable (run_variant).
 *
 * Data: one genuine match per query (labels_q[i] = i, labels_g[j] = j % Q),
 * genuine scores ~ N(0.6, 0.1) and impostor scores ~ N(0, sigma) for sigma =
 * 0.1 and 0.044 (the spread of cosines between random 512-D unit vectors,
 * the impostors of bench_roc.py: about 45 bins hold most pairs).
 * Napkin math: the kernel must read Q * G * 4 bytes of scores (840 MB at the
 * blog's 10,000 x 21,000); labels and histograms are noise beside that.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cuda/roc_hist_kernel.h"
#include "ext_tensor.h"
#include "roc_math.h"

#include "harness.cuh"


constexpr int kBins = 1024;

// ----------------------------------------------------------------------------
// CPU reference

void reference(const std::vector<float> &score, int64_t n_query, int64_t n_gallery,
               const std::vector<float> &labels_q, const std::vector<float> &labels_g,
               std::vector<uint64_t> &all, std::vector<uint64_t> &genuine)
{
    all.assign(kBins, 0);
    genuine.assign(kBins, 0);
    for (int64_t i = 0; i < n_query; i++)
        for (int64_t j = 0; j < n_gallery; j++) {
            float s = score[i * n_gallery + j];
            if (std::isnan(s))
                continue;
            int64_t bin = roc_legacy_bin(s, kBins);
            all[bin]++;
            genuine[bin] += labels_q[i] == labels_g[j];
        }
}

// ----------------------------------------------------------------------------
// version 0: the blog's kernel (dev/cuda/roc_blog.cu)

extern "C" int roc_blog_launch(const float *score, int q_num, int g_num, float *histo1,
                               float *histo2, const float *labels_q, const float *labels_g,
                               void *stream);

// ----------------------------------------------------------------------------
// version 1: flat ranges of pairs, 16-byte loads, incremental (row, col)

__global__ void __launch_bounds__(512)
    hist_v1(const float *__restrict__ score, int64_t n_gallery, int64_t n_pairs,
            int64_t pairs_per_block, const float *__restrict__ labels_q,
            const float *__restrict__ labels_g, unsigned long long *__restrict__ counts)
{
    __shared__ unsigned int block_counts[2 * kBins];
    for (int b = threadIdx.x; b < 2 * kBins; b += blockDim.x)
        block_counts[b] = 0;
    __syncthreads();
    const int64_t begin = blockIdx.x * pairs_per_block;
    const int64_t end = begin + pairs_per_block < n_pairs ? begin + pairs_per_block : n_pairs;
    const int64_t step = int64_t(blockDim.x) * 4;
    const int64_t step_rows = step / n_gallery, step_cols = step % n_gallery;
    int64_t k = begin + int64_t(threadIdx.x) * 4;
    int64_t row = k / n_gallery, col = k % n_gallery;
    for (; k < end; k += step) {
        float v[4];
        if (k + 4 <= end) {
            float4 q = __ldg(reinterpret_cast<const float4 *>(score + k));
            v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        } else {
            for (int t = 0; t < 4; t++)
                v[t] = k + t < end ? score[k + t] : 0.0f;
        }
        for (int t = 0; t < 4 && k + t < end; t++) {
            int64_t r = row, c = col + t;
            while (c >= n_gallery) {
                c -= n_gallery;
                r++;
            }
            if (isnan(v[t]))
                continue;
            int64_t bin = roc_legacy_bin(v[t], kBins);
            atomicAdd(&block_counts[bin], 1u);
            if (labels_q[r] == labels_g[c])
                atomicAdd(&block_counts[kBins + bin], 1u);
        }
        row += step_rows;
        col += step_cols;
        if (col >= n_gallery) {
            col -= n_gallery;
            row++;
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 2 * kBins; b += blockDim.x)
        if (block_counts[b])
            atomicAdd(&counts[b], (unsigned long long)block_counts[b]);
}

// ----------------------------------------------------------------------------
// versions 3-6: lane-private copies of the all-pairs counters

template <int kBatch, int kCopies, bool kFixedBins = true>
__global__ void __launch_bounds__(1024)
    hist_copies(const float *__restrict__ score, int64_t n_query, int64_t n_gallery,
                const float *__restrict__ labels_q, const float *__restrict__ labels_g,
                int64_t nbins, unsigned long long *__restrict__ counts)
{
    constexpr int64_t kSegment = 2048;
    extern __shared__ unsigned int shared_counts[];
    unsigned int *all = shared_counts;                      /* [kBins][kCopies] */
    unsigned int *genuine = shared_counts + kBins * kCopies; /* [kBins] */
    for (int b = threadIdx.x; b < kBins * (kCopies + 1); b += blockDim.x)
        shared_counts[b] = 0;
    __syncthreads();
    const int lane = threadIdx.x % 32, copy = lane % kCopies;
    const int64_t n_segments = (n_gallery + kSegment - 1) / kSegment;
    const int64_t n_items = n_query * n_segments;
    const int64_t n_warps = int64_t(gridDim.x) * blockDim.x / 32;
    for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < n_items;
         item += n_warps) {
        const int64_t row = item / n_segments;
        const int64_t c0 = (item % n_segments) * kSegment;
        const int64_t c1 = min(c0 + kSegment, n_gallery); /* n_gallery % 4 == 0 here */
        const float label = labels_q[row];
        const float *row_score = score + row * n_gallery;
        for (int64_t j = c0 + 4 * lane; j < c1; j += 4 * 32 * kBatch) {
            float4 v[kBatch];
#pragma unroll
            for (int b = 0; b < kBatch; b++)
                v[b] = j + 128 * b < c1
                           ? __ldg(reinterpret_cast<const float4 *>(row_score + j + 128 * b))
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int b = 0; b < kBatch; b++) {
                const int64_t c = j + 128 * b;
                if (c >= c1)
                    break;
                const float4 other = __ldg(reinterpret_cast<const float4 *>(labels_g + c));
                const float s[4] = {v[b].x, v[b].y, v[b].z, v[b].w};
                const float l[4] = {other.x, other.y, other.z, other.w};
#pragma unroll
                for (int t = 0; t < 4; t++) {
                    if (isnan(s[t]))
                        continue;
                    const int bin = int(roc_legacy_bin(s[t], kFixedBins ? kBins : nbins));
                    atomicAdd(&all[bin * kCopies + copy], 1u);
                    if (l[t] == label)
                        atomicAdd(&genuine[bin], 1u);
                }
            }
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
        unsigned int total = 0;
        for (int r = 0; r < kCopies; r++) /* rotated: threads of a warp read distinct banks */
            total += all[b * kCopies + (r + b) % kCopies];
        if (total)
            atomicAdd(&counts[b], (unsigned long long)total);
        if (genuine[b])
            atomicAdd(&counts[kBins + b], (unsigned long long)genuine[b]);
    }
}

struct Buffers {
    float *score, *labels_q, *labels_g;
    float *histo_f;      // (2, kBins) for version 0
    long long *histo_i;  // (2, kBins) for the library
    int64_t n_query, n_gallery;
};

/* A full wave of blocks with the (kCopies + 1) x kBins counters in shared memory. */
// ----------------------------------------------------------------------------
// version 8: version 7 with the next 16-byte score load issued before the
// current one is counted (one more load a lane in flight, 4 more registers)

__global__ void __launch_bounds__(512, 4)
    hist_prefetch(const float *__restrict__ score, int64_t n_query, int64_t n_gallery,
                  const float *__restrict__ labels_q, const float *__restrict__ labels_g,
                  int64_t nbins, unsigned long long *__restrict__ counts)
{
    constexpr int64_t kSegment = 2048;
    extern __shared__ unsigned int shared_counts[];
    unsigned int *all = shared_counts, *genuine = shared_counts + nbins;
    for (int b = threadIdx.x; b < 2 * nbins; b += blockDim.x)
        shared_counts[b] = 0;
    __syncthreads();
    const int lane = threadIdx.x % 32;
    const int64_t n_segments = (n_gallery + kSegment - 1) / kSegment;
    const int64_t n_items = n_query * n_segments;
    const int64_t n_warps = int64_t(gridDim.x) * blockDim.x / 32;
    for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < n_items;
         item += n_warps) {
        const int64_t row = item / n_segments;
        const int64_t c0 = (item % n_segments) * kSegment;
        const int64_t c1 = min(c0 + kSegment, n_gallery); /* n_gallery % 4 == 0 here */
        const float label = labels_q[row];
        const float *row_score = score + row * n_gallery;
        int64_t c = c0 + 4 * lane;
        float4 next = c < c1 ? __ldg(reinterpret_cast<const float4 *>(row_score + c))
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (; c < c1; c += 128) {
            const float4 v = next;
            if (c + 128 < c1)
                next = __ldg(reinterpret_cast<const float4 *>(row_score + c + 128));
            const float4 other = __ldg(reinterpret_cast<const float4 *>(labels_g + c));
            const float s[4] = {v.x, v.y, v.z, v.w};
            const float l[4] = {other.x, other.y, other.z, other.w};
#pragma unroll
            for (int t = 0; t < 4; t++) {
                if (isnan(s[t]))
                    continue;
                const int bin = int(roc_legacy_bin(s[t], nbins));
                atomicAdd(&all[bin], 1u);
                if (l[t] == label)
                    atomicAdd(&genuine[bin], 1u);
            }
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 2 * nbins; b += blockDim.x)
        if (shared_counts[b])
            atomicAdd(&counts[b], (unsigned long long)shared_counts[b]);
}

void launch_prefetch(const Buffers &b, cudaStream_t stream)
{
    const size_t shared = size_t(2 * kBins) * sizeof(unsigned int);
    int per_sm = 0, sms = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, hist_prefetch, 512, shared));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaMemsetAsync(b.histo_i, 0, 2 * kBins * sizeof(long long), stream));
    hist_prefetch<<<sms * per_sm, 512, shared, stream>>>(
        b.score, b.n_query, b.n_gallery, b.labels_q, b.labels_g, kBins,
        reinterpret_cast<unsigned long long *>(b.histo_i));
    CHECK(cudaGetLastError());
}

template <int kBatch, int kCopies, bool kFixedBins = true>
void launch_copies(const Buffers &b, int threads, cudaStream_t stream)
{
    auto kernel = hist_copies<kBatch, kCopies, kFixedBins>;
    const size_t shared = size_t(kBins) * (kCopies + 1) * sizeof(unsigned int);
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)));
    int per_sm = 0, sms = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaMemsetAsync(b.histo_i, 0, 2 * kBins * sizeof(long long), stream));
    kernel<<<sms * per_sm, threads, shared, stream>>>(
        b.score, b.n_query, b.n_gallery, b.labels_q, b.labels_g, kBins,
        reinterpret_cast<unsigned long long *>(b.histo_i));
    CHECK(cudaGetLastError());
}

void run_variant(int version, const Buffers &b, cudaStream_t stream)
{
    if (version == 0) {
        CHECK(cudaMemsetAsync(b.histo_f, 0, 2 * kBins * sizeof(float), stream));
        CHECK(cudaError_t(roc_blog_launch(b.score, int(b.n_query), int(b.n_gallery), b.histo_f,
                                          b.histo_f + kBins, b.labels_q, b.labels_g, stream)));
    } else if (version == 1) {
        CHECK(cudaMemsetAsync(b.histo_i, 0, 2 * kBins * sizeof(long long), stream));
        const int64_t n = b.n_query * b.n_gallery, blocks = 132 * 4;
        const int64_t per_block = ((n + blocks - 1) / blocks + 2047) / 2048 * 2048;
        hist_v1<<<unsigned((n + per_block - 1) / per_block), 512, 0, stream>>>(
            b.score, b.n_gallery, n, per_block, b.labels_q, b.labels_g,
            reinterpret_cast<unsigned long long *>(b.histo_i));
        CHECK(cudaGetLastError());
    } else if (version == 3) {
        launch_copies<1, 1>(b, 512, stream);
    } else if (version == 4) {
        launch_copies<4, 32>(b, 1024, stream);
    } else if (version == 5) {
        launch_copies<1, 32>(b, 1024, stream);
    } else if (version == 6) {
        launch_copies<4, 16>(b, 512, stream);
    } else if (version == 7) {
        launch_copies<1, 1, false>(b, 512, stream);
    } else if (version == 8) {
        launch_prefetch(b, stream);
    } else {
        CHECK(cudaMemsetAsync(b.histo_i, 0, 2 * kBins * sizeof(long long), stream));
        int64_t n_nan = 0;
        int err = roc_hist_launch(b.score, b.n_query, b.n_gallery, b.labels_q, b.labels_g,
                                  EXT_FLOAT32, kBins, b.histo_i, EXT_INT64, b.histo_i + kBins,
                                  EXT_INT64, 0, stream, &n_nan);
        CHECK(cudaError_t(err));
    }
}

/* Largest |gpu - cpu| over both histograms, and the first bad bin. */
void validate(int version, const Buffers &b, const std::vector<uint64_t> &all,
              const std::vector<uint64_t> &genuine)
{
    std::vector<double> got(2 * kBins);
    if (version == 0) {
        std::vector<float> h(2 * kBins);
        CHECK(cudaMemcpy(h.data(), b.histo_f, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
        std::copy(h.begin(), h.end(), got.begin());
    } else {
        std::vector<long long> h(2 * kBins);
        CHECK(cudaMemcpy(h.data(), b.histo_i, h.size() * sizeof(long long),
                         cudaMemcpyDeviceToHost));
        std::copy(h.begin(), h.end(), got.begin());
    }
    double max_diff = 0, total = 0;
    int first_bad = -1;
    for (int k = 0; k < 2 * kBins; k++) {
        double expected = double(k < kBins ? all[k] : genuine[k - kBins]);
        double diff = std::fabs(got[k] - expected);
        total += expected;
        if (diff > max_diff)
            max_diff = diff;
        if (diff > 0 && first_bad < 0)
            first_bad = k;
    }
    printf("version %d: max abs diff %.0f (relative %.3g), first bad bin %d%s\n", version,
           max_diff, max_diff / (total > 0 ? total : 1), first_bad,
           first_bad < 0 ? "  OK" : (version == 0 ? "  (float counters: expected)" : "  WRONG"));
    if (version != 0 && first_bad >= 0)
        exit(1);
}

int main(int argc, char **argv)
{
    const int64_t n_query = argc > 2 ? atoll(argv[1]) : 10000;
    const int64_t n_gallery = argc > 2 ? atoll(argv[2]) : 21000;
    const int64_t n = n_query * n_gallery;
    if (n_gallery % 4) {
        fprintf(stderr, "versions 3-6 need G %% 4 == 0\n");
        return 1;
    }
    std::vector<float> labels_q(n_query), labels_g(n_gallery), score(n);
    for (int64_t i = 0; i < n_query; i++)
        labels_q[i] = float(i);
    for (int64_t j = 0; j < n_gallery; j++)
        labels_g[j] = float(j % n_query);

    Buffers b{};
    b.n_query = n_query;
    b.n_gallery = n_gallery;
    CHECK(cudaMalloc(&b.score, n * sizeof(float)));
    CHECK(cudaMalloc(&b.labels_q, n_query * sizeof(float)));
    CHECK(cudaMalloc(&b.labels_g, n_gallery * sizeof(float)));
    CHECK(cudaMalloc(&b.histo_f, 2 * kBins * sizeof(float)));
    CHECK(cudaMalloc(&b.histo_i, 2 * kBins * sizeof(long long)));
    CHECK(cudaMemcpy(b.labels_q, labels_q.data(), n_query * sizeof(float),
                     cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b.labels_g, labels_g.data(), n_gallery * sizeof(float),
                     cudaMemcpyHostToDevice));
    size_t flush_bytes = 256u << 20; /* larger than L2: evicts the scores between runs */
    void *flush;
    CHECK(cudaMalloc(&flush, flush_bytes));
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));

    {
        /* what a call of the library's launcher costs beyond its kernel: a 1 x 4 matrix */
        std::vector<float> times;
        for (int rep = 0; rep < 53; rep++) {
            CHECK(cudaMemsetAsync(flush, rep, flush_bytes, stream));
            CHECK(cudaEventRecord(start, stream));
            int64_t n_nan = 0;
            CHECK(cudaError_t(roc_hist_launch(b.score, 1, 4, b.labels_q, b.labels_g, EXT_FLOAT32,
                                              kBins, b.histo_i, EXT_INT64, b.histo_i + kBins,
                                              EXT_INT64, 0, stream, &n_nan)));
            CHECK(cudaEventRecord(stop, stream));
            CHECK(cudaEventSynchronize(stop));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, start, stop));
            if (rep >= 3)
                times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        printf("library launcher on a 1 x 4 matrix: %.3f ms (median of 50)\n",
               times[times.size() / 2]);
    }
    const int versions[] = {0, 2, 7, 8};
    for (float sigma : {0.1f, 0.044f}) {
        std::mt19937_64 gen(2018);
        std::normal_distribution<float> impostor(0.0f, sigma), genuine_score(0.6f, 0.1f);
        for (int64_t i = 0; i < n_query; i++)
            for (int64_t j = 0; j < n_gallery; j++) {
                float s = labels_q[i] == labels_g[j] ? genuine_score(gen) : impostor(gen);
                score[i * n_gallery + j] = std::min(1.0f, std::max(-1.0f, s));
            }
        std::vector<uint64_t> all, genuine;
        reference(score, n_query, n_gallery, labels_q, labels_g, all, genuine);
        CHECK(cudaMemcpy(b.score, score.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        printf("%lld x %lld pairs (%.0f MB of scores), impostors ~ N(0, %.3f)\n",
               (long long)n_query, (long long)n_gallery, n * 4.0 / 1e6, sigma);
        for (int version : versions) {
            run_variant(version, b, stream);
            CHECK(cudaStreamSynchronize(stream));
            validate(version, b, all, genuine);
        }
        printf("version | ms (median of 20) | GB/s of scores read\n");
        for (int version : versions) {
            std::vector<float> times;
            for (int rep = 0; rep < 23; rep++) {
                CHECK(cudaMemsetAsync(flush, rep, flush_bytes, stream));
                CHECK(cudaEventRecord(start, stream));
                run_variant(version, b, stream);
                CHECK(cudaEventRecord(stop, stream));
                CHECK(cudaEventSynchronize(stop));
                float ms;
                CHECK(cudaEventElapsedTime(&ms, start, stop));
                if (rep >= 3)
                    times.push_back(ms);
            }
            std::sort(times.begin(), times.end());
            float ms = times[times.size() / 2];
            printf("%7d | %17.3f | %8.0f\n", version, ms, n * 4.0 / ms / 1e6);
        }
    }
    return 0;
}
