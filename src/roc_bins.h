/*
 * roc_bins.h: how a score becomes a bin, shared by the CPU code (C) and the
 * kernels (CUDA) so that both count every pair into the same bin.
 */
#ifndef ROC_BINS_H
#define ROC_BINS_H

#include <stdint.h>

#ifdef __CUDACC__
#define ROC_HD __host__ __device__ __forceinline__
#else
#define ROC_HD static inline
#endif

/*
 * Legacy binning of the 2018 gpu_roc: bin = trunc((s + 1) / 2 * (nbins - 1)),
 * evaluated in float64 (the blog wrote 1.0 * ..., which promotes to double),
 * with scores outside [-1, 1] (and +-inf) clamped into the edge bins instead
 * of indexing out of bounds. NaN is the caller's to skip. Every step is one
 * IEEE double operation, so NumPy's float64 evaluation of the same formula
 * gives the same bin.
 */
ROC_HD int64_t roc_legacy_bin(float score, int64_t nbins)
{
    if (!(score > -1.0f))
        return 0;
    if (score >= 1.0f)
        return nbins - 1;
    double position = ((double)score + 1.0) / 2.0 * (double)(nbins - 1);
    int64_t bin = (int64_t)position;
    return bin < nbins - 1 ? bin : nbins - 1;
}

#endif /* ROC_BINS_H */
