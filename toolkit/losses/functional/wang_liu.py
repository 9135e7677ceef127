"""Wang & Liu 2021, "Understanding the Behaviour of Contrastive Loss" (CVPR): the memory-bank
contrastive loss, its temperature limit, and explicit hard negatives.

Notation of the paper (Sec. 3): ``s_ij = f(x_i)^T g(x_j)`` with g a memory bank (Sec. 5.1
follows Wu et al. 2018); ``s_ii`` is the anchor against its own bank entry (the positive) and
``s_ik, k != i`` against every other entry (the negatives). Here the functions take the
positive ``s_pos`` ``[N]`` (``s_ii``) and negatives ``s_neg`` ``[N, M]`` (``s_ik``) directly, so
the same code serves a bank (:func:`wl_sims_from_bank`), a queue or in-batch negatives.

* :func:`wl_contrastive`  Eq. 1, ``L = -s_ii/tau + log(sum_{k!=i} e^{s_ik/tau} + e^{s_ii/tau})``
* :func:`wl_simple`       Eq. 3, ``L_simple = -s_ii + lambda sum_{j!=i} s_ij``
* :func:`wl_hard`         Eq. 9, Eq. 1 with only ``s_ik >= s_alpha^(i)`` in the denominator
* :func:`wl_hard_simple`  Sec. 5.5 HardSimple, Eq. 3 on the same hard negatives
* :func:`wl_gradient_ratio`  Eq. 5 / Eq. 8, the relative penalty ``r_i(s_ij)``

The hard quantile ``s_alpha^(i)`` is the K-th largest negative similarity of row i, ``K =
num_hard`` (the paper: 4095 nearest neighbours) or ``ceil(alpha * M)``; ties are kept; the mask
is hard, so no gradient flows through the selection; ``alpha = 1`` gives Eq. 1 exactly.
Temperature limit (Eq. 7): ``tau (L_tau - log(M+1)) -> M/(M+1) L_simple(lambda = 1/M)`` as
``tau -> inf``. Batch mean throughout. No official code exists (docs/methods.md, section
Wang & Liu).
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit import checks
from toolkit.samplers.masks import hard_mask

from ._kernel import _checks_read
from ._precision import full_precision

__all__ = ["wl_contrastive", "wl_simple", "wl_hard", "wl_hard_simple", "wl_sims_from_bank", "wl_gradient_ratio"]


def _check_sims(s_pos: Tensor, s_neg: Tensor, neg_mask: Tensor | None) -> None:
    checks.tensor("s_pos", s_pos, dim=1)
    checks.tensor("s_neg", s_neg, dim=2)
    if s_neg.shape[0] != s_pos.shape[0]:
        raise ValueError(
            f"s_pos and s_neg must have one row per anchor, got shapes {tuple(s_pos.shape)} and {tuple(s_neg.shape)}"
        )
    if neg_mask is not None:
        if not isinstance(neg_mask, Tensor) or neg_mask.dtype != torch.bool:
            raise ValueError(
                f"neg_mask must be a bool tensor, got {getattr(neg_mask, 'dtype', type(neg_mask).__name__)}"
            )
        if neg_mask.shape != s_neg.shape:
            raise ValueError(f"neg_mask must have the shape of s_neg {tuple(s_neg.shape)}, got {tuple(neg_mask.shape)}")


def _hard(s_neg: Tensor, alpha: float | None, num_hard: int | None) -> Tensor | None:
    """Eq. 9's mask (no gradient through the selection), or None to keep every negative."""
    if alpha is None and num_hard is None:
        return None
    return hard_mask(s_neg.detach(), alpha=alpha, num_hard=num_hard)


def _record(stats: dict | None, s_pos: Tensor, s_neg: Tensor, neg_mask: Tensor | None) -> None:
    if stats is None:
        return
    with torch.no_grad():
        stats["pos_sim"] = s_pos.detach().mean()
        if neg_mask is None:
            stats["neg_sim"] = s_neg.detach().mean()
            stats["neg_kept"] = 1.0
        else:
            kept = neg_mask.sum()
            stats["neg_sim"] = (s_neg.detach() * neg_mask).sum() / kept.clamp_min(1)
            stats["neg_kept"] = kept / neg_mask.numel()


