"""What every loss module reads from a :class:`~toolkit.losses.base.ContrastiveBatch` and how it
hands back a :class:`~toolkit.losses.base.LossOutput`: the views (checked for shape), a memory
bank with the anchors' slots, the domain's own score matrix with its masks, and the functional
core's stats as records."""

from __future__ import annotations

from torch import Tensor

from toolkit.losses.base import ContrastiveBatch, LossOutput, require


def batch_views(batch: ContrastiveBatch, owner: str, at_least: int = 2) -> Tensor:
    """``batch.views`` ``[N, V, d]`` with ``V >= at_least``, or a ValueError naming ``owner``."""
    require(batch, owner, "views")
    v = batch.views
    if v.dim() != 3 or v.shape[1] < at_least:
        raise ValueError(f"{owner} needs views of shape [N, V>={at_least}, d], got {tuple(v.shape)}")
    return v


def bank_inputs(batch: ContrastiveBatch, owner: str) -> tuple[Tensor, Tensor, Tensor]:
    """Memory-bank losses: ``(views[:, 0], the bank rows in negatives, the anchors' own slots
    indices)``; one view per instance is enough."""
    require(batch, owner, "views", "negatives", "indices")
    return batch_views(batch, owner, at_least=1)[:, 0], batch.negatives, batch.indices


def has_scores(batch: ContrastiveBatch) -> bool:
    """Whether the domain scored the candidates itself (quick-thought, CURL)."""
    return batch.scores is not None


def batch_scores(batch: ContrastiveBatch, owner: str) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(scores, positive_mask, valid_mask)`` of a domain-scored batch."""
    require(batch, owner, "scores", "positive_mask")
    return batch.scores, batch.positive_mask, batch.valid_mask


class Records:
    """Collects the functional core's stats (``stats=records.d``) into a LossOutput's records."""

    def __init__(self) -> None:
        self.d: dict[str, Tensor | float] = {}

    def out(self, loss: Tensor) -> LossOutput:
        return LossOutput(loss, dict(self.d))


def predicted_pairs(batch: ContrastiveBatch, owner: str) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """``((p1, p2), (k1, k2))``: the predictor's output on the first two (global) views and the
    target's embeddings of the same views (the momentum encoder's, or the stopped online ones)."""
    require(batch, owner, "views", "predictions", "keys")
    p, k = batch.predictions, batch.keys
    if p.dim() != 3 or p.shape[1] < 2 or k.dim() != 3 or k.shape[1] < 2:
        raise ValueError(
            f"{owner} needs predictions and keys of shape [N, V>=2, d], got {tuple(p.shape)} and {tuple(k.shape)}"
        )
    return (p[:, 0], p[:, 1]), (k[:, 0], k[:, 1])
