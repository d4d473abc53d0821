/*
 * trilinear.c: the _ext.trilinear shim: argument checks, the CPU
 * implementation (OpenMP over points) of forward, backward and double
 * backward, and the calls into the CUDA launchers of
 * cuda/trilinear_kernel.cu. The weights and slopes are in
 * trilinear_math.h, shared with the GPU.
 */
#include <stdint.h>
#include <stdlib.h>

#include "ext_check.h"
#include "trilinear.h"
#include "trilinear_math.h"
#ifdef EXT_WITH_CUDA
#include "cuda/trilinear_kernel.h"
#endif

#define FLOAT_DTYPES (EXT_MASK(EXT_FLOAT32) | EXT_MASK(EXT_FLOAT64))

/* Feature values (N x F) below which one thread is faster than the team. */
#define TRILINEAR_PARALLEL_MIN 16384

// ----------------------------------------------------------------------------
// argument checks shared by the CPU and CUDA entry points

/* feats (N, 8, F) float, points (N, 3) of its dtype: the inputs of both passes. */
static int check_inputs(const char *fn, const ext_tensor *feats, const ext_tensor *points)
{
    char shape[192], other[192];
    int st;
    if ((st = ext_check_dtype(fn, "feats", feats, FLOAT_DTYPES)) ||
        (st = ext_check_dtype(fn, "points", points, EXT_MASK(feats->dtype))))
        return st;
    if (feats->ndim != 3 || feats->sizes[1] != 8)
        return ext_fail(EXT_ERR_VALUE, "%s: feats must be (N, 8, F), got %s", fn,
                        ext_shape_string(feats, shape, sizeof shape));
    if (points->ndim != 2 || points->sizes[0] != feats->sizes[0] || points->sizes[1] != 3)
        return ext_fail(EXT_ERR_VALUE, "%s: points is %s but feats is %s; points must be "
                        "(N, 3) = (%lld, 3)", fn, ext_shape_string(points, shape, sizeof shape),
                        ext_shape_string(feats, other, sizeof other),
                        (long long)feats->sizes[0]);
    return EXT_OK;
}

/* t (N, F), of feats' dtype, where N and F are feats' (N, 8, F). */
static int check_rows(const char *fn, const char *name, const ext_tensor *t,
                      const ext_tensor *feats)
{
    char shape[192], other[192];
    int st;
    if ((st = ext_check_dtype(fn, name, t, EXT_MASK(feats->dtype))))
        return st;
    if (t->ndim != 2 || t->sizes[0] != feats->sizes[0] || t->sizes[1] != feats->sizes[2])
        return ext_fail(EXT_ERR_VALUE, "%s: %s is %s but feats is %s; %s must be (N, F) = "
                        "(%lld, %lld)", fn, name, ext_shape_string(t, shape, sizeof shape),
                        ext_shape_string(feats, other, sizeof other), name,
                        (long long)feats->sizes[0], (long long)feats->sizes[2]);
    return EXT_OK;
}

/* t (or NULL) float, with the dtype and shape of ref: a gradient of ref's. */
static int check_optional_like(const char *fn, const char *name, const ext_tensor *t,
                               const char *ref_name, const ext_tensor *ref)
{
    int st;
    if (t && ((st = ext_check_dtype(fn, name, t, FLOAT_DTYPES)) ||
              (st = ext_check_like(fn, name, t, ref_name, ref))))
        return st;
    return EXT_OK;
}

static int check_forward(const char *fn, const ext_tensor *feats, const ext_tensor *points,
                         const ext_tensor *out, int device_type)
{
    const ext_arg args[] = {{"feats", feats}, {"points", points}, {"out", out}};
    int st;
    if ((st = check_inputs(fn, feats, points)) || (st = check_rows(fn, "out", out, feats)) ||
        (st = ext_check_devices(fn, args, 3, device_type, NULL)))
        return st;
    for (int i = 0; i < 3; i++)
        if ((st = ext_check_contiguous(fn, args[i].name, args[i].t)))
            return st;
    return EXT_OK;
}

