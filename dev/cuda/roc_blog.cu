/*
 * roc_blog.cu: the blog's ROC kernel (2018) as published, the baseline the
 * library is measured against; kept apart from the library.
 *
 * As written: 1024 x 1024 threads, 1024 float counters per block in shared
 * memory (so nbins is fixed at 1024), float atomics into float histograms
 * (exact only to 2^24 per bin), 32-bit indices (Q x G < 2^31), bins of scores
 * outside [-1, 1] written out of bounds, a division and a modulo per pair.
 * The one change: the launch takes the caller's stream, so a benchmark can
 * time it on PyTorch's stream (the blog used the default stream).
 *
 * Built as a shared library for scripts/bench_roc.py (`make bench`) and
 * linked into dev/cuda/roc_hist.cu.
 */
#include <cuda_runtime.h>

#define NUM 1024

__global__ void roc_kernel(const float *score, const int q_num, const int g_num, float *histo1,
                           float *histo2, const float *labels_q, const float *labels_g)
{
    __shared__ float temp1[NUM];
    __shared__ float temp2[NUM];
    temp1[threadIdx.x] = 0;
    temp2[threadIdx.x] = 0;
    __syncthreads();
    int j = threadIdx.x + blockIdx.x * blockDim.x;
    int stride = blockDim.x * gridDim.x;
    while (j < q_num * g_num) {
        atomicAdd(&(temp1[(int)(1.0 * (score[j] + 1) / 2 * (NUM - 1))]), 1);
        atomicAdd(&(temp2[(int)(1.0 * (score[j] + 1) / 2 * (NUM - 1))]),
                  labels_q[j / g_num] == labels_g[j % g_num]);
        j += stride;
    }
    __syncthreads();
    atomicAdd(&(histo1[threadIdx.x]), temp1[threadIdx.x]);
    atomicAdd(&(histo2[threadIdx.x]), temp2[threadIdx.x]);
}

/* histo1/histo2 hold NUM floats each; returns cudaGetLastError(). */
extern "C" int roc_blog_launch(const float *score, int q_num, int g_num, float *histo1,
                               float *histo2, const float *labels_q, const float *labels_g,
                               void *stream)
{
    roc_kernel<<<1024, NUM, 0, static_cast<cudaStream_t>(stream)>>>(score, q_num, g_num, histo1,
                                                                     histo2, labels_q, labels_g);
    return cudaGetLastError();
}
