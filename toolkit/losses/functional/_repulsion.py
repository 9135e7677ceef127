"""CACR's repulsion term: the softmin-weighted expected squared distance to the negatives and the
entropy of those weights, over one or several blocks of scores, without a weight matrix kept
for autograd (see :func:`_repulsion`). Used by :mod:`.cacr`; the plain-torch definition
is ``cacr.cacr_reference``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _row_dot(u: Tensor, v: Tensor) -> Tensor:
    """``sum_j u_ij v_ij``: a batched dot for wide rows (no product tensor), else mul + sum
    (faster for narrow rows; both measured on CPU)."""
    if u.shape[1] >= 4096:
        return torch.bmm(u.unsqueeze(1), v.unsqueeze(2)).reshape(-1)
    return (u * v).sum(dim=1)


class _SoftminExpectation(torch.autograd.Function):
    """``E_i = sum_j pi_ij s_ij`` with ``pi = softmax_j(s_ij)`` (j != i with ``diagonal``).

    One block of repulsion scores in a fused op: unnormalised weights ``u = exp(s - max)``,
    one row dot, and a hand-written backward ``dE_i/ds_ij = pi_ij (1 + s_ij - E_i)`` (weights
    with gradient) or ``pi_ij`` (weights detached). Returns ``(E, lse)``; ``lse = log sum_j
    e^{s_ij}`` has no gradient (it gives the entropy ``H = lse - E``).
    """

    @staticmethod
    def forward(ctx, s: Tensor, diagonal: bool, weight_grad: bool):  # type: ignore[override]
        u = s.clone()
        if diagonal:
            u.diagonal().fill_(float("-inf"))
        peak = u.amax(dim=1, keepdim=True)
        u.sub_(peak).exp_()
        mass = u.sum(dim=1)
        e = _row_dot(u, s) / mass
        lse = mass.log() + peak.squeeze(1)
        ctx.save_for_backward(s, u, mass, e)
        ctx.weight_grad = weight_grad
        ctx.mark_non_differentiable(lse)
        return e, lse

    @staticmethod
    def backward(ctx, grad_e: Tensor, grad_lse: Tensor):  # type: ignore[override]
        s, u, mass, e = ctx.saved_tensors
        coef = (grad_e / mass).unsqueeze(1)
        if ctx.weight_grad:
            grad = torch.sub(s, (e - 1.0).unsqueeze(1)).mul_(u).mul_(coef)
        else:
            grad = u * coef
        return grad, None, None


def _repulsion(blocks: list[tuple[Tensor, Tensor, bool]], row_const: Tensor, t_neg: float) -> tuple[Tensor, Tensor]:
    """Expected squared distance ``sum_j pi-_j c_ij`` per anchor and the entropy of pi-.

    Each block is ``(scores, weight_scores, diagonal)`` as made by :func:`_scores`: the scores
    with gradient (they carry the cost), the same values as the weights see them (the same
    tensor, detached, or shifted by a zero-valued term that carries a gradient), and whether
    the entry j == i is left out. ``pi- = softmax(-t- c) = softmax(weight_scores)`` over all
    blocks together and ``sum_j pi- c = ||q_i||^2 - (sum_j pi- scores_j) / t-``. One block goes
    through :class:`_SoftminExpectation`; several are combined by their log-sum-exp.
    Returns ``(expected [N], entropy [N] detached)``.
    """
    if t_neg == 0:  # uniform weights over the kept entries (UAUR)
        total, count = row_const.new_zeros(row_const.shape), row_const.new_zeros(row_const.shape)
        for cost, _, diagonal in blocks:
            total = total + cost.sum(dim=1) - (cost.diagonal() if diagonal else 0.0)
            count = count + cost.shape[1] - (1 if diagonal else 0)
        return row_const + total / count, count.log()
    if len(blocks) == 1:
        scores, w_scores, diagonal = blocks[0]
        if w_scores is scores or not w_scores.requires_grad:
            weighted, lse = _SoftminExpectation.apply(scores, diagonal, w_scores is scores)
            return row_const - weighted / t_neg, (lse - weighted).detach()
    peaks, masses, dots = [], [], []
    for scores, w_scores, diagonal in blocks:
        if diagonal:
            bias = torch.zeros_like(w_scores, requires_grad=False)
            w_scores = w_scores + bias.fill_diagonal_(float("-inf"))
        peak = w_scores.detach().amax(dim=1, keepdim=True)  # cancels in the ratio below
        u = (w_scores - peak).exp_()
        peaks.append(peak.squeeze(1))
        masses.append(u.sum(dim=1))
        dots.append(_row_dot(u, scores))
    top = torch.stack(peaks).amax(dim=0)
    scale = [torch.exp(p - top) for p in peaks]
    mass = sum(z * c for z, c in zip(masses, scale))
    weighted = sum(t * c for t, c in zip(dots, scale)) / mass  # sum_j pi- scores_j
    expected = row_const - weighted / t_neg
    with torch.no_grad():
        entropy = mass.log() + top - weighted  # -sum pi log pi
    return expected, entropy.detach()