static int check_backward(const char *fn, const ext_tensor *grad_out, const ext_tensor *feats,
                          const ext_tensor *points, const ext_tensor *grad_feats,
                          const ext_tensor *grad_points, int device_type)
{
    ext_arg args[5] = {{"feats", feats}, {"points", points}, {"grad_out", grad_out}};
    int n_args = 3, st;
    if ((st = check_inputs(fn, feats, points)) ||
        (st = check_rows(fn, "grad_out", grad_out, feats)))
        return st;
    if (grad_feats == NULL && grad_points == NULL)
        return ext_fail(EXT_ERR_VALUE, "%s: grad_feats and grad_points are both NULL; ask for "
                        "at least one gradient", fn);
    if ((st = check_optional_like(fn, "grad_feats", grad_feats, "feats", feats)) ||
        (st = check_optional_like(fn, "grad_points", grad_points, "points", points)))
        return st;
    if (grad_feats)
        args[n_args++] = (ext_arg){"grad_feats", grad_feats};
    if (grad_points)
        args[n_args++] = (ext_arg){"grad_points", grad_points};
    if ((st = ext_check_devices(fn, args, n_args, device_type, NULL)))
        return st;
    for (int i = 0; i < n_args; i++)
        if ((st = ext_check_contiguous(fn, args[i].name, args[i].t)))
            return st;
    return EXT_OK;
}

static int check_double_backward(const char *fn, const ext_tensor *grad_grad_feats,
                                 const ext_tensor *grad_grad_points, const ext_tensor *grad_out,
                                 const ext_tensor *feats, const ext_tensor *points,
                                 const ext_tensor *grad_grad_out, const ext_tensor *grad_feats,
                                 const ext_tensor *grad_points, int device_type)
{
    const ext_arg optional[] = {{"grad_grad_feats", grad_grad_feats},
                                {"grad_grad_points", grad_grad_points},
                                {"grad_grad_out", grad_grad_out},
                                {"grad_feats", grad_feats},
                                {"grad_points", grad_points}};
    ext_arg args[8] = {{"feats", feats}, {"points", points}, {"grad_out", grad_out}};
    int n_args = 3, st;
    if ((st = check_inputs(fn, feats, points)) ||
        (st = check_rows(fn, "grad_out", grad_out, feats)) ||
        (st = check_optional_like(fn, "grad_grad_feats", grad_grad_feats, "feats", feats)) ||
        (st = check_optional_like(fn, "grad_grad_points", grad_grad_points, "points", points)))
        return st;
    if (grad_grad_feats == NULL && grad_grad_points == NULL)
        return ext_fail(EXT_ERR_VALUE, "%s: grad_grad_feats and grad_grad_points are both NULL; "
                        "give at least one", fn);
    if (grad_grad_out == NULL && grad_feats == NULL && grad_points == NULL)
        return ext_fail(EXT_ERR_VALUE, "%s: grad_grad_out, grad_feats and grad_points are all "
                        "NULL; ask for at least one gradient", fn);
    if ((grad_grad_out && (st = check_rows(fn, "grad_grad_out", grad_grad_out, feats))) ||
        (st = check_optional_like(fn, "grad_feats", grad_feats, "feats", feats)) ||
        (st = check_optional_like(fn, "grad_points", grad_points, "points", points)))
        return st;
    for (int i = 0; i < 5; i++)
        if (optional[i].t)
            args[n_args++] = optional[i];
    if ((st = ext_check_devices(fn, args, n_args, device_type, NULL)))
        return st;
    for (int i = 0; i < n_args; i++)
        if ((st = ext_check_contiguous(fn, args[i].name, args[i].t)))
            return st;
    return EXT_OK;
}

// ----------------------------------------------------------------------------
// CPU implementation

/*
 * Forward: out[n, f] from feats[n, 0..7, f] and points[n]. Backward:
 * grad_feats[n, k, f] = grad_out[n, f] * corner weight k, and grad_points[n]
 * = 1/2 sum_f grad_out[n, f] * d out[n, f] / d (u, v, w), summed in f order.
 * Either gradient pointer may be NULL.
 */
