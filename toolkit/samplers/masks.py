"""Negative-selection masks: which candidate negatives of each anchor take part in the loss.

The mask functions behind the registered selectors (:mod:`toolkit.samplers.selectors`). Each is a
pure function of the anchor-candidate similarities ``sims`` ``[N, M]`` (row i: anchor i against
its M candidate negatives) and returns a boolean keep-mask of the same shape. It never copies
embeddings and never carries a gradient: the losses fill the dropped logits with ``-inf`` (a
hard mask, so no gradient flows through the selection itself).

* :func:`all_mask`  -- every candidate (plain InfoNCE / NCE).
* :func:`hard_mask` -- Wang & Liu 2021, Sec. 3.3, Eq. 9: keep ``s_ik >= s_alpha^(i)``, the K-th
  largest similarity of row i, with ``K = num_hard`` or ``K = ceil(alpha * M)``. Ties with the
  K-th value are kept, so a row can keep more than K candidates when similarities tie.
* :func:`ring_mask` -- Ring (Wu et al. 2021), Sec. 4 / Alg. 1: sort row i ascending and keep the
  slice ``[int(lower/100 * M), int(upper/100 * M))``, i.e. exactly ``hi - lo`` candidates.

Quantiles are found with ``torch.topk`` on the smaller side of the row (measured faster than
``sort`` and ``kthvalue`` on CPU); nothing sorts a full row. On CPU (float32, float64)
:func:`ring_mask` instead finds its two cut values per row with NumPy's in-place
``partition`` (values only, no indices; ~1.8x faster than the ``topk`` path at M = 65,536)
and compares; rows with a tie across a cut take the ``topk`` path, so the mask is the same.
"""

from __future__ import annotations

import math
import numbers
import threading

import numpy as np
import torch
from torch import Tensor

from toolkit import checks

__all__ = [
    "all_mask",
    "hard_mask",
    "ring_mask",
    "ring_mask_and_sums",
    "ring_bounds",
    "hard_count",
    "check_percentiles",
    "RING_DEFAULT",
    "RING_DEFAULT_THRESHOLDS",
    "ring_official_thresholds_to_percentiles",
    "ring_percentiles_to_official_thresholds",
]

# The one default ring of every Ring component (ring_nce, ir_ring, the ring selector): the
# authors' configs, thres_outer = thres_inner = 0.1, which are the percentiles [90, 99).
RING_DEFAULT_THRESHOLDS = (0.1, 0.1)
RING_DEFAULT = (90.0, 99.0)

# Devices on which the samplers read values back freely, as reading a CPU tensor waits for nothing:
# the ring mask's NumPy cut there, the memory bank's index check. Every other device takes the
# read-free branches (``topk``; indexing's own bounds check); ``toolkit.training.syncs.cuda_branches``
# empties it to check those on the CPU.
HOST_READ_DEVICES = ("cpu",)

# Products such as 0.29 * 100 are 28.999... in binary floating point; a plain int() / ceil()
# would then be off by one. Quantile positions are computed with this slack instead.
_EPS = 1e-9


def _check_sims(sims: Tensor) -> Tensor:
    checks.tensor("sims", sims, dim=2)
    if sims.shape[1] < 1:
        raise checks.ArgumentError("sims", f"sims needs at least one candidate column, got shape {tuple(sims.shape)}")
    return sims


def all_mask(sims: Tensor) -> Tensor:
    """Keep every candidate: a ``[N, M]`` mask of ``True``."""
    _check_sims(sims)
    return torch.ones(sims.shape, dtype=torch.bool, device=sims.device)


def hard_count(num_candidates: int, alpha: float | None = None, num_hard: int | None = None) -> int:
    """The K of Wang & Liu Eq. 9: ``num_hard``, or ``ceil(alpha * M)``, or ``M`` if neither.

    Raises ``ValueError`` if both are given, ``alpha`` is outside ``(0, 1]`` or ``num_hard``
    is outside ``[1, M]``.
    """
    m = int(num_candidates)
    if alpha is not None and num_hard is not None:
        raise ValueError(
            f"give exactly one of alpha and num_hard (or neither, for all "
            f"negatives), got alpha={alpha!r} and num_hard={num_hard!r}"
        )
    if num_hard is not None:
        if isinstance(num_hard, bool) or not isinstance(num_hard, numbers.Integral) or not 1 <= num_hard <= m:
            raise checks.ArgumentError(
                "num_hard",
                f"num_hard must be an integer in [1, {m}] (the number of candidate negatives), got {num_hard!r}",
            )
        return int(num_hard)
    if alpha is not None:
        checks.in_range("alpha", alpha, 0.0, 1.0, low_open=True)
        return max(1, min(m, math.ceil(alpha * m - _EPS)))
    return m


