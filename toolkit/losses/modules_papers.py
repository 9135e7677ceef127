"""Registered loss modules of Wang & Liu (memory bank), CACR, Ring / CNCE and IR / IRing.

The registry and the shared helpers live in :mod:`toolkit.losses.registry`; importing
:mod:`toolkit.losses` registers the losses of both module files.
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import ContrastiveBatch, ContrastiveLoss, LossOutput, require
from toolkit.losses.registry import LOSSES, _Stats, _views
from toolkit.samplers.masks import ring_bounds


class _WangLiu(ContrastiveLoss):
    """Memory-bank losses of Wang & Liu: similarities of views[:,0] to every bank row."""

    needs = ("views", "negatives", "indices")
    min_views: ClassVar[int] = 1

    def _sims(self, batch: ContrastiveBatch) -> tuple[Tensor, Tensor]:
        require(batch, type(self).__name__, *self.needs)
        q = _views(batch, type(self).__name__, at_least=1)[:, 0]
        return F.wl_sims_from_bank(q, batch.negatives, batch.indices)


def _hard_args(alpha: float | None, num_hard: int | None) -> tuple[float | None, int | None]:
    if alpha is not None and num_hard is not None:
        raise ValueError(f"give at most one of alpha ({alpha!r}) and num_hard ({num_hard!r})")
    if alpha is not None:
        checks.in_range("alpha", alpha, 0.0, 1.0, low_open=True)
    if num_hard is not None and (not isinstance(num_hard, int) or num_hard < 1):
        raise checks.ArgumentError("num_hard", f"num_hard must be an integer >= 1, got {num_hard!r}")
    return alpha, num_hard


@LOSSES.register("wl_contrastive", description="Wang & Liu Eq. 1: contrastive loss against a memory bank")
class WLContrastive(_WangLiu):
    """Wang & Liu Eq. 1 (a selector may restrict the bank negatives)."""

    accepts_selector = True

    def __init__(self, temperature: float = 0.2) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        s_pos, s_neg = self._sims(batch)
        mask = None
        if self.selector is not None:
            with torch.no_grad():
                mask = self.selector(s_neg, batch.step)
        st = _Stats()
        return st.out(F.wl_contrastive(s_pos, s_neg, temperature=self.temperature, neg_mask=mask,
                                       stats=st.d))


@LOSSES.register("wl_simple", description="Wang & Liu Eq. 3: the simple (tau -> infinity) loss")
class WLSimple(_WangLiu):
    """Wang & Liu Eq. 3: -s_ii + lam * sum_j s_ij."""

    def __init__(self, lam: float | None = None) -> None:
        super().__init__()
        self.lam = None if lam is None else checks.non_negative("lam", lam)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        s_pos, s_neg = self._sims(batch)
        st = _Stats()
        return st.out(F.wl_simple(s_pos, s_neg, self.lam, stats=st.d))


@LOSSES.register("wl_hard", description="Wang & Liu Eq. 9: contrastive loss over the hardest negatives")
class WLHard(_WangLiu):
    """Wang & Liu Eq. 9: keep negatives at or above the K-th largest similarity."""

    def __init__(self, temperature: float = 0.2, alpha: float | None = None,
                 num_hard: int | None = None) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)
        self.alpha, self.num_hard = _hard_args(alpha, num_hard)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        s_pos, s_neg = self._sims(batch)
        st = _Stats()
        return st.out(F.wl_hard(s_pos, s_neg, temperature=self.temperature, alpha=self.alpha,
                                num_hard=self.num_hard, stats=st.d))


@LOSSES.register("wl_hard_simple", description="Wang & Liu hard simple loss")
class WLHardSimple(_WangLiu):
    """The simple loss restricted to the hardest negatives."""

    def __init__(self, lam: float | None = None, alpha: float | None = None,
                 num_hard: int | None = None) -> None:
        super().__init__()
        self.lam = None if lam is None else checks.non_negative("lam", lam)
        self.alpha, self.num_hard = _hard_args(alpha, num_hard)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        s_pos, s_neg = self._sims(batch)
        st = _Stats()
        return st.out(F.wl_hard_simple(s_pos, s_neg, self.lam, alpha=self.alpha,
                                       num_hard=self.num_hard, stats=st.d))


class _CACR(ContrastiveLoss):
    def __init__(self, t_pos: float = 1.0, t_neg: float = 2.0) -> None:
        super().__init__()
        # t = 0 is allowed: uniform weights (the paper's UAUR ablation)
        self.t_pos = checks.non_negative("t_pos", t_pos)
        self.t_neg = checks.non_negative("t_neg", t_neg)


@LOSSES.register("cacr", description="CACR (paper form): views[:,1:] attract, other queries / bank rows repel")
class CACR(_CACR):
    """CACR with K = V-1 positives; negatives are the other queries of the mini-batch (paper
    Sec. 3.2) or, with a queue / memory bank source, the shared rows in ``negatives``."""

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = _views(batch, "cacr")
        st = _Stats()
        if batch.negatives is not None:
            return st.out(F.cacr(v[:, 0], v[:, 1:], batch.negatives, t_pos=self.t_pos,
                                 t_neg=self.t_neg, stats=st.d))
        return st.out(F.cacr_minibatch(v[:, 0], v[:, 1:], t_pos=self.t_pos, t_neg=self.t_neg,
                                       stats=st.d))


@LOSSES.register("cacr_multiview", description="CACR with the authors' small-scale cross-view pairing")
class CACRMultiview(_CACR):
    """CACR as in the authors' small-scale code (cross-view negatives, alpha/beta cost scales)."""

    def __init__(self, t_pos: float = 1.0, t_neg: float = 2.0, alpha: float = 1.0,
                 beta: float = 1.0) -> None:
        super().__init__(t_pos, t_neg)
        self.alpha = checks.positive("alpha", alpha)
        self.beta = checks.positive("beta", beta)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        st = _Stats()
        return st.out(F.cacr_multiview(_views(batch, "cacr_multiview"), t_pos=self.t_pos,
                                       t_neg=self.t_neg, alpha=self.alpha, beta=self.beta,
                                       stats=st.d))


