/*
 * harness.cuh: what the dev/cuda harnesses share (they include it by its
 * path beside them; the library never does).
 */
#ifndef DEV_CUDA_HARNESS_CUH
#define DEV_CUDA_HARNESS_CUH

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

/* A CUDA runtime call that must succeed: else the harness stops, saying
 * where and why. */
#define CHECK(call)                                                                       \
    do {                                                                                  \
        cudaError_t err_ = (call);                                                        \
        if (err_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#endif /* DEV_CUDA_HARNESS_CUH */
