/*
 * upsample.c: the _ext.upsample shim: argument checks, the CPU
 * implementation (OpenMP over rows), and the calls into the CUDA launchers of
 * cuda/upsample_kernel.cu. Where each output reads from is computed by
 * upsample_math.h, shared with the GPU.
 *
 * Forward: each output row (plane, oh) blends input rows i0(oh) and i1(oh);
 * each output element of it blends columns i0(ow) and i1(ow). The per-axis
 * taps are computed once per call.
 *
 * Backward is a gather, not a scatter: grad_input[plane, h, w] sums
 * grad_output over the outputs that read (h, w), which along each axis are
 * one run of indices (upsample_readers), weighted by what each output gave
 * that input. Every element is written once, in a fixed order: no zeroing,
 * no atomics, the same result on every run.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "ext_check.h"
#include "upsample.h"
#include "upsample_math.h"
#ifdef EXT_WITH_CUDA
#include "cuda/upsample_kernel.h"
#endif

#define FLOAT_DTYPES (EXT_MASK(EXT_FLOAT32) | EXT_MASK(EXT_FLOAT64))

/* Output (forward) or input (backward) elements below which one thread is
 * faster than the team. */
#define UPSAMPLE_PARALLEL_MIN 16384

// ----------------------------------------------------------------------------
// argument checks shared by the CPU and CUDA entry points

/* A 4-D (N, C, H, W) tensor whose H and W are in [1, 2^31). */
static int check_image(const char *fn, const char *name, const ext_tensor *t)
{
    char shape[192];
    int st;
    if ((st = ext_check_ndim(fn, name, t, 4)))
        return st;
    if (t->sizes[2] < 1 || t->sizes[3] < 1)
        return ext_fail(EXT_ERR_VALUE, "%s: %s is %s; its height and width must be at least 1",
                        fn, name, ext_shape_string(t, shape, sizeof shape));
    if (t->sizes[2] > INT32_MAX || t->sizes[3] > INT32_MAX)
        return ext_fail(EXT_ERR_VALUE, "%s: %s is %s; its height and width must be below 2^31",
                        fn, name, ext_shape_string(t, shape, sizeof shape));
    return EXT_OK;
}

static int check_scale(const char *fn, const char *name, double scale)
{
    if (!(scale >= 0.0) || isinf(scale))
        return ext_fail(EXT_ERR_VALUE, "%s: %s must be a positive number, or 0 for none, got %g",
                        fn, name, scale);
    return EXT_OK;
}

/*
 * given is the caller's tensor and written the one the call fills: forward,
 * input (N, C, H, W) and output (N, C, OH, OW); backward, grad_output
 * (N, C, OH, OW) and grad_input (N, C, H, W).
 */
static int check_args(const char *fn, const char *given_name, const ext_tensor *given,
                      const char *written_name, const ext_tensor *written, int32_t mode,
                      double scale_h, double scale_w, int device_type)
{
    const ext_arg args[] = {{given_name, given}, {written_name, written}};
    char shape[192], other[192];
    int st;
    if ((st = ext_check_dtype(fn, given_name, given, FLOAT_DTYPES)) ||
        (st = ext_check_dtype(fn, written_name, written, EXT_MASK(given->dtype))) ||
        (st = ext_check_devices(fn, args, 2, device_type, NULL)) ||
        (st = ext_check_contiguous(fn, given_name, given)) ||
        (st = ext_check_contiguous(fn, written_name, written)) ||
        (st = check_image(fn, given_name, given)) ||
        (st = check_image(fn, written_name, written)))
        return st;
    if (given->sizes[0] != written->sizes[0] || given->sizes[1] != written->sizes[1])
        return ext_fail(EXT_ERR_VALUE, "%s: %s is %s but %s is %s; N and C must match", fn,
                        written_name, ext_shape_string(written, shape, sizeof shape),
                        given_name, ext_shape_string(given, other, sizeof other));
    if (mode != UPSAMPLE_HALF_PIXEL && mode != UPSAMPLE_ALIGN_CORNERS &&
        mode != UPSAMPLE_ASYMMETRIC)
        return ext_fail(EXT_ERR_VALUE, "%s: mode must be UPSAMPLE_HALF_PIXEL (0), "
                        "UPSAMPLE_ALIGN_CORNERS (1) or UPSAMPLE_ASYMMETRIC (2), got %d", fn,
                        (int)mode);
    if ((st = check_scale(fn, "scale_h", scale_h)) || (st = check_scale(fn, "scale_w", scale_w)))
        return st;
    return EXT_OK;
}

// ----------------------------------------------------------------------------
// CPU implementation

/*
 * forward: input (planes, in_h, in_w) -> output (planes, out_h, out_w)
 * backward: grad_output (planes, out_h, out_w) -> grad_input (planes, in_h, in_w)
 * Each returns 0, or -1 when its tables cannot be allocated.
 */
