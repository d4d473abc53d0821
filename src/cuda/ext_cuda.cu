/*
 * ext_cuda.cu: CUDA helpers shared by every op family's launchers.
 */
#include "ext_cuda.cuh"

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

/* The test hook's count of device allocations left to fail. */
static std::atomic<int> failing_allocations{0};

extern "C" void ext_test_fail_device_allocations(int count) { failing_allocations = count; }

extern "C" const char *ext_cuda_error_string(int err)
{
    return cudaGetErrorString(static_cast<cudaError_t>(err));
}

extern "C" int ext_cuda_error_is_oom(int err) { return err == cudaErrorMemoryAllocation; }

int ext_sm_count()
{
    constexpr int kMaxDevices = 64;
    static std::atomic<int> counts[kMaxDevices];
    int device = 0, count = 0;
    if (cudaGetDevice(&device) != cudaSuccess)
        return 1;
    if (device >= 0 && device < kMaxDevices && (count = counts[device].load()) > 0)
        return count;
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        count < 1)
        return 1;
    if (device >= 0 && device < kMaxDevices)
        counts[device] = count;
    return count;
}

cudaError_t ext_blocks_per_sm(const void *kernel, int threads, size_t shared, int *per_sm)
{
    using Shape = std::tuple<const void *, int, int, size_t>;
    static std::map<Shape, int> known;
    static std::mutex lock;
    int device = 0;
    EXT_CUDA_TRY(cudaGetDevice(&device));
    const Shape shape{kernel, device, threads, shared};
    {
        std::lock_guard<std::mutex> hold(lock);
        auto found = known.find(shape);
        if (found != known.end()) {
            *per_sm = found->second;
            return cudaSuccess;
        }
    }
    int blocks = 0;
    EXT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared));
    *per_sm = blocks > 0 ? blocks : 1;
    std::lock_guard<std::mutex> hold(lock);
    known[shape] = *per_sm;
    return cudaSuccess;
}

/* The current device's pool of `kind` (0: scratch, 1: keeping), created on
 * first use with release threshold `keep`. */
static cudaError_t device_pool(int kind, uint64_t keep, cudaMemPool_t *pool)
{
    constexpr int kMaxDevices = 64;
    static cudaMemPool_t pools[2][kMaxDevices];
    static std::mutex lock;
    int device = 0;
    EXT_CUDA_TRY(cudaGetDevice(&device));
    if (device < 0 || device >= kMaxDevices)
        return cudaErrorInvalidDevice;
    std::lock_guard<std::mutex> hold(lock);
    if (!pools[kind][device]) {
        cudaMemPoolProps props = {};
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = device;
        cudaMemPool_t created;
        EXT_CUDA_TRY(cudaMemPoolCreate(&created, &props));
        cudaError_t err = cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &keep);
        if (err != cudaSuccess) {
            cudaMemPoolDestroy(created);
            return err;
        }
        pools[kind][device] = created;
    }
    *pool = pools[kind][device];
    return cudaSuccess;
}

cudaError_t ext_scratch_pool(cudaMemPool_t *pool)
{
    return device_pool(0, uint64_t(64) << 20, pool);
}

/* What a keeping arena leaves mapped when it ends: the next evaluation of a
 * similar size then allocates without mapping memory afresh. */
constexpr uint64_t kKeptBetweenArenas = uint64_t(256) << 20;

ExtDeviceArena::~ExtDeviceArena()
{
    if (keeping_pool_) {
        /* the buffers' frees are queued on the stream: let them land first */
        cudaStreamSynchronize(stream_);
        cudaMemPoolTrimTo(keeping_pool_, kKeptBetweenArenas);
    }
}

cudaError_t ExtDeviceArena::keep_freed_memory()
{
    return device_pool(1, UINT64_MAX, &keeping_pool_);
}

cudaError_t ExtDeviceArena::allocate(void **ptr, size_t bytes)
{
    *ptr = nullptr;
    int left = failing_allocations.load();
    while (left > 0 && !failing_allocations.compare_exchange_weak(left, left - 1)) {
    }
    if (left > 0)
        return cudaErrorMemoryAllocation;
    cudaMemPool_t pool = keeping_pool_;
    if (!pool)
        EXT_CUDA_TRY(ext_scratch_pool(&pool));
    cudaError_t err = cudaMallocFromPoolAsync(ptr, bytes, pool, stream_);
    if (err != cudaSuccess) {
        *ptr = nullptr;
        cudaGetLastError(); /* the failed allocation is reported here, not left sticky */
        return err;
    }
    in_use_ += int64_t(bytes);
    peak_ = in_use_ > peak_ ? in_use_ : peak_;
    return cudaSuccess;
}

void ExtDeviceArena::free(void *ptr, size_t bytes)
{
    cudaFreeAsync(ptr, stream_);
    in_use_ -= int64_t(bytes);
}