@full_precision
def wl_contrastive(
    s_pos: Tensor, s_neg: Tensor, temperature: float = 0.2, *, neg_mask: Tensor | None = None, stats: dict | None = None
) -> Tensor:
    """Wang & Liu Eq. 1 (Sec. 3), batch mean:
    ``L_i = -s_ii/tau + log( sum_{k != i} e^{s_ik/tau} + e^{s_ii/tau} )``.

    Args:
        s_pos: ``[N]`` positive similarities ``s_ii``.
        s_neg: ``[N, M]`` negative similarities ``s_ik``.
        temperature: tau > 0 (the paper sweeps 0.05-1; best 0.2-0.3).
        neg_mask: optional ``[N, M]`` bool, which negatives enter the denominator (Eq. 9 uses
            the hard mask). A row with none kept contributes 0.
        stats: receives ``pos_sim``, ``neg_sim`` (over kept negatives), ``neg_kept``.
    """
    _check_sims(s_pos, s_neg, neg_mask)
    tau = checks.positive("temperature", temperature)
    pos = s_pos / tau
    logits = s_neg / tau
    if neg_mask is not None:
        logits = logits.masked_fill(~neg_mask, float("-inf"))
    partition = torch.logaddexp(torch.logsumexp(logits, dim=1), pos)
    _record(stats, s_pos, s_neg, neg_mask)
    return (partition - pos).mean()


@full_precision
def wl_simple(
    s_pos: Tensor, s_neg: Tensor, lam: float | None = None, *, neg_mask: Tensor | None = None, stats: dict | None = None
) -> Tensor:
    """Wang & Liu Eq. 3 (Sec. 3), batch mean: ``L_i = -s_ii + lambda * sum_{j != i} s_ij``.

    The sum runs over the kept negatives when ``neg_mask`` is given. ``lam=None`` takes
    ``lambda = 1/M_i`` (``M_i`` = kept negatives of row i), the value singled out by the
    temperature limit of Eq. 7; the paper leaves lambda unspecified. ``lam`` must be >= 0.
    """
    _check_sims(s_pos, s_neg, neg_mask)
    neg = s_neg if neg_mask is None else s_neg * neg_mask
    total = neg.sum(dim=1)
    if lam is None:
        count = torch.full_like(total, s_neg.shape[1]) if neg_mask is None else neg_mask.sum(dim=1).to(total.dtype)
        if _checks_read(count) and bool((count == 0).any()):  # elsewhere: 0 / 0, a NaN loss
            raise ValueError("lam=None needs at least one kept negative in every row of neg_mask; pass an explicit lam")
        repulsion = total / count
    else:
        repulsion = checks.non_negative("lam", lam) * total
    _record(stats, s_pos, s_neg, neg_mask)
    return (repulsion - s_pos).mean()


@full_precision
def wl_hard(
    s_pos: Tensor,
    s_neg: Tensor,
    temperature: float = 0.2,
    alpha: float | None = None,
    num_hard: int | None = None,
    *,
    stats: dict | None = None,
) -> Tensor:
    """Wang & Liu hard contrastive loss, Eq. 9 (Sec. 3.3), batch mean.

    ``L_i = -log e^{s_ii/tau} / ( sum_{s_ik >= s_alpha^(i)} e^{s_ik/tau} + e^{s_ii/tau} )`` where
    ``s_alpha^(i)`` is the K-th largest negative similarity of row i, ``K = num_hard`` or
    ``ceil(alpha * M)`` (exactly one; neither = all negatives = Eq. 1). Ties are kept.
    """
    _check_sims(s_pos, s_neg, None)
    mask = _hard(s_neg, alpha, num_hard)
    return wl_contrastive(s_pos, s_neg, temperature, neg_mask=mask, stats=stats)


@full_precision
def wl_hard_simple(
    s_pos: Tensor,
    s_neg: Tensor,
    lam: float | None = None,
    alpha: float | None = None,
    num_hard: int | None = None,
    *,
    stats: dict | None = None,
) -> Tensor:
    """Wang & Liu HardSimple (Sec. 5.5): Eq. 3 over the hard negatives of Eq. 9.

    ``L_i = -s_ii + lambda * sum_{s_ij >= s_alpha^(i)} s_ij``; ``lam=None`` takes ``1/M_i`` (the
    mean over the kept negatives). K as in :func:`wl_hard`.
    """
    _check_sims(s_pos, s_neg, None)
    mask = _hard(s_neg, alpha, num_hard)
    return wl_simple(s_pos, s_neg, lam, neg_mask=mask, stats=stats)


