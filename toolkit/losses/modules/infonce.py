"""Loss modules of the InfoNCE family (:mod:`toolkit.losses.functional.infonce`): NT-Xent and
InfoNCE (in-batch, or on the domain's scores), MoCo InfoNCE against a queue, CMC over V views.
The in-batch and queue forms accept a negative selector (hard / ring)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput, require
from toolkit.losses.functional._precision import similarities
from toolkit.losses.modules.batch_io import Records, batch_scores, batch_views, has_scores


def _in_batch_keep_mask(z1: Tensor, z2: Tensor, selector: Any, step: int) -> Tensor:
    """Apply ``selector`` to each anchor's 2B-2 in-batch negatives; return a [2B, 2B] keep-mask.

    The selector sees exactly the candidate negatives of each anchor (self and the positive
    removed), so percentiles and top-k counts are those of the paper.
    """
    with torch.no_grad():
        z = torch.cat([z1, z2])
        n2 = z.shape[0]
        b = n2 // 2
        sims = similarities(z, z)  # float32 even under autocast: half precision ties ranks
        # row a's negatives in ascending order: every column but a and its partner, i.e. j, j + 1
        # past the first of the two (a mod B) and j + 2 past the second (a mod B + B); computed,
        # not selected with a mask, so nothing is read back to the host
        first = (torch.arange(n2, device=z.device) % b).unsqueeze(1)
        neg_idx = torch.arange(n2 - 2, device=z.device).expand(n2, n2 - 2)
        neg_idx = neg_idx + (neg_idx >= first)
        neg_idx = neg_idx + (neg_idx >= first + b)
        keep_neg = selector(sims.gather(1, neg_idx), step)
        keep = torch.ones(n2, n2, dtype=torch.bool, device=z.device)
        keep.scatter_(1, neg_idx, keep_neg)
        return keep


@LOSSES.register(
    "nt_xent", description="SimCLR NT-Xent (2B form); score-level InfoNCE when the domain scores candidates"
)
class NTXent(ContrastiveLoss):
    """NT-Xent / InfoNCE with in-batch negatives (SimCLR 2B form, mean over 2B anchors)."""

    accepts_selector = True

    def __init__(self, temperature: float = 0.5) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        st = Records()
        if has_scores(batch):
            if self.selector is not None:
                raise ValueError("a negative selector is not supported with domain-scored candidates")
            s, pos, valid = batch_scores(batch, type(self).__name__)
            return st.out(F.info_nce_scores(s, pos, valid, temperature=self.temperature, stats=st.d))
        v = batch_views(batch, "nt_xent")
        z1, z2 = v[:, 0], v[:, 1]
        mask = _in_batch_keep_mask(z1, z2, self.selector, batch.step) if self.selector else None
        return st.out(F.nt_xent(z1, z2, temperature=self.temperature, neg_mask=mask, stats=st.d))


@LOSSES.register("info_nce", description="InfoNCE on domain scores (quick-thought, CURL; temperature 1 by default)")
class InfoNCE(NTXent):
    """InfoNCE; identical to nt_xent but with temperature 1 by default (QT softmax, CURL)."""

    def __init__(self, temperature: float = 1.0) -> None:
        super().__init__(temperature)


@LOSSES.register("moco_infonce", description="MoCo InfoNCE against a queue of momentum keys")
class MoCoInfoNCE(ContrastiveLoss):
    """MoCo InfoNCE: q = views[:,0], k = keys[:,1], negatives = the queue (a selector may
    restrict them: hard negatives, or a ring for MoCoRing with annealed thresholds)."""

    needs = ("views", "keys", "negatives")
    accepts_selector = True

    def __init__(self, temperature: float = 0.07) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        require(batch, "moco_infonce", *self.needs)
        q, k = batch_views(batch, "moco_infonce")[:, 0], batch.keys[:, 1]
        mask = None
        if self.selector is not None:
            with torch.no_grad():
                mask = self.selector(similarities(q, batch.negatives), batch.step)
        st = Records()
        return st.out(F.moco_infonce(q, k, batch.negatives, temperature=self.temperature, neg_mask=mask, stats=st.d))


@LOSSES.register("cmc", description="CMC full graph over V views (in-batch negatives from the other view)")
class CMC(ContrastiveLoss):
    """CMC full-graph loss over all view pairs."""

    def __init__(self, temperature: float = 0.07, pair_reduction: str = "sum") -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)
        self.pair_reduction = checks.choice("pair_reduction", pair_reduction, ("sum", "mean"))

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        st = Records()
        return st.out(
            F.cmc(
                batch_views(batch, "cmc"), temperature=self.temperature, pair_reduction=self.pair_reduction, stats=st.d
            )
        )
