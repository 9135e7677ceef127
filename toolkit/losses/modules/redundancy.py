"""Barlow Twins and VICReg: the two views' embeddings held together by batch statistics, no
negatives and no target network (:mod:`toolkit.losses.functional.redundancy`). Both read the
raw projections: recipes set the encoder's ``normalize: false``."""

from __future__ import annotations

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput
from toolkit.losses.modules.batch_io import batch_views


@LOSSES.register(
    "barlow_twins", description="Barlow Twins: cross-correlation of the standardised views towards the identity"
)
class BarlowTwins(ContrastiveLoss):
    """Barlow Twins (Zbontar et al. 2021, Eq. 1): ``sum (1 - C_ii)^2 + lambd sum_{i!=j} C_ij^2``
    with ``C`` the cross-correlation of views 0 and 1, each dimension standardised over the
    (global, under torchrun) batch."""

    two_branches = True

    def __init__(self, lambd: float = 0.0051) -> None:
        super().__init__()
        self.lambd = checks.non_negative("lambd", lambd)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = batch_views(batch, "barlow_twins")
        return LossOutput(F.barlow_twins(v[:, 0], v[:, 1], lambd=self.lambd))


@LOSSES.register("vicreg", description="VICReg: invariance (MSE) + variance hinge + covariance, per branch")
class VICReg(ContrastiveLoss):
    """VICReg (Bardes et al. 2022, Eq. 6): ``sim_coeff * MSE + std_coeff * variance hinge +
    cov_coeff * covariance`` of views 0 and 1 (statistics over the global batch)."""

    two_branches = True

    def __init__(self, sim_coeff: float = 25.0, std_coeff: float = 25.0, cov_coeff: float = 1.0) -> None:
        super().__init__()
        self.sim_coeff = checks.non_negative("sim_coeff", sim_coeff)
        self.std_coeff = checks.non_negative("std_coeff", std_coeff)
        self.cov_coeff = checks.non_negative("cov_coeff", cov_coeff)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = batch_views(batch, "vicreg")
        loss = F.vicreg(v[:, 0], v[:, 1], sim_coeff=self.sim_coeff, std_coeff=self.std_coeff, cov_coeff=self.cov_coeff)
        return LossOutput(loss)
