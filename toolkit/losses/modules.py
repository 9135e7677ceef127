"""Registered loss modules: hyper-parameters validated at construction, the math in
``toolkit.losses.functional``.

Each module reads the :class:`~toolkit.losses.base.ContrastiveBatch` fields it declares in
``needs`` and returns a :class:`~toolkit.losses.base.LossOutput` whose records are the scalars
the functional core computed anyway. Recipes name them (``loss: {name: cacr, t_neg: 2.0}``);
``ctk list losses`` prints the registry.

Which embeddings go where (V views per instance, ``views[:, 0]`` is the query view):

* in-batch pair losses (nt_xent, dcl, hcl, spectral, cpcl_*, align_uniform) use views 0 and 1;
  when the domain supplies ``scores`` + ``positive_mask`` (quick-thought, CURL) the InfoNCE,
  DCL and HCL modules use the score-level forms instead;
* MoCo-form losses (moco_infonce, ring_nce) use ``q = views[:, 0]``, ``k = keys[:, 1]`` and the
  queue in ``negatives``; cacr_moco uses all query and key views;
* memory-bank losses (wl_*) compare ``views[:, 0]`` with the bank rows in ``negatives``, the
  anchor's own slot (``indices``) being the positive.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import ContrastiveBatch, ContrastiveLoss, LossOutput, require
from toolkit.losses.functional._precision import similarities
from toolkit.losses.registry import LOSSES, _Stats, _views  # noqa: F401 - re-exported

def _scored(batch: ContrastiveBatch) -> bool:
    return batch.scores is not None


def _score_args(batch: ContrastiveBatch, owner: str) -> tuple[Tensor, Tensor, Tensor | None]:
    require(batch, owner, "scores", "positive_mask")
    return batch.scores, batch.positive_mask, batch.valid_mask


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
        rows = torch.arange(n2, device=z.device)
        partner = (rows + b) % n2
        cols = torch.arange(n2, device=z.device).expand(n2, n2)
        is_neg = (cols != rows[:, None]) & (cols != partner[:, None])
        neg_idx = cols[is_neg].view(n2, n2 - 2)
        keep_neg = selector(sims.gather(1, neg_idx), step)
        keep = torch.ones(n2, n2, dtype=torch.bool, device=z.device)
        keep.scatter_(1, neg_idx, keep_neg)
        return keep


@LOSSES.register("nt_xent", description="SimCLR NT-Xent (2B form); score-level InfoNCE when the domain scores candidates")
class NTXent(ContrastiveLoss):
    """NT-Xent / InfoNCE with in-batch negatives (SimCLR 2B form, mean over 2B anchors)."""

    accepts_selector = True

    def __init__(self, temperature: float = 0.5) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        st = _Stats()
        if _scored(batch):
            if self.selector is not None:
                raise ValueError("a negative selector is not supported with domain-scored candidates")
            s, pos, valid = _score_args(batch, type(self).__name__)
            return st.out(F.info_nce_scores(s, pos, valid, temperature=self.temperature, stats=st.d))
        v = _views(batch, "nt_xent")
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
        q, k = _views(batch, "moco_infonce")[:, 0], batch.keys[:, 1]
        mask = None
        if self.selector is not None:
            with torch.no_grad():
                mask = self.selector(similarities(q, batch.negatives), batch.step)
        st = _Stats()
        return st.out(F.moco_infonce(q, k, batch.negatives, temperature=self.temperature,
                                     neg_mask=mask, stats=st.d))


@LOSSES.register("cmc", description="CMC full graph over V views (in-batch negatives from the other view)")
class CMC(ContrastiveLoss):
    """CMC full-graph loss over all view pairs."""

    def __init__(self, temperature: float = 0.07, pair_reduction: str = "sum") -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)
        self.pair_reduction = checks.choice("pair_reduction", pair_reduction, ("sum", "mean"))

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        st = _Stats()
        return st.out(F.cmc(_views(batch, "cmc"), temperature=self.temperature,
                            pair_reduction=self.pair_reduction, stats=st.d))


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
        st = _Stats()
        if _scored(batch):
            s, pos, valid = _score_args(batch, "dcl")
            return st.out(F.dcl_scores(s, pos, valid, **self._kwargs(), stats=st.d))
        v = _views(batch, "dcl")
        return st.out(F.dcl(v[:, 0], v[:, 1], **self._kwargs(), stats=st.d))


@LOSSES.register("hcl", description="Hard-negative contrastive loss (Robinson et al. 2021)")
class HCL(_Debiased):
    """Hard-negative loss with importance weights exp(beta s / tau), in-batch or on scores."""

    def __init__(self, temperature: float = 0.5, tau_plus: float = 0.1, beta: float = 1.0,
                 clamp: bool = True) -> None:
        super().__init__(temperature, tau_plus, clamp)
        self.beta = checks.non_negative("beta", beta)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        st = _Stats()
        kw = dict(self._kwargs(), beta=self.beta)
        if _scored(batch):
            s, pos, valid = _score_args(batch, "hcl")
            return st.out(F.hcl_scores(s, pos, valid, **kw, stats=st.d))
        v = _views(batch, "hcl")
        return st.out(F.hcl(v[:, 0], v[:, 1], **kw, stats=st.d))


@LOSSES.register("align_uniform", description="Wang & Isola alignment + uniformity")
class AlignUniform(ContrastiveLoss):
    """w_a * align(x, y) + w_u * (uniform(x) + uniform(y)) / 2."""

    def __init__(self, align_weight: float = 1.0, uniform_weight: float = 1.0, alpha: float = 2.0,
                 t: float = 2.0) -> None:
        super().__init__()
        self.align_weight = checks.non_negative("align_weight", align_weight)
        self.uniform_weight = checks.non_negative("uniform_weight", uniform_weight)
        self.alpha = checks.positive("alpha", alpha)
        self.t = checks.positive("t", t)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = _views(batch, "align_uniform")
        st = _Stats()
        return st.out(F.align_uniform(v[:, 0], v[:, 1], align_weight=self.align_weight,
                                      uniform_weight=self.uniform_weight, alpha=self.alpha,
                                      t=self.t, stats=st.d))


@LOSSES.register("spectral", description="Spectral contrastive loss (HaoChen et al. 2021)")
class Spectral(ContrastiveLoss):
    """Spectral contrastive loss with rows clipped to norm sqrt(mu)."""

    def __init__(self, mu: float = 1.0) -> None:
        super().__init__()
        self.mu = checks.positive("mu", mu)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = _views(batch, "spectral")
        st = _Stats()
        return st.out(F.spectral(v[:, 0], v[:, 1], mu=self.mu, stats=st.d))


@LOSSES.register("cpcl_a", description="CPCL-A, the augmentation-overlap term (paper form)")
class CPCLA(ContrastiveLoss):
    """CPCL-A: -2/B sum z1.z2 + K/(B(B-1)) sum_{i!=j} (z1_i.z2_j)^2."""

    def __init__(self, K: float = 2.0) -> None:  # noqa: N803 - the paper's name
        super().__init__()
        self.K = checks.positive("K", K)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = _views(batch, "cpcl_a")
        st = _Stats()
        return st.out(F.cpcl_a(v[:, 0], v[:, 1], K=self.K, stats=st.d))


@LOSSES.register("cpcl_full", description="CPCL-Full: CPCL-A + alpha * projection onto the natural view")
class CPCLFull(ContrastiveLoss):
    """CPCL-Full (paper form); needs the un-augmented (natural) view."""

    needs = ("views", "natural")

    def __init__(self, K: float = 2.0, alpha: float = 1.0) -> None:  # noqa: N803
        super().__init__()
        self.K = checks.positive("K", K)
        self.alpha = checks.non_negative("alpha", alpha)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = _views(batch, "cpcl_full")
        require(batch, "cpcl_full", "natural")
        st = _Stats()
        return st.out(F.cpcl_full(batch.natural, v[:, 0], v[:, 1], K=self.K, alpha=self.alpha,
                                  stats=st.d))


@LOSSES.register("aca", description="CPCL as released by its authors (ACA: 1/T logits, same-view negatives, detached MSE)")
class ACA(ContrastiveLoss):
    """The authors' released ACA form of CPCL; needs the natural view."""

    needs = ("views", "natural")

    def __init__(self, K: float = 1.0, lamb: float = 1.0, temperature: float = 0.5) -> None:  # noqa: N803
        super().__init__()
        self.K = checks.positive("K", K)
        self.lamb = checks.non_negative("lamb", lamb)
        self.temperature = checks.positive("temperature", temperature)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = _views(batch, "aca")
        require(batch, "aca", "natural")
        st = _Stats()
        return st.out(F.aca(batch.natural, v[:, 0], v[:, 1], K=self.K, lamb=self.lamb,
                            temperature=self.temperature, stats=st.d))
