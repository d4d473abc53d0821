/*
 * pcl_kernel.h: launchers of the PCL loss kernels (pcl_kernel.cu), called by
 * the shim in pcl.c once it has checked every descriptor. Pointers in the
 * problem are device pointers on `device`; work runs on `stream`. Each
 * launcher fills *scan (pcl_internal.h) from the device, so it synchronizes
 * the stream before returning; it returns a cudaError_t as int.
 */
#ifndef PCL_KERNEL_H
#define PCL_KERNEL_H

#include "../pcl_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* loss: one element of problem->dtype. Counts the label mismatches. */
int pcl_forward_launch(const pcl_problem *problem, void *loss, int device, void *stream,
                       pcl_scan *scan /* OUT */);

/* grad_probs (B, C) from grad_loss (one element); the scan's mismatch fields
 * are left at zero (the forward counts them). */
int pcl_backward_launch(const pcl_problem *problem, const void *grad_loss, void *grad_probs,
                        int device, void *stream, pcl_scan *scan /* OUT */);

#ifdef __cplusplus
}
#endif

#endif /* PCL_KERNEL_H */