#define DEFINE_TRILINEAR_CPU(sfx, T)                                                          \
    static void trilinear_forward_##sfx(const T *feats, const T *points, T *out,             \
                                        int64_t n_points, int64_t n_feats)                    \
    {                                                                                         \
        const int parallel = n_points * n_feats >= TRILINEAR_PARALLEL_MIN;                    \
        _Pragma("omp parallel for schedule(static) if (parallel)")                            \
        for (int64_t n = 0; n < n_points; n++) {                                              \
            const trilinear_point_##sfx q = trilinear_point_##sfx##_at(points + 3 * n);       \
            const T *cube = feats + n * 8 * n_feats;                                          \
            for (int64_t f = 0; f < n_feats; f++) {                                           \
                T corner[8];                                                                  \
                for (int k = 0; k < 8; k++)                                                   \
                    corner[k] = cube[k * n_feats + f];                                        \
                out[n * n_feats + f] = trilinear_value_##sfx(&q, corner);                     \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    static void trilinear_backward_##sfx(const T *grad_out, const T *feats, const T *points, \
                                         T *grad_feats, T *grad_points, int64_t n_points,     \
                                         int64_t n_feats)                                     \
    {                                                                                         \
        const int parallel = n_points * n_feats >= TRILINEAR_PARALLEL_MIN;                    \
        _Pragma("omp parallel for schedule(static) if (parallel)")                            \
        for (int64_t n = 0; n < n_points; n++) {                                              \
            const trilinear_point_##sfx q = trilinear_point_##sfx##_at(points + 3 * n);       \
            const T *cube = feats + n * 8 * n_feats;                                          \
            const T *grad_row = grad_out + n * n_feats;                                       \
            if (grad_feats) {                                                                 \
                T *grad_cube = grad_feats + n * 8 * n_feats;                                  \
                for (int k = 0; k < 8; k++)                                                   \
                    for (int64_t f = 0; f < n_feats; f++)                                     \
                        grad_cube[k * n_feats + f] = q.corner[k] * grad_row[f];               \
            }                                                                                 \
            if (grad_points) {                                                                \
                T sum[3] = {0, 0, 0};                                                         \
                for (int64_t f = 0; f < n_feats; f++) {                                       \
                    T corner[8], slope[3];                                                    \
                    for (int k = 0; k < 8; k++)                                               \
                        corner[k] = cube[k * n_feats + f];                                    \
                    trilinear_slopes_##sfx(&q, corner, slope);                                \
                    for (int i = 0; i < 3; i++)                                               \
                        sum[i] += grad_row[f] * slope[i];                                     \
                }                                                                             \
                for (int i = 0; i < 3; i++)                                                   \
                    grad_points[3 * n + i] = sum[i] / (T)2;                                   \
            }                                                                                 \
        }                                                                                     \
    }

DEFINE_TRILINEAR_CPU(f32, float)
DEFINE_TRILINEAR_CPU(f64, double)

/*
 * Double backward (trilinear.h): per point, the 8 corners' terms for the
 * direction grad_grad_points[n]; then per feature f, grad_grad_out and
 * grad_feats, and grad_points summed in f order. The terms of a NULL input
 * are left out (not multiplied by 0, which would turn an infinite feature
 * into NaN); NULL outputs are skipped.
 */
#define DEFINE_TRILINEAR_DOUBLE_BACKWARD_CPU(sfx, T)                                          \
    static void trilinear_double_backward_##sfx(                                              \
        const T *grad_grad_feats, const T *grad_grad_points, const T *grad_out,               \
        const T *feats, const T *points, T *grad_grad_out, T *grad_feats, T *grad_points,     \
        int64_t n_points, int64_t n_feats)                                                    \
    {                                                                                         \
        const int parallel = n_points * n_feats >= TRILINEAR_PARALLEL_MIN;                    \
        _Pragma("omp parallel for schedule(static) if (parallel)")                            \
        for (int64_t n = 0; n < n_points; n++) {                                              \
            const trilinear_point_##sfx q = trilinear_point_##sfx##_at(points + 3 * n);       \
            T dp[3] = {0, 0, 0};                                                              \
            if (grad_grad_points)                                                             \
                for (int i = 0; i < 3; i++)                                                   \
                    dp[i] = grad_grad_points[3 * n + i];                                      \
            trilinear_corner_terms_##sfx terms[8];                                            \
            for (int k = 0; k < 8; k++)                                                       \
                terms[k] = trilinear_corner_terms_##sfx##_at(&q, dp, k);                      \
            const int64_t cube = n * 8 * n_feats, row = n * n_feats;                          \
            T sum[3] = {0, 0, 0};                                                             \
            for (int64_t f = 0; f < n_feats; f++) {                                           \
                const T g = grad_out[row + f];                                                \
                T value = 0;                                                                  \
                for (int k = 0; k < 8; k++) {                                                 \
                    const int64_t at = cube + k * n_feats + f;                                \
                    const trilinear_corner_terms_##sfx *t = &terms[k];                        \
                    T point_term[3] = {0, 0, 0};                                              \
                    if (grad_grad_feats) {                                                    \
                        const T gg = grad_grad_feats[at];                                     \
                        value += gg * t->weight;                                              \
                        for (int i = 0; i < 3; i++)                                           \
                            point_term[i] += gg * t->slope[i];                                \
                    }                                                                         \
                    if (grad_grad_points) {                                                   \
                        value += feats[at] * t->along;                                        \
                        for (int i = 0; i < 3; i++)                                           \
                            point_term[i] += feats[at] * t->bend[i];                          \
                    }                                                                         \
                    if (grad_feats)                                                           \
                        grad_feats[at] = grad_grad_points ? g * t->along : (T)0;              \
                    for (int i = 0; i < 3; i++)                                               \
                        sum[i] += g * point_term[i];                                          \
                }                                                                             \
                if (grad_grad_out)                                                            \
                    grad_grad_out[row + f] = value;                                           \
            }                                                                                 \
            if (grad_points)                                                                  \
                for (int i = 0; i < 3; i++)                                                   \
                    grad_points[3 * n + i] = sum[i];                                          \
        }                                                                                     \
    }

DEFINE_TRILINEAR_DOUBLE_BACKWARD_CPU(f32, float)
DEFINE_TRILINEAR_DOUBLE_BACKWARD_CPU(f64, double)

static void *data_or_null(const ext_tensor *t) { return t ? t->data : NULL; }

int trilinear_forward_cpu(const ext_tensor *feats, const ext_tensor *points,
                          const ext_tensor *out)
{
    const char *fn = "trilinear_interpolation";
    int st = check_forward(fn, feats, points, out, EXT_CPU);
    if (st)
        return st;
    int64_t n_points = feats->sizes[0], n_feats = feats->sizes[2];
    if (feats->dtype == EXT_FLOAT32)
        trilinear_forward_f32(feats->data, points->data, out->data, n_points, n_feats);
    else
        trilinear_forward_f64(feats->data, points->data, out->data, n_points, n_feats);
    return EXT_OK;
}

int trilinear_backward_cpu(const ext_tensor *grad_out, const ext_tensor *feats,
                           const ext_tensor *points, const ext_tensor *grad_feats,
                           const ext_tensor *grad_points)
{
    const char *fn = "trilinear_interpolation_backward";
    int st = check_backward(fn, grad_out, feats, points, grad_feats, grad_points, EXT_CPU);
    if (st)
        return st;
    int64_t n_points = feats->sizes[0], n_feats = feats->sizes[2];
    if (feats->dtype == EXT_FLOAT32)
        trilinear_backward_f32(grad_out->data, feats->data, points->data,
                               data_or_null(grad_feats), data_or_null(grad_points), n_points,
                               n_feats);
    else
        trilinear_backward_f64(grad_out->data, feats->data, points->data,
                               data_or_null(grad_feats), data_or_null(grad_points), n_points,
                               n_feats);
    return EXT_OK;
}

int trilinear_double_backward_cpu(const ext_tensor *grad_grad_feats,
                                  const ext_tensor *grad_grad_points, const ext_tensor *grad_out,
                                  const ext_tensor *feats, const ext_tensor *points,
                                  const ext_tensor *grad_grad_out, const ext_tensor *grad_feats,
                                  const ext_tensor *grad_points)
{
    const char *fn = "trilinear_interpolation_double_backward";
    int st = check_double_backward(fn, grad_grad_feats, grad_grad_points, grad_out, feats,
                                   points, grad_grad_out, grad_feats, grad_points, EXT_CPU);
    if (st)
        return st;
    int64_t n_points = feats->sizes[0], n_feats = feats->sizes[2];
    if (feats->dtype == EXT_FLOAT32)
        trilinear_double_backward_f32(data_or_null(grad_grad_feats),
                                      data_or_null(grad_grad_points), grad_out->data,
                                      feats->data, points->data, data_or_null(grad_grad_out),
                                      data_or_null(grad_feats), data_or_null(grad_points),
                                      n_points, n_feats);
    else
        trilinear_double_backward_f64(data_or_null(grad_grad_feats),
                                      data_or_null(grad_grad_points), grad_out->data,
                                      feats->data, points->data, data_or_null(grad_grad_out),
                                      data_or_null(grad_feats), data_or_null(grad_points),
                                      n_points, n_feats);
    return EXT_OK;
}

// ----------------------------------------------------------------------------
// CUDA entry points

int trilinear_forward_cuda(const ext_tensor *feats, const ext_tensor *points,
                           const ext_tensor *out, void *stream)
{
    const char *fn = "trilinear_interpolation";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    int st = check_forward(fn, feats, points, out, EXT_CUDA);
    if (st)
        return st;
    int err = trilinear_forward_launch(feats->data, points->data, out->data, feats->dtype,
                                       feats->sizes[0], feats->sizes[2], feats->device_index,
                                       stream);
    if (err)
        return ext_cuda_fail(fn, err);
    return EXT_OK;
#endif
}

int trilinear_backward_cuda(const ext_tensor *grad_out, const ext_tensor *feats,
                            const ext_tensor *points, const ext_tensor *grad_feats,
                            const ext_tensor *grad_points, void *stream)
{
    const char *fn = "trilinear_interpolation_backward";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    int st = check_backward(fn, grad_out, feats, points, grad_feats, grad_points, EXT_CUDA);
    if (st)
        return st;
    int err = trilinear_backward_launch(grad_out->data, feats->data, points->data,
                                        data_or_null(grad_feats), data_or_null(grad_points),
                                        feats->dtype, feats->sizes[0], feats->sizes[2],
                                        feats->device_index, stream);
    if (err)
        return ext_cuda_fail(fn, err);
    return EXT_OK;
#endif
}

int trilinear_double_backward_cuda(const ext_tensor *grad_grad_feats,
                                   const ext_tensor *grad_grad_points, const ext_tensor *grad_out,
                                   const ext_tensor *feats, const ext_tensor *points,
                                   const ext_tensor *grad_grad_out, const ext_tensor *grad_feats,
                                   const ext_tensor *grad_points, void *stream)
{
    const char *fn = "trilinear_interpolation_double_backward";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    int st = check_double_backward(fn, grad_grad_feats, grad_grad_points, grad_out, feats,
                                   points, grad_grad_out, grad_feats, grad_points, EXT_CUDA);
    if (st)
        return st;
    int err = trilinear_double_backward_launch(
        data_or_null(grad_grad_feats), data_or_null(grad_grad_points), grad_out->data,
        feats->data, points->data, data_or_null(grad_grad_out), data_or_null(grad_feats),
        data_or_null(grad_points), feats->dtype, feats->sizes[0], feats->sizes[2],
        feats->device_index, stream);
    if (err)
        return ext_cuda_fail(fn, err);
    return EXT_OK;
#endif
}