@LOSSES.register("cacr_moco", description="CACR MoCo-v2 form: keys attract, queue + batch repel")
class CACRMoCo(_CACR):
    """CACR's MoCo-v2 form over all query views and key views."""

    needs = ("views", "keys", "negatives")

    def __init__(self, t_pos: float = 1.0, t_neg: float = 2.0, intra_batch: bool = True,
                 detach_queue_weights: bool = True, reuse_first_view_queue_dists: bool = False,
                 alpha: float = 1.0, beta: float = 1.0) -> None:
        super().__init__(t_pos, t_neg)
        self.intra_batch = bool(intra_batch)
        self.detach_queue_weights = bool(detach_queue_weights)
        self.reuse_first_view_queue_dists = bool(reuse_first_view_queue_dists)
        self.alpha = checks.positive("alpha", alpha)
        self.beta = checks.positive("beta", beta)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        require(batch, "cacr_moco", *self.needs)
        st = _Stats()
        return st.out(F.cacr_moco(_views(batch, "cacr_moco"), batch.keys, batch.negatives,
                                  t_pos=self.t_pos, t_neg=self.t_neg, intra_batch=self.intra_batch,
                                  detach_queue_weights=self.detach_queue_weights,
                                  reuse_first_view_queue_dists=self.reuse_first_view_queue_dists,
                                  alpha=self.alpha, beta=self.beta, stats=st.d))