#define DEFINE_UPSAMPLE_CPU(sfx, T)                                                           \
    static int upsample_forward_##sfx(const T *input, T *output, int64_t planes,             \
                                      int32_t in_h, int32_t in_w, int32_t out_h,              \
                                      int32_t out_w, int32_t mode, double scale_h,            \
                                      double scale_w)                                         \
    {                                                                                         \
        upsample_tap_##sfx *taps_h = ext_malloc(((size_t)out_h + out_w) * sizeof *taps_h);        \
        if (taps_h == NULL)                                                                   \
            return -1;                                                                        \
        upsample_tap_##sfx *taps_w = taps_h + out_h;                                          \
        const T ratio_h = upsample_ratio_##sfx(in_h, out_h, mode, scale_h);                   \
        const T ratio_w = upsample_ratio_##sfx(in_w, out_w, mode, scale_w);                   \
        for (int32_t o = 0; o < out_h; o++)                                                   \
            taps_h[o] = upsample_tap_##sfx##_at(ratio_h, o, in_h, out_h, mode);               \
        for (int32_t o = 0; o < out_w; o++)                                                   \
            taps_w[o] = upsample_tap_##sfx##_at(ratio_w, o, in_w, out_w, mode);               \
                                                                                              \
        const int64_t rows = planes * out_h;                                                  \
        const int parallel = rows * out_w >= UPSAMPLE_PARALLEL_MIN;                           \
        _Pragma("omp parallel for schedule(static) if (parallel)")                            \
        for (int64_t row = 0; row < rows; row++) {                                            \
            const int64_t plane = row / out_h;                                                \
            const upsample_tap_##sfx th = taps_h[row % out_h];                                \
            const T *top = input + (plane * in_h + th.i0) * in_w;                             \
            const T *bottom = input + (plane * in_h + th.i1) * in_w;                          \
            T *dst = output + row * out_w;                                                    \
            for (int32_t ow = 0; ow < out_w; ow++) {                                          \
                const upsample_tap_##sfx tw = taps_w[ow];                                     \
                dst[ow] = th.w0 * (tw.w0 * top[tw.i0] + tw.w1 * top[tw.i1]) +                 \
                          th.w1 * (tw.w0 * bottom[tw.i0] + tw.w1 * bottom[tw.i1]);            \
            }                                                                                 \
        }                                                                                     \
        free(taps_h);                                                                         \
        return 0;                                                                             \
    }                                                                                         \
                                                                                              \
    static int upsample_backward_##sfx(const T *grad_output, T *grad_input, int64_t planes,  \
                                       int32_t in_h, int32_t in_w, int32_t out_h,             \
                                       int32_t out_w, int32_t mode, double scale_h,           \
                                       double scale_w)                                        \
    {                                                                                         \
        /* weights: (as_i1, as_i0) per output row, then per output column */                 \
        T *weights = ext_malloc(2 * ((size_t)out_h + out_w) * sizeof *weights);                   \
        upsample_readers *readers_h = ext_malloc(((size_t)in_h + in_w) * sizeof *readers_h);      \
        if (weights == NULL || readers_h == NULL) {                                           \
            free(weights);                                                                    \
            free(readers_h);                                                                  \
            return -1;                                                                        \
        }                                                                                     \
        T *as_i1_h = weights, *as_i0_h = as_i1_h + out_h;                                     \
        T *as_i1_w = as_i0_h + out_h, *as_i0_w = as_i1_w + out_w;                             \
        upsample_readers *readers_w = readers_h + in_h;                                       \
        const T ratio_h = upsample_ratio_##sfx(in_h, out_h, mode, scale_h);                   \
        const T ratio_w = upsample_ratio_##sfx(in_w, out_w, mode, scale_w);                   \
        for (int32_t o = 0; o < out_h; o++)                                                   \
            upsample_back_weights_##sfx(ratio_h, o, in_h, out_h, mode, &as_i1_h[o],           \
                                        &as_i0_h[o]);                                         \
        for (int32_t o = 0; o < out_w; o++)                                                   \
            upsample_back_weights_##sfx(ratio_w, o, in_w, out_w, mode, &as_i1_w[o],           \
                                        &as_i0_w[o]);                                         \
        for (int32_t s = 0; s < in_h; s++)                                                    \
            readers_h[s] = upsample_readers_##sfx(ratio_h, s, in_h, out_h, mode);             \
        for (int32_t s = 0; s < in_w; s++)                                                    \
            readers_w[s] = upsample_readers_##sfx(ratio_w, s, in_w, out_w, mode);             \
                                                                                              \
        const int64_t rows = planes * in_h;                                                   \
        const int parallel = rows * in_w >= UPSAMPLE_PARALLEL_MIN;                            \
        _Pragma("omp parallel for schedule(static) if (parallel)")                            \
        for (int64_t row = 0; row < rows; row++) {                                            \
            const upsample_readers rh = readers_h[row % in_h];                                \
            const T *grad_plane = grad_output + row / in_h * out_h * out_w;                   \
            T *dst = grad_input + row * in_w;                                                 \
            for (int32_t w = 0; w < in_w; w++) {                                              \
                const upsample_readers rw = readers_w[w];                                     \
                T sum = 0;                                                                    \
                for (int32_t oh = rh.first; oh < rh.end; oh++) {                              \
                    const T *grad_row = grad_plane + (int64_t)oh * out_w;                     \
                    T row_sum = 0;                                                            \
                    for (int32_t ow = rw.first; ow < rw.middle; ow++)                         \
                        row_sum += as_i1_w[ow] * grad_row[ow];                                \
                    for (int32_t ow = rw.middle; ow < rw.end; ow++)                           \
                        row_sum += as_i0_w[ow] * grad_row[ow];                                \
                    sum += (oh < rh.middle ? as_i1_h[oh] : as_i0_h[oh]) * row_sum;            \
                }                                                                             \
                dst[w] = sum;                                                                 \
            }                                                                                 \
        }                                                                                     \
        free(weights);                                                                        \
        free(readers_h);                                                                      \
        return 0;                                                                             \
    }

