/*
 * pcl.c: the _ext.pcl shim. Every entry point checks the descriptors (dtype,
 * device, contiguity, shapes), then runs the CPU implementation below or the
 * CUDA launchers in cuda/pcl_kernel.cu. The label data (class and cluster
 * indices) is checked by a scan on the tensors' own device, before any of it
 * is used as an index; pcl.h says what the loss and its gradient are.
 */
#include <math.h>
#include <stdio.h>

#include "ext_check.h"
#include "pcl.h"
#include "pcl_internal.h"
#ifdef EXT_WITH_CUDA
#include "cuda/pcl_kernel.h"
#endif

#define FLOAT_DTYPES (EXT_MASK(EXT_FLOAT32) | EXT_MASK(EXT_FLOAT64))
#define INDEX_DTYPES (FLOAT_DTYPES | EXT_MASK(EXT_INT32) | EXT_MASK(EXT_INT64))

/* Gradient elements below which the CPU backward runs on one thread. */
#define BACKWARD_PARALLEL_ELEMENTS 65536

/* ------------------------------------------------------------------------- */
/* argument checks shared by the four entry points */

/* A vector of n elements, (n,) or (1, n); `role` names n for the message
 * ("B", the rows of pcl_probs), and `of` says where n comes from. */
static int check_vector(const char *fn, const char *name, const ext_tensor *t, int64_t n,
                        const char *role, const char *of)
{
    char shape[256];
    if (!(t->ndim == 1 || (t->ndim == 2 && t->sizes[0] == 1))) {
        ext_shape_string(t, shape, sizeof shape);
        return ext_fail(EXT_ERR_VALUE, "%s: %s must be (%s,) or (1, %s), got %s", fn, name, role,
                        role, shape);
    }
    if (ext_numel(t) != n)
        return ext_fail(EXT_ERR_VALUE, "%s: %s has %lld elements but %s", fn, name,
                        (long long)ext_numel(t), of);
    return EXT_OK;
}

/*
 * The nine inputs and the `n_extras` other tensors of one call (outputs, the
 * upstream gradient: each of pcl_probs' dtype), then the problem they make.
 */
static int check_args(const char *fn, const pcl_inputs *in, const ext_arg *extras, int n_extras,
                      int device_type, pcl_problem *problem)
{
    const ext_arg floats[] = {{"pcl_probs", in->pcl_probs},
                              {"cls_loss_weights", in->cls_loss_weights},
                              {"pc_probs", in->pc_probs},
                              {"img_cls_loss_weights", in->img_cls_loss_weights}};
    const ext_arg indices[] = {{"labels", in->labels},
                               {"gt_assignment", in->gt_assignment},
                               {"pc_labels", in->pc_labels},
                               {"pc_count", in->pc_count},
                               {"im_labels", in->im_labels}};
    ext_arg all[11];
    int n_all = 0, st;
    for (int a = 0; a < 4; a++) {
        if ((st = ext_check_dtype(fn, floats[a].name, floats[a].t, FLOAT_DTYPES)))
            return st;
        all[n_all++] = floats[a];
    }
    for (int a = 0; a < 5; a++) {
        if ((st = ext_check_dtype(fn, indices[a].name, indices[a].t, INDEX_DTYPES)))
            return st;
        all[n_all++] = indices[a];
    }
    for (int a = 0; a < n_extras; a++) {
        if ((st = ext_check_dtype(fn, extras[a].name, extras[a].t, FLOAT_DTYPES)))
            return st;
        all[n_all++] = extras[a];
    }
    /* the float data, inputs and extras alike, has pcl_probs' dtype */
    const int dtype = in->pcl_probs->dtype;
    for (int a = 1; a < 4 + n_extras; a++) {
        const ext_arg *arg = a < 4 ? &floats[a] : &extras[a - 4];
        if (arg->t->dtype != dtype)
            return ext_fail(EXT_ERR_TYPE, "%s: %s must have the dtype of pcl_probs (%s), got %s",
                            fn, arg->name, ext_dtype_name(dtype), ext_dtype_name(arg->t->dtype));
    }
    if ((st = ext_check_devices(fn, all, n_all, device_type, NULL)))
        return st;
    for (int a = 0; a < n_all; a++)
        if ((st = ext_check_contiguous(fn, all[a].name, all[a].t)))
            return st;

    const ext_tensor *probs = in->pcl_probs;
    char shape[256];
    if ((st = ext_check_ndim(fn, "pcl_probs", probs, 2)))
        return st;
    if (ext_numel(probs) == 0) {
        ext_shape_string(probs, shape, sizeof shape);
        return ext_fail(EXT_ERR_VALUE, "%s: pcl_probs is empty, %s; the loss needs at least one "
                        "proposal (B) and one class (C)", fn, shape);
    }
    const int64_t n_proposals = probs->sizes[0], n_classes = probs->sizes[1];
    char rows[96], columns[96], clusters[96];
    snprintf(rows, sizeof rows, "pcl_probs has B = %lld rows", (long long)n_proposals);
    snprintf(columns, sizeof columns, "pcl_probs has C = %lld columns", (long long)n_classes);
    if ((st = check_vector(fn, "labels", in->labels, n_proposals, "B", rows)) ||
        (st = check_vector(fn, "cls_loss_weights", in->cls_loss_weights, n_proposals, "B",
                           rows)) ||
        (st = check_vector(fn, "gt_assignment", in->gt_assignment, n_proposals, "B", rows)) ||
        (st = check_vector(fn, "im_labels", in->im_labels, n_classes, "C", columns)))
        return st;
    /* P is the length of pc_labels; the other cluster vectors must agree. */
    if ((st = check_vector(fn, "pc_labels", in->pc_labels, ext_numel(in->pc_labels), "P", "")))
        return st;
    const int64_t n_clusters = ext_numel(in->pc_labels);
    snprintf(clusters, sizeof clusters, "pc_labels has %lld", (long long)n_clusters);
    if ((st = check_vector(fn, "pc_probs", in->pc_probs, n_clusters, "P", clusters)) ||
        (st = check_vector(fn, "pc_count", in->pc_count, n_clusters, "P", clusters)) ||
        (st = check_vector(fn, "img_cls_loss_weights", in->img_cls_loss_weights, n_clusters, "P",
                           clusters)))
        return st;

    *problem = (pcl_problem){
        .dtype = dtype,
        .n_proposals = n_proposals,
        .n_classes = n_classes,
        .n_clusters = n_clusters,
        .pcl_probs = probs->data,
        .cls_loss_weights = in->cls_loss_weights->data,
        .pc_probs = in->pc_probs->data,
        .img_cls_loss_weights = in->img_cls_loss_weights->data,
        .labels = in->labels->data,
        .gt_assignment = in->gt_assignment->data,
        .pc_labels = in->pc_labels->data,
        .pc_count = in->pc_count->data,
        .im_labels = in->im_labels->data,
        .labels_dtype = in->labels->dtype,
        .gt_assignment_dtype = in->gt_assignment->dtype,
        .pc_labels_dtype = in->pc_labels->dtype,
        .pc_count_dtype = in->pc_count->dtype,
        .im_labels_dtype = in->im_labels->dtype,
    };
    return EXT_OK;
}

