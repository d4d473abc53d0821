/*
 * conv.c: the _ext.conv shim. Every entry point checks the descriptors
 * (dtype, device, contiguity, shapes), then runs the CPU implementation below
 * or the CUDA launchers in cuda/conv_kernel.cu. conv.h says what is computed.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "conv.h"
#include "conv_internal.h"
#include "ext_check.h"
#ifdef EXT_WITH_CUDA
#include "cuda/conv_kernel.h"
#endif

#define FLOAT_DTYPES (EXT_MASK(EXT_FLOAT32) | EXT_MASK(EXT_FLOAT64))

/* Largest image side and kernel side: the kernels index within a plane, and
 * count taps, in int. */
#define MAX_SIDE (1ll << 30)
#define MAX_KERNEL_SIDE 32767

/* Multiply-adds below which the CPU work runs on one thread. */
#define PARALLEL_WORK (1ll << 18)

/* ------------------------------------------------------------------------- */
/* argument checks shared by the four entry points */

static int same_shape(const ext_tensor *a, const ext_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d])
            return 0;
    return 1;
}

/* `t` (named `name`) must have the shape of `like` (named `like_name`). */
static int check_shape_like(const char *fn, const char *name, const ext_tensor *t,
                            const char *like_name, const ext_tensor *like)
{
    if (same_shape(t, like))
        return EXT_OK;
    char got[256], wanted[256];
    ext_shape_string(t, got, sizeof got);
    ext_shape_string(like, wanted, sizeof wanted);
    return ext_fail(EXT_ERR_VALUE, "%s: %s must have the shape of %s, %s, got %s", fn, name,
                    like_name, wanted, got);
}

/* The kernel of an image with `channels` channels: (K, K) or (channels, K, K). */
static int check_kernel(const char *fn, const ext_tensor *kernel, int64_t channels,
                        int image_ndim)
{
    char shape[256];
    ext_shape_string(kernel, shape, sizeof shape);
    const int64_t *sizes = kernel->sizes + (kernel->ndim == 3 ? 1 : 0);
    int ok = (kernel->ndim == 2 || (kernel->ndim == 3 && kernel->sizes[0] == channels)) &&
             sizes[0] == sizes[1] && sizes[0] % 2 == 1;
    if (!ok && image_ndim == 4)
        return ext_fail(EXT_ERR_VALUE, "%s: kernel must be (2R+1, 2R+1) or (C, 2R+1, 2R+1) with "
                        "C = %lld, the channels of image, got %s", fn, (long long)channels,
                        shape);
    if (!ok)
        return ext_fail(EXT_ERR_VALUE, "%s: kernel must be (2R+1, 2R+1) (or (1, 2R+1, 2R+1) for "
                        "an (H, W) image), got %s", fn, shape);
    if (sizes[0] > MAX_KERNEL_SIDE)
        return ext_fail(EXT_ERR_VALUE, "%s: kernel is %lld x %lld; at most %d x %d is supported",
                        fn, (long long)sizes[0], (long long)sizes[0], MAX_KERNEL_SIDE,
                        MAX_KERNEL_SIDE);
    return EXT_OK;
}

/*
 * image and kernel, and `n_others` tensors of image's dtype (outputs,
 * grad_out; their shapes are the caller's to check), on one device; then the
 * geometry they make.
 */
static int check_args(const char *fn, const ext_tensor *image, const ext_tensor *kernel,
                      const ext_arg *others, int n_others, int device_type,
                      conv_geometry *geometry)
{
    ext_arg all[6] = {{"image", image}, {"kernel", kernel}};
    int n_all = 2, st;
    for (int a = 0; a < n_others; a++)
        all[n_all++] = others[a];
    for (int a = 0; a < n_all; a++)
        if ((st = ext_check_dtype(fn, all[a].name, all[a].t, FLOAT_DTYPES)))
            return st;
    for (int a = 1; a < n_all; a++)
        if (all[a].t->dtype != image->dtype)
            return ext_fail(EXT_ERR_TYPE, "%s: %s must have the dtype of image (%s), got %s", fn,
                            all[a].name, ext_dtype_name(image->dtype),
                            ext_dtype_name(all[a].t->dtype));
    if ((st = ext_check_devices(fn, all, n_all, device_type, NULL)))
        return st;
    for (int a = 0; a < n_all; a++)
        if ((st = ext_check_contiguous(fn, all[a].name, all[a].t)))
            return st;

    char shape[256];
    ext_shape_string(image, shape, sizeof shape);
    if (image->ndim != 2 && image->ndim != 4)
        return ext_fail(EXT_ERR_VALUE, "%s: image must be (H, W) or (N, C, H, W), got %d-D %s",
                        fn, image->ndim, shape);
    if (ext_numel(image) == 0)
        return ext_fail(EXT_ERR_VALUE, "%s: image is empty, %s", fn, shape);
    const int64_t height = image->sizes[image->ndim - 2], width = image->sizes[image->ndim - 1];
    if (height > MAX_SIDE || width > MAX_SIDE)
        return ext_fail(EXT_ERR_VALUE, "%s: image is %s; its height and width must be at most "
                        "%lld", fn, shape, MAX_SIDE);
    const int64_t channels = image->ndim == 4 ? image->sizes[1] : 1;
    if ((st = check_kernel(fn, kernel, channels, image->ndim)))
        return st;

    const int64_t side = kernel->sizes[kernel->ndim - 1];
    *geometry = (conv_geometry){
        .dtype = image->dtype,
        .planes = ext_numel(image) / (height * width),
        .channels = kernel->ndim == 3 ? channels : 1,
        .height = height,
        .width = width,
        .radius = (int)(side / 2),
    };
    return EXT_OK;
}

