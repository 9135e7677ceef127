"""SwAV: swapped prediction of Sinkhorn-Knopp codes over learned prototypes
(:func:`toolkit.losses.functional.swav`), with multi-crop and the optional feature queue."""

from __future__ import annotations

import torch
import torch.nn.functional as nnf
from torch import Tensor

from toolkit import checks
from toolkit.heads import Prototypes
from toolkit.losses import functional as F
from toolkit.losses.base import LOSSES, ContrastiveBatch, ContrastiveLoss, LossOutput, RunLength
from toolkit.losses.modules.batch_io import batch_views
from toolkit.samplers.sources import MoCoQueue


def _wide(x: Tensor) -> Tensor:
    """``x`` in float32 at least: half precision up, float64 kept (as the functional core does)."""
    return x if x.dtype == torch.float64 else x.float()


@LOSSES.register("swav", description="SwAV: predict one view's Sinkhorn codes over prototypes from another view")
class SwAV(ContrastiveLoss):
    """SwAV (Caron et al. 2020, Sec. 3.1, Eq. 3): for every global view ``i`` the codes
    ``q_i = Sinkhorn(scores_i)`` (on detached scores, equal partition over ``prototypes`` rows),
    predicted from every other view ``v`` by ``softmax(scores_v / temperature)``; the mean over
    the pairs. With two views it is exactly :func:`toolkit.losses.functional.swav`. Multi-crop's
    local views predict, never give codes. The prototypes are trained with the encoder,
    normalised after every step and frozen for ``freeze_prototypes_steps`` steps. With
    ``queue_size`` > 0 the codes are computed over the batch and the last ``queue_size`` global
    embeddings (from step ``queue_start_step``), for small batches (the paper's queue of 3840
    from epoch 15)."""

    two_branches = True

    def __init__(
        self,
        prototypes: int = 3000,
        temperature: float = 0.1,
        epsilon: float = 0.05,
        iterations: int = 3,
        freeze_prototypes_steps: int = 313,
        queue_size: int = 0,
        queue_start_step: int = 0,
    ) -> None:
        super().__init__()
        self.count = checks.integer("prototypes", prototypes, 2)
        self.temperature = checks.positive("temperature", temperature)
        self.epsilon = checks.positive("epsilon", epsilon)
        self.iterations = checks.integer("iterations", iterations, 1)
        for name, value in (
            ("freeze_prototypes_steps", freeze_prototypes_steps),
            ("queue_size", queue_size),
            ("queue_start_step", queue_start_step),
        ):
            checks.integer(name, value, 0)
        self.freeze_prototypes_steps = freeze_prototypes_steps
        self.queue_size = queue_size
        self.queue_start_step = queue_start_step
        self.prototypes: Prototypes | None = None
        self.queue: MoCoQueue | None = None

    def attach(self, dim: int, length: RunLength) -> None:
        self.prototypes = Prototypes(dim, self.count, self.freeze_prototypes_steps)
        if self.queue_size:
            self.queue = MoCoQueue(self.queue_size, dim)

    def _queued_scores(self, step: int) -> Tensor | None:
        """The queue's rows scored against the prototypes, once a step (None while it is off)."""
        if self.queue is None or step < self.queue_start_step or self.prototypes is None:
            return None
        with torch.no_grad():
            return _wide(self.prototypes(self.queue.rows()))

    def _codes(self, scores: Tensor, step: int, queued: Tensor | None = None) -> Tensor:
        """Sinkhorn codes of one view's detached scores (with the queue's scored rows where it is
        on: ``queued``, or scored here when not given)."""
        with torch.no_grad():
            s = _wide(scores.detach())
            queued = self._queued_scores(step) if queued is None else queued
            if queued is not None:
                s = torch.cat([queued, s])
            codes = F.sinkhorn_knopp(s, epsilon=self.epsilon, iterations=self.iterations)
            return codes[-scores.shape[0] :]

    def forward(self, batch: ContrastiveBatch) -> LossOutput:
        if self.prototypes is None:
            raise RuntimeError("swav: attach(dim) builds the prototypes before the first step")
        z = nnf.normalize(_wide(batch_views(batch, "swav")), dim=-1)
        n, v = z.shape[:2]
        with torch.autocast(z.device.type, enabled=False):  # scores in float32 at least, as every similarity
            scores = self.prototypes(z.flatten(0, 1)).view(n, v, -1)
        log_p = torch.log_softmax(scores / self.temperature, dim=-1)
        total, pairs = scores.new_zeros(()), 0
        queued = self._queued_scores(batch.step)  # the same rows for every global view
        for i in range(batch.num_global):
            q = self._codes(scores[:, i], batch.step, queued)
            for j in range(v):
                if j != i:
                    total = total - (q * log_p[:, j]).sum(-1).mean()
                    pairs += 1
        return LossOutput(total / pairs)

    @torch.no_grad()
    def after_step(self, batch: ContrastiveBatch) -> None:
        if self.prototypes is not None:
            self.prototypes.normalize_()
        if self.queue is not None and batch.views is not None:
            self.queue.enqueue(nnf.normalize(batch.views[:, 0].float(), dim=-1))
