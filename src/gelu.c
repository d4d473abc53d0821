/*
 * gelu.c: the _ext.gelu shim: argument checks, the CPU implementation
 * (OpenMP over contiguous ranges) of forward, backward and double backward,
 * and the calls into the CUDA launchers of cuda/gelu_kernel.cu. The
 * formulas are in gelu_math.h, shared with the GPU.
 */
#include <stdint.h>

#include "ext_check.h"
#include "gelu.h"
#include "gelu_math.h"
#ifdef EXT_WITH_CUDA
#include "cuda/gelu_kernel.h"
#endif

#define FLOAT_DTYPES (EXT_MASK(EXT_FLOAT32) | EXT_MASK(EXT_FLOAT64))

/* Elements below which one thread is faster than waking the team. */
#define GELU_PARALLEL_MIN 32768

// ----------------------------------------------------------------------------
// argument checks shared by the CPU and CUDA entry points

static int check_approximate(const char *fn, int32_t approximate)
{
    if (approximate != GELU_NONE && approximate != GELU_TANH && approximate != GELU_SIGMOID)
        return ext_fail(EXT_ERR_VALUE, "%s: approximate must be GELU_NONE (0), GELU_TANH (1) or "
                        "GELU_SIGMOID (2), got %d", fn, (int)approximate);
    return EXT_OK;
}

/* Every tensor of args float32 or float64, with the dtype and shape of
 * `input` (one of them), on one device of device_type, and contiguous; then
 * `approximate`. Each kind of check runs over all of args before the next. */
static int check_elementwise(const char *fn, const ext_arg *args, int n_args,
                             const ext_tensor *input, int32_t approximate, int device_type)
{
    int st;
    for (int i = 0; i < n_args; i++)
        if ((st = ext_check_dtype(fn, args[i].name, args[i].t, FLOAT_DTYPES)))
            return st;
    for (int i = 0; i < n_args; i++)
        if (args[i].t != input &&
            (st = ext_check_like(fn, args[i].name, args[i].t, "input", input)))
            return st;
    if ((st = ext_check_devices(fn, args, n_args, device_type, NULL)))
        return st;
    for (int i = 0; i < n_args; i++)
        if ((st = ext_check_contiguous(fn, args[i].name, args[i].t)))
            return st;
    return check_approximate(fn, approximate);
}

static int check_forward(const char *fn, const ext_tensor *input, const ext_tensor *output,
                         int32_t approximate, int device_type)
{
    const ext_arg args[] = {{"input", input}, {"output", output}};
    return check_elementwise(fn, args, 2, input, approximate, device_type);
}

static int check_backward(const char *fn, const ext_tensor *grad_output, const ext_tensor *input,
                          const ext_tensor *grad_input, int32_t approximate, int device_type)
{
    const ext_arg args[] = {{"grad_output", grad_output}, {"input", input},
                            {"grad_input", grad_input}};
    return check_elementwise(fn, args, 3, input, approximate, device_type);
}

static int check_double_backward(const char *fn, const ext_tensor *grad_grad_input,
                                 const ext_tensor *grad_output, const ext_tensor *input,
                                 const ext_tensor *grad_grad_output,
                                 const ext_tensor *grad_input, int32_t approximate,
                                 int device_type)
{
    ext_arg args[5] = {{"grad_grad_input", grad_grad_input}, {"grad_output", grad_output},
                       {"input", input}};
    int n_args = 3;
    if (grad_grad_output == NULL && grad_input == NULL)
        return ext_fail(EXT_ERR_VALUE, "%s: grad_grad_output and grad_input are both NULL; ask "
                        "for at least one gradient", fn);
    if (grad_grad_output)
        args[n_args++] = (ext_arg){"grad_grad_output", grad_grad_output};
    if (grad_input)
        args[n_args++] = (ext_arg){"grad_input", grad_input};
    return check_elementwise(fn, args, n_args, input, approximate, device_type);
}

// ----------------------------------------------------------------------------
// CPU implementation

#define DEFINE_GELU_CPU(sfx, T)                                                               \
    static void gelu_forward_##sfx(const T *x, T *y, int64_t n, int approximate)             \
    {                                                                                         \
        _Pragma("omp parallel for schedule(static) if (n >= GELU_PARALLEL_MIN)")              \
        for (int64_t i = 0; i < n; i++)                                                       \
            y[i] = gelu_value_##sfx(x[i], approximate);                                       \
    }                                                                                         \
                                                                                              \
    static void gelu_backward_##sfx(const T *dy, const T *x, T *dx, int64_t n,               \
                                    int approximate)                                          \
    {                                                                                         \
        _Pragma("omp parallel for schedule(static) if (n >= GELU_PARALLEL_MIN)")              \
        for (int64_t i = 0; i < n; i++)                                                       \
            dx[i] = dy[i] * gelu_slope_##sfx(x[i], approximate);                              \
    }                                                                                         \
                                                                                              \
    /* ddy (or NULL) = ddx GELU'(x), dx (or NULL) = ddx dy GELU''(x) */                      \
    static void gelu_double_backward_##sfx(const T *ddx, const T *dy, const T *x, T *ddy,    \
                                           T *dx, int64_t n, int approximate)                 \
    {                                                                                         \
        _Pragma("omp parallel for schedule(static) if (n >= GELU_PARALLEL_MIN)")              \
        for (int64_t i = 0; i < n; i++) {                                                     \
            if (ddy)                                                                          \
                ddy[i] = ddx[i] * gelu_slope_##sfx(x[i], approximate);                        \
            if (dx)                                                                           \
                dx[i] = ddx[i] * dy[i] * gelu_curvature_##sfx(x[i], approximate);             \
        }                                                                                     \
    }

