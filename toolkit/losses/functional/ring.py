"""Ring / conditional NCE (Wu, Mosse, Zhuang, Yamins, Goodman, ICLR 2021, "Conditional Negative
Sampling for Contrastive Learning of Visual Representations").

CNCE (Sec. 3, Thm. 3.1) draws the negatives of anchor i from a conditional distribution whose
support S_B is a "ring" of the candidates: those whose similarity to the anchor lies between
the ``w_l``-th and ``w_u``-th percentiles (Sec. 4). With a MoCo queue (Alg. 1, ``MoCoRing``)::

    s+ = q_i . k_i / tau,   s_j = q_i . Q_j / tau   (j = 1..M, sorted ascending per row)
    ring_i = s_(j) for j in [int(w_l/100 * M), int(w_u/100 * M))
    L_i = -s+ + log( e^{s+} + sum_{ring_i} e^{s_j} ),   L = mean_i L_i

``w_l = 0, w_u = 100`` is MoCo InfoNCE (Eq. 4). Alg. 1's pseudo-code leaves ``e^{s+}`` out of
the partition; every class of the authors' code and Thm. 3.1 include it, so it is included by
default (``include_positive=False`` gives the pseudo-code). The code's ``thres_outer`` /
``thres_inner`` map to percentiles by :func:`ring_official_thresholds_to_percentiles`.

Memory-bank forms (instance discrimination, Eq. 3; docs/methods.md, sections ir_nce and
ir_ring): :func:`ir_nce` and :func:`ir_ring` take their random indices explicitly
(``noise_idx``) so that a run is reproducible and testable; the ``1/(k+1)`` factor of Eq. 1 is
a constant and is dropped.

Inputs are used as given (the authors' classes L2-normalise inside; here the encoder's head
does). Keys, queues and banks are constants: no gradient flows into them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit import checks
from toolkit.samplers.masks import (
    RING_DEFAULT,
    ring_bounds,
    ring_mask,
    ring_mask_and_sums,
    ring_official_thresholds_to_percentiles,
    ring_percentiles_to_official_thresholds,
)

from ._kernel import _LOG2E, _checks_read, _RowLogSumExp, _shift_by_row_max
from ._precision import full_precision

__all__ = [
    "ring_nce",
    "ir_nce",
    "ir_ring",
    "ring_official_thresholds_to_percentiles",
    "ring_percentiles_to_official_thresholds",
]


def _check_pair(q: Tensor, k: Tensor, negatives: Tensor, neg_name: str) -> None:
    checks.tensor("q", q, dim=2)
    checks.tensor("k", k, dim=2)
    checks.same_shape("q", q, "k", k)
    checks.tensor(neg_name, negatives, dim=2)
    checks.same_width("q", q, neg_name, negatives)


def _check_index(name: str, idx: Tensor, dim: int, rows: int, high: int) -> None:
    if not isinstance(idx, Tensor) or idx.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be an integer tensor, got {getattr(idx, 'dtype', type(idx).__name__)}")
    if idx.dim() != dim or idx.shape[0] != rows:
        raise ValueError(f"{name} must have {dim} dimension(s) and {rows} rows, got shape {tuple(idx.shape)}")
    # the range reads the indices: checked where that is free; on a GPU indexing checks it
    if idx.numel() and _checks_read(idx) and (int(idx.min()) < 0 or int(idx.max()) >= high):
        raise ValueError(f"{name} values must lie in [0, {high}), got range [{int(idx.min())}, {int(idx.max())}]")


@full_precision
def ring_nce(
    q: Tensor,
    k: Tensor,
    queue: Tensor,
    temperature: float = 0.07,
    lower: float = RING_DEFAULT[0],
    upper: float = RING_DEFAULT[1],
    include_positive: bool = True,
    *,
    stats: dict | None = None,
) -> Tensor:
    """MoCoRing loss (Ring Sec. 4, Alg. 1; docs/methods.md, section ring_nce), batch mean.

    ``L_i = -s+_i + log(e^{s+_i} + sum_{j in ring_i} e^{s_ij})`` with ``s+_i = q_i.k_i / tau``,
    ``s_ij = q_i.queue_j / tau`` and ``ring_i`` the ascending-sorted slice
    ``[int(lower/100 * M), int(upper/100 * M))`` of row i (exactly ``hi - lo`` negatives; see
    :func:`toolkit.samplers.ring_mask` for ties and for how the slice is found without a
    sort). The selection is a keep-mask (no gradient through it); the ring's log-sum-exp and
    its gradient are MoCo's kernel with that mask, so a ring costs the selection on top of a
    plain MoCo step.

    Args:
        q: ``[N, d]`` queries (gradient flows). k: ``[N, d]`` keys (constant).
        queue: ``[M, d]`` queue rows (constant).
        temperature: tau > 0 (paper 0.07).
        lower, upper: ring percentiles, ``0 <= lower < upper <= 100``; default the authors'
            ``thres_outer = thres_inner = 0.1``, i.e. ``(90, 99)``; ``(0, 100)`` is MoCo.
        include_positive: put ``e^{s+}`` in the partition (code and Thm. 3.1; default) or not
            (Alg. 1 pseudo-code).
        stats: receives ``pos_sim``, ``neg_sim`` (mean over kept negatives) and ``neg_kept``
            (fraction of the queue in the ring).
    """
    _check_pair(q, k, queue, "queue")
    tau = checks.positive("temperature", temperature)
    k, queue = k.detach(), queue.detach()
    m = queue.shape[0]
    lo, hi = ring_bounds(m, lower, upper)
    ring = _RingSelection(lower, upper, stats is not None) if (lo > 0 or hi < m) else None
    partition = _RowLogSumExp.apply(q, queue, 1.0 / tau, ring)
    pos = (q * k).sum(dim=1) / tau
    if include_positive:
        partition = torch.logaddexp(partition, pos)
    loss = (partition - pos).mean()
    if stats is not None:
        with torch.no_grad():
            qd = q.detach()
            stats["pos_sim"] = pos.detach().mean() * tau
            stats["neg_kept"] = (hi - lo) / m
            if ring is None:
                stats["neg_sim"] = qd.mean(0) @ queue.mean(0)
            else:  # x = (q.Q / tau - shift) log2 e: shift = ||q_i|| max ||Q|| / tau (the bound), or 0
                # where the kernel shifts by the row max (the ring is taken before that shift)
                shift = 0.0
                if not _shift_by_row_max(qd):
                    shift = (torch.linalg.vector_norm(qd, dim=1) * torch.linalg.vector_norm(queue, dim=1).max()).sum()
                stats["neg_sim"] = (ring.kept_x_sum / _LOG2E * tau + (hi - lo) * shift) / (len(qd) * (hi - lo))
    return loss


class _RingSelection:
    """The ring's keep-mask, taken inside MoCo's kernel from its shifted logits (an increasing
    map of q.Q per row, so the ranks and the ring are those of the logits); with ``sums`` it
    keeps the sum of the selected shifted logits for ``neg_sim``."""

    def __init__(self, lower: float, upper: float, sums: bool) -> None:
        self.lower, self.upper, self.sums = lower, upper, sums
        self.kept_x_sum = None

    def __call__(self, x: Tensor) -> Tensor:
        if not self.sums:
            return ring_mask(x, self.lower, self.upper)
        keep, row_sums = ring_mask_and_sums(x, self.lower, self.upper)
        self.kept_x_sum = row_sums.sum()
        return keep


def _bank_logits(qs: Tensor, bank: Tensor, cols: Tensor) -> Tensor:
    """``qs . bank[cols]`` for an index matrix ``cols`` ``[N, k]``, without an ``[N, k, d]`` copy:
    one matmul against the distinct rows used (or the whole bank when that is smaller)."""
    if cols.numel() >= bank.shape[0]:
        return (qs @ bank.T).gather(1, cols)
    rows, inverse = torch.unique(cols, return_inverse=True)
    return (qs @ bank[rows].T).gather(1, inverse)


@full_precision
def ir_nce(
    q: Tensor, bank: Tensor, indices: Tensor, noise_idx: Tensor, temperature: float = 0.07, *, stats: dict | None = None
) -> Tensor:
    """Instance-discrimination NCE with a memory bank (Ring Eq. 3; Wu et al. 2018), batch mean.

    ``L_i = -q_i.M[idx_i]/tau + log sum_{j in {idx_i} + noise_i} e^{q_i.M[j]/tau}``: the positive
    is the anchor's own bank entry; ``noise_idx`` ``[N, K]`` holds the K uniformly drawn bank
    indices (they may include ``idx_i`` itself). The ``ir_nce`` module draws K = k =
    ``num_negatives`` (default 4096) with ``torch.randint(0, n, (N, k))``; the authors' ``NCE``
    class draws k - 1. ``bank`` ``[n, d]`` is a constant.

    stats: ``pos_sim``, ``neg_sim`` (mean over the drawn entries), ``neg_kept`` (1.0).
    """
    checks.tensor("q", q, dim=2)
    checks.tensor("bank", bank, dim=2)
    checks.same_width("q", q, "bank", bank)
    tau = checks.positive("temperature", temperature)
    n = q.shape[0]
    _check_index("indices", indices, 1, n, bank.shape[0])
    _check_index("noise_idx", noise_idx, 2, n, bank.shape[0])
    cols = torch.cat([indices.long().unsqueeze(1), noise_idx.long()], dim=1)
    logits = _bank_logits(q / tau, bank.detach(), cols)
    pos = logits[:, 0]
    loss = (torch.logsumexp(logits, dim=1) - pos).mean()
    if stats is not None:
        with torch.no_grad():
            stats["pos_sim"] = pos.mean() * tau
            negs = logits[:, 1:]
            stats["neg_sim"] = negs.mean() * tau if negs.numel() else pos.new_zeros(())
            stats["neg_kept"] = 1.0
    return loss


@full_precision
def ir_ring(
    q: Tensor,
    bank: Tensor,
    indices: Tensor,
    noise_idx: Tensor,
    lower: float,
    upper: float,
    temperature: float = 0.07,
    include_positive: bool = True,
    *,
    stats: dict | None = None,
) -> Tensor:
    """IRing: memory-bank Ring with sampled negatives (Ring Sec. 4; docs/methods.md, ir_ring).

    All bank similarities ``s_ij = q_i.M[j]/tau`` (the anchor's own entry included, as in the
    authors' ``NCERing``) are ranked; the ring is the ascending slice ``[lo, hi)`` =
    ``[int(lower/100 * n), int(upper/100 * n))``. ``noise_idx`` ``[N, k']`` holds positions in the
    ring ordered by **decreasing** similarity (position 0 is the ring member closest to the
    anchor, as the authors' ``topk`` returns it), drawn with replacement from ``[0, hi - lo)``::

        L_i = -s_i,idx_i + log( e^{s_i,idx_i} + sum_{p in noise_i} e^{ring_i[p]} )

    (the positive term only with ``include_positive``, the code's ``self_negative``). The
    official default ``thres_outer = thres_inner = 0.1`` is ``lower=90, upper=99``. One sorted
    ``topk`` of the ``n - lo`` largest similarities per row; ``lower`` near 0 sorts most of it.

    stats: ``pos_sim``, ``neg_sim`` (mean over the drawn ring members), ``neg_kept``
    (ring size / n).
    """
    checks.tensor("q", q, dim=2)
    checks.tensor("bank", bank, dim=2)
    checks.same_width("q", q, "bank", bank)
    tau = checks.positive("temperature", temperature)
    n_bank = bank.shape[0]
    lo, hi = ring_bounds(n_bank, lower, upper)
    _check_index("indices", indices, 1, q.shape[0], n_bank)
    _check_index("noise_idx", noise_idx, 2, q.shape[0], hi - lo)
    logits = (q / tau) @ bank.detach().T
    pos = logits.gather(1, indices.long().unsqueeze(1)).squeeze(1)
    ring = torch.topk(logits, n_bank - lo, dim=1, sorted=True).values[:, n_bank - hi :]
    drawn = ring.gather(1, noise_idx.long())
    cand = torch.cat([pos.unsqueeze(1), drawn], dim=1) if include_positive else drawn
    if cand.shape[1] == 0:
        raise ValueError("noise_idx has no columns and include_positive is False: the partition would be empty")
    loss = (torch.logsumexp(cand, dim=1) - pos).mean()
    if stats is not None:
        with torch.no_grad():
            stats["pos_sim"] = pos.mean() * tau
            stats["neg_sim"] = drawn.mean() * tau if drawn.numel() else pos.new_zeros(())
            stats["neg_kept"] = (hi - lo) / n_bank
    return loss
