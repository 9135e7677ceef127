"""Loss modules of Wang & Liu (:mod:`toolkit.losses.functional.wang_liu`): Eq. 1, 3 and 9 and
the hard simple loss, against a memory bank (``views[:, 0]`` with the bank rows in
``negatives``, the anchor's own slot ``indices`` the positive)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput
from toolkit.losses.modules.batch_io import Records, bank_inputs


class _WangLiu(ContrastiveLoss):
    """Memory-bank losses of Wang & Liu: similarities of views[:,0] to every bank row."""

    needs = ("views", "negatives", "indices")
    min_views: ClassVar[int] = 1

    def _sims(self, batch: ContrastiveBatch) -> tuple[Tensor, Tensor]:
        return F.wl_sims_from_bank(*bank_inputs(batch, type(self).__name__))


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
        st = Records()
        return st.out(F.wl_contrastive(s_pos, s_neg, temperature=self.temperature, neg_mask=mask, stats=st.d))


@LOSSES.register("wl_simple", description="Wang & Liu Eq. 3: the simple (tau -> infinity) loss")
class WLSimple(_WangLiu):
    """Wang & Liu Eq. 3: -s_ii + lam * sum_j s_ij."""

    def __init__(self, lam: float | None = None) -> None:
        super().__init__()
        self.lam = None if lam is None else checks.non_negative("lam", lam)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        s_pos, s_neg = self._sims(batch)
        st = Records()
        return st.out(F.wl_simple(s_pos, s_neg, self.lam, stats=st.d))


@LOSSES.register("wl_hard", description="Wang & Liu Eq. 9: contrastive loss over the hardest negatives")
class WLHard(_WangLiu):
    """Wang & Liu Eq. 9: keep negatives at or above the K-th largest similarity."""

    def __init__(self, temperature: float = 0.2, alpha: float | None = None, num_hard: int | None = None) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)
        self.alpha, self.num_hard = _hard_args(alpha, num_hard)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        s_pos, s_neg = self._sims(batch)
        st = Records()
        return st.out(
            F.wl_hard(s_pos, s_neg, temperature=self.temperature, alpha=self.alpha, num_hard=self.num_hard, stats=st.d)
        )


@LOSSES.register("wl_hard_simple", description="Wang & Liu hard simple loss")
class WLHardSimple(_WangLiu):
    """The simple loss restricted to the hardest negatives."""

    def __init__(self, lam: float | None = None, alpha: float | None = None, num_hard: int | None = None) -> None:
        super().__init__()
        self.lam = None if lam is None else checks.non_negative("lam", lam)
        self.alpha, self.num_hard = _hard_args(alpha, num_hard)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        s_pos, s_neg = self._sims(batch)
        st = Records()
        return st.out(F.wl_hard_simple(s_pos, s_neg, self.lam, alpha=self.alpha, num_hard=self.num_hard, stats=st.d))
