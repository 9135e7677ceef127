"""SupCon: every view an anchor, every other view of the same label a positive
(:func:`toolkit.losses.functional.supcon`)."""

from __future__ import annotations

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput, require
from toolkit.losses.modules.batch_io import Records, batch_views


@LOSSES.register("supcon", description="SupCon (L_out): the batch's labels give each anchor its positives")
class SupCon(ContrastiveLoss):
    """Supervised contrastive loss (Khosla et al. 2020, Eq. 2, L_out) over every view of the
    (global) batch, labels from the domain (``y``). An anchor whose label no other view shares
    is left out and counted in the records (``supcon_anchors_without_positive``), never a
    silent 0."""

    needs = ("views", "labels")

    def __init__(self, temperature: float = 0.07, base_temperature: float = 0.07) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)
        self.base_temperature = checks.positive("base_temperature", base_temperature)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        require(batch, "supcon", "views", "labels")
        st = Records()
        loss = F.supcon(
            batch_views(batch, "supcon", at_least=1),
            batch.labels,
            temperature=self.temperature,
            base_temperature=self.base_temperature,
            stats=st.d,
        )
        return st.out(loss)
