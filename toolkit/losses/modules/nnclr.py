"""NNCLR: the nearest neighbour of an embedding in a support set of past embeddings as the
positive (:func:`toolkit.losses.functional.nnclr`)."""

from __future__ import annotations

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput, require
from toolkit.losses.modules.batch_io import batch_views


@LOSSES.register("nnclr", description="NNCLR: InfoNCE from each view's nearest neighbour in a support set")
class NNCLR(ContrastiveLoss):
    """NNCLR (Dwibedi et al. 2021, Eq. 2, symmetrised as the paper trains):
    ``(L(z1, p2) + L(z2, p1)) / 2`` with ``L`` the cross-entropy of ``NN(z_a, Q) p_b^T / tau``
    against the diagonal; ``Q`` the support set (``objective.negatives: {source: support_set,
    size: 98304}``, filled with past ``z1``), ``p`` the predictor's output when the recipe has
    ``objective.predictor`` (the paper's), else the embeddings."""

    two_branches = True

    needs = ("views", "negatives")

    def __init__(self, temperature: float = 0.1) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        require(batch, "nnclr", "views", "negatives")
        z = batch_views(batch, "nnclr")
        p = batch.predictions if batch.predictions is not None else z
        support = batch.negatives
        loss = (
            F.nnclr(z[:, 0], p[:, 1], support, temperature=self.temperature)
            + F.nnclr(z[:, 1], p[:, 0], support, temperature=self.temperature)
        ) / 2
        return LossOutput(loss)
