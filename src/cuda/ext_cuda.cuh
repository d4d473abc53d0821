/*
 * ext_cuda.cuh: helpers for the launchers in src/cuda/*.cu (C++ only).
 *
 * Launchers take raw pointers, sizes, a device ordinal and the caller's
 * stream, and return a cudaError_t as int; they never exit or print.
 */
#ifndef EXT_CUDA_CUH
#define EXT_CUDA_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "ext_cuda.h"

/* Return the error of a runtime call from the enclosing launcher. */
#define EXT_CUDA_TRY(call)                         \
    do {                                           \
        cudaError_t ext_err_ = (call);             \
        if (ext_err_ != cudaSuccess)               \
            return ext_err_;                       \
    } while (0)

/* Makes `device` current for the launcher's lifetime. The module links its own
 * (static) CUDA runtime, whose current device is not PyTorch's. It also
 * clears an error an earlier call left behind (a bad device ordinal, say), so
 * that the launcher's own cudaGetLastError() reports only its own launches. */
class ExtDeviceGuard {
  public:
    explicit ExtDeviceGuard(int device)
    {
        cudaGetLastError();
        if (cudaGetDevice(&previous_) != cudaSuccess)
            previous_ = -1;
        if (previous_ == device) { /* already current: nothing to set or restore */
            previous_ = -1;
            error_ = cudaSuccess;
        } else {
            error_ = cudaSetDevice(device);
        }
        cudaGetLastError();
    }
    ~ExtDeviceGuard()
    {
        if (previous_ >= 0)
            cudaSetDevice(previous_);
    }
    cudaError_t error() const { return error_; }

  private:
    int previous_;
    cudaError_t error_;
};

/* The current device's pool for launchers' scratch memory: stream-ordered,
 * and unlike the default pool it keeps up to 64 MiB of freed memory across
 * synchronizations, so that a launcher's small buffers are not mapped afresh
 * at every call (tens of microseconds each). Created on first use. */
cudaError_t ext_scratch_pool(cudaMemPool_t *pool /* OUT */);

/* Where a launcher's device memory comes from: stream-ordered allocations on
 * `stream`, from the device's scratch pool or, after keep_freed_memory(), from
 * the device's keeping pool: it keeps every freed byte for the next
 * allocation while the arena lives (an evaluation allocates and frees the same
 * large buffers step after step), and all but 256 MiB are given back when the
 * arena ends (a pool made and destroyed for each evaluation cost ~0.25 ms of
 * a 7 ms call, and mapping its memory afresh more). It counts the bytes its
 * buffers hold and their peak. Declare it before the buffers that use it:
 * they must be released first. */
class ExtDeviceArena {
  public:
    explicit ExtDeviceArena(cudaStream_t stream) : stream_(stream) {}
    ExtDeviceArena(const ExtDeviceArena &) = delete;
    ExtDeviceArena &operator=(const ExtDeviceArena &) = delete;
    ~ExtDeviceArena();

    cudaError_t keep_freed_memory();
    cudaError_t allocate(void **ptr, size_t bytes);
    void free(void *ptr, size_t bytes);
    cudaStream_t stream() const { return stream_; }
    int64_t peak_bytes() const { return peak_; }

  private:
    cudaStream_t stream_;
    cudaMemPool_t keeping_pool_ = nullptr;
    int64_t in_use_ = 0, peak_ = 0;
};

/* count elements of T on the device, freed (in stream order) when the buffer
 * goes out of scope or is allocated again: an early error return frees
 * everything its scope allocated. Movable, not copyable. */
template <typename T> class ExtDeviceBuffer {
  public:
    explicit ExtDeviceBuffer(ExtDeviceArena &arena) : arena_(&arena) {}
    ExtDeviceBuffer(const ExtDeviceBuffer &) = delete;
    ExtDeviceBuffer &operator=(const ExtDeviceBuffer &) = delete;
    ExtDeviceBuffer(ExtDeviceBuffer &&other) noexcept
        : arena_(other.arena_), ptr_(other.ptr_), count_(other.count_)
    {
        other.ptr_ = nullptr;
        other.count_ = 0;
    }
    ExtDeviceBuffer &operator=(ExtDeviceBuffer &&other) noexcept
    {
        if (this != &other) {
            release();
            arena_ = other.arena_;
            ptr_ = other.ptr_;
            count_ = other.count_;
            other.ptr_ = nullptr;
            other.count_ = 0;
        }
        return *this;
    }
    ~ExtDeviceBuffer() { release(); }

    /* Room for max(count, 1) elements (so get() is never NULL once allocated). */
    cudaError_t allocate(size_t count)
    {
        release();
        void *ptr = nullptr;
        EXT_CUDA_TRY(arena_->allocate(&ptr, bytes_for(count)));
        ptr_ = static_cast<T *>(ptr);
        count_ = count;
        return cudaSuccess;
    }
    void release()
    {
        if (ptr_)
            arena_->free(ptr_, bytes_for(count_));
        ptr_ = nullptr;
        count_ = 0;
    }
    T *get() const { return ptr_; }
    size_t size() const { return count_; }

  private:
    static size_t bytes_for(size_t count) { return (count > 0 ? count : 1) * sizeof(T); }
    ExtDeviceArena *arena_;
    T *ptr_ = nullptr;
    size_t count_ = 0;
};

/* kN consecutive elements of T moved as one access: ExtVec<float, 4> and
 * ExtVec<double, 2> are 16-byte loads and stores (the pointer must be aligned
 * to sizeof(T) * kN); ExtVec<T, 1> is a plain scalar access. */
template <typename T, int kN> struct alignas(sizeof(T) * kN) ExtVec {
    T v[kN];
};

/* Elements of T in one 16-byte access. */
template <typename T> constexpr int ext_vec16_width() { return int(16 / sizeof(T)); }

/* True if p is 16-byte aligned. */
__host__ __device__ inline bool ext_aligned16(const void *p)
{
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/* Multiprocessors of the current device (asked once a device). */
int ext_sm_count();

/* The blocks of `threads` threads and `shared` dynamic bytes of kernel that
 * one multiprocessor of the current device holds at once, at least 1. Asked of
 * the runtime once for each kernel, shape and device: the query costs about a
 * microsecond, a large part of a call on a tiny input. */
cudaError_t ext_blocks_per_sm(const void *kernel, int threads, size_t shared, int *per_sm);

/* Blocks of `threads` threads that fill the current device once: the grid
 * of a grid-stride kernel. */
template <typename Kernel>
cudaError_t ext_full_wave(Kernel kernel, int threads, size_t shared, int64_t *blocks /* OUT */)
{
    int per_sm = 1;
    cudaError_t err = ext_blocks_per_sm(reinterpret_cast<const void *>(kernel), threads, shared,
                                        &per_sm);
    *blocks = int64_t(ext_sm_count()) * per_sm;
    return err;
}

#endif /* EXT_CUDA_CUH */