def _kth_largest(sims: Tensor, k: int) -> Tensor:
    """Per-row k-th largest value (1-based), via topk on the smaller side of the row."""
    m = sims.shape[1]
    if k <= m - k + 1:
        return torch.topk(sims, k, dim=1, largest=True, sorted=False).values.amin(dim=1)
    return torch.topk(sims, m - k + 1, dim=1, largest=False, sorted=False).values.amax(dim=1)


@torch.no_grad()
def hard_mask(sims: Tensor, alpha: float | None = None, num_hard: int | None = None) -> Tensor:
    """Wang & Liu hard-negative mask (Sec. 3.3, Eq. 8-9).

    ``keep[i, k] = sims[i, k] >= s_alpha^(i)`` where ``s_alpha^(i)`` is the K-th largest value of
    row i and ``K = num_hard`` or ``ceil(alpha * M)`` (exactly one of them; neither keeps all).
    Ties with the threshold are kept, so a row keeps at least K candidates.

    Args:
        sims: ``[N, M]`` anchor-candidate similarities (any monotone score works).
        alpha: upper quantile in ``(0, 1]``; ``alpha=1`` keeps everything (Eq. 9 = Eq. 1).
        num_hard: number of nearest negatives, in ``[1, M]`` (the paper uses 4095).
    """
    _check_sims(sims)
    m = sims.shape[1]
    k = hard_count(m, alpha=alpha, num_hard=num_hard)
    if k == m:
        return torch.ones(sims.shape, dtype=torch.bool, device=sims.device)
    threshold = _kth_largest(sims, k)
    return sims >= threshold.unsqueeze(1)


def check_percentiles(lower: float, upper: float) -> None:
    """``0 <= lower < upper <= 100`` or a ``ValueError`` naming the offending argument."""
    checks.in_range("lower", lower, 0.0, 100.0)
    checks.in_range("upper", upper, 0.0, 100.0)
    if lower >= upper:
        raise checks.ArgumentError(
            "lower",
            f"lower must be < upper (percentiles of the ascending similarities), got lower={lower!r}, upper={upper!r}",
        )


def ring_bounds(num_candidates: int, lower: float, upper: float) -> tuple[int, int]:
    """Ring slice ``[lo, hi)`` of the ascending order: ``lo = int(lower/100 * M)``,
    ``hi = int(upper/100 * M)`` (the ``int()`` truncation of Ring Alg. 1).

    Raises ``ValueError`` for percentiles outside ``[0, 100]``, ``lower >= upper`` or a
    slice that is empty for this M.
    """
    check_percentiles(lower, upper)
    m = int(num_candidates)
    lo = int(math.floor(lower * m / 100.0 + _EPS))
    hi = min(m, int(math.floor(upper * m / 100.0 + _EPS)))
    if hi <= lo:
        raise ValueError(
            f"the ring [lower={lower!r}, upper={upper!r}) percentiles of {m} "
            f"candidates is empty (int({lower}/100*{m})={lo}, "
            f"int({upper}/100*{m})={hi}); widen the ring or use more negatives"
        )
    return lo, hi


@torch.no_grad()
def ring_mask(sims: Tensor, lower: float, upper: float) -> Tensor:
    """Ring percentile mask (Wu et al. 2021, Sec. 4, Alg. 1).

    Row i sorted ascending; the ring is the slice ``[int(lower/100*M), int(upper/100*M))``, so
    ``lower=0, upper=100`` keeps everything and a larger ``lower`` keeps harder negatives.
    Exactly ``hi - lo`` candidates are kept per row. Ties across a boundary are broken by
    ``topk``'s order, like the paper's sort: the tied values are equal, so a loss on the kept
    values does not depend on which tied candidate is taken.

    On CPU (float32, float64) the two cut values of each row come from a partition
    (:func:`_ring_cuts`) and the mask is ``s_(lo) <= s <= s_(hi-1)``: exactly the slice
    when no value ties across a cut; the rows where one does (or that hold a NaN) are
    recomputed by :func:`_ring_mask_topk`, the path every other device and dtype takes (one
    or two ``topk`` calls and index scatters). No row is fully sorted.
    """
    return _ring(sims, lower, upper, False)[0]


