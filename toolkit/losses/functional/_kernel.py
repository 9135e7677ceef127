"""The similarity kernel shared by the InfoNCE family and the debiased losses.

:class:`_RowLogSumExp` (one or several temperature scales) and :class:`_RowLogSumExpRatio`
(lse(2c) - lse(c), HCL at beta = 1) compute row log-sum-exps of ``c left @ right^T`` with
masks, in one GEMM and one exponential pass, with hand-written backwards that are the
matmuls of the bound; see :func:`_masked_exponentials` for the shift and the masks.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

_NEG_INF = float("-inf")
_LOG2E = 1.4426950408889634  # 1 / ln 2


def _masked_exponentials(left: Tensor, right: Tensor | None, scales: Sequence[float],
                         drop_self: bool, partner: Tensor | None, partner_kept: bool,
                         keep: Tensor | None):
    """X = c0 left @ right^T (right=None: the Gram matrix of left; c0 = scales[0], or scales[1]
    when the scales are (2c, c)) with -inf at self (``drop_self``) and at the partner unless
    ``partner_kept``; per scale c: E_c = exp((c / c0) (X - m)) with a row shift
    m >= max_b X_ab; entries dropped by ``keep`` (single scale only) are zeroed after the exp.

    Returns (exps, sums, lse) with lse[c, a] = (c / c0) m_a + log sum_b E_c[a, b]. When the
    scales are (2c, c) (HCL at beta = 1) the GEMM runs at c and only E_c is kept: E_2c = E_c^2
    and its row sums are squared row norms, so ``exps`` is ``[None, E_c]`` (one exp pass and no
    rescaling pass over the matrix).

    The shift is the Cauchy-Schwarz bound m_a = c0 ||left_a|| max_b ||right_b||, known before
    the product, so the GEMM itself computes c0 left right^T - m (no row-max and no subtraction
    pass). It is exact for unit rows up to a gap of 2 c0; a row whose sum would lose precision
    to underflow (far below its bound: large 1/tau, very unequal norms, or a mask that keeps
    only distant candidates) is recomputed exactly with its true max over allowed entries.
    Masks are applied after the exp: exp(-inf) takes a ~10x slower path on CPU.
    """
    if keep is not None and len(scales) != 1:
        raise ValueError("a keep-mask needs a single temperature scale")  # internal misuse
    c0 = _base_scale(scales)
    other = left if right is None else right
    norms = torch.linalg.vector_norm(left, dim=1)
    other_max = (norms if right is None else torch.linalg.vector_norm(other, dim=1)).max()
    shift = (norms * (c0 * other_max)).unsqueeze(1)
    # (X - m) log2(e) in the GEMM, then exp2: the same value as exp(X - m) to the rounding the
    # GEMM output has anyway, and exp2 is ~2x faster than exp on CPU (measured, AVX2).
    x = torch.addmm(shift * -_LOG2E, left, other.t(), alpha=c0 * _LOG2E)
    n = x.shape[0]
    rows = torch.arange(n, device=x.device)
    if drop_self:
        x.diagonal().fill_(_NEG_INF)
    if partner is not None and not partner_kept:
        x[rows, partner] = _NEG_INF
    if _squares(scales):
        half = x.exp2_()
        exps: list[Tensor | None] = [None, half]
        sums = [torch.linalg.vector_norm(half, dim=1).square(), half.sum(dim=1)]
    else:
        exps = [x] * len(scales)
        for i in range(1, len(scales)):
            exps[i] = (x * (scales[i] / c0)).exp2_()
        exps[0] = x.exp2_()
        if keep is not None:
            saved = x[rows, partner] if partner is not None and partner_kept else None
            torch.where(keep, x, x.new_zeros(()), out=x)
            if saved is not None:
                x[rows, partner] = saved
        sums = [e.sum(dim=1) for e in exps]
    # terms below `tiny` add at most m * tiny: negligible (< eps relative) above this level
    floor = torch.finfo(x.dtype).tiny * x.shape[1] / torch.finfo(x.dtype).eps
    low = torch.stack(sums).amin(dim=0) < floor
    if low.any():
        _exact_rows(low.nonzero().flatten(), exps, sums, shift, left, other, scales, drop_self,
                    partner, partner_kept, keep)
    lse = torch.stack([(c / c0) * shift.squeeze(1) + s.log() for c, s in zip(scales, sums)])
    return exps, sums, lse


def _exact_rows(idx: Tensor, exps: list, sums: list, shift: Tensor, left: Tensor,
                other: Tensor, scales: Sequence[float], drop_self: bool, partner: Tensor | None,
                partner_kept: bool, keep: Tensor | None) -> None:
    """Recompute rows ``idx`` of every E_c, their sums and shifts with the exact max over the
    allowed entries of each row (in place in ``exps``, ``sums``, ``shift``)."""
    c0 = _base_scale(scales)
    x = (left[idx] * c0) @ other.t()
    allowed = torch.ones_like(x, dtype=torch.bool) if keep is None else keep[idx].clone()
    local = torch.arange(idx.numel(), device=x.device)
    if drop_self:
        allowed[local, idx] = False
    if partner is not None:
        allowed[local, partner[idx]] = partner_kept
    x.masked_fill_(allowed.logical_not(), _NEG_INF)
    m = x.amax(dim=1, keepdim=True)
    x.sub_(m)
    shift[idx] = m
    if _squares(scales):
        half = x.exp_()
        exps[1][idx] = half
        sums[0][idx] = torch.linalg.vector_norm(half, dim=1).square()
        sums[1][idx] = half.sum(dim=1)
        return
    for i, c in enumerate(scales):
        e = (x * (c / c0)).exp_()
        exps[i][idx] = e
        sums[i][idx] = e.sum(dim=1)


def _squares(scales: Sequence[float]) -> bool:
    return len(scales) == 2 and scales[0] == 2 * scales[1]


def _base_scale(scales: Sequence[float]) -> float:
    """The scale the GEMM and the shift use: the smaller one for (2c, c), else the first."""
    return scales[1] if _squares(scales) else scales[0]


def _gemm_backward(g: Tensor, row: Tensor | None, left: Tensor, right: Tensor | None) -> Tensor:
    """d/d left of sum_ab G_ab <left_a, right_b> for G = diag(row) g (``row=None``: G = g).
    ``right=None`` is the Gram case (right = left: the transpose adds). Row factors are applied
    to ``[n, d]`` operands and results, never to the ``[n, m]`` matrix."""
    if right is None:
        if row is None:
            return torch.addmm(g @ left, g.t(), left)
        return torch.addmm((g @ left).mul_(row), g.t(), left * row)
    return g @ right if row is None else (g @ right).mul_(row)


class _RowLogSumExp(torch.autograd.Function):
    """lse[c, a] = log sum_{b allowed for a} exp(c * <left_a, right_b>), for each scale c > 0.

    ``right=None`` means the Gram matrix of ``left`` (in-batch: the gradient reaches both
    factors). Otherwise ``right`` is a constant (MoCo queue, memory bank).
    Backward: with w_a = grad_a * c / sum_a (softmax normaliser and incoming gradient, per row)
    the gradient is diag(w) E right (+ E^T diag(w) left in the Gram case). For one scale the
    row factors are applied to the ``[n, d]`` operands and results, never to the ``[n, m]``
    matrix, so the backward is the matmul(s) of the bound and nothing else; several scales
    are first combined into one matrix sum_c diag(w_c) E_c. The saved exponentials stay
    intact (a second backward with ``retain_graph`` sees the same values). Scales (2c, c)
    go through :class:`_RowLogSumExpRatio` (HCL at beta = 1).
    """

    @staticmethod
    def forward(ctx, left, right, scales, drop_self, partner, partner_kept, keep):
        if _squares(scales):
            raise ValueError("scales (2c, c): use _RowLogSumExpRatio")  # internal misuse
        exps, sums, lse = _masked_exponentials(left, right, scales, drop_self, partner,
                                               partner_kept, keep)
        ctx.save_for_backward(left, right, *exps, *sums)
        ctx.scales = tuple(scales)
        return lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        left, right, *saved = ctx.saved_tensors
        scales = ctx.scales
        w = [(gc * c / s).unsqueeze(1) for gc, c, s in zip(grad, scales, saved[-len(scales):])]
        if len(scales) == 1:
            g, row = saved[0], w[0]
        else:
            g = saved[0] * w[0]
            for e, wc in zip(saved[1:len(scales)], w[1:]):
                g.addcmul_(e, wc)
            row = None
        return _gemm_backward(g, row, left, right), *([None] * 6)


class _RowLogSumExpRatio(torch.autograd.Function):
    """D[a] = lse_{2c}[a] - lse_c[a] over the allowed b of row a (HCL's log-ratio at beta = 1).

    With E = exp(c s - m) (one exponential pass at scale c, see :func:`_masked_exponentials`),
    S0 = sum_b E^2 and S1 = sum_b E:  dD_a / ds_ab = 2c E^2 / S0 - c E / S1. Scaling the row
    by lambda = 2 S1 / S0 (E' = lambda E) turns the bracket into E'^2 - E':

        dD_a / ds_ab = (c S0 / (2 S1^2)) (E'^2 - E')

    whose row factor goes to the ``[n, d]`` operands as in the one-scale backward. So the
    forward turns E into E' - E'^2 in place (two passes, no new matrix) and the backward is
    the two matmuls of the bound and nothing else (the general two-scale backward needed a
    new matrix and three passes over it).
    """

    @staticmethod
    def forward(ctx, left, right, c, drop_self, partner, partner_kept):
        exps, (s0, s1), lse = _masked_exponentials(left, right, (2.0 * c, c), drop_self, partner,
                                                   partner_kept, None)
        f = exps[1].mul_((2.0 * s1 / s0).unsqueeze(1))
        f.addcmul_(f, f, value=-1.0)  # E' - E'^2 (masked entries stay 0)
        ctx.save_for_backward(left, right, f, s0, s1)
        ctx.c = c
        return lse[0] - lse[1]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        left, right, f, s0, s1 = ctx.saved_tensors
        row = (grad * (-ctx.c) * s0 / (2.0 * s1.square())).unsqueeze(1)
        return _gemm_backward(f, row, left, right), *([None] * 5)
