/*
 * ext_cuda.cu: CUDA helpers shared by every op family's launchers.
 */
#include "ext_cuda.cuh"

extern "C" const char *ext_cuda_error_string(int err)
{
    return cudaGetErrorString(static_cast<cudaError_t>(err));
}

extern "C" int ext_cuda_error_is_oom(int err) { return err == cudaErrorMemoryAllocation; }

int ext_sm_count()
{
    int device = 0, count = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
        return 1;
    return count;
}