static int check_one_element(const char *fn, const char *name, const ext_tensor *t)
{
    if (ext_numel(t) != 1)
        return ext_fail(EXT_ERR_VALUE, "%s: %s must have one element, got %lld", fn, name,
                        (long long)ext_numel(t));
    return EXT_OK;
}

static int check_like_probs(const char *fn, const char *name, const ext_tensor *t,
                            const ext_tensor *probs)
{
    if (t->ndim != 2 || t->sizes[0] != probs->sizes[0] || t->sizes[1] != probs->sizes[1]) {
        char shape[256];
        ext_shape_string(t, shape, sizeof shape);
        return ext_fail(EXT_ERR_VALUE, "%s: %s must be (B, C) = (%lld, %lld) like pcl_probs, "
                        "got %s", fn, name, (long long)probs->sizes[0],
                        (long long)probs->sizes[1], shape);
    }
    return EXT_OK;
}

/* The scan's first offending element as an error, or EXT_OK. */
static int scan_status(const char *fn, const pcl_problem *p, const pcl_scan *scan)
{
    if (scan->bad_label >= 0)
        return ext_fail(EXT_ERR_VALUE, "%s: labels[%lld] = %.17g is not a class index in "
                        "[0, %lld) (C, the columns of pcl_probs)", fn,
                        (long long)scan->bad_label, scan->bad_label_value,
                        (long long)p->n_classes);
    if (scan->bad_assignment >= 0)
        return ext_fail(EXT_ERR_VALUE, "%s: gt_assignment[%lld] = %.17g is not a cluster index "
                        "in [0, %lld) (P, the length of pc_labels); every proposal with a "
                        "positive label needs its cluster", fn,
                        (long long)scan->bad_assignment, scan->bad_assignment_value,
                        (long long)p->n_clusters);
    if (scan->bad_pc_label >= 0)
        return ext_fail(EXT_ERR_VALUE, "%s: pc_labels[%lld] = %.17g is not a class index in "
                        "[0, %lld) (C, the columns of pcl_probs)", fn,
                        (long long)scan->bad_pc_label, scan->bad_pc_label_value,
                        (long long)p->n_classes);
    return EXT_OK;
}

