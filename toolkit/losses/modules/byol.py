"""BYOL and SimSiam: the predictor's output against the target's embedding of the other view
(:mod:`toolkit.losses.functional.byol`), symmetrised as the papers write it."""

from __future__ import annotations

from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput
from toolkit.losses.modules.batch_io import predicted_pairs


@LOSSES.register(
    "byol", description="BYOL: 2 - 2 cos(predictor(online view 1), target(view 2)), both ways; no negatives"
)
class BYOL(ContrastiveLoss):
    """BYOL (Grill et al. 2020, Eq. 2): ``L(p1, z'2) + L(p2, z'1)`` with ``L = mean 2 - 2 cos``;
    ``p`` the objective's predictor on the online embeddings, ``z'`` the target network's
    (``objective.target``, an EMA with BYOL's cosine momentum). Needs ``objective.predictor``
    and ``objective.target``."""

    two_branches = True

    needs = ("views", "predictions", "keys")
    parts = ("predictor", "target")

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        (p1, p2), (k1, k2) = predicted_pairs(batch, "byol")
        sg = not k1.requires_grad  # False only in the stop-gradient ablation (objective.target.stop_gradient)
        a, b = F.byol(p1, k2, stop_gradient=sg), F.byol(p2, k1, stop_gradient=sg)
        loss = a + b
        return LossOutput(loss, {"prediction_cosine": 1 - loss.detach() / 4})


@LOSSES.register("simsiam", description="SimSiam: -cos(predictor(view 1), stop-grad(view 2)) / 2, both ways")
class SimSiam(ContrastiveLoss):
    """SimSiam (Chen & He 2021, Alg. 1): ``D(p1, z2) / 2 + D(p2, z1) / 2`` with ``D = -cos`` and
    ``z`` the online embedding with its gradient stopped (``objective.target: {momentum: 0}``;
    a momentum above 0 compares with an EMA target instead). Needs ``objective.predictor`` and
    ``objective.target``."""

    two_branches = True

    needs = ("views", "predictions", "keys")
    parts = ("predictor", "target")

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        (p1, p2), (k1, k2) = predicted_pairs(batch, "simsiam")
        sg = not k1.requires_grad  # False only in the stop-gradient ablation (objective.target.stop_gradient)
        loss = F.simsiam(p1, k2, stop_gradient=sg) / 2 + F.simsiam(p2, k1, stop_gradient=sg) / 2
        return LossOutput(loss, {"prediction_cosine": -loss.detach()})
