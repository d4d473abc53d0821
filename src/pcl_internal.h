/*
 * pcl_internal.h: what the PCL shim (pcl.c) hands its CPU implementation and
 * its CUDA launchers (cuda/pcl_kernel.cu) once the descriptors are checked,
 * and what they hand back about the label data. Plain C, host memory.
 */
#ifndef PCL_INTERNAL_H
#define PCL_INTERNAL_H

#include <stdint.h>

/* Raw pointers (host or device, as the tensors are), sizes and dtypes
 * (ext_dtype codes). Float data is of `dtype`; label-like data of its own. */
typedef struct {
    int dtype;                          /* EXT_FLOAT32 or EXT_FLOAT64 */
    int64_t n_proposals;                /* B */
    int64_t n_classes;                  /* C */
    int64_t n_clusters;                 /* P, may be 0 */
    const void *pcl_probs;              /* (B, C) */
    const void *cls_loss_weights;       /* (B,) */
    const void *pc_probs;               /* (P,) */
    const void *img_cls_loss_weights;   /* (P,) */
    const void *labels;                 /* (B,) */
    const void *gt_assignment;          /* (B,) */
    const void *pc_labels;              /* (P,) */
    const void *pc_count;               /* (P,) */
    const void *im_labels;              /* (C,) */
    int labels_dtype, gt_assignment_dtype, pc_labels_dtype, pc_count_dtype, im_labels_dtype;
} pcl_problem;

/* The verdict on the label data: the first offending element of each kind
 * (-1: none) with its value, and the label mismatches (see pcl.h). */
typedef struct {
    int64_t bad_label;          /* labels[i] not a whole number in [0, C) */
    int64_t bad_assignment;     /* labels[i] > 0 but gt_assignment[i] not in [0, P) */
    int64_t bad_pc_label;       /* pc_labels[k] not a whole number in [0, C) */
    double bad_label_value, bad_assignment_value, bad_pc_label_value;
    int64_t n_mismatch;
    int64_t first_mismatch;
} pcl_scan;

#endif /* PCL_INTERNAL_H */
