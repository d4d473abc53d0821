/*
 * upsample_math.h: along one axis, which two input indices an output index
 * reads and with which weights (its "tap"), and the reverse: which output
 * indices read a given input index. One definition, shared by the CPU code
 * (C) and the kernels (CUDA), for float (_f32) and double (_f64), so that
 * both compute the same indices and weights.
 *
 * The arithmetic is torch's (area_pixel_compute_scale,
 * area_pixel_compute_source_index, guard_index_and_lambda), done in the
 * tensor's own precision; see upsample.h for the modes. Products are rounded
 * on their own on the GPU too (no fused multiply-add), so the CPU and the
 * GPU find the same taps.
 *
 * Taps are ordered: as the output index grows, neither i0 nor i1 decreases.
 * So the outputs reading input index s form one run, and within it those
 * reading s as their i1 (where i0 = s - 1) come before those reading it as
 * their i0. upsample_readers_* finds that run by binary search.
 */
#ifndef UPSAMPLE_MATH_H
#define UPSAMPLE_MATH_H

#include <float.h>
#include <stdint.h>

#include "upsample.h"

#ifdef __CUDACC__
#define UPSAMPLE_HD __host__ __device__ __forceinline__
#else
#define UPSAMPLE_HD static inline
#endif

#ifdef __CUDA_ARCH__
#define UPSAMPLE_MUL_f32(a, b) __fmul_rn((a), (b))
#define UPSAMPLE_MUL_f64(a, b) __dmul_rn((a), (b))
#else
#define UPSAMPLE_MUL_f32(a, b) ((a) * (b))
#define UPSAMPLE_MUL_f64(a, b) ((a) * (b))
#endif

/* The outputs reading one input index s: [first, middle) read it as their
 * i1, [middle, end) as their i0 (an empty run when first == end). */
typedef struct {
    int32_t first, middle, end;
} upsample_readers;

#define UPSAMPLE_DEFINE_AXIS(sfx, T, T_MAX)                                                   \
    /* output = w0 input[i0] + w1 input[i1] */                                                \
    typedef struct {                                                                          \
        int32_t i0, i1;                                                                       \
        T w0, w1;                                                                             \
    } upsample_tap_##sfx;                                                                     \
                                                                                              \
    /* r of upsample.h for an axis of `in` inputs and `out` outputs. A scale so   */        \
    /* small (subnormal) that 1 / scale overflows T gives T's largest value: an   */        \
    /* infinite r would make output 0's position inf * 0 = NaN.                   */        \
    UPSAMPLE_HD T upsample_ratio_##sfx(int32_t in, int32_t out, int32_t mode, double scale)   \
    {                                                                                         \
        if (mode == UPSAMPLE_ALIGN_CORNERS)                                                   \
            return out > 1 ? (T)(in - 1) / (T)(out - 1) : (T)0;                               \
        if (!(scale > 0.0))                                                                   \
            return (T)in / (T)out;                                                            \
        const double ratio = 1.0 / scale;                                                     \
        return ratio < (double)(T_MAX) ? (T)ratio : (T_MAX);                                  \
    }                                                                                         \
                                                                                              \
    UPSAMPLE_HD upsample_tap_##sfx upsample_tap_##sfx##_at(T ratio, int32_t o, int32_t in,    \
                                                           int32_t out, int32_t mode)         \
    {                                                                                         \
        upsample_tap_##sfx tap;                                                               \
        if (in == out) {                                                                      \
            tap.i0 = tap.i1 = o;                                                              \
            tap.w0 = (T)1;                                                                    \
            tap.w1 = (T)0;                                                                    \
            return tap;                                                                       \
        }                                                                                     \
        T src;                                                                                \
        if (mode == UPSAMPLE_HALF_PIXEL) {                                                    \
            src = UPSAMPLE_MUL_##sfx(ratio, (T)o + (T)0.5) - (T)0.5;                          \
            if (src < (T)0)                                                                   \
                src = (T)0;                                                                   \
        } else {                                                                              \
            src = UPSAMPLE_MUL_##sfx(ratio, (T)o);                                            \
        }                                                                                     \
        tap.i0 = src < (T)(in - 1) ? (int32_t)src : in - 1;                                   \
        tap.i1 = tap.i0 < in - 1 ? tap.i0 + 1 : tap.i0;                                       \
        T lambda = src - (T)tap.i0;                                                           \
        tap.w1 = lambda < (T)0 ? (T)0 : (lambda > (T)1 ? (T)1 : lambda);                      \
        tap.w0 = (T)1 - tap.w1;                                                               \
        return tap;                                                                           \
    }                                                                                         \
                                                                                              \
    /* The first output index whose i1 (use_i1) or i0 is >= s; out if none. */                \
    UPSAMPLE_HD int32_t upsample_first_reading_##sfx(T ratio, int32_t s, int use_i1,          \
                                                     int32_t in, int32_t out, int32_t mode)   \
    {                                                                                         \
        int32_t lo = 0, hi = out;                                                             \
        while (lo < hi) {                                                                     \
            int32_t mid = lo + (hi - lo) / 2;                                                 \
            upsample_tap_##sfx tap = upsample_tap_##sfx##_at(ratio, mid, in, out, mode);      \
            if ((use_i1 ? tap.i1 : tap.i0) >= s)                                              \
                hi = mid;                                                                     \
            else                                                                              \
                lo = mid + 1;                                                                 \
        }                                                                                     \
        return lo;                                                                            \
    }                                                                                         \
                                                                                              \
    UPSAMPLE_HD upsample_readers upsample_readers_##sfx(T ratio, int32_t s, int32_t in,       \
                                                        int32_t out, int32_t mode)            \
    {                                                                                         \
        upsample_readers r;                                                                   \
        r.first = upsample_first_reading_##sfx(ratio, s, 1, in, out, mode);                   \
        r.middle = upsample_first_reading_##sfx(ratio, s, 0, in, out, mode);                  \
        r.end = upsample_first_reading_##sfx(ratio, s + 1, 0, in, out, mode);                 \
        return r;                                                                             \
    }                                                                                         \
                                                                                              \
    /* The weight output o gives the input it reads as i1 (0 when i1 = i0) and     */        \
    /* as i0 (w0, plus w1 when i1 = i0): its share in each input's gradient.        */        \
    UPSAMPLE_HD void upsample_back_weights_##sfx(T ratio, int32_t o, int32_t in, int32_t out, \
                                                 int32_t mode, T *as_i1, T *as_i0)            \
    {                                                                                         \
        upsample_tap_##sfx tap = upsample_tap_##sfx##_at(ratio, o, in, out, mode);            \
        *as_i1 = tap.i1 == tap.i0 ? (T)0 : tap.w1;                                            \
        *as_i0 = tap.i1 == tap.i0 ? tap.w0 + tap.w1 : tap.w0;                                 \
    }

UPSAMPLE_DEFINE_AXIS(f32, float, FLT_MAX)
UPSAMPLE_DEFINE_AXIS(f64, double, DBL_MAX)

#endif /* UPSAMPLE_MATH_H */
