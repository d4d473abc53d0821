/*
 * ext_cuda.cu: CUDA helpers shared by every op family's launchers.
 */
#include "ext_cuda.cuh"

#include <mutex>

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

cudaError_t ext_scratch_pool(cudaMemPool_t *pool)
{
    constexpr int kMaxDevices = 64;
    constexpr uint64_t kKeepBytes = uint64_t(64) << 20;
    static cudaMemPool_t pools[kMaxDevices];
    static std::mutex lock;
    int device = 0;
    EXT_CUDA_TRY(cudaGetDevice(&device));
    if (device < 0 || device >= kMaxDevices)
        return cudaErrorInvalidDevice;
    std::lock_guard<std::mutex> hold(lock);
    if (!pools[device]) {
        cudaMemPoolProps props = {};
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = device;
        cudaMemPool_t created;
        EXT_CUDA_TRY(cudaMemPoolCreate(&created, &props));
        uint64_t keep = kKeepBytes;
        cudaError_t err = cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &keep);
        if (err != cudaSuccess) {
            cudaMemPoolDestroy(created);
            return err;
        }
        pools[device] = created;
    }
    *pool = pools[device];
    return cudaSuccess;
}