/* ------------------------------------------------------------------------- */
/* CPU implementation */

/* Element i of label-like data of `dtype`, as a double (exact for the
 * integers an index can be). */
static double load_index(const void *data, int dtype, int64_t i)
{
    switch (dtype) {
    case EXT_FLOAT32: return ((const float *)data)[i];
    case EXT_FLOAT64: return ((const double *)data)[i];
    case EXT_INT32: return ((const int32_t *)data)[i];
    default: return (double)((const int64_t *)data)[i];
    }
}

/* A whole number in [0, n); false for NaN. */
static int is_index(double value, int64_t n)
{
    return value >= 0 && value < (double)n && value == floor(value);
}

/* The label verdict (pcl_internal.h), proposals then clusters, in order. */
static void scan_cpu(const pcl_problem *p, pcl_scan *scan)
{
    *scan = (pcl_scan){.bad_label = -1, .bad_assignment = -1, .bad_pc_label = -1,
                       .first_mismatch = -1};
    for (int64_t i = 0; i < p->n_proposals; i++) {
        const double label = load_index(p->labels, p->labels_dtype, i);
        if (!is_index(label, p->n_classes)) {
            if (scan->bad_label < 0) {
                scan->bad_label = i;
                scan->bad_label_value = label;
            }
            continue;
        }
        if (label == 0)
            continue;
        const double cluster = load_index(p->gt_assignment, p->gt_assignment_dtype, i);
        if (!is_index(cluster, p->n_clusters)) {
            if (scan->bad_assignment < 0) {
                scan->bad_assignment = i;
                scan->bad_assignment_value = cluster;
            }
            continue;
        }
        if (load_index(p->im_labels, p->im_labels_dtype, (int64_t)label) != 0 &&
            load_index(p->pc_labels, p->pc_labels_dtype, (int64_t)cluster) != label) {
            if (scan->n_mismatch++ == 0)
                scan->first_mismatch = i;
        }
    }
    for (int64_t k = 0; k < p->n_clusters; k++) {
        const double label = load_index(p->pc_labels, p->pc_labels_dtype, k);
        if (!is_index(label, p->n_classes)) {
            scan->bad_pc_label = k;
            scan->bad_pc_label_value = label;
            break;
        }
    }
}

/*
 * The loss (times B) in double, and the gradient rule, for one float type.
 * Both run after scan_cpu found every index in range. The logarithm is taken
 * in T, as the seed did; products and sums in double.
 */
#define DEFINE_PCL_CPU(suffix, T, log_T)                                                        \
    static double loss_sum_##suffix(const pcl_problem *p)                                      \
    {                                                                                          \
        const T *probs = p->pcl_probs, *weights = p->cls_loss_weights;                         \
        const T *pc_probs = p->pc_probs, *pc_weights = p->img_cls_loss_weights;                \
        double sum = 0.0;                                                                      \
        if (load_index(p->im_labels, p->im_labels_dtype, 0) != 0)                             \
            for (int64_t i = 0; i < p->n_proposals; i++)                                       \
                if (load_index(p->labels, p->labels_dtype, i) == 0)                            \
                    sum -= (double)weights[i] * (double)log_T(probs[i * p->n_classes]);        \
        for (int64_t k = 0; k < p->n_clusters; k++) {                                          \
            const int64_t c = (int64_t)load_index(p->pc_labels, p->pc_labels_dtype, k);        \
            if (c > 0 && load_index(p->im_labels, p->im_labels_dtype, c) != 0)                 \
                sum -= (double)pc_weights[k] * (double)log_T(pc_probs[k]);                     \
        }                                                                                      \
        return sum;                                                                            \
    }                                                                                          \
                                                                                               \
    /* grad is (B, C), row-major; one row per proposal, nonzero in column labels[i] */         \
    static void backward_##suffix(const pcl_problem *p, T grad_loss, T *grad)                  \
    {                                                                                          \
        const T *probs = p->pcl_probs, *weights = p->cls_loss_weights;                         \
        const T *pc_probs = p->pc_probs, *pc_weights = p->img_cls_loss_weights;                \
        const int64_t n_classes = p->n_classes;                                                \
        const T scale = grad_loss / (T)p->n_proposals;                                         \
        _Pragma("omp parallel for if (p->n_proposals * n_classes > BACKWARD_PARALLEL_ELEMENTS)") \
        for (int64_t i = 0; i < p->n_proposals; i++) {                                         \
            T *row = grad + i * n_classes;                                                     \
            for (int64_t j = 0; j < n_classes; j++)                                            \
                row[j] = 0;                                                                    \
            const int64_t c = (int64_t)load_index(p->labels, p->labels_dtype, i);              \
            if (load_index(p->im_labels, p->im_labels_dtype, c) == 0)                          \
                continue;                                                                      \
            if (c == 0) {                                                                      \
                row[0] = -weights[i] / probs[i * n_classes] * scale;                           \
            } else {                                                                           \
                const int64_t k =                                                              \
                    (int64_t)load_index(p->gt_assignment, p->gt_assignment_dtype, i);          \
                const T count = (T)load_index(p->pc_count, p->pc_count_dtype, k);              \
                row[c] = -pc_weights[k] / (count * pc_probs[k]) * scale;                       \
            }                                                                                  \
        }                                                                                      \
    }

