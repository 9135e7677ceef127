"""The similarity kernel shared by the InfoNCE family and the debiased losses.

:class:`_RowLogSumExp` computes row log-sum-exps of ``c q @ keys^T`` (a queue or memory bank)
with an optional mask, in one GEMM and one exponential pass, with a hand-written backward that
is the matmul of the bound; :class:`_InBatchLoss` is the in-batch (SimCLR 2B)
loss of NT-Xent, DCL and HCL on top of it as one autograd node. See
:func:`_masked_exponentials` for the shift and the masks.

The formulas these kernels compute are written once in plain torch next to the public
functions, and the tests hold the kernels to them: ``infonce.nt_xent_reference``,
``infonce.moco_infonce_reference`` and ``debiased.dcl_reference`` (DCL and HCL).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

_NEG_INF = float("-inf")
_LOG2E = 1.4426950408889634  # 1 / ln 2
ROW_MAX_DEVICES = ("cuda",)  # devices whose logits are shifted by the row max (_shift_by_row_max)


def _masked_exponentials(
    left: Tensor,
    right: Tensor | None,
    scales: Sequence[float],
    partner_kept: bool = False,
    keep: Tensor | Callable[[Tensor], Tensor] | None = None,
):
    """X = c0 left @ right^T (c0 = scales[0], or scales[1] when the scales are (2c, c)); per
    scale c: E_c = exp((c / c0) (X - m)) with a row shift m >= max_b X_ab; entries dropped by
    ``keep`` (single scale only) are zeroed after the exp.

    ``right=None`` is the in-batch case: the Gram matrix of left = [z1; z2] (2B rows) with
    self dropped and the partner (a + B mod 2B) dropped unless ``partner_kept``; both lie on
    diagonals of the matrix (offsets 0 and +-B) and are written there as -inf.

    Returns (exps, sums, shift, symmetric) with lse[c, a] = (c / c0) shift_a + log sum_b
    E_c[a, b] (:func:`_lse`); ``symmetric``: the in-batch E_c are symmetric (no keep-mask, one
    shift for all rows, no row recomputed). When the scales are (2c, c) (HCL at beta = 1) the GEMM runs at c and only
    E_c is kept: E_2c = E_c^2 and its row sums are squared row norms, so ``exps`` is
    ``[None, E_c]`` (one exp pass and no rescaling pass over the matrix).

    The shift is the Cauchy-Schwarz bound m_a = c0 ||left_a|| max_b ||right_b|| (in-batch
    without a mask: c0 max_b ||left_b||^2 for every row, the same for unit rows), known before
    the product, so the GEMM itself computes c0 left right^T - m (no row-max and no subtraction
    pass). It is exact for unit rows up to a gap of 2 c0; a row whose sum would lose precision
    to underflow (far below its bound: large 1/tau, very unequal norms, or a mask that keeps
    only distant candidates) is recomputed exactly with its true max over allowed entries.
    Masks are applied after the exp: exp(-inf) takes a ~10x slower path on CPU. ``keep`` may
    also be a function of the shifted logits X (before the exp; an increasing function of
    c0 left @ right^T in each row) that returns the mask: a selection by rank within a row
    (Ring's percentile ring) then costs no second product.
    """
    if keep is not None and len(scales) != 1:
        raise ValueError("a keep-mask needs a single temperature scale")  # internal misuse
    c0 = _base_scale(scales)
    other = left if right is None else right
    if _shift_by_row_max(left):
        return _row_max_exponentials(left, other, right is None, scales, c0, partner_kept, keep)
    norms = torch.linalg.vector_norm(left, dim=1)
    other_max = (norms if right is None else torch.linalg.vector_norm(other, dim=1)).max()
    symmetric = right is None and keep is None
    if symmetric:  # one shift for all rows keeps E symmetric (the same as m_a for unit rows)
        shift = (other_max.square() * c0).expand(norms.shape[0], 1)
    else:
        shift = (norms * (c0 * other_max)).unsqueeze(1)
    # (X - m) log2(e) in the GEMM, then exp2: the same value as exp(X - m) to the rounding the
    # GEMM output has anyway, and exp2 is ~2x faster than exp on CPU (measured, AVX2).
    x = torch.addmm(shift * -_LOG2E, left, other.t(), alpha=c0 * _LOG2E)
    if callable(keep):
        keep = keep(x)
    if right is None:
        half = x.shape[0] // 2
        x.diagonal().fill_(_NEG_INF)
        if not partner_kept:
            x.diagonal(half).fill_(_NEG_INF)
            x.diagonal(-half).fill_(_NEG_INF)
    exps, sums = _exponentials(x, scales, c0, keep)
    smallest, floor = _smallest_sums(sums, scales), _floor(x)
    if float(smallest.amin()) < floor:
        shift = shift.contiguous()
        _exact_rows((smallest < floor).nonzero().flatten(), exps, sums, shift, left, right, scales, partner_kept, keep)
        symmetric = False
    return exps, sums, shift.squeeze(1), symmetric, keep


def _shift_by_row_max(t: Tensor) -> bool:
    """Which shift :func:`_masked_exponentials` takes for tensors on ``t``'s device: on CUDA the
    max over the allowed entries (a reduction and a subtraction over the matrix more, and no
    value read back to the host: the training step never waits for the device), on the CPU the
    Cauchy-Schwarz bound (no pass over the matrix; its underflow guard reads one number back,
    which costs nothing where the tensors already are). :data:`ROW_MAX_DEVICES` holds the device
    types of the first kind, the devices whose steps read nothing back: the losses' checks that
    need a device value are left to the records there (:func:`_checks_read`); the tests add
    ``cpu`` to check those paths here (``toolkit.training.syncs.cuda_branches``)."""
    return t.device.type in ROW_MAX_DEVICES


def _checks_read(t: Tensor) -> bool:
    """Whether a check that needs a value of ``t`` (an anchor left without negatives, an index
    out of range) reads it inside the loss: off :data:`ROW_MAX_DEVICES`, where reading costs
    no synchronisation. Elsewhere the check is left to the step's records, read at log steps."""
    return not _shift_by_row_max(t)


def _row_max_exponentials(
    left: Tensor,
    other: Tensor,
    in_batch: bool,
    scales: Sequence[float],
    c0: float,
    partner_kept: bool,
    keep: Tensor | Callable[[Tensor], Tensor] | None,
):
    """:func:`_masked_exponentials` with the shift taken from the max over the allowed entries
    (dropped entries are written as -inf before it), nothing read back to the host.

    With a keep-mask, against keys, or where one shift could underflow: each row's own max,
    m_a = max_b X_ab. Every row keeps a term equal to 1, so no sum can underflow and nothing is
    checked; E is not symmetric (rows shift apart), and the in-batch backward takes two GEMMs.

    In-batch without a mask, when unit rows cannot underflow under it: one shift for all rows,
    the largest allowed logit m = max_a m_a, so E stays symmetric and the backward is one GEMM
    as on the bound's path. A row's largest term is then e^{rho (m_a - m)} (rho = the largest
    scale over the GEMM's, 2 for HCL at beta = 1) and m - m_a <= 2 c0 for unit rows, so the
    sums stay above the underflow floor whenever 2 c0 rho <= ln(1 / floor) (float32: ~71 - ln n,
    i.e. tau >= ~0.032 at n = 8192): decided on the host from c0, n and the dtype, before the
    product. Rows far from unit norm can still fall below the floor, where the bound's path
    recomputes them exactly; here, with no read, their sums are set to NaN: the loss is NaN and
    the trainer's non-finite check stops the run at its next log step, never an inexact value."""
    x = torch.mm(left, other.t()).mul_(c0 * _LOG2E)  # X log2(e): exp2 below, as the bound's path
    if callable(keep):
        keep = keep(x)  # a rank within each row: the same under any row shift
    if in_batch:
        half = x.shape[0] // 2
        x.diagonal().fill_(_NEG_INF)
        if not partner_kept:
            x.diagonal(half).fill_(_NEG_INF)
            x.diagonal(-half).fill_(_NEG_INF)
    if keep is not None:
        x.masked_fill_(keep.logical_not(), _NEG_INF)
    top = x.amax(dim=1, keepdim=True)
    symmetric = in_batch and keep is None and 2.0 * max(scales) <= -math.log(_floor(x))
    if symmetric:
        top = top.amax().expand_as(top)  # one shift: E = exp(X - m) is symmetric
    x.sub_(top)
    exps, sums = _exponentials(x, scales, c0)  # dropped entries are -inf: exp2 makes them 0
    if symmetric:
        lost = _smallest_sums(sums, scales) < _floor(x)
        sums = [s.masked_fill(lost, math.nan) for s in sums]
    return exps, sums, (top / _LOG2E).squeeze(1), symmetric, keep  # the shift in natural units


def _smallest_sums(sums: Sequence[Tensor], scales: Sequence[float]) -> Tensor:
    """Per row, the smallest of the sums of every E_c (all entries <= 1 under the shift)."""
    if _squares(scales):
        return sums[0]  # sum E^2 <= sum E, as E <= 1
    return sums[0] if len(sums) == 1 else torch.stack(sums).amin(dim=0)


def _floor(x: Tensor) -> float:
    """The row sum below which a row may have lost precision to underflow: terms below ``tiny``
    add at most n * tiny, negligible (< eps relative) above this level."""
    info = torch.finfo(x.dtype)
    return info.tiny * x.shape[1] / info.eps


def _exponentials(x: Tensor, scales: Sequence[float], c0: float, keep: Tensor | None = None):
    """E_c per scale from the shifted logits ``x`` (base 2, exponentiated in place) and their row
    sums; with ``keep`` (single scale) the dropped entries are zeroed after the exp. For the
    scales (2c, c) only E_c is kept: E_2c = E_c^2, its row sums the squared row norms."""
    if _squares(scales):
        e = x.exp2_()
        return [None, e], [torch.linalg.vector_norm(e, dim=1).square(), e.sum(dim=1)]
    exps = [x] * len(scales)
    for i in range(1, len(scales)):
        exps[i] = (x * (scales[i] / c0)).exp2_()
    exps[0] = x.exp2_()
    if keep is not None:
        torch.where(keep, x, x.new_zeros(()), out=x)
    return exps, [e.sum(dim=1) for e in exps]


def _lse(scales: Sequence[float], sums: Sequence[Tensor], shift: Tensor, i: int) -> Tensor:
    """lse at scale ``scales[i]`` from :func:`_masked_exponentials`' sums and shift."""
    return shift * (scales[i] / _base_scale(scales)) + sums[i].log()


def _exact_rows(
    idx: Tensor,
    exps: list,
    sums: list,
    shift: Tensor,
    left: Tensor,
    right: Tensor | None,
    scales: Sequence[float],
    partner_kept: bool,
    keep: Tensor | None,
) -> None:
    """Recompute rows ``idx`` of every E_c, their sums and shifts with the exact max over the
    allowed entries of each row (in place in ``exps``, ``sums``, ``shift``)."""
    c0 = _base_scale(scales)
    x = (left[idx] * c0) @ (left if right is None else right).t()
    allowed = torch.ones_like(x, dtype=torch.bool) if keep is None else keep[idx].clone()
    if right is None:
        local = torch.arange(idx.numel(), device=x.device)
        allowed[local, idx] = False
        allowed[local, (idx + x.shape[1] // 2) % x.shape[1]] = partner_kept
    x.masked_fill_(allowed.logical_not(), _NEG_INF)
    m = x.amax(dim=1, keepdim=True)
    x.sub_(m)
    shift[idx] = m
    if _squares(scales):
        e = x.exp_()
        exps[1][idx] = e
        sums[0][idx] = torch.linalg.vector_norm(e, dim=1).square()
        sums[1][idx] = e.sum(dim=1)
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


def _in_batch_partner(n_pairs: int, device: torch.device | None = None) -> Tensor:
    """Index of the positive of each row of z = [z1; z2]: a -> a + B (mod 2B)."""
    return (torch.arange(2 * n_pairs, device=device) + n_pairs) % (2 * n_pairs)


def _gram_backward(g: Tensor, row: Tensor, z: Tensor) -> Tensor:
    """d/dz of sum_ab G_ab <z_a, z_b> for G = diag(row) g: the transpose adds. Row factors are
    applied to ``[n, d]`` operands and results, never to the ``[n, n]`` matrix."""
    return torch.addmm((g @ z).mul_(row), g.t(), z * row)


class _RowLogSumExp(torch.autograd.Function):
    """lse[a] = log sum_{b kept for a} exp(c <q_a, k_b>) against constant keys ``k`` (a MoCo
    queue, a memory bank), with an optional keep-mask (or a function that selects it from the
    shifted logits, see :func:`_masked_exponentials`).

    Backward: with w_a = grad_a c / S_a (softmax normaliser and incoming gradient, per row)
    the gradient is diag(w) E k, the row factor applied to the ``[n, d]`` result, never to the
    ``[n, m]`` matrix: the backward is the matmul of the bound and nothing else. The saved
    exponentials stay intact (a second backward with ``retain_graph`` sees the same values).
    """

    @staticmethod
    def forward(ctx, q, keys, c, keep):
        exps, sums, shift, _, _ = _masked_exponentials(q, keys, (c,), keep=keep)
        ctx.save_for_backward(keys, exps[0], sums[0])
        ctx.c = c
        return _lse((c,), sums, shift, 0)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        keys, e, s = ctx.saved_tensors
        return (e @ keys).mul_((grad * ctx.c / s).unsqueeze(1)), None, None, None


class _InBatchLoss(torch.autograd.Function):
    """mean_a head(A_a, L_a) over the 2B rows of z = [z1; z2], as one autograd node.

    A_a = pos_scale <z_a, z_p(a)> is the positive logit (p(a) = a + B mod 2B) and L_a the
    row statistic of the similarities s_ab = <z_a, z_b> over the b allowed for a (self always
    dropped, the partner kept or not, ``keep`` as in :func:`_masked_exponentials`):

        scales (c,):     L = lse_c                   dL/ds = (c / S) E
        scales (2c, c):  L = lse_2c - lse_c          dL/ds = (2c / S0) E^2 - (c / S1) E
        scales (c1, c2): L = lse_c1 - lse_c2         dL/ds = (c1 / S1) E_c1 - (c2 / S2) E_c2

    with E = exp(c s - m), S0 = sum_b E^2 and S = S1 = sum_b E ((2c, c) is HCL at beta = 1:
    one exponential pass). ``head(A, L)`` returns the per-row losses and their derivatives
    dl/dA, dl/dL (tensors or floats). The loss is a scalar, so every row factor u_a = dl/dL_a
    / 2B is known in the forward and G = dloss/ds (G_ab = u_a dL_a/ds_ab) is built there. The
    gradient is (G + G^T) z plus an ``[n, d]`` term for the positives. Without a keep-mask E
    is symmetric (one shift for all rows), so H = G + G^T needs no transpose:

        one scale:  H = E o (r_a + r_b),                     r = u c / S
        (2c, c):    H = E o ((a_a + a_b) E + b_a + b_b),     a = 2c u / S0, b = -c u / S1

    and the backward is ONE matmul H z, where autograd through the similarity matrix needs
    two (the bound's backward): the matrix passes that build H cost less than the matmul they
    save (measured: nt_xent 1.2 -> 1.0-1.1, dcl 1.27 -> 1.06-1.14, hcl 1.28 -> 1.16-1.24x the
    bound). With a keep-mask, under row shifts (a row recomputed on the CPU; CUDA's row max
    with a mask or a small temperature, :func:`_row_max_exponentials`) or for other scale
    pairs, G is saved as diag(row) g and the backward is the bound's two matmuls with the row
    factors on ``[n, d]`` operands. The per-row vector arithmetic of a loss (NT-Xent, DCL,
    HCL) runs outside autograd: one node instead of ~10. The saved matrix stays intact (a
    second backward with ``retain_graph`` sees the same values).
    """

    @staticmethod
    def forward(ctx, z1, z2, pos_scale, scales, partner_kept, keep, head):
        n = 2 * z1.shape[0]
        z = torch.cat([z1, z2])
        exps, sums, shift, symmetric, _ = _masked_exponentials(z, None, scales, partner_kept, keep)
        if len(scales) == 1:
            stat = _lse(scales, sums, shift, 0)
        elif _squares(scales):
            stat = (sums[0] / sums[1]).log_().add_(shift)  # lse_2c - lse_c, the GEMM at c
        else:
            stat = _lse(scales, sums, shift, 0) - _lse(scales, sums, shift, 1)
        pos = torch.linalg.vecdot(z1, z2)
        per_row, d_a, d_l = head(torch.cat([pos, pos]).mul_(pos_scale), stat)
        u = d_l / n if isinstance(d_l, Tensor) else torch.full_like(sums[-1], d_l / n)
        # G = dloss/ds (row a: the loss's factor u_a times dL_a/ds_ab); saved as H = G + G^T
        # (one backward matmul) when E is symmetric, else as (g, row) with G = diag(row) g.
        if len(scales) == 1:  # dL/ds = (c / S) E
            r = u * scales[0] / sums[0]
            if symmetric:
                g, row = exps[0].mul_(r.unsqueeze(1) + r), None
            else:
                g, row = exps[0], r
        elif _squares(scales):  # dL/ds = (2c / S0) E^2 - (c / S1) E = E o (a E + b) per row
            w = u if symmetric else 1.0  # u inside H, or left to the backward as the row factor
            a = (w * (2.0 * scales[1]) / sums[0]).unsqueeze(1)
            b = (w * -scales[1] / sums[1]).unsqueeze(1)
            e = exps[1]
            g = torch.addcmul(b, a, e)
            if symmetric:  # G + G^T: the column factors too
                g.addcmul_(a.t(), e).add_(b.t())
            g.mul_(e)
            row = None if symmetric else u
        else:
            g = exps[0].mul_((scales[0] / sums[0]).unsqueeze(1))
            g.addcmul_(exps[1], (-scales[1] / sums[1]).unsqueeze(1))
            row = u
        ctx.save_for_backward(z, g, None if row is None else row.unsqueeze(1), d_a if isinstance(d_a, Tensor) else None)
        ctx.d_a, ctx.pos_scale = d_a, pos_scale
        return per_row.mean()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        z, g, row, d_a = ctx.saved_tensors
        n = z.shape[0]
        b = n // 2
        dz = (g @ z).mul_(grad) if row is None else _gram_backward(g, row * grad, z)
        if d_a is None:
            d_pos = (2.0 * ctx.d_a * ctx.pos_scale / n) * grad
        else:
            d_pos = ((d_a[:b] + d_a[b:]) * (ctx.pos_scale / n)).mul_(grad).unsqueeze(1)
        dz[:b].addcmul_(z[b:], d_pos)
        dz[b:].addcmul_(z[:b], d_pos)
        return dz[:b], dz[b:], None, None, None, None, None
