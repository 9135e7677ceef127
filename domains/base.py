"""The face a domain adapter implements (see ``docs/adding-a-domain.md``).

A domain knows its data, its encoder and its evaluation; the toolkit knows the objective, the
negative sources, the trainer and the tracking. A domain is built from its validated recipe and
hands back one trainer::

    recipe = load_recipe(path, overrides, lookup)  # the class, its sections and Domain.check, once
    domain = recipe.domain_class(recipe)           # keeps the recipe; checks nothing again, builds nothing
    trainer = domain.trainer(recipe, tracker, options)
    trainer.fit(); metrics = trainer.evaluate()

A representation-learning domain implements ``build_data``, ``build_encoder``, ``make_views``
and ``evaluate`` and gets the toolkit's :class:`~toolkit.training.pretrainer.Pretrainer`; a domain
with a training loop of its own (RL) returns its own :class:`~toolkit.training.trainer.Trainer`.

Each domain validates its own recipe sections (``data``, ``encoder``, ``evaluation``) with the
pydantic models it names below, and the rules that span sections in :meth:`Domain.check`, which
``load_recipe`` runs together with the schema checks: ``ctk show`` rejects exactly what
``ctk run`` would, and every problem is reported in one go with its YAML path.

A domain's datasets: the offline datasets a domain reads (their catalogue entries and the builders
that place their files) and the ones a user must place by hand (name -> the folder names looked
for under the data root) are one :class:`toolkit.data.Catalogue`, declared as ``CATALOGUE`` by
the module the domain's entry names (``domains.vision`` for ``domains.vision:VisionDomain``; a
plug-in's own module). It is read without loading the domain class, so without torch
(:meth:`domains.installed.DomainSpec.catalogue`); ``domains.installed.catalogue`` joins every
installed domain's, and the commands hand the result to the toolkit (``ctk data``, what a paper
table needs). A domain that reads no offline dataset declares nothing. The toolkit keeps no
catalogue of its own, and a domain writes none of the toolkit's names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from toolkit import recipe as rc
from toolkit.losses.base import ContrastiveBatch
from toolkit.recipe import Section

if TYPE_CHECKING:
    from toolkit.training.trainer import RunOptions, Trainer

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
    sampler:        what orders an epoch, if not ``train`` itself: a ``Batches``, a
                    ``SeededEpochSampler`` or torch's ``DistributedSampler``; the loop calls
                    its ``set_epoch(epoch)`` (``toolkit.training.batches.epoch_orders``).
    """

    train: Iterable[Mapping[str, Any]]
    num_instances: int
    eval: Any = None
    sampler: Any = None


@dataclass
class Evaluation:
    """What ``evaluate`` returns: named scalar metrics and matplotlib figures to log as PNG, and
    the settings the evaluation chose itself (a probe's L2 strength), logged as params: they are
    not results, and comparisons leave them out."""

    metrics: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)


