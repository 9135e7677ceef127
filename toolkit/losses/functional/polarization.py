"""LMCL distance polarization (DP) regulariser (Large-Margin Contrastive Learning with Distance
Polarization Regularizer: D in Sec. 3.1, Eq. 3; the l0 regulariser in Sec. 3.2, Eq. 6; its l1
relaxation R1 in Sec. 3.3, Eq. 9; METHODS row 21).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from toolkit import checks

from ._precision import full_precision
from ._validation import _rows

__all__ = ["distance_polarization"]


@full_precision
def distance_polarization(
    f: Tensor, d_plus: float = 0.1, d_minus: float = 0.5, reduction: str = "sum", *, stats: dict | None = None
) -> Tensor:
    r"""Distance polarization regulariser R1.

        D    = (1 - F F^T) / 2                        (Eq. 3; in [0, 1] for unit rows)
        R1   = sum_{i,j} | min( (D_ij - d+) (D_ij - d-), 0 ) |     over the full n x n matrix
                                                         (D_ii = 0)

    Only distances inside the margin (d+, d-) contribute: the product is negative there and
    positive (clipped to 0) outside, so minimising R1 pushes every pairwise distance out of the
    margin, towards [0, d+] or [d-, 1]. The diagonal is a distance of a point to itself,
    D_ii = 0 <= d+, and adds nothing, so the full sum is twice the sum over i < j. It is left out
    explicitly: computed as (1 - ||f_i||^2)/2 it is only 0 up to round-off, and with d+ = 0 that
    round-off would leak an O(1) gradient into every row (and penalise the norm of non-unit
    rows, which is not a pairwise distance). ``reduction='mean'`` divides by the
    n(n-1) off-diagonal entries (the paper's Eq. 10 normaliser is garbled; 'sum' is the l1 norm
    of Eq. 9). Defaults d+ = 0.1, d- = 0.5 and weight lambda = 0.1 in the objective (Sec. 5).
    Eq. 1's NCE loss has no temperature; the "tau" of Table 3 is the margin width d- - d+.
    Which embeddings enter R1 is not stated in the paper; the caller decides (one embedding per
    distinct instance is the reference choice). Inputs are used as given.

    Args:
        f: ``[n, d]`` embeddings (L2-normalised by the head), n >= 1.
        d_plus, d_minus: the margin, 0 <= d_plus < d_minus.
        reduction: ``'sum'`` (default) or ``'mean'``.
        stats: optional dict receiving ``dp_margin_occupancy``: the fraction of off-diagonal
            pairs whose distance lies strictly inside (d_plus, d_minus), as a 0-dim tensor
            on f's device (a training step reads it back on log steps only).
    """
    _rows("f", f)
    lo = checks.non_negative("d_plus", d_plus)
    hi = checks.positive("d_minus", d_minus)
    if not lo < hi:
        raise ValueError(f"d_plus must be < d_minus, got d_plus={d_plus!r}, d_minus={d_minus!r}")
    checks.choice("reduction", reduction, ("sum", "mean"))
    n = f.shape[0]
    if reduction == "mean" and n < 2:
        raise ValueError(f"reduction='mean' needs at least 2 rows in f, got shape {tuple(f.shape)}")
    total, inside = _Polarization.apply(f, lo, hi)
    if stats is not None:
        stats["dp_margin_occupancy"] = inside.float() / (n * (n - 1)) if n > 1 else 0.0
    return total if reduction == "sum" else total / (n * (n - 1))


class _Polarization(torch.autograd.Function):
    """R1 and the number of pairs inside the margin, with a hand-written backward.

    With c = (d+ + d-)/2, h = (d- - d+)/2 and t = D - c (one ``addmm``: t = 1/2 - c - F F^T / 2),
    (D - d+)(D - d-) = t^2 - h^2, so R1 = sum_{i != j} max(h^2 - t^2, 0). Inside the margin
    dR1/dS = t (S = F F^T) and 0 outside; S is symmetric, so dR1/dF = 2 W F with W = t on the
    inside pairs: one matmul in the backward, the matrix saved once. Plain-torch
    definition: :func:`distance_polarization_reference`.
    """

    @staticmethod
    def forward(ctx, f, d_plus, d_minus):
        center, half = (d_plus + d_minus) / 2, (d_minus - d_plus) / 2
        t = torch.addmm(f.new_full((), 0.5 - center), f, f.t(), alpha=-0.5)
        t.diagonal().fill_(2 * half)  # not a pair: outside the margin, no penalty, no gradient
        gap = torch.addcmul(t.new_full((), half * half), t, t, value=-1.0)  # h^2 - t^2
        inside = gap > 0
        total = gap.clamp_min_(0.0).sum()
        del gap
        weights = t.masked_fill_(inside.logical_not(), 0.0)
        ctx.save_for_backward(f, weights)
        count = torch.count_nonzero(inside)
        ctx.mark_non_differentiable(count)
        return total, count

    @staticmethod
    @once_differentiable
    def backward(ctx, grad, _):
        f, weights = ctx.saved_tensors
        return (weights @ f).mul_(2 * grad), None, None


def distance_polarization_reference(
    f: Tensor, d_plus: float = 0.1, d_minus: float = 0.5, reduction: str = "sum"
) -> Tensor:
    """R1 (LMCL Sec. 3.3, Eq. 9) straight from the matrix: D = (1 - F F^T) / 2 with D_ii = 0,
    sum of |min((D - d+)(D - d-), 0)| over the n x n entries (``'mean'``: over the n(n-1)
    off-diagonal ones). :func:`distance_polarization` computes it with ``_Polarization``."""
    n = f.shape[0]
    off = ~torch.eye(n, dtype=torch.bool, device=f.device)
    dist = torch.where(off, (1 - f @ f.t()) / 2, 0.0)
    total = ((dist - d_plus) * (dist - d_minus)).clamp(max=0.0).abs().sum()
    return total if reduction == "sum" else total / (n * (n - 1))
