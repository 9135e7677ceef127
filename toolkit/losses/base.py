"""The face every loss module and regularizer shares.

A step of any domain ends in a :class:`ContrastiveBatch`: the embeddings (and, where the
domain scores pairs itself, a score matrix with its positive mask). Loss modules and
regularizers turn it into a :class:`LossOutput`: the scalar to minimise plus the records it
computed anyway (mean positive / negative similarity, fraction of negatives kept, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from torch import Tensor, nn

from toolkit.registry import Registry

# A selector maps candidate-negative similarities ``[N, M]`` and the training step to a
# boolean keep-mask of the same shape (see ``toolkit.samplers``).
SelectorFn = Callable[[Tensor, int], Tensor]  # a keep-mask from (similarities, step)


@dataclass
class ContrastiveBatch:
    """What one training step hands to the objective.

    views:          ``[N, V, d]`` embeddings of V augmented views of N instances (online
                    encoder, gradients flow), L2-normalised by the head.
    keys:           ``[N, V, d]`` momentum-encoder embeddings of the same views (no grad).
    negatives:      ``[M, d]`` external negatives: MoCo queue or memory-bank rows (no grad).
    natural:        ``[N, d]`` embedding of the un-augmented input (CPCL's projection term).
    scores:         ``[N, C]`` similarities computed by the domain itself (quick-thought
                    f(s).g(c), CURL's bilinear q W k); used with ``positive_mask``.
    positive_mask:  ``[N, C]`` bool, which candidates are positives of each anchor.
    valid_mask:     ``[N, C]`` bool, which candidates take part at all (False for the anchor
                    itself); ``None`` means all.
    indices:        ``[N]`` dataset indices (memory bank slots).
    step:           global optimisation step (drives selector schedules).
    """

    views: Tensor | None = None
    keys: Tensor | None = None
    negatives: Tensor | None = None
    natural: Tensor | None = None
    scores: Tensor | None = None
    positive_mask: Tensor | None = None
    valid_mask: Tensor | None = None
    indices: Tensor | None = None
    step: int = 0


@dataclass
class LossOutput:
    """The scalar loss and the scalars computed on the way (detached tensors or floats)."""

    loss: Tensor
    records: dict[str, Tensor | float] = field(default_factory=dict)


class ContrastiveLoss(nn.Module):
    """Base of the registered loss modules.

    ``needs`` names the :class:`ContrastiveBatch` fields the loss reads, so that a recipe that
    pairs, say, ``moco_infonce`` with in-batch negatives is refused before anything runs.
    ``accepts_selector`` says whether a negative selector (hard / ring) may be attached.
    """

    needs: ClassVar[tuple[str, ...]] = ("views",)
    accepts_selector: ClassVar[bool] = False
    min_views: ClassVar[int] = 2

    def __init__(self) -> None:
        super().__init__()
        self.selector: SelectorFn | None = None

    def attach_selector(self, selector: SelectorFn | None) -> None:
        if selector is not None and not self.accepts_selector:
            raise ValueError(
                f"loss {type(self).__name__} does not accept a negative selector; "
                "use a loss of the InfoNCE family (nt_xent, moco_infonce, "
                "wl_contrastive, ...) or selector: all"
            )
        self.selector = selector

    def forward(self, batch: ContrastiveBatch) -> LossOutput:  # pragma: no cover - abstract
        raise NotImplementedError


class Regularizer(nn.Module):
    """Base of the registered regularizers (added with a weight by the objective). ``needs``
    names the :class:`ContrastiveBatch` fields it reads, as a loss's does."""

    needs: ClassVar[tuple[str, ...]] = ("views",)

    def forward(self, batch: ContrastiveBatch) -> LossOutput:  # pragma: no cover - abstract
        raise NotImplementedError


def require(batch: ContrastiveBatch, owner: str, *names: str) -> None:
    """Raise a ValueError naming the missing fields of ``batch`` that ``owner`` needs."""
    missing = [n for n in names if getattr(batch, n) is None]
    if missing:
        raise ValueError(
            f"{owner} needs {', '.join(missing)} in the batch (got None); check the recipe's objective.negatives source"
        )


# The loss registry: the modules of :mod:`toolkit.losses.modules` register themselves here, one
# module per family; importing :mod:`toolkit.losses` imports them all, so ``LOSSES`` is complete.
LOSSES: Registry[type[ContrastiveLoss]] = Registry("loss")