DEFINE_PCL_CPU(f32, float, logf)
DEFINE_PCL_CPU(f64, double, log)

static void report_from_scan(pcl_report *report, const pcl_scan *scan)
{
    report->n_mismatch = scan->n_mismatch;
    report->first_mismatch = scan->first_mismatch;
}

int pcl_forward_cpu(const pcl_inputs *inputs, const ext_tensor *loss, pcl_report *report)
{
    const char *fn = "pcl_loss";
    *report = (pcl_report){.n_mismatch = 0, .first_mismatch = -1};
    const ext_arg outputs[] = {{"loss", loss}};
    pcl_problem p;
    int st = check_args(fn, inputs, outputs, 1, EXT_CPU, &p);
    if (st || (st = check_one_element(fn, "loss", loss)))
        return st;
    pcl_scan scan;
    scan_cpu(&p, &scan);
    if ((st = scan_status(fn, &p, &scan)))
        return st;
    if (p.dtype == EXT_FLOAT32)
        *(float *)loss->data = (float)(loss_sum_f32(&p) / (double)p.n_proposals);
    else
        *(double *)loss->data = loss_sum_f64(&p) / (double)p.n_proposals;
    report_from_scan(report, &scan);
    return EXT_OK;
}

int pcl_backward_cpu(const pcl_inputs *inputs, const ext_tensor *grad_loss,
                     const ext_tensor *grad_probs)
{
    const char *fn = "pcl_loss_backward";
    const ext_arg extras[] = {{"grad_loss", grad_loss}, {"grad_probs", grad_probs}};
    pcl_problem p;
    int st = check_args(fn, inputs, extras, 2, EXT_CPU, &p);
    if (st || (st = check_one_element(fn, "grad_loss", grad_loss)) ||
        (st = check_like_probs(fn, "grad_probs", grad_probs, inputs->pcl_probs)))
        return st;
    pcl_scan scan;
    scan_cpu(&p, &scan);
    if ((st = scan_status(fn, &p, &scan)))
        return st;
    if (p.dtype == EXT_FLOAT32)
        backward_f32(&p, *(const float *)grad_loss->data, grad_probs->data);
    else
        backward_f64(&p, *(const double *)grad_loss->data, grad_probs->data);
    return EXT_OK;
}

/* ------------------------------------------------------------------------- */
/* CUDA entry points */

int pcl_forward_cuda(const pcl_inputs *inputs, const ext_tensor *loss, void *stream,
                     pcl_report *report)
{
    const char *fn = "pcl_loss";
    *report = (pcl_report){.n_mismatch = 0, .first_mismatch = -1};
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    const ext_arg outputs[] = {{"loss", loss}};
    pcl_problem p;
    int st = check_args(fn, inputs, outputs, 1, EXT_CUDA, &p);
    if (st || (st = check_one_element(fn, "loss", loss)))
        return st;
    pcl_scan scan;
    int err = pcl_forward_launch(&p, loss->data, loss->device_index, stream, &scan);
    if (err)
        return ext_cuda_fail(fn, err);
    if ((st = scan_status(fn, &p, &scan)))
        return st;
    report_from_scan(report, &scan);
    return EXT_OK;
#endif
}

int pcl_backward_cuda(const pcl_inputs *inputs, const ext_tensor *grad_loss,
                      const ext_tensor *grad_probs, void *stream)
{
    const char *fn = "pcl_loss_backward";
#ifndef EXT_WITH_CUDA
    return ext_no_cuda(fn, NULL);
#else
    const ext_arg extras[] = {{"grad_loss", grad_loss}, {"grad_probs", grad_probs}};
    pcl_problem p;
    int st = check_args(fn, inputs, extras, 2, EXT_CUDA, &p);
    if (st || (st = check_one_element(fn, "grad_loss", grad_loss)) ||
        (st = check_like_probs(fn, "grad_probs", grad_probs, inputs->pcl_probs)))
        return st;
    pcl_scan scan;
    int err = pcl_backward_launch(&p, grad_loss->data, grad_probs->data,
                                  grad_probs->device_index, stream, &scan);
    if (err)
        return ext_cuda_fail(fn, err);
    return scan_status(fn, &p, &scan);
#endif
}