/* ------------------------------------------------------------------------- */
/* CPU implementation */

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Multiply-adds of one pass over the planes with every tap. */
static int64_t pass_work(const conv_geometry *g)
{
    const int64_t side = 2 * g->radius + 1;
    return g->planes * g->height * g->width * side * side;
}

/*
 * One definition per float type T:
 *
 * correlate: out (planes, H, W) = in correlated with each plane's kernel,
 * flipped in both axes when `flip`. One output row at a time: for each tap
 * (i, j), out_row[x] += w * in_row(y + i - R)[x + j - R] over the x where the
 * input exists, a loop the compiler vectorizes; accumulation in T, taps in
 * order (i, then j).
 *
 * grad_kernel: for each tap, the dot product of grad_out rows with shifted
 * image rows, in double; each thread sums its static share of the rows into
 * its own (channels, K, K) partials, added in thread order at the end, so
 * the result does not depend on scheduling.
 */
#define DEFINE_CONV_CPU(suffix, T)                                                              \
    static void correlate_##suffix(const conv_geometry *g, const T *in, const T *kernel,      \
                                   int flip, T *out)                                           \
    {                                                                                          \
        const int64_t height = g->height, width = g->width;                                    \
        const int radius = g->radius, side = 2 * g->radius + 1;                                \
        _Pragma("omp parallel for schedule(static) if (pass_work(g) > PARALLEL_WORK)")         \
        for (int64_t row = 0; row < g->planes * height; row++) {                               \
            const int64_t plane = row / height, y = row % height;                              \
            const T *w = kernel + (plane % g->channels) * side * side;                         \
            T *out_row = out + row * width;                                                    \
            for (int64_t x = 0; x < width; x++)                                                \
                out_row[x] = 0;                                                                \
            for (int i = 0; i < side; i++) {                                                   \
                const int64_t in_y = y + i - radius;                                           \
                if (in_y < 0 || in_y >= height)                                                \
                    continue;                                                                  \
                const T *in_row = in + (plane * height + in_y) * width;                        \
                for (int j = 0; j < side; j++) {                                               \
                    const T weight = flip ? w[(side - 1 - i) * side + (side - 1 - j)]          \
                                          : w[i * side + j];                                   \
                    const int64_t shift = j - radius;                                          \
                    const int64_t begin = max64(0, -shift), end = min64(width, width - shift); \
                    for (int64_t x = begin; x < end; x++)                                      \
                        out_row[x] += weight * in_row[x + shift];                              \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
                                                                                               \
    static int grad_kernel_##suffix(const conv_geometry *g, const T *image, const T *grad_out, \
                                    T *grad_kernel)                                            \
    {                                                                                          \
        const int64_t height = g->height, width = g->width;                                    \
        const int radius = g->radius, side = 2 * g->radius + 1;                                \
        const int64_t taps = g->channels * side * side;                                        \
        const int n_threads = pass_work(g) > PARALLEL_WORK ? omp_get_max_threads() : 1;        \
        double *partial = ext_calloc((size_t)(n_threads * taps), sizeof *partial);                 \
        if (partial == NULL)                                                                   \
            return 0;                                                                          \
        _Pragma("omp parallel num_threads(n_threads)")                                         \
        {                                                                                      \
            double *mine = partial + omp_get_thread_num() * taps;                              \
            _Pragma("omp for schedule(static)")                                                \
            for (int64_t row = 0; row < g->planes * height; row++) {                           \
                const int64_t plane = row / height, y = row % height;                          \
                double *acc = mine + (plane % g->channels) * side * side;                      \
                const T *grad_row = grad_out + row * width;                                    \
                for (int i = 0; i < side; i++) {                                               \
                    const int64_t in_y = y + i - radius;                                       \
                    if (in_y < 0 || in_y >= height)                                            \
                        continue;                                                              \
                    const T *in_row = image + (plane * height + in_y) * width;                 \
                    for (int j = 0; j < side; j++) {                                           \
                        const int64_t shift = j - radius;                                      \
                        const int64_t begin = max64(0, -shift);                                \
                        const int64_t end = min64(width, width - shift);                       \
                        double sum = 0.0;                                                      \
                        for (int64_t x = begin; x < end; x++)                                  \
                            sum += (double)grad_row[x] * (double)in_row[x + shift];            \
                        acc[i * side + j] += sum;                                              \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        for (int64_t t = 0; t < taps; t++) {                                                   \
            double total = 0.0;                                                                \
            for (int thread = 0; thread < n_threads; thread++)                                 \
                total += partial[thread * taps + t];                                           \
            grad_kernel[t] = (T)total;                                                         \
        }                                                                                      \
        free(partial);                                                                         \
        return 1;                                                                              \
    }

DEFINE_CONV_CPU(f32, float)
DEFINE_CONV_CPU(f64, double)

static void correlate_cpu(const conv_geometry *g, const void *in, const void *kernel, int flip,
                          void *out)
{
    if (g->dtype == EXT_FLOAT32)
        correlate_f32(g, in, kernel, flip, out);
    else
        correlate_f64(g, in, kernel, flip, out);
}

int conv2d_forward_cpu(const ext_tensor *image, const ext_tensor *kernel, const ext_tensor *out)
{
    const char *fn = "conv2d";
    const ext_arg others[] = {{"out", out}};
    conv_geometry g;
    int st = check_args(fn, image, kernel, others, 1, EXT_CPU, &g);
    if (st || (st = check_shape_like(fn, "out", out, "image", image)))
        return st;
    correlate_cpu(&g, image->data, kernel->data, 0, out->data);
    return EXT_OK;
}

/* The backward's tensors: grad_out, and the outputs that are wanted. */
static int check_backward_args(const char *fn, const ext_tensor *image, const ext_tensor *kernel,
                               const ext_tensor *grad_out, const ext_tensor *grad_image,
                               const ext_tensor *grad_kernel, int device_type,
                               conv_geometry *g)
{
    ext_arg others[3] = {{"grad_out", grad_out}};
    int n_others = 1, st;
    if (grad_image)
        others[n_others++] = (ext_arg){"grad_image", grad_image};
    if (grad_kernel)
        others[n_others++] = (ext_arg){"grad_kernel", grad_kernel};
    if ((st = check_args(fn, image, kernel, others, n_others, device_type, g)) ||
        (st = check_shape_like(fn, "grad_out", grad_out, "image", image)) ||
        (grad_image && (st = check_shape_like(fn, "grad_image", grad_image, "image", image))) ||
        (grad_kernel && (st = check_shape_like(fn, "grad_kernel", grad_kernel, "kernel", kernel))))
        return st;
    return EXT_OK;
}

int conv2d_backward_cpu(const ext_tensor *image, const ext_tensor *kernel,
                        const ext_tensor *grad_out, const ext_tensor *grad_image,
                        const ext_tensor *grad_kernel)
{
    const char *fn = "conv2d_backward";
    conv_geometry g;
    int st = check_backward_args(fn, image, kernel, grad_out, grad_image, grad_kernel, EXT_CPU,
                                 &g);
    if (st)
        return st;
    if (grad_image)
        correlate_cpu(&g, grad_out->data, kernel->data, 1, grad_image->data);
    if (grad_kernel) {
        int done = g.dtype == EXT_FLOAT32
                       ? grad_kernel_f32(&g, image->data, grad_out->data, grad_kernel->data)
                       : grad_kernel_f64(&g, image->data, grad_out->data, grad_kernel->data);
        if (!done)
            return ext_fail(EXT_ERR_NOMEM, "%s: cannot allocate the per-thread kernel sums", fn);
    }
    return EXT_OK;
}

/* ------------------------------------------------------------------------- */
/* CUDA entry points */

int conv2d_forward_cuda(const ext_tensor *image, const ext_tensor *kernel, const ext_tensor *out,
                        void *stream)
{
    const char *fn = "conv2d";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    const ext_arg others[] = {{"out", out}};
    conv_geometry g;
    int st = check_args(fn, image, kernel, others, 1, EXT_CUDA, &g);
    if (st || (st = check_shape_like(fn, "out", out, "image", image)))
        return st;
    int err = conv2d_correlate_launch(&g, image->data, kernel->data, 0, out->data,
                                      image->device_index, stream);
    return err ? ext_cuda_fail(fn, err) : EXT_OK;
#endif
}

int conv2d_backward_cuda(const ext_tensor *image, const ext_tensor *kernel,
                         const ext_tensor *grad_out, const ext_tensor *grad_image,
                         const ext_tensor *grad_kernel, void *stream)
{
    const char *fn = "conv2d_backward";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    conv_geometry g;
    int st = check_backward_args(fn, image, kernel, grad_out, grad_image, grad_kernel, EXT_CUDA,
                                 &g);
    if (st)
        return st;
    int err = 0;
    if (grad_image)
        err = conv2d_correlate_launch(&g, grad_out->data, kernel->data, 1, grad_image->data,
                                      image->device_index, stream);
    if (!err && grad_kernel)
        err = conv2d_grad_kernel_launch(&g, image->data, grad_out->data, grad_kernel->data,
                                        image->device_index, stream);
    return err ? ext_cuda_fail(fn, err) : EXT_OK;
#endif
}
