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

import torch
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
    labels:         ``[N]`` class labels where the loss uses them as positives (SupCon).
    predictions:    ``[N, V, d']`` the objective's predictor on ``views`` (BYOL, SimSiam,
                    MoCo v3, NNCLR), set by the objective before the loss.
    global_views:   how many of the V views are global crops (the first ones; the rest are
                    multi-crop's local crops, which the target network never sees); ``None``:
                    all of them.
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
    labels: Tensor | None = None
    predictions: Tensor | None = None
    global_views: int | None = None
    step: int = 0

    @property
    def num_global(self) -> int:
        """The number of global views (all of them unless multi-crop added local ones)."""
        assert self.views is not None
        return self.views.shape[1] if self.global_views is None else self.global_views


@dataclass
class RunLength:
    """How long the run is, for schedules that follow training (EMA momentum, DINO's teacher
    temperature): ``total()`` steps (a callable: ``budget.minutes`` fixes it after a
    calibration) and ``steps_per_epoch``."""

    total: Callable[[], int] = lambda: 1
    steps_per_epoch: int = 1


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
    # the parts of the objective the loss reads (validated against the recipe): "predictor",
    # "target" (a target network, or SimSiam's stopped gradient)
    parts: ClassVar[tuple[str, ...]] = ()
    # True: the loss compares the two branches of each positive pair (views[:, 0] with
    # views[:, 1]: two crops of an image or an observation, a sentence and its neighbour) and
    # never reads a domain's score matrix; the objective then asks the domain for "pairs"
    two_branches: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.selector: SelectorFn | None = None

    def attach(self, dim: int, length: RunLength) -> None:
        """Build the loss's own state for embeddings of size ``dim`` (SwAV's prototypes, DINO's
        centre) and keep the run's length for its schedules. Default: nothing to build."""

    @torch.no_grad()
    def after_step(self, batch: ContrastiveBatch) -> None:
        """Update the loss's own state after the optimizer step (normalise prototypes, move the
        centre, enqueue). Default: nothing."""

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