@torch.no_grad()
def ring_mask_and_sums(sims: Tensor, lower: float, upper: float) -> tuple[Tensor, Tensor]:
    """:func:`ring_mask` and the per-row sums of the kept values ``[N]`` (on CPU taken from
    the partition's slice: no pass over the mask)."""
    return _ring(sims, lower, upper, True)


def _ring(sims: Tensor, lower: float, upper: float, sums: bool):
    _check_sims(sims)
    n, m = sims.shape
    lo, hi = ring_bounds(m, lower, upper)
    if lo == 0 and hi == m:
        return torch.ones((n, m), dtype=torch.bool, device=sims.device), (sims.sum(1) if sums else None)
    if sims.device.type not in HOST_READ_DEVICES or sims.dtype not in (torch.float32, torch.float64):
        mask = _ring_mask_topk(sims, lo, hi)
        return mask, (torch.where(mask, sims, sims.new_zeros(())).sum(1) if sums else None)
    cut_lo, cut_hi, redo, kept_sums = _ring_cuts(sims.detach().numpy(), lo, hi, sums)
    mask = None
    if lo > 0:  # not (s < cut) rather than s >= cut: keeps a NaN, as topk ranks it last
        mask = torch.lt(sims, torch.from_numpy(cut_lo).unsqueeze(1)).logical_not_()
    if hi < m:
        below = torch.le(sims, torch.from_numpy(cut_hi).unsqueeze(1))
        mask = below if mask is None else mask.logical_and_(below)
    if redo.any():
        rows = torch.from_numpy(np.flatnonzero(redo))
        mask[rows] = _ring_mask_topk(sims[rows], lo, hi)
    return mask, (torch.from_numpy(kept_sums) if sums else None)


