/*
 * ext_cuda.h: what the C shims need to know about CUDA errors, without
 * including CUDA headers (a CPU-only build compiles the shims without them).
 */
#ifndef EXT_CUDA_H
#define EXT_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

/* cudaGetErrorString for a launcher's return code. */
const char *ext_cuda_error_string(int err);
/* 1 if `err` is cudaErrorMemoryAllocation. */
int ext_cuda_error_is_oom(int err);
/* Test hook: the next `count` device allocations of this module's launchers
 * fail as out of memory (0 turns it off). */
void ext_test_fail_device_allocations(int count);

#ifdef __cplusplus
}
#endif

#endif /* EXT_CUDA_H */
