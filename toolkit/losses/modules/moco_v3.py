"""MoCo v3: InfoNCE between the predictor's queries and the momentum encoder's keys of the other
view, in-batch keys, no queue (:func:`toolkit.losses.functional.moco_v3`)."""

from __future__ import annotations

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput
from toolkit.losses.modules.batch_io import predicted_pairs


@LOSSES.register("moco_v3", description="MoCo v3: ctr(q1, k2) + ctr(q2, k1), in-batch momentum keys, times 2 tau")
class MoCoV3(ContrastiveLoss):
    """MoCo v3 (Chen, Xie & He 2021, Alg. 1): ``ctr(q1, k2) + ctr(q2, k1)``, ``ctr`` the
    cross-entropy of ``q k^T / tau`` against the diagonal times ``2 tau``; ``q`` the predictor on
    the online embeddings, ``k`` the momentum encoder's (``objective.target``: 0.99 -> 1 cosine).
    Under torchrun the keys are the global batch's."""

    two_branches = True

    needs = ("views", "predictions", "keys")
    parts = ("predictor", "target")

    def __init__(self, temperature: float = 0.2) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        (q1, q2), (k1, k2) = predicted_pairs(batch, "moco_v3")
        loss = F.moco_v3(q1, k2, temperature=self.temperature) + F.moco_v3(q2, k1, temperature=self.temperature)
        return LossOutput(loss)