def _ring_cuts(sims: np.ndarray, lo: int, hi: int, sums: bool):
    """Per row of ``sims`` ``[N, M]``: the ascending order statistics ``s_(lo)`` and
    ``s_(hi-1)`` (the first and the last kept value; unset when ``lo = 0`` / ``hi = M``),
    ``redo``, the rows where ``s_(lo-1) = s_(lo)`` or ``s_(hi-1) = s_(hi)``, or where a NaN
    sits at or beyond a cut that has one above it (NumPy, like ``topk``, ranks NaN last), and
    with ``sums`` the sum of ``s_(lo) .. s_(hi-1)`` (the slice's values, ties or not).

    Each block of rows is copied once and partitioned in place at one cut, then the side of
    it that holds the other cut (the smaller choice) at that one; the slice then lies in
    columns ``[lo, hi)`` of the copy. NumPy releases the GIL while it partitions, so the rows
    are split over ``torch.get_num_threads()`` threads."""
    n, m = sims.shape
    cut_lo, cut_hi = np.zeros(n, sims.dtype), np.zeros(n, sims.dtype)
    redo = np.zeros(n, dtype=bool)
    kept_sums = np.zeros(n, sims.dtype) if sums else None
    parts = max(1, min(torch.get_num_threads(), n * m // (1 << 18)))
    edges = [n * i // parts for i in range(parts + 1)]

    def run(a: int, b: int) -> None:
        if b > a:
            p = _partition_cuts(sims[a:b], lo, hi, cut_lo[a:b], cut_hi[a:b], redo[a:b])
            if sums:
                p[:, lo:hi].sum(axis=1, out=kept_sums[a:b])

    workers = [threading.Thread(target=run, args=(edges[i], edges[i + 1])) for i in range(1, parts)]
    for w in workers:
        w.start()
    run(edges[0], edges[1])
    for w in workers:
        w.join()
    return cut_lo, cut_hi, redo, kept_sums


def _partition_cuts(
    rows: np.ndarray, lo: int, hi: int, cut_lo: np.ndarray, cut_hi: np.ndarray, redo: np.ndarray
) -> np.ndarray:
    """:func:`_ring_cuts` on a block of rows, written into its slices of the outputs; returns
    the partitioned copy."""
    p = np.array(rows, copy=True, order="C")
    m = p.shape[1]

    def lower_cut(seg: np.ndarray) -> None:  # seg holds ranks 0.. of the row, lo inside it
        seg.partition(lo, axis=1)
        cut_lo[:] = seg[:, lo]
        below = seg[:, :lo].max(axis=1)
        redo[:] |= (below == cut_lo) | np.isnan(cut_lo)

    def upper_cut(seg: np.ndarray, first: int) -> None:  # seg holds ranks first..M-1
        k = hi - 1 - first
        seg.partition(k, axis=1)
        cut_hi[:] = seg[:, k]
        above = seg[:, k + 1 :].min(axis=1)
        redo[:] |= (above == cut_hi) | np.isnan(cut_hi) | np.isnan(above)

    if hi == m:
        lower_cut(p)
    elif lo == 0:
        upper_cut(p, 0)
    elif hi < m - lo:  # upper cut first, then the lower one among the hi smallest
        upper_cut(p, 0)
        lower_cut(p[:, :hi])
    else:
        lower_cut(p)
        upper_cut(p[:, lo:], lo)
    return p


def _ring_mask_topk(sims: Tensor, lo: int, hi: int) -> Tensor:
    """:func:`ring_mask`'s slice ``[lo, hi)`` (``0 < lo`` or ``hi < M``) with ``topk``: the
    side of each cut that is the smaller selected, ties broken by ``topk``'s order."""
    n, m = sims.shape
    device = sims.device
    if lo > 0 and m - lo <= lo:
        # Outer ball (the m - lo largest) is the small side: select it, then drop its top.
        ball_vals, ball_idx = torch.topk(sims, m - lo, dim=1, sorted=False)
        mask = torch.zeros((n, m), dtype=torch.bool, device=device)
        mask.scatter_(1, ball_idx, True)
        if hi < m:
            inner = torch.topk(ball_vals, m - hi, dim=1, sorted=False).indices
            mask.scatter_(1, ball_idx.gather(1, inner), False)
        return mask
    mask = torch.ones((n, m), dtype=torch.bool, device=device)
    rest = sims
    if lo > 0:
        mask.scatter_(1, torch.topk(sims, lo, dim=1, largest=False, sorted=False).indices, False)
        if hi < m:
            # Under ties the two topk calls could pick the same column; take the top among
            # the columns still kept so that exactly hi - lo remain.
            rest = sims.masked_fill(~mask, float("-inf"))
    if hi < m:
        mask.scatter_(1, torch.topk(rest, m - hi, dim=1, sorted=False).indices, False)
    return mask


def ring_official_thresholds_to_percentiles(theta_outer: float, theta_inner: float) -> tuple[float, float]:
    """Map the Ring code's thresholds to the paper's percentiles (docs/methods.md, section Ring).

    The official ``MoCoRing`` sorts descending, keeps the outer ball of the ``theta_outer``
    fraction closest to the anchor and drops the first ``theta_inner`` fraction *of that ball*
    (``dynamic_inner`` is forced on), so ``lower = 100 (1 - theta_outer)`` and
    ``upper = 100 (1 - theta_outer * theta_inner)``. The index truncations agree whenever
    ``theta_outer * M`` and ``theta_inner * int(theta_outer * M)`` are integers, e.g.
    ``M = 100, (0.5, 0.2) -> (50, 90)``.
    """
    checks.in_range("theta_outer", theta_outer, 0.0, 1.0, low_open=True)
    checks.in_range("theta_inner", theta_inner, 0.0, 1.0, high_open=True)
    return 100.0 * (1.0 - theta_outer), 100.0 * (1.0 - theta_outer * theta_inner)


def ring_percentiles_to_official_thresholds(lower: float, upper: float) -> tuple[float, float]:
    """Inverse of :func:`ring_official_thresholds_to_percentiles`:
    ``(theta_outer, theta_inner)`` from ``(lower, upper)``."""
    checks.in_range("lower", lower, 0.0, 100.0, high_open=True)
    checks.in_range("upper", upper, 0.0, 100.0)
    if lower >= upper:
        raise checks.ArgumentError("lower", f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
    theta_outer = 1.0 - lower / 100.0
    return theta_outer, (1.0 - upper / 100.0) / theta_outer
