/*
 * pcl.h: the C entry points of _ext.pcl (also fed to cffi's cdef), the
 * Proposal Cluster Learning loss of Tang et al. (PCL, TPAMI 2018), forward
 * and backward, on the CPU and on CUDA.
 *
 * Inputs, B proposals, C classes, P proposal clusters:
 *   pcl_probs             (B, C) float32 or float64, contiguous
 *   labels                (B,) or (1, B): class of each proposal, in [0, C)
 *   cls_loss_weights      (B,) or (1, B): weight of each proposal
 *   gt_assignment         (B,) or (1, B): cluster of each proposal, in [0, P)
 *                         wherever labels > 0
 *   pc_labels             (P,) or (1, P): class of each cluster, in [0, C)
 *   pc_probs              (P,) or (1, P): probability of each cluster
 *   pc_count              (P,) or (1, P): proposals in each cluster
 *   img_cls_loss_weights  (P,) or (1, P): weight of each cluster
 *   im_labels             (C,) or (1, C): classes present in the image (!= 0)
 * cls_loss_weights, pc_probs and img_cls_loss_weights have pcl_probs' dtype;
 * labels, gt_assignment, pc_labels, pc_count and im_labels may each be
 * float32, float64, int32 or int64 (class and cluster indices must hold whole
 * numbers). All on one device; P may be 0.
 *
 * Forward: loss = (L_0 + L_1 + ... + L_{C-1}) / B, where for a class c with
 * im_labels[c] != 0
 *   L_0 = sum over proposals i with labels[i] == 0 of
 *         -cls_loss_weights[i] * log(pcl_probs[i, 0])
 *   L_c = sum over clusters k with pc_labels[k] == c of
 *         -img_cls_loss_weights[k] * log(pc_probs[k])        (c > 0)
 * and L_c = 0 for a class absent from the image. The sums are kept in double.
 *
 * Backward: the method's own gradient rule (the seed's kernel), not the
 * derivative of the forward. grad_probs[i, c] = 0 unless im_labels[c] != 0,
 * and then
 *   c == 0, labels[i] == 0:  -cls_loss_weights[i] / pcl_probs[i, 0]
 *   c > 0,  labels[i] == c:  -img_cls_loss_weights[k] / (pc_count[k] * pc_probs[k]),
 *                            k = gt_assignment[i]
 * each multiplied by grad_loss / B.
 *
 * A proposal with labels[i] = c > 0 (c in the image) whose cluster has
 * another class (pc_labels[gt_assignment[i]] != c) is a *label mismatch*: the
 * seed printed "labels mismatch." from its kernel and went on. Here the
 * forward counts them into pcl_report (the gradient rule stays the seed's);
 * the Python wrapper decides whether that warns or fails. A label outside
 * [0, C), a cluster index outside [0, P) or a fractional index is an error
 * (EXT_ERR_VALUE) naming the first offending element, never a read out of
 * bounds. The CUDA entry points read that verdict back from the device, so
 * they return once the stream has finished their work.
 */
#ifndef PCL_H
#define PCL_H

#include <stdint.h>

#include "ext_tensor.h"

/* The nine inputs, by the seed's names. */
typedef struct {
    const ext_tensor *pcl_probs;
    const ext_tensor *labels;
    const ext_tensor *cls_loss_weights;
    const ext_tensor *gt_assignment;
    const ext_tensor *pc_labels;
    const ext_tensor *pc_probs;
    const ext_tensor *pc_count;
    const ext_tensor *img_cls_loss_weights;
    const ext_tensor *im_labels;
} pcl_inputs;

typedef struct {
    int64_t n_mismatch;      /* proposals whose cluster has another class */
    int64_t first_mismatch;  /* the lowest such proposal, or -1 */
} pcl_report;

/* loss: one element of pcl_probs' dtype (a 0-d tensor), on its device. */
int pcl_forward_cpu(const pcl_inputs *inputs, const ext_tensor *loss /* OUT */,
                    pcl_report *report /* OUT */);
int pcl_forward_cuda(const pcl_inputs *inputs, const ext_tensor *loss /* OUT */, void *stream,
                     pcl_report *report /* OUT */);

/* grad_loss: one element of pcl_probs' dtype (the upstream gradient);
 * grad_probs: (B, C) like pcl_probs. */
int pcl_backward_cpu(const pcl_inputs *inputs, const ext_tensor *grad_loss,
                     const ext_tensor *grad_probs /* OUT */);
int pcl_backward_cuda(const pcl_inputs *inputs, const ext_tensor *grad_loss,
                      const ext_tensor *grad_probs /* OUT */, void *stream);

#endif /* PCL_H */
