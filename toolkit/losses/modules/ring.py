"""Loss modules of Ring (:mod:`toolkit.losses.functional.ring`): Ring / conditional NCE on a
MoCo queue, and the memory-bank forms IR (Wu et al. 2018; Ring Eq. 3) and IRing (Ring Sec. 4)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from toolkit import checks
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput, require
from toolkit.losses.modules.batch_io import Records, bank_inputs, batch_views
from toolkit.samplers.masks import RING_DEFAULT, ring_bounds


@LOSSES.register("ring_nce", description="Ring / conditional NCE: negatives in a percentile ring of the queue")
class RingNCE(ContrastiveLoss):
    """Ring NCE with fixed percentiles [lower, upper) of the queue similarities, default the
    authors' ``thres_outer = thres_inner = 0.1``, i.e. [90, 99) (:data:`RING_DEFAULT`, shared by
    every Ring component). For annealed thresholds use ``moco_infonce`` with
    ``selector: {name: ring, schedule: ...}``."""

    needs = ("views", "keys", "negatives")

    def __init__(
        self,
        temperature: float = 0.07,
        lower: float = RING_DEFAULT[0],
        upper: float = RING_DEFAULT[1],
        include_positive: bool = True,
    ) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)
        checks.in_range("lower", lower, 0.0, 100.0)
        checks.in_range("upper", upper, 0.0, 100.0)
        if lower >= upper:
            raise checks.ArgumentError("lower", f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
        self.lower, self.upper = float(lower), float(upper)
        self.include_positive = bool(include_positive)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        require(batch, "ring_nce", *self.needs)
        q, k = batch_views(batch, "ring_nce")[:, 0], batch.keys[:, 1]
        st = Records()
        return st.out(
            F.ring_nce(
                q,
                k,
                batch.negatives,
                temperature=self.temperature,
                lower=self.lower,
                upper=self.upper,
                include_positive=self.include_positive,
                stats=st.d,
            )
        )


# --- Ring's memory-bank forms: IR (Wu et al. 2018; Ring Eq. 3) and IRing (Ring Sec. 4) -------
# A self-contained block: the two modules draw their own uniform noise indices each step
# (the authors' ``torch.randint``) and hand them to the functional forms, which take them
# explicitly so that the math is tested with fixed draws.


class _IRBank(ContrastiveLoss):
    """Memory-bank instance discrimination: ``views[:, 0]`` against the bank in ``negatives``,
    the anchor's own slot ``indices`` being the positive."""

    needs = ("views", "negatives", "indices")
    min_views: ClassVar[int] = 1

    def __init__(self, temperature: float = 0.07, num_negatives: int = 4096) -> None:
        super().__init__()
        self.temperature = checks.positive("temperature", temperature)
        if isinstance(num_negatives, bool) or not isinstance(num_negatives, int) or num_negatives < 1:
            raise ValueError(f"num_negatives must be an integer >= 1, got {num_negatives!r}")
        self.num_negatives = num_negatives

    def _inputs(self, batch: ContrastiveBatch) -> tuple[Tensor, Tensor, Tensor]:
        return bank_inputs(batch, type(self).__name__)


@LOSSES.register("ir_nce", description="IR (Wu et al. 2018; Ring Eq. 3): memory bank, k uniform noise entries")
class IRNCE(_IRBank):
    """Ring Eq. 3: the partition is the anchor's own bank entry plus ``num_negatives`` (k = 4096
    in Ring Sec. 5) bank entries drawn uniformly with replacement; the constant ``1/(k+1)`` of
    Eq. 3 is dropped (it shifts the loss by ``log(k+1)``, not its gradient)."""

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        q, bank, idx = self._inputs(batch)
        noise = torch.randint(0, bank.shape[0], (q.shape[0], self.num_negatives), device=q.device)
        st = Records()
        return st.out(F.ir_nce(q, bank, idx, noise, temperature=self.temperature, stats=st.d))


@LOSSES.register("ir_ring", description="IRing (Ring Sec. 4): memory bank, k negatives drawn from a percentile ring")
class IRRing(_IRBank):
    """IRing: ``num_negatives`` draws with replacement from the ring ``[lower, upper)`` of the
    anchor's bank similarities (Ring Sec. 4, the authors' ``NCERing``). A ``ring`` selector
    (``selector: {name: ring, schedule: ...}``) supplies annealed percentiles; without one the
    fixed ``lower`` / ``upper`` (default the official 0.1 / 0.1 thresholds, [90, 99)) apply."""

    accepts_selector = True

    def __init__(
        self,
        temperature: float = 0.07,
        num_negatives: int = 4096,
        lower: float = RING_DEFAULT[0],
        upper: float = RING_DEFAULT[1],
        include_positive: bool = True,
    ) -> None:
        super().__init__(temperature, num_negatives)
        checks.in_range("lower", lower, 0.0, 100.0)
        checks.in_range("upper", upper, 0.0, 100.0)
        if lower >= upper:
            raise ValueError(f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
        self.lower, self.upper = float(lower), float(upper)
        self.include_positive = bool(include_positive)

    def attach_selector(self, selector) -> None:  # noqa: ANN001 - a ScheduledSelector or None
        if selector is not None and getattr(selector, "name", None) != "ring":
            raise ValueError(
                f"ir_ring takes only a ring selector (its percentiles set the ring), "
                f"got {getattr(selector, 'name', selector)!r}"
            )
        super().attach_selector(selector)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        q, bank, idx = self._inputs(batch)
        lower, upper = self.lower, self.upper
        if self.selector is not None:
            bounds = self.selector.arguments(batch.step)
            lower, upper = bounds["lower"], bounds["upper"]
        lo, hi = ring_bounds(bank.shape[0], lower, upper)
        noise = torch.randint(0, hi - lo, (q.shape[0], self.num_negatives), device=q.device)
        st = Records()
        return st.out(
            F.ir_ring(
                q,
                bank,
                idx,
                noise,
                lower,
                upper,
                temperature=self.temperature,
                include_positive=self.include_positive,
                stats=st.d,
            )
        )