class Encoder(nn.Module):
    """Backbone + projection head. ``forward`` gives the L2-normalised projection (what the
    loss sees); ``features`` gives the backbone output (what evaluation uses)."""

    def features(self, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class Domain:
    """Base of domain adapters. Subclasses set ``name`` and ``description`` and override the
    builders; the three ``*Config`` models validate the recipe's domain-owned sections and
    :meth:`check` the rules between sections, both run once when the recipe is loaded
    (``toolkit.runs.load_recipe``). ``Domain(recipe)`` keeps that validated recipe; it checks
    nothing again and builds nothing (the trainer does)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    # defaults of the common sections that differ for this domain (rl: a constant schedule),
    # filled in where the recipe does not write the key, so the resolved recipe says what runs
    recipe_defaults: ClassVar[dict[str, Any]] = {}
    DataConfig: ClassVar[type[Section]] = EmptySection
    EncoderConfig: ClassVar[type[Section]] = EmptySection
    EvaluationConfig: ClassVar[type[Section]] = EmptySection
    ExtraSections: ClassVar[dict[str, type[Section]]] = {}
    recipe_dirs: ClassVar[tuple[str, ...]] = ()  # folders of recipes/tables a plugin ships
    # None: runs under --nproc / --nnodes > 1; otherwise why not (the CLI refuses before launching)
    single_process_only: ClassVar[str | None] = None
    # the resolved precisions this domain's trainer runs (``precision: auto`` picks among them)
    precisions: ClassVar[tuple[str, ...]] = ("fp32", "bf16", "fp16")
    # set to a reason to make ``precision: auto`` run fp32 on any hardware (a recipe may still
    # ask for bf16 / fp16 explicitly)
    auto_fp32: ClassVar[str | None] = None
    # set to a reason when the training batches change shape from step to step (text pads each
    # batch to its longest sentence): ``compile: auto`` then stays eager and says why, since every
    # new shape would cost a recompile and, with CUDA graphs, a new graph (toolkit.training.speed)
    variable_shapes: ClassVar[str | None] = None

    @classmethod
    def sections(cls) -> dict[str, type[Section]]:
        """The recipe sections this domain validates, by key."""
        return {
            "data": cls.DataConfig,
            "encoder": cls.EncoderConfig,
            "evaluation": cls.EvaluationConfig,
            **cls.ExtraSections,
        }

    def __init__(self, recipe: rc.Recipe) -> None:
        self.recipe = recipe

    @classmethod
    def check(cls, raw: Mapping[str, Any], sections: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Domain-specific problems as ``(yaml path, message)``. ``raw`` is the recipe mapping
        as written (overrides applied, no defaults filled); ``sections`` holds the domain's
        section models that validated. The default asks for what the shared pretrainer needs:
        an objective and a budget."""
        return [(key, "required key is missing") for key in ("objective", "budget") if raw.get(key) is None]

    @classmethod
    def result_metrics(cls, recipe: rc.Recipe) -> dict[str, str] | None:
        """The evaluation metrics a run of ``recipe`` logs at its end, each with the direction
        that is better (``"max"`` / ``"min"``, ``""`` for descriptive figures such as geometry),
        or None when the domain does not say. ``ctk study`` checks the metric names it is given
        against this before anything runs."""
        return None

    @classmethod
    def record_metrics(cls, recipe: rc.Recipe) -> dict[str, tuple[str, ...]]:
        """The metrics of record of a run of ``recipe`` (what the run is for), each with the
        metrics of the same run that are its baselines; ``ctk run`` ends with them, comparisons
        and the UI put them first. A recipe may name others under ``tracking.record``. The
        default declares none."""
        return {}

    def check_data(self, recipe: rc.Recipe) -> list[tuple[str, str]]:
        """What keeps this run from reading its data (or files the recipe names), as ``(yaml
        path, message)``. ``ctk run`` calls it after validation and before anything is written
        to the tracking store, so a run that cannot start leaves no run behind; datasets the
        data provider can fetch are fetched here. The default finds nothing to check."""
        return []

    def trainer(self, recipe: rc.Recipe, tracker: Any, options: RunOptions | None = None) -> Trainer:
        """The trainer of a run; by default the toolkit's pretrainer with this domain's data,
        encoder, views and evaluation."""
        from toolkit.training.pretrainer import Pretrainer

        return Pretrainer(recipe, self, tracker, options)

    # -- the trained encoder as data (toolkit.tracking.encoder_file) ------------------------------
    def encoder_extras(self, encoder: nn.Module) -> dict[str, Any]:
        """Plain data besides the weights that :meth:`rebuild_encoder` needs (default none)."""
        return {}

    def rebuild_encoder(self, extras: Mapping[str, Any]) -> nn.Module:
        """An untrained encoder of this recipe's architecture, to load exported weights into
        (default: :meth:`build_encoder`, which must then need no training data)."""
        return self.build_encoder(self.recipe)

    # -- representation-learning domains -------------------------------------------------
    def build_data(self, recipe: Any) -> DataBundle:  # pragma: no cover - abstract
        raise NotImplementedError(f"domain {self.name!r} does not build training data")

    def build_encoder(self, recipe: Any) -> Encoder:  # pragma: no cover - abstract
        raise NotImplementedError(f"domain {self.name!r} does not build an encoder")

    def make_views(self, batch: Mapping[str, Any], num_views: int, generator: torch.Generator | None = None) -> Tensor:
        """``[N, V, *input]`` augmented views of ``batch["x"]`` (on its device)."""
        raise NotImplementedError(f"domain {self.name!r} does not make views")  # pragma: no cover

    def make_local_views(self, batch: Mapping[str, Any], generator: torch.Generator | None = None) -> Tensor | None:
        """Multi-crop's local views (SwAV, DINO): ``[N, L, *local_input]``, smaller inputs than
        the global views of :meth:`make_views`, drawn from the same ``generator`` after them (so a
        run stays seeded and resumable); None when the domain makes none (the default).
        :meth:`contrastive_batch` encodes them apart (another input size) and appends their
        embeddings after the global views' along the view axis."""
        return None

    def natural_view(self, batch: Mapping[str, Any]) -> Tensor:
        """The un-augmented input (CPCL's projection term); by default ``batch["x"]``."""
        return batch["x"]

    def contrastive_batch(
        self,
        batch: Mapping[str, Any],
        encoder: nn.Module,
        key_encoder: nn.Module | None,
        needs: set[str],
        num_views: int,
        step: int,
        generator: torch.Generator | None = None,
    ) -> ContrastiveBatch:
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
        local = self.make_local_views(batch, generator)  # multi-crop: encoded apart (another size)
        if local is not None:
            z = torch.cat([z, encoder(local.flatten(0, 1)).view(n, local.shape[1], -1)], dim=1)
        natural = encoder(self.natural_view(batch)) if "natural" in needs else None
        labels = None
        if "labels" in needs:
            if batch.get("y") is None:
                raise ValueError(f"the loss uses labels as positives, but domain {self.name!r} gives no labels ('y')")
            labels = batch["y"]
        return ContrastiveBatch(
            views=z,
            keys=keys,
            natural=natural,
            indices=batch.get("index"),
            labels=labels,
            global_views=v if local is not None else None,
            step=step,
        )

    def evaluate(self, encoder: Encoder, data: DataBundle, recipe: Any) -> Evaluation:
        return Evaluation()  # pragma: no cover - overridden by every real domain

    def monitor(self, encoder: Encoder, data: DataBundle) -> dict[str, float]:
        """Cheap online metrics of the encoder during training (``budget.monitor_every``; the
        untrained encoder first, where the time-to-accuracy curve starts), logged as
        ``online_<name>``; called in eval mode without gradients, on the main process. The
        default measures nothing (nothing is logged)."""
        return {}
