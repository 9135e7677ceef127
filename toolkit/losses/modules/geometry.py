"""Loss modules of the geometric family (:mod:`toolkit.losses.functional.geometry`):
alignment + uniformity, spectral, CPCL (paper form: CPCL-A, CPCL-Full) and ACA (the authors'
released CPCL)."""

from __future__ import annotations

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput, require
from toolkit.losses.modules.batch_io import Records, batch_views


@LOSSES.register("align_uniform", description="Wang & Isola alignment + uniformity")
class AlignUniform(ContrastiveLoss):
    """w_a * align(x, y) + w_u * (uniform(x) + uniform(y)) / 2."""

    def __init__(
        self, align_weight: float = 1.0, uniform_weight: float = 1.0, alpha: float = 2.0, t: float = 2.0
    ) -> None:
        super().__init__()
        self.align_weight = checks.non_negative("align_weight", align_weight)
        self.uniform_weight = checks.non_negative("uniform_weight", uniform_weight)
        self.alpha = checks.positive("alpha", alpha)
        self.t = checks.positive("t", t)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = batch_views(batch, "align_uniform")
        st = Records()
        return st.out(
            F.align_uniform(
                v[:, 0],
                v[:, 1],
                align_weight=self.align_weight,
                uniform_weight=self.uniform_weight,
                alpha=self.alpha,
                t=self.t,
                stats=st.d,
            )
        )


@LOSSES.register("spectral", description="Spectral contrastive loss (HaoChen et al. 2021)")
class Spectral(ContrastiveLoss):
    """Spectral contrastive loss with rows clipped to norm sqrt(mu)."""

    def __init__(self, mu: float = 1.0) -> None:
        super().__init__()
        self.mu = checks.positive("mu", mu)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = batch_views(batch, "spectral")
        st = Records()
        return st.out(F.spectral(v[:, 0], v[:, 1], mu=self.mu, stats=st.d))


@LOSSES.register("cpcl_a", description="CPCL-A, the augmentation-overlap term (paper form)")
class CPCLA(ContrastiveLoss):
    """CPCL-A: -2/B sum z1.z2 + K/(B(B-1)) sum_{i!=j} (z1_i.z2_j)^2."""

    def __init__(self, K: float = 2.0) -> None:  # noqa: N803 - the paper's name
        super().__init__()
        self.K = checks.positive("K", K)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = batch_views(batch, "cpcl_a")
        st = Records()
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
        v = batch_views(batch, "cpcl_full")
        require(batch, "cpcl_full", "natural")
        st = Records()
        return st.out(F.cpcl_full(batch.natural, v[:, 0], v[:, 1], K=self.K, alpha=self.alpha, stats=st.d))


@LOSSES.register(
    "aca", description="CPCL as released by its authors (ACA: 1/T logits, same-view negatives, detached MSE)"
)
class ACA(ContrastiveLoss):
    """The authors' released ACA form of CPCL; needs the natural view."""

    needs = ("views", "natural")

    def __init__(self, K: float = 1.0, lamb: float = 1.0, temperature: float = 0.5) -> None:  # noqa: N803
        super().__init__()
        self.K = checks.positive("K", K)
        self.lamb = checks.non_negative("lamb", lamb)
        self.temperature = checks.positive("temperature", temperature)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        v = batch_views(batch, "aca")
        require(batch, "aca", "natural")
        st = Records()
        return st.out(
            F.aca(batch.natural, v[:, 0], v[:, 1], K=self.K, lamb=self.lamb, temperature=self.temperature, stats=st.d)
        )
