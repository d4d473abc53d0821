"""The PCL loss and its gradient rule in plain PyTorch (no extension): the
peer that scripts/bench_ops_pcl_conv.py times _ext.pcl against, and a
readable statement of the formulas in src/pcl.h.

Vectorized, with no host synchronization (torch.where instead of boolean
indexing). It trusts its inputs: indices are assumed valid, mismatches are
not counted; _ext.pcl checks both.
"""

import torch


def _flat(*tensors):
    """(B,) or (1, B) vectors as (B,)."""
    return [t.reshape(-1) for t in tensors]


def pcl_loss_reference(pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
                       pc_count, img_cls_loss_weights, im_labels):
    """loss = (L_0 + sum of L_c over classes c > 0 in the image) / B, 0-d."""
    labels, weights, pc_labels, pc_probs, pc_weights, im_labels = _flat(
        labels, cls_loss_weights, pc_labels, pc_probs, img_cls_loss_weights,
        im_labels)
    n_proposals, n_classes = pcl_probs.shape
    present = im_labels != 0
    background = (labels == 0) & present[0]
    probs_0 = torch.where(background, pcl_probs[:, 0], torch.ones_like(pcl_probs[:, 0]))
    loss = -torch.where(background, weights * torch.log(probs_0), 0).sum()
    if pc_labels.numel():
        classes = pc_labels.long().clamp(0, n_classes - 1)
        counted = (pc_labels > 0) & present[classes]
        probs_k = torch.where(counted, pc_probs, torch.ones_like(pc_probs))
        loss = loss - torch.where(counted, pc_weights * torch.log(probs_k), 0).sum()
    return loss / n_proposals


def pcl_grad_reference(pcl_probs, labels, cls_loss_weights, gt_assignment, pc_labels, pc_probs,
                       pc_count, img_cls_loss_weights, im_labels, grad_loss=1.0):
    """The seed's gradient rule for pcl_probs, (B, C), times grad_loss / B."""
    labels, weights, assignment, pc_probs, pc_count, pc_weights, im_labels = _flat(
        labels, cls_loss_weights, gt_assignment, pc_probs, pc_count,
        img_cls_loss_weights, im_labels)
    n_proposals, n_classes = pcl_probs.shape
    classes = labels.long()
    present = (im_labels != 0)[classes]
    background = -weights / pcl_probs[:, 0]
    if pc_probs.numel():
        k = assignment.long().clamp(0, pc_probs.numel() - 1)
        cluster = -pc_weights[k] / (pc_count[k].to(pcl_probs.dtype) * pc_probs[k])
    else:
        cluster = torch.zeros_like(background)
    value = torch.where(present, torch.where(classes == 0, background, cluster), 0)
    grad = torch.zeros_like(pcl_probs)
    grad.scatter_(1, classes[:, None], value[:, None].to(pcl_probs.dtype))
    return grad * (grad_loss / n_proposals)