class _SplitOwn(torch.autograd.Function):
    """``sims`` ``[N, n]`` -> ``(sims[i, own_i]`` ``[N]``, row i without column own_i
    ``[N, n-1]``)``: column j of the negatives is column j of sims if ``j < own_i``, else j + 1.

    One elementwise select forward and two passes backward (boolean indexing would cost a
    ``nonzero`` pass and index scatters, slicing a zero-filled gradient per slice).
    Plain-torch definition: :func:`wl_sims_from_bank_reference`.
    """

    @staticmethod
    def forward(ctx, sims: Tensor, own: Tensor):  # type: ignore[override]
        before = torch.arange(sims.shape[1] - 1, device=sims.device).unsqueeze(0) < own
        ctx.save_for_backward(before, own)
        s_neg = torch.where(before, sims[:, :-1], sims[:, 1:])
        return sims.gather(1, own).squeeze(1), s_neg

    @staticmethod
    def backward(ctx, grad_pos: Tensor, grad_neg: Tensor):  # type: ignore[override]
        before, own = ctx.saved_tensors
        n, m = grad_neg.shape
        grad = grad_neg.new_empty((n, m + 1))
        grad[:, 1:] = grad_neg  # entries after own_i move right by one
        head = grad[:, :-1]
        torch.where(before, grad_neg, head, out=head)  # entries before own_i stay in place
        grad.scatter_(1, own, grad_pos.unsqueeze(1))  # the positive's own column
        return grad, None


@full_precision
def wl_sims_from_bank(q: Tensor, bank: Tensor, indices: Tensor) -> tuple[Tensor, Tensor]:
    """Similarities against a memory bank (Sec. 3, ``s_ij = f(x_i)^T g(x_j)``, g = bank).

    Returns ``s_pos`` ``[N]`` = ``q_i . bank[indices_i]`` (the anchor's own entry) and ``s_neg``
    ``[N, n-1]`` = ``q_i`` against every other entry, in bank order with entry ``indices_i``
    removed. One ``[N, n]`` matmul; the bank is a constant (no gradient).
    """
    checks.tensor("q", q, dim=2)
    checks.tensor("bank", bank, dim=2)
    checks.same_width("q", q, "bank", bank)
    n, size = q.shape[0], bank.shape[0]
    if size < 2:
        raise ValueError(f"bank needs at least 2 entries (a positive and a negative), got shape {tuple(bank.shape)}")
    if not isinstance(indices, Tensor) or indices.dtype not in (torch.int64, torch.int32) or indices.shape != (n,):
        raise ValueError(
            f"indices must be an integer tensor of shape ({n},), got "
            f"{getattr(indices, 'dtype', type(indices).__name__)} "
            f"{tuple(getattr(indices, 'shape', ()))}"
        )
    if _checks_read(indices) and (int(indices.min()) < 0 or int(indices.max()) >= size):  # elsewhere: gather's check
        raise ValueError(f"indices must lie in [0, {size}), got range [{int(indices.min())}, {int(indices.max())}]")
    return _SplitOwn.apply(q @ bank.detach().T, indices.long().unsqueeze(1))


@full_precision
def wl_gradient_ratio(s_neg: Tensor, temperature: float = 0.2, *, neg_mask: Tensor | None = None) -> Tensor:
    """Relative penalty on each negative, Wang & Liu Eq. 5 (Eq. 8 with a hard mask).

    ``r_i(s_ij) = |dL/ds_ij| / |dL/ds_ii| = e^{s_ij/tau} / sum_{k != i} e^{s_ik/tau}`` (a
    Boltzmann distribution over the kept negatives; dropped negatives get 0). ``[N, M]``.
    """
    checks.tensor("s_neg", s_neg, dim=2)
    tau = checks.positive("temperature", temperature)
    logits = s_neg / tau
    if neg_mask is not None:
        _check_sims(s_neg[:, 0], s_neg, neg_mask)
        if not bool(neg_mask.any(dim=1).all()):
            raise ValueError("neg_mask leaves a row without negatives; the ratio is undefined")
        logits = logits.masked_fill(~neg_mask, float("-inf"))
    return torch.softmax(logits, dim=1)


def wl_sims_from_bank_reference(q: Tensor, bank: Tensor, indices: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`wl_sims_from_bank` by boolean indexing: the similarity matrix q M^T, its entry
    (i, indices_i) and row i without that entry (``_SplitOwn`` computes the same split)."""
    sims = q @ bank.detach().t()
    own = torch.zeros_like(sims, dtype=torch.bool)
    own[torch.arange(q.shape[0], device=q.device), indices] = True
    return sims[own], sims[~own].view(q.shape[0], -1)
