"""CURL's contrastive term as a ContrastiveBatch for any core objective (Laskin et al., 2020, Sec. 4).

Queries are the online critic encoder's features of one random crop, ``z_a = f_q(o_a)``; keys
the momentum (target) encoder's features of another crop of the same stacked frames,
``z_pos = f_k(o_pos)`` (no gradient). The similarity is bilinear (Sec. 4.5, Eq. 3 ff.)::

    s_ij = z_a_i^T W z_pos_j

The scores are handed over unshifted. CURL's reference code subtracts each row's maximum
before its cross-entropy; that changes neither InfoNCE nor its gradient, but it does change
DCL / HCL, whose clamp ``Ng >= N e^{-1/tau}`` compares against the unshifted scores. The core's
score-level losses evaluate everything in log space (log-sum-exp), so the unshifted scores are
safe at any scale. The positive of anchor i is key i, the other
``B - 1`` keys of the batch its negatives; CURL's loss is InfoNCE with temperature 1 on these
logits (recipe ``loss: {name: info_nce}``), but any score-level loss of the core (``dcl``,
``hcl``) and regularizers (``distance_polarization``) plug in through the objective.

``W`` is ``feature_dim x feature_dim`` (50 x 50): CURL's reference passes its ``curl_latent_dim``
(128) to an unused argument, so its W is 50 x 50 too; ctk says so instead of pretending
otherwise. ``W`` starts uniform in ``[0, 1)`` as in the reference.

The ``views`` of the batch are the L2-normalised pair ``[z_a, z_pos]``: LMCL's distance
polarization is defined on unit vectors (``D = (1 - F F^T) / 2``, Sec. 3.1), while the
bilinear logits use the raw LayerNorm features.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.losses.base import ContrastiveBatch

__all__ = ["BilinearCURL"]


class BilinearCURL(nn.Module):
    """The bilinear similarity ``W`` and the batch it hands to the objective."""

    def __init__(self, feature_dim: int) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.rand(feature_dim, feature_dim))

    def logits(self, z_anchor: Tensor, z_pos: Tensor) -> Tensor:
        """``[B, B]`` bilinear scores ``z_a W z_pos^T`` (not shifted: see the module docstring)."""
        return z_anchor @ (self.W @ z_pos.t())

    def batch(self, z_anchor: Tensor, z_pos: Tensor, step: int = 0) -> ContrastiveBatch:
        """The ContrastiveBatch of CURL's pair: scores, identity positives, unit-norm views."""
        n = z_anchor.shape[0]
        views = torch.stack([F.normalize(z_anchor, dim=-1), F.normalize(z_pos, dim=-1)], dim=1)
        return ContrastiveBatch(
            scores=self.logits(z_anchor, z_pos),
            positive_mask=torch.eye(n, dtype=torch.bool, device=z_anchor.device),
            views=views,
            step=step,
        )
