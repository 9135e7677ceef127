"""The tabular domain: SCARF corruption views, an MLP encoder, a linear probe.

Recipe sections it validates (unknown keys and bad values are reported as ``data.<key>`` etc.):

    data:        {dataset: breast_cancer | wine | digits | csv, path, target, test_fraction,
                  split_seed, corruption_rate, clean_first_view}
    encoder:     {hidden, depth, head_hidden, head_depth, out_dim, batch_norm, dropout}
    evaluation:  {probe_c, max_iter, baselines}

Metrics: ``linear_top1`` (%, frozen features of the trained encoder),
``linear_top1_random_init`` (%, the same architecture at its initial weights, the seed's),
``linear_top1_raw_features`` (%, the standardised input columns); with ``evaluation.geometry``
the toolkit's geometry of the projection on the held-out rows: ``alignment`` (two SCARF views
per row, Wang & Isola Eq. 4, alpha=2), ``uniformity`` (the loss value log E e^{-2||z-z'||^2},
lower = more uniform) and ``tolerance`` (mean same-class z.z', Wang & Liu Eq. 11). With
``budget.monitor_every`` the trained encoder's probe is also logged during training as
``online_linear_top1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, PositiveFloat, model_validator
from torch import Tensor

from domains.base import DataBundle, Domain, Encoder, Evaluation, Section
from toolkit.evaluation import metrics as geometry
from toolkit.evaluation.probes import C_GRID, linear_probe
from toolkit.training.batches import TensorBatches

from .corruption import scarf_views
from .datasets import TabularSplits, load_bundled, load_csv, split_and_standardise
from .encoder import MLPEncoder

__all__ = ["TabularData", "TabularEncoder", "TabularEvaluation", "TabularDomain"]

RECIPES = Path(__file__).resolve().parent / "recipes"
_ADVICE = "raise evaluation.max_iter or lower evaluation.probe_c"


class TabularData(Section):
    """Which table, how it is split, and how views are corrupted (SCARF Sec. 2)."""

    dataset: Literal["breast_cancer", "wine", "digits", "csv"] = "breast_cancer"
    path: str | None = Field(None, description="CSV file (dataset: csv), relative to the working directory")
    target: str | None = Field(None, description="label column of the CSV (dataset: csv)")
    test_fraction: float = Field(0.3, gt=0, lt=1, description="held-out rows for the probe")
    split_seed: int = Field(0, ge=0, description="fixes the stratified train/test split")
    corruption_rate: float = Field(0.6, ge=0, le=1, description="fraction c of features replaced per view")
    clean_first_view: bool = Field(False, description="SCARF's pairing: view 0 is the clean row")

    @model_validator(mode="after")
    def _csv_fields(self) -> TabularData:
        if self.dataset == "csv" and (not self.path or not self.target):
            raise ValueError("dataset 'csv' needs data.path (the file) and data.target (the label column)")
        if self.dataset != "csv" and (self.path or self.target):
            raise ValueError(
                f"data.path and data.target are for dataset 'csv'; dataset "
                f"{self.dataset!r} is bundled with scikit-learn"
            )
        return self


class TabularEncoder(Section):
    """MLP backbone + projection head (defaults: SCARF's 4 x 256 encoder, 2 x 256 head)."""

    hidden: int = Field(256, ge=1)
    depth: int = Field(4, ge=1, description="backbone Linear+ReLU layers")
    head_hidden: int = Field(256, ge=1)
    head_depth: int = Field(2, ge=1, description="projection head Linear layers")
    out_dim: int = Field(128, ge=1)
    batch_norm: bool = False
    dropout: float = Field(0.0, ge=0, lt=1)


class TabularEvaluation(Section):
    """The linear probe (``toolkit.evaluation.probes``: logistic regression on standardised frozen features)."""

    probe_c: float = Field(1.0, gt=0, description="inverse L2 strength of the logistic regression")
    max_iter: int = Field(2000, ge=1)
    standardize: bool = Field(True, description="standardise the features with the training rows' mean / std")
    select_c: bool = Field(False, description="choose probe_c from c_grid on a held-out tenth of the training rows")
    c_grid: list[PositiveFloat] = Field(default_factory=lambda: list(C_GRID), min_length=1)
    baselines: bool = Field(True, description="also probe a random-init encoder and the raw features")
    geometry: bool = Field(True, description="alignment, uniformity, tolerance on the held-out rows")


class TabularDomain(Domain):
    """Tables of numeric features, SCARF views, MLP encoder, linear probe."""

    name = "tabular"
    description = (
        "numeric tables (scikit-learn breast_cancer / wine / digits, or a CSV): "
        "SCARF feature-corruption views, MLP encoder, linear probe"
    )
    DataConfig = TabularData
    EncoderConfig = TabularEncoder
    EvaluationConfig = TabularEvaluation
    recipe_dirs = (str(RECIPES),)

    @classmethod
    def record_metrics(cls, recipe: Any) -> dict[str, tuple[str, ...]]:
        """What a run is for, beside its baselines from the same run: ``ctk run`` ends with them."""
        baselines = ("linear_top1_random_init", "linear_top1_raw_features") if recipe.evaluation.baselines else ()
        return {"linear_top1": baselines}

    def __init__(self, recipe: Any) -> None:
        super().__init__(recipe)
        self._splits: dict[str, TabularSplits] = {}
        self._pool: Tensor | None = None
        self._data_cfg: TabularData | None = None
        self._baselines: dict[str, float] | None = None

    # -- data ----------------------------------------------------------------------------
    def splits(self, data: TabularData) -> TabularSplits:
        """The standardised train/test split of ``data`` (loaded once per configuration)."""
        key = data.model_dump_json()
        if key not in self._splits:
            if data.dataset == "csv":
                x, y, names = load_csv(str(data.path), str(data.target))
            else:
                x, y, names = load_bundled(data.dataset)
            self._splits[key] = split_and_standardise(
                x, y, names, test_fraction=data.test_fraction, split_seed=data.split_seed
            )
        return self._splits[key]

    def build_data(self, recipe: Any) -> DataBundle:
        s = self.splits(recipe.data)
        n, batch_size = len(s.train_x), recipe.budget.batch_size
        if batch_size > n:
            raise ValueError(
                f"budget.batch_size={batch_size} exceeds the {n} training rows of "
                f"data.dataset={recipe.data.dataset!r}; expected at most {n}"
            )
        self._pool, self._data_cfg, self._baselines = s.train_x, recipe.data, None
        return DataBundle(TensorBatches({"x": s.train_x}, batch_size, seed=recipe.seed), num_instances=n, eval=s)

    def make_views(self, batch: Mapping[str, Any], num_views: int, generator: torch.Generator | None = None) -> Tensor:
        """``[N, V, M]`` SCARF views of ``batch["x"]``; donors come from the training table."""
        if self._pool is None or self._data_cfg is None:
            raise ValueError("make_views needs the training table: call build_data(recipe) first")
        x = batch["x"]
        if self._pool.device != x.device:
            self._pool = self._pool.to(x.device)
        return scarf_views(
            x,
            self._pool,
            num_views,
            self._data_cfg.corruption_rate,
            clean_first_view=self._data_cfg.clean_first_view,
            generator=generator,
        )

    # -- encoder -------------------------------------------------------------------------
    def build_encoder(self, recipe: Any) -> Encoder:
        e = recipe.encoder
        return MLPEncoder(
            self.splits(recipe.data).num_features,
            hidden=e.hidden,
            depth=e.depth,
            head_hidden=e.head_hidden,
            head_depth=e.head_depth,
            out_dim=e.out_dim,
            batch_norm=e.batch_norm,
            dropout=e.dropout,
        )

    # -- evaluation ----------------------------------------------------------------------
    @staticmethod
    @torch.no_grad()
    def _features(encoder: Encoder, x: Tensor, batch_size: int = 4096) -> Tensor:
        device = next(encoder.parameters()).device
        return torch.cat(
            [encoder.features(x[i : i + batch_size].to(device)).float().cpu() for i in range(0, len(x), batch_size)]
        )

    def _probe(self, encoder: Encoder | None, s: TabularSplits, recipe: Any) -> float:
        tr, te = (
            (s.train_x, s.test_x)
            if encoder is None
            else (self._features(encoder, s.train_x), self._features(encoder, s.test_x))
        )
        ev = recipe.evaluation
        return linear_probe(
            tr,
            s.train_y,
            te,
            s.test_y,
            c=ev.probe_c,
            max_iter=ev.max_iter,
            standardize=ev.standardize,
            select=ev.select_c,
            c_grid=ev.c_grid,
            seed=recipe.seed,
            warn_convergence=_ADVICE,
        )["top1"]

    def random_init_encoder(self, recipe: Any) -> Encoder:
        """The same architecture at the weights the shared loop starts from: the loop seeds
        torch with ``recipe.seed``, builds the data (which draws nothing from torch's RNG here)
        and then the encoder. Does not disturb the caller's RNG state."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(recipe.seed)
            encoder = self.build_encoder(recipe)
        return encoder.eval()

    def evaluate(self, encoder: Encoder, data: DataBundle, recipe: Any) -> Evaluation:
        s: TabularSplits = data.eval
        was_training = encoder.training
        encoder.eval()
        metrics = {"linear_top1": self._probe(encoder, s, recipe)}
        if recipe.evaluation.geometry:
            metrics.update(self._geometry(encoder, s, recipe))
        encoder.train(was_training)
        if recipe.evaluation.baselines:
            if self._baselines is None:  # fixed for a run: computed once
                self._baselines = {
                    "linear_top1_random_init": self._probe(self.random_init_encoder(recipe), s, recipe),
                    "linear_top1_raw_features": self._probe(None, s, recipe),
                }
            metrics.update(self._baselines)
        return Evaluation(metrics)

    @torch.no_grad()
    def _geometry(self, encoder: Encoder, s: TabularSplits, recipe: Any) -> dict[str, float]:
        """Geometry of the normalised projection on the held-out rows; the two views are
        drawn with a generator seeded by ``recipe.seed`` (the same views at every evaluation)."""
        device = next(encoder.parameters()).device
        x, pool = s.test_x.to(device), s.train_x.to(device)
        gen = torch.Generator(device=device).manual_seed(recipe.seed + 29)
        views = scarf_views(
            x, pool, 2, recipe.data.corruption_rate, clean_first_view=recipe.data.clean_first_view, generator=gen
        )
        z = encoder(views.flatten(0, 1)).view(len(x), 2, -1).float().cpu()
        clean = encoder(x).float().cpu()
        return {
            "alignment": geometry.alignment(z[:, 0], z[:, 1]),
            "uniformity": geometry.uniformity(clean),
            "tolerance": geometry.tolerance(clean, s.test_y),
        }

    def monitor(self, encoder: Encoder, data: DataBundle) -> dict[str, float]:
        """Online probe during training (logged as ``online_linear_top1``), default probe
        settings; the loop calls it every ``budget.monitor_every`` steps."""
        s: TabularSplits = data.eval
        return {
            "linear_top1": linear_probe(
                self._features(encoder, s.train_x),
                s.train_y,
                self._features(encoder, s.test_x),
                s.test_y,
                max_iter=2000,
                warn_convergence=_ADVICE,
            )["top1"]
        }
