"""The face a domain adapter implements (see ``docs/adding-a-domain.md``).

A domain knows its data, its encoder and its evaluation; the toolkit knows the objective, the
negative sources, the loop and the tracking. A representation-learning domain implements
``build_data``, ``build_encoder``, ``make_views`` and ``evaluate`` and shares the toolkit's
pretraining loop; a domain with a loop of its own (RL) sets ``owns_loop = True`` and
implements ``run``.

Each domain validates its own recipe sections (``data``, ``encoder``, ``evaluation``) with the
pydantic models it names below; errors then carry the YAML path of the bad key like every
other recipe error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping

import torch
from torch import Tensor, nn

from toolkit.losses.base import ContrastiveBatch
from toolkit.recipe import Section

__all__ = ["Section", "EmptySection", "DataBundle", "Evaluation", "Encoder", "Domain"]


class EmptySection(Section):
    """A section the domain does not use."""


@dataclass
class DataBundle:
    """What ``build_data`` returns.

    train:          an iterable of batches, re-iterated once per epoch. A batch is a dict with
                    at least ``"x"`` (inputs, first dim N) and ``"index"`` (``[N]`` long dataset
                    indices, for memory banks); domains may add keys (``"y"``, ``"book"``...).
    num_instances:  size of the training set (memory-bank slots).
    eval:           anything the domain's ``evaluate`` needs (labelled splits, tasks, ...).
    sampler:        the training sampler if it has ``set_epoch`` (distributed runs).
    """

    train: Iterable[Mapping[str, Any]]
    num_instances: int
    eval: Any = None
    sampler: Any = None


@dataclass
class Evaluation:
    """What ``evaluate`` returns: named scalar metrics and matplotlib figures to log as PNG."""

    metrics: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)


class Encoder(nn.Module):
    """Backbone + projection head. ``forward`` gives the L2-normalised projection (what the
    loss sees); ``features`` gives the backbone output (what evaluation uses)."""

    def features(self, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class Domain:
    """Base of domain adapters. Subclasses set ``name`` and ``description`` and override the
    builders; the three ``*Config`` models validate the recipe's domain-owned sections."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    DataConfig: ClassVar[type[Section]] = EmptySection
    EncoderConfig: ClassVar[type[Section]] = EmptySection
    EvaluationConfig: ClassVar[type[Section]] = EmptySection
    ExtraSections: ClassVar[dict[str, type[Section]]] = {}
    owns_loop: ClassVar[bool] = False
    recipe_dirs: ClassVar[tuple[str, ...]] = ()  # folders of recipes/tables a plugin ships

    @classmethod
    def sections(cls) -> dict[str, type[Section]]:
        """The recipe sections this domain validates, by key."""
        return {"data": cls.DataConfig, "encoder": cls.EncoderConfig,
                "evaluation": cls.EvaluationConfig, **cls.ExtraSections}

    # -- representation-learning domains -------------------------------------------------
    def build_data(self, recipe: Any) -> DataBundle:  # pragma: no cover - abstract
        raise NotImplementedError(f"domain {self.name!r} does not build training data")

    def build_encoder(self, recipe: Any) -> Encoder:  # pragma: no cover - abstract
        raise NotImplementedError(f"domain {self.name!r} does not build an encoder")

    def make_views(self, batch: Mapping[str, Any], num_views: int,
                   generator: torch.Generator | None = None) -> Tensor:
        """``[N, V, *input]`` augmented views of ``batch["x"]`` (on its device)."""
        raise NotImplementedError(f"domain {self.name!r} does not make views")  # pragma: no cover

    def natural_view(self, batch: Mapping[str, Any]) -> Tensor:
        """The un-augmented input (CPCL's projection term); by default ``batch["x"]``."""
        return batch["x"]

    def contrastive_batch(self, batch: Mapping[str, Any], encoder: nn.Module,
                          key_encoder: nn.Module | None, needs: set[str], num_views: int,
                          step: int, generator: torch.Generator | None = None) -> ContrastiveBatch:
        """Encode a batch for the objective. The default fits view-based domains; a domain
        that scores candidates itself (quick-thought) overrides it and fills ``scores`` and
        ``positive_mask``."""
        views = self.make_views(batch, num_views, generator)
        n, v = views.shape[:2]
        flat = views.flatten(0, 1)
        z = encoder(flat).view(n, v, -1)
        keys = None
        if key_encoder is not None:
            with torch.no_grad():
                keys = key_encoder(flat).view(n, v, -1)
        natural = encoder(self.natural_view(batch)) if "natural" in needs else None
        return ContrastiveBatch(views=z, keys=keys, natural=natural,
                                indices=batch.get("index"), step=step)

    def evaluate(self, encoder: Encoder, data: DataBundle, recipe: Any) -> Evaluation:
        return Evaluation()  # pragma: no cover - overridden by every real domain

    # -- domains with their own loop (RL) ------------------------------------------------
    def run(self, recipe: Any, tracker: Any, *, resume_from: str | None = None,
            device: torch.device | None = None) -> dict[str, float]:  # pragma: no cover
        raise NotImplementedError(f"domain {self.name!r} uses the shared pretraining loop")