DEFINE_GELU_CPU(f32, float)
DEFINE_GELU_CPU(f64, double)

int gelu_forward_cpu(const ext_tensor *input, const ext_tensor *output, int32_t approximate)
{
    const char *fn = "gelu";
    int st = check_forward(fn, input, output, approximate, EXT_CPU);
    if (st)
        return st;
    int64_t n = ext_numel(input);
    if (input->dtype == EXT_FLOAT32)
        gelu_forward_f32(input->data, output->data, n, approximate);
    else
        gelu_forward_f64(input->data, output->data, n, approximate);
    return EXT_OK;
}

int gelu_backward_cpu(const ext_tensor *grad_output, const ext_tensor *input,
                      const ext_tensor *grad_input, int32_t approximate)
{
    const char *fn = "gelu_backward";
    int st = check_backward(fn, grad_output, input, grad_input, approximate, EXT_CPU);
    if (st)
        return st;
    int64_t n = ext_numel(input);
    if (input->dtype == EXT_FLOAT32)
        gelu_backward_f32(grad_output->data, input->data, grad_input->data, n, approximate);
    else
        gelu_backward_f64(grad_output->data, input->data, grad_input->data, n, approximate);
    return EXT_OK;
}

static void *data_or_null(const ext_tensor *t) { return t ? t->data : NULL; }

int gelu_double_backward_cpu(const ext_tensor *grad_grad_input, const ext_tensor *grad_output,
                             const ext_tensor *input, const ext_tensor *grad_grad_output,
                             const ext_tensor *grad_input, int32_t approximate)
{
    const char *fn = "gelu_double_backward";
    int st = check_double_backward(fn, grad_grad_input, grad_output, input, grad_grad_output,
                                   grad_input, approximate, EXT_CPU);
    if (st)
        return st;
    int64_t n = ext_numel(input);
    if (input->dtype == EXT_FLOAT32)
        gelu_double_backward_f32(grad_grad_input->data, grad_output->data, input->data,
                                 data_or_null(grad_grad_output), data_or_null(grad_input), n,
                                 approximate);
    else
        gelu_double_backward_f64(grad_grad_input->data, grad_output->data, input->data,
                                 data_or_null(grad_grad_output), data_or_null(grad_input), n,
                                 approximate);
    return EXT_OK;
}

// ----------------------------------------------------------------------------
// CUDA entry points

int gelu_forward_cuda(const ext_tensor *input, const ext_tensor *output, int32_t approximate,
                      void *stream)
{
    const char *fn = "gelu";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    int st = check_forward(fn, input, output, approximate, EXT_CUDA);
    if (st)
        return st;
    int err = gelu_forward_launch(input->data, output->data, input->dtype, ext_numel(input),
                                  approximate, input->device_index, stream);
    if (err)
        return ext_cuda_fail(fn, err);
    return EXT_OK;
#endif
}

int gelu_backward_cuda(const ext_tensor *grad_output, const ext_tensor *input,
                       const ext_tensor *grad_input, int32_t approximate, void *stream)
{
    const char *fn = "gelu_backward";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    int st = check_backward(fn, grad_output, input, grad_input, approximate, EXT_CUDA);
    if (st)
        return st;
    int err = gelu_backward_launch(grad_output->data, input->data, grad_input->data,
                                   input->dtype, ext_numel(input), approximate,
                                   input->device_index, stream);
    if (err)
        return ext_cuda_fail(fn, err);
    return EXT_OK;
#endif
}

int gelu_double_backward_cuda(const ext_tensor *grad_grad_input, const ext_tensor *grad_output,
                              const ext_tensor *input, const ext_tensor *grad_grad_output,
                              const ext_tensor *grad_input, int32_t approximate, void *stream)
{
    const char *fn = "gelu_double_backward";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    int st = check_double_backward(fn, grad_grad_input, grad_output, input, grad_grad_output,
                                   grad_input, approximate, EXT_CUDA);
    if (st)
        return st;
    int err = gelu_double_backward_launch(grad_grad_input->data, grad_output->data, input->data,
                                          data_or_null(grad_grad_output),
                                          data_or_null(grad_input), input->dtype,
                                          ext_numel(input), approximate, input->device_index,
                                          stream);
    if (err)
        return ext_cuda_fail(fn, err);
    return EXT_OK;
#endif
}
