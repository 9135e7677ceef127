"""Supervised contrastive learning: every view of every sample an anchor, every other view with
the same label a positive.

Conventions (docs/methods.md, section Baselines family): features are
L2-normalised inside; the mean over anchors counts only anchors with a positive, and the others
are counted in the records, never averaged in as 0. No device value is read on the host except
on the CPU (see :func:`supcon`).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from toolkit import checks

from . import _kernel
from ._precision import full_precision

__all__ = ["supcon", "check_supcon_positives"]

_INTEGER = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _reads_host(device: torch.device) -> bool:
    """Whether the "no anchor has a positive" check runs inside :func:`supcon`: on the CPU, where
    reading a value costs no synchronisation, unless the CPU is listed in
    ``_kernel.ROW_MAX_DEVICES`` (the devices that take the losses' read-free branches; the tests
    add ``cpu`` to check that branch here)."""
    return device.type == "cpu" and "cpu" not in _kernel.ROW_MAX_DEVICES


def _check(features: Tensor, labels: Tensor) -> tuple[int, int, int]:
    checks.tensor("features", features, dim=3)
    b, v, d = features.shape
    if v < 1 or d < 1:
        raise checks.ArgumentError(
            "features", f"features must be [B, V, D] with V, D >= 1, got {tuple(features.shape)}"
        )
    if b * v < 2:
        raise checks.ArgumentError(
            "features", f"features needs at least 2 anchors (B V >= 2), got {tuple(features.shape)}"
        )
    if not isinstance(labels, Tensor):
        raise checks.ArgumentError("labels", f"labels must be a torch.Tensor, got {type(labels).__name__}")
    if labels.dtype not in _INTEGER:
        raise checks.ArgumentError("labels", f"labels must be an integer tensor, got dtype {labels.dtype}")
    if tuple(labels.shape) != (b,):
        raise checks.ArgumentError(
            "labels", f"labels must have shape ({b},), one per sample, got {tuple(labels.shape)}"
        )
    if labels.device != features.device:
        raise checks.ArgumentError(
            "labels", f"labels must be on the features' device {features.device}, got {labels.device}"
        )
    return b, v, d


def check_supcon_positives(stats: dict) -> None:
    """Raise the ``ValueError`` :func:`supcon` raises itself on the CPU when no anchor has a
    positive, from the records of a call on another device. Reads one value on the host (a
    synchronisation): call it where the caller can afford one (e.g. when logging)."""
    missing, anchors = stats["supcon_anchors_without_positive"], stats["supcon_anchors"]
    if int(missing) >= anchors:
        raise ValueError(
            f"labels give none of the {anchors} anchors a positive (every label occurs once and "
            "features has 1 view); supcon needs at least one anchor with a positive"
        )


@full_precision
def supcon(
    features: Tensor,
    labels: Tensor,
    temperature: float = 0.07,
    base_temperature: float = 0.07,
    stats: dict | None = None,
) -> Tensor:
    r"""SupCon's L_out (Khosla et al. 2020, Sec. 3.2.2, Eq. 2), every view an anchor.

    With z_a the L2-normalised rows of ``features`` (A = B V anchors, one per view of each
    sample) and P(a) the views other than a itself whose sample has a's label (a's other views
    included):

        l_a  = -(tau / tau_b) (1/|P(a)|) sum_{p in P(a)} [ z_a.z_p / tau - log sum_{c != a} exp(z_a.z_c / tau) ]
        loss = mean of l_a over the anchors with |P(a)| >= 1

    The factor tau / tau_b (``base_temperature``) is the authors' code's; with the defaults
    0.07 / 0.07 it is 1. Anchors without a positive (a label that occurs once, with V = 1) are
    excluded from the mean and counted in ``stats``.

    No host read on a GPU: the masks are summed, never used to index. If no anchor has a
    positive the mean is 0/0: on the CPU :func:`supcon` raises a ``ValueError`` before that
    (reading a CPU tensor costs nothing); on any other device (and on the CPU when it is listed
    in ``_kernel.ROW_MAX_DEVICES``, as the host-read tests do) the loss is NaN, never a silent
    0, and :func:`check_supcon_positives` raises the same error from the records when the
    caller chooses to synchronise.

    Args:
        features: ``[B, V, D]`` embeddings of V views of B samples (B V >= 2; gradient flows).
        labels: ``[B]`` integer labels on the features' device.
        temperature: tau > 0.
        base_temperature: tau_b > 0.
        stats: optional dict receiving ``supcon_anchors_without_positive`` (device int64
            tensor, the excluded anchors), ``supcon_anchors`` (int, B V) and ``pos_sim`` (mean
            cosine over the (anchor, positive) pairs; NaN without any).
    """
    b, v, d = _check(features, labels)
    tau = checks.positive("temperature", temperature)
    base = checks.positive("base_temperature", base_temperature)
    n = b * v
    z = F.normalize(features, dim=-1).reshape(n, d)  # sample-major: row s v + j is view j of sample s
    anchor_labels = labels[:, None].expand(b, v).reshape(n)
    sims = z @ z.t()
    logits = sims / tau
    self_mask = torch.eye(n, dtype=torch.bool, device=z.device)
    log_partition = torch.logsumexp(logits.masked_fill(self_mask, float("-inf")), dim=1, keepdim=True)
    positive = (anchor_labels[:, None] == anchor_labels[None, :]) & ~self_mask
    n_positive = positive.sum(dim=1)
    has_positive = n_positive > 0
    n_anchors = has_positive.sum()
    if _reads_host(z.device) and not bool(n_anchors):
        raise ValueError(
            f"labels give none of the {n} anchors a positive (every label occurs once and features "
            "has 1 view); supcon needs at least one anchor with a positive"
        )
    log_prob = logits - log_partition
    mean_log_prob_pos = torch.where(positive, log_prob, 0.0).sum(dim=1) / n_positive.clamp(min=1)
    per_anchor = -(tau / base) * mean_log_prob_pos
    loss = torch.where(has_positive, per_anchor, 0.0).sum() / n_anchors
    if stats is not None:
        with torch.no_grad():
            stats["supcon_anchors_without_positive"] = n - n_anchors
            stats["supcon_anchors"] = n
            stats["pos_sim"] = torch.where(positive, sims, 0.0).sum() / n_positive.sum()
    return loss
