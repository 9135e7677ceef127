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
``sort`` and ``kthvalue`` on CPU); nothing sorts a full row.
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

from toolkit import checks

__all__ = ["all_mask", "hard_mask", "ring_mask", "ring_bounds", "hard_count", "check_percentiles",
           "RING_DEFAULT", "RING_DEFAULT_THRESHOLDS",
           "ring_official_thresholds_to_percentiles", "ring_percentiles_to_official_thresholds"]

# The one default ring of every Ring component (ring_nce, ir_ring, the ring selector): the
# authors' configs, thres_outer = thres_inner = 0.1, which are the percentiles [90, 99).
RING_DEFAULT_THRESHOLDS = (0.1, 0.1)
RING_DEFAULT = (90.0, 99.0)

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


def hard_count(num_candidates: int, alpha: float | None = None,
               num_hard: int | None = None) -> int:
    """The K of Wang & Liu Eq. 9: ``num_hard``, or ``ceil(alpha * M)``, or ``M`` if neither.

    Raises ``ValueError`` if both are given, ``alpha`` is outside ``(0, 1]`` or ``num_hard``
    is outside ``[1, M]``.
    """
    m = int(num_candidates)
    if alpha is not None and num_hard is not None:
        raise ValueError(f"give exactly one of alpha and num_hard (or neither, for all "
                         f"negatives), got alpha={alpha!r} and num_hard={num_hard!r}")
    if num_hard is not None:
        if isinstance(num_hard, bool) or not isinstance(num_hard, numbers.Integral) \
                or not 1 <= num_hard <= m:
            raise checks.ArgumentError("num_hard", f"num_hard must be an integer in [1, {m}] (the number of candidate "
                             f"negatives), got {num_hard!r}")
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
        raise checks.ArgumentError("lower", f"lower must be < upper (percentiles of the ascending similarities), "
                         f"got lower={lower!r}, upper={upper!r}")


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
        raise ValueError(f"the ring [lower={lower!r}, upper={upper!r}) percentiles of {m} "
                         f"candidates is empty (int({lower}/100*{m})={lo}, "
                         f"int({upper}/100*{m})={hi}); widen the ring or use more negatives")
    return lo, hi


@torch.no_grad()
def ring_mask(sims: Tensor, lower: float, upper: float) -> Tensor:
    """Ring percentile mask (Wu et al. 2021, Sec. 4, Alg. 1).

    Row i sorted ascending; the ring is the slice ``[int(lower/100*M), int(upper/100*M))``, so
    ``lower=0, upper=100`` keeps everything and a larger ``lower`` keeps harder negatives.
    Exactly ``hi - lo`` candidates are kept per row. Ties across a boundary are broken by
    ``topk``'s order, like the paper's sort: the tied values are equal, so a loss on the kept
    values does not depend on which tied candidate is taken.

    Computed with one or two ``topk`` calls and index scatters; no row is fully sorted.
    """
    _check_sims(sims)
    n, m = sims.shape
    lo, hi = ring_bounds(m, lower, upper)
    device = sims.device
    if lo == 0 and hi == m:
        return torch.ones((n, m), dtype=torch.bool, device=device)
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


def ring_official_thresholds_to_percentiles(theta_outer: float,
                                            theta_inner: float) -> tuple[float, float]:
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