@LOSSES.register("ring_nce", description="Ring / conditional NCE: negatives in a percentile ring of the queue")
class RingNCE(ContrastiveLoss):
    """Ring NCE with fixed percentiles [lower, upper) of the queue similarities. For annealed
    thresholds use ``moco_infonce`` with ``selector: {name: ring, schedule: ...}``."""

    needs = ("views", "keys", "negatives")

    def __init__(self, temperature: float = 0.07, lower: float = 0.0, upper: float = 100.0,
                 include_positive: bool = True) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)
        checks.in_range("lower", lower, 0.0, 100.0)
        checks.in_range("upper", upper, 0.0, 100.0)
        if lower >= upper:
            raise checks.ArgumentError("lower", f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
        self.lower, self.upper = float(lower), float(upper)
        self.include_positive = bool(include_positive)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        require(batch, "ring_nce", *self.needs)
        q, k = _views(batch, "ring_nce")[:, 0], batch.keys[:, 1]
        st = _Stats()
        return st.out(F.ring_nce(q, k, batch.negatives, temperature=self.temperature,
                                 lower=self.lower, upper=self.upper,
                                 include_positive=self.include_positive, stats=st.d))


# --- Ring's memory-bank forms: IR (Wu et al. 2018; Ring Eq. 3) and IRing (Ring Sec. 4) -------
# A self-contained block: the two modules draw their own uniform noise indices each step
# (the authors' ``torch.randint``) and hand them to the functional forms, which take them
# explicitly so that the math is tested with fixed draws.

class _IRBank(ContrastiveLoss):
    """Memory-bank instance discrimination: ``views[:, 0]`` against the bank in ``negatives``,
    the anchor's own slot ``indices`` being the positive."""

    needs = ("views", "negatives", "indices")
    min_views: ClassVar[int] = 1

    def __init__(self, temperature: float = 0.07, num_negatives: int = 4096) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)
        if isinstance(num_negatives, bool) or not isinstance(num_negatives, int) or num_negatives < 1:
            raise ValueError(f"num_negatives must be an integer >= 1, got {num_negatives!r}")
        self.num_negatives = num_negatives

    def _inputs(self, batch: ContrastiveBatch) -> tuple[Tensor, Tensor, Tensor]:
        owner = type(self).__name__
        require(batch, owner, *self.needs)
        return _views(batch, owner, at_least=1)[:, 0], batch.negatives, batch.indices


@LOSSES.register("ir_nce", description="IR (Wu et al. 2018; Ring Eq. 3): memory bank, k uniform noise entries")
class IRNCE(_IRBank):
    """Ring Eq. 3: the partition is the anchor's own bank entry plus ``num_negatives`` (k = 4096
    in Ring Sec. 5) bank entries drawn uniformly with replacement; the constant ``1/(k+1)`` of
    Eq. 3 is dropped (it shifts the loss by ``log(k+1)``, not its gradient)."""

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        q, bank, idx = self._inputs(batch)
        noise = torch.randint(0, bank.shape[0], (q.shape[0], self.num_negatives), device=q.device)
        st = _Stats()
        return st.out(F.ir_nce(q, bank, idx, noise, temperature=self.temperature, stats=st.d))


@LOSSES.register("ir_ring", description="IRing (Ring Sec. 4): memory bank, k negatives drawn from a percentile ring")
class IRRing(_IRBank):
    """IRing: ``num_negatives`` draws with replacement from the ring ``[lower, upper)`` of the
    anchor's bank similarities (Ring Sec. 4, the authors' ``NCERing``). A ``ring`` selector
    (``selector: {name: ring, schedule: ...}``) supplies annealed percentiles; without one the
    fixed ``lower`` / ``upper`` (default the official 0.1 / 0.1 thresholds, [90, 99)) apply."""

    accepts_selector = True

    def __init__(self, temperature: float = 0.07, num_negatives: int = 4096,
                 lower: float = 90.0, upper: float = 99.0, include_positive: bool = True) -> None:
        super().__init__(temperature, num_negatives)
        checks.in_range("lower", lower, 0.0, 100.0)
        checks.in_range("upper", upper, 0.0, 100.0)
        if lower >= upper:
            raise ValueError(f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
        self.lower, self.upper = float(lower), float(upper)
        self.include_positive = bool(include_positive)

    def attach_selector(self, selector) -> None:  # noqa: ANN001 - a ScheduledSelector or None
        if selector is not None and getattr(selector, "name", None) != "ring":
            raise ValueError(f"ir_ring takes only a ring selector (its percentiles set the ring), "
                             f"got {getattr(selector, 'name', selector)!r}")
        super().attach_selector(selector)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        q, bank, idx = self._inputs(batch)
        lower, upper = self.lower, self.upper
        if self.selector is not None:
            bounds = self.selector.arguments(batch.step)
            lower, upper = bounds["lower"], bounds["upper"]
        lo, hi = ring_bounds(bank.shape[0], lower, upper)
        noise = torch.randint(0, hi - lo, (q.shape[0], self.num_negatives), device=q.device)
        st = _Stats()
        return st.out(F.ir_ring(q, bank, idx, noise, lower, upper, temperature=self.temperature,
                                include_positive=self.include_positive, stats=st.d))