DEFINE_UPSAMPLE_CPU(f32, float)
DEFINE_UPSAMPLE_CPU(f64, double)

int upsample_bilinear_forward_cpu(const ext_tensor *input, const ext_tensor *output,
                                  int32_t mode, double scale_h, double scale_w)
{
    const char *fn = "upsample_bilinear";
    int st = check_args(fn, "input", input, "output", output, mode, scale_h, scale_w, EXT_CPU);
    if (st)
        return st;
    const int64_t planes = input->sizes[0] * input->sizes[1];
    const int32_t in_h = (int32_t)input->sizes[2], in_w = (int32_t)input->sizes[3];
    const int32_t out_h = (int32_t)output->sizes[2], out_w = (int32_t)output->sizes[3];
    if (planes == 0) /* nothing to write: do not build taps for a size nobody reads */
        return EXT_OK;
    int failed = input->dtype == EXT_FLOAT32
                     ? upsample_forward_f32(input->data, output->data, planes, in_h, in_w,
                                            out_h, out_w, mode, scale_h, scale_w)
                     : upsample_forward_f64(input->data, output->data, planes, in_h, in_w,
                                            out_h, out_w, mode, scale_h, scale_w);
    if (failed)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the taps of %d + %d outputs", fn,
                        (int)out_h, (int)out_w);
    return EXT_OK;
}

int upsample_bilinear_backward_cpu(const ext_tensor *grad_output, const ext_tensor *grad_input,
                                   int32_t mode, double scale_h, double scale_w)
{
    const char *fn = "upsample_bilinear_backward";
    int st = check_args(fn, "grad_output", grad_output, "grad_input", grad_input, mode, scale_h,
                        scale_w, EXT_CPU);
    if (st)
        return st;
    const int64_t planes = grad_input->sizes[0] * grad_input->sizes[1];
    const int32_t in_h = (int32_t)grad_input->sizes[2], in_w = (int32_t)grad_input->sizes[3];
    const int32_t out_h = (int32_t)grad_output->sizes[2], out_w = (int32_t)grad_output->sizes[3];
    if (planes == 0)
        return EXT_OK;
    int failed = grad_input->dtype == EXT_FLOAT32
                     ? upsample_backward_f32(grad_output->data, grad_input->data, planes, in_h,
                                             in_w, out_h, out_w, mode, scale_h, scale_w)
                     : upsample_backward_f64(grad_output->data, grad_input->data, planes, in_h,
                                             in_w, out_h, out_w, mode, scale_h, scale_w);
    if (failed)
        return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the tables of a %d x %d input", fn,
                        (int)in_h, (int)in_w);
    return EXT_OK;
}

// ----------------------------------------------------------------------------
// CUDA entry points

int upsample_bilinear_forward_cuda(const ext_tensor *input, const ext_tensor *output,
                                   int32_t mode, double scale_h, double scale_w, void *stream)
{
    const char *fn = "upsample_bilinear";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    int st = check_args(fn, "input", input, "output", output, mode, scale_h, scale_w, EXT_CUDA);
    if (st)
        return st;
    int err = upsample_forward_launch(input->data, output->data, input->dtype,
                                      input->sizes[0] * input->sizes[1], (int32_t)input->sizes[2],
                                      (int32_t)input->sizes[3], (int32_t)output->sizes[2],
                                      (int32_t)output->sizes[3], mode, scale_h, scale_w,
                                      input->device_index, stream);
    if (err)
        return ext_cuda_fail(fn, err);
    return EXT_OK;
#endif
}

int upsample_bilinear_backward_cuda(const ext_tensor *grad_output, const ext_tensor *grad_input,
                                    int32_t mode, double scale_h, double scale_w, void *stream)
{
    const char *fn = "upsample_bilinear_backward";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    int st = check_args(fn, "grad_output", grad_output, "grad_input", grad_input, mode, scale_h,
                        scale_w, EXT_CUDA);
    if (st)
        return st;
    int err = upsample_backward_launch(
        grad_output->data, grad_input->data, grad_input->dtype,
        grad_input->sizes[0] * grad_input->sizes[1], (int32_t)grad_input->sizes[2],
        (int32_t)grad_input->sizes[3], (int32_t)grad_output->sizes[2],
        (int32_t)grad_output->sizes[3], mode, scale_h, scale_w, grad_input->device_index, stream);
    if (err)
        return ext_cuda_fail(fn, err);
    return EXT_OK;
#endif
}
