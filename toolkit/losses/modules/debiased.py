"""Loss modules of the debiased family (:mod:`toolkit.losses.functional.debiased`): DCL and
HCL, in-batch (2B form) or on the domain's scores."""

from __future__ import annotations

from typing import Any

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput
from toolkit.losses.modules.batch_io import Records, batch_scores, batch_views, has_scores


class _Debiased(ContrastiveLoss):
    def __init__(self, temperature: float = 0.5, tau_plus: float = 0.1, clamp: bool = True) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)
        self.tau_plus = checks.in_range("tau_plus", tau_plus, 0.0, 1.0, high_open=True)
        self.clamp = bool(clamp)

    def _kwargs(self) -> dict[str, Any]:
        return dict(temperature=self.temperature, tau_plus=self.tau_plus, clamp=self.clamp)


@LOSSES.register("dcl", description="Debiased contrastive loss (Chuang et al. 2020)")
class DCL(_Debiased):
    """Debiased contrastive loss, in-batch (2B form) or on domain scores."""

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        st = Records()
        if has_scores(batch):
            s, pos, valid = batch_scores(batch, "dcl")
            return st.out(F.dcl_scores(s, pos, valid, **self._kwargs(), stats=st.d))
        v = batch_views(batch, "dcl")
        return st.out(F.dcl(v[:, 0], v[:, 1], **self._kwargs(), stats=st.d))


@LOSSES.register("hcl", description="Hard-negative contrastive loss (Robinson et al. 2021)")
class HCL(_Debiased):
    """Hard-negative loss with importance weights exp(beta s / tau), in-batch or on scores."""

    def __init__(self, temperature: float = 0.5, tau_plus: float = 0.1, beta: float = 1.0, clamp: bool = True) -> None:
        super().__init__(temperature, tau_plus, clamp)
        self.beta = checks.non_negative("beta", beta)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        st = Records()
        kw = dict(self._kwargs(), beta=self.beta)
        if has_scores(batch):
            s, pos, valid = batch_scores(batch, "hcl")
            return st.out(F.hcl_scores(s, pos, valid, **kw, stats=st.d))
        v = batch_views(batch, "hcl")
        return st.out(F.hcl(v[:, 0], v[:, 1], **kw, stats=st.d))
