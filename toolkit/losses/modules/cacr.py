"""Loss modules of CACR (:mod:`toolkit.losses.functional.cacr`): the paper form (in-batch or
against a queue / memory bank), the authors' small-scale multi-view pairing and the MoCo-v2
form."""

from __future__ import annotations

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput, require
from toolkit.losses.modules.batch_io import Records, batch_views


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
        v = batch_views(batch, "cacr")
        st = Records()
        if batch.negatives is not None:
            return st.out(F.cacr(v[:, 0], v[:, 1:], batch.negatives, t_pos=self.t_pos, t_neg=self.t_neg, stats=st.d))
        return st.out(F.cacr_minibatch(v[:, 0], v[:, 1:], t_pos=self.t_pos, t_neg=self.t_neg, stats=st.d))


@LOSSES.register("cacr_multiview", description="CACR with the authors' small-scale cross-view pairing")
class CACRMultiview(_CACR):
    """CACR as in the authors' small-scale code (cross-view negatives, alpha/beta cost scales)."""

    def __init__(self, t_pos: float = 1.0, t_neg: float = 2.0, alpha: float = 1.0, beta: float = 1.0) -> None:
        super().__init__(t_pos, t_neg)
        self.alpha = checks.positive("alpha", alpha)
        self.beta = checks.positive("beta", beta)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        st = Records()
        return st.out(
            F.cacr_multiview(
                batch_views(batch, "cacr_multiview"),
                t_pos=self.t_pos,
                t_neg=self.t_neg,
                alpha=self.alpha,
                beta=self.beta,
                stats=st.d,
            )
        )


@LOSSES.register("cacr_moco", description="CACR MoCo-v2 form: keys attract, queue + batch repel")
class CACRMoCo(_CACR):
    """CACR's MoCo-v2 form over all query views and key views."""

    needs = ("views", "keys", "negatives")

    def __init__(
        self,
        t_pos: float = 1.0,
        t_neg: float = 2.0,
        intra_batch: bool = True,
        detach_queue_weights: bool = True,
        reuse_first_view_queue_dists: bool = False,
        alpha: float = 1.0,
        beta: float = 1.0,
    ) -> None:
        super().__init__(t_pos, t_neg)
        self.intra_batch = bool(intra_batch)
        self.detach_queue_weights = bool(detach_queue_weights)
        self.reuse_first_view_queue_dists = bool(reuse_first_view_queue_dists)
        self.alpha = checks.positive("alpha", alpha)
        self.beta = checks.positive("beta", beta)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        require(batch, "cacr_moco", *self.needs)
        st = Records()
        return st.out(
            F.cacr_moco(
                batch_views(batch, "cacr_moco"),
                batch.keys,
                batch.negatives,
                t_pos=self.t_pos,
                t_neg=self.t_neg,
                intra_batch=self.intra_batch,
                detach_queue_weights=self.detach_queue_weights,
                reuse_first_view_queue_dists=self.reuse_first_view_queue_dists,
                alpha=self.alpha,
                beta=self.beta,
                stats=st.d,
            )
        )
