"""The toy domain's recipe sections: ``data``, ``encoder``, ``evaluation``.

``data.experiment`` selects the experiment; each experiment reads its own sub-block, whose
defaults are the paper's constants::

    data:
      experiment: lmcl_clusters          # ring_mi | cpcl_mixture | lmcl_clusters
      dataset: nested_moons              # lmcl only: three_bars | nested_moons | sector_blobs
      lmcl_clusters: {per_class: 200, view_std: 0.1}
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveFloat, model_validator

from domains.base import Section
from toolkit.evaluation.probes import C_GRID

__all__ = [
    "RingMIData",
    "MixtureData",
    "ClusterData",
    "ToyData",
    "ToyEncoderConfig",
    "RingMIEvaluation",
    "ToyEvaluation",
    "DATASETS",
]

Matrix2 = tuple[tuple[float, float], tuple[float, float]]

# experiment -> the datasets it accepts (the first is the default)
DATASETS: dict[str, tuple[str, ...]] = {
    "ring_mi": ("correlated_gaussians",),
    "cpcl_mixture": ("gaussian_mixture",),
    "lmcl_clusters": ("three_bars", "nested_moons", "sector_blobs"),
}


class RingMIData(Section):
    """Ring App. B: ``(X, Y) = z + eps``, ``num_points`` draws (the memory bank)."""

    num_points: int = Field(2000, ge=10)
    sigma_z: Matrix2 = ((1.0, -0.5), (-0.5, 1.0))
    sigma_eps: Matrix2 = ((1.0, 0.9), (0.9, 1.0))


class MixtureData(Section):
    """CPCL Sec. 5: ``components`` Gaussians ``N(mu_i, component_variance I)`` with means equally
    spaced on a circle of ``radius``; ``per_component`` training points each (and
    ``test_per_component`` fresh ones for the probe's test split); Gaussian augmentation of
    variance ``augment_variance``.

    ``views``: ``pool`` (default, the paper's Sec. 5 form) samples each view from the fixed pool
    of ``pool_augmentations`` (2 in Sec. 5, 1600 pool points in all) augmentations per point with
    the row-normalised probabilities ``A[x_bar, :]``; ``fresh`` draws new noise
    ``x_bar + N(0, s_a I)`` at every step (Algorithm 1 with an unbounded augmentation set).

    ``classes``: label each point by its component index modulo ``classes`` (not in the
    paper); ``null`` (default, the paper) labels by component. 8 components with 2 classes
    alternate the labels around the circle: no line separates them, so a linear probe on the
    raw points is far from the Bayes error (the ``cpcl-gaussian-mixture-hard`` table)."""

    components: int = Field(4, ge=2)
    classes: int | None = Field(None, ge=2)
    radius: float = Field(2.0, ge=0)
    component_variance: float = Field(1.0, gt=0)
    per_component: int = Field(200, ge=2)
    test_per_component: int = Field(200, ge=1)
    augment_variance: float = Field(4.0, ge=0)
    pool_augmentations: int = Field(2, ge=1)
    views: Literal["fresh", "pool"] = "pool"


class ClusterData(Section):
    """LMCL Sec. 5.1: ``per_class`` points per cluster of ``data.dataset``; a view adds
    ``N(0, view_std^2 I)`` noise. ``params`` override the generator's shape parameters
    (``docs/toy-datasets.md``)."""

    per_class: int = Field(200, ge=2)
    view_std: float = Field(0.1, ge=0)
    params: dict[str, int | float] = Field(default_factory=dict)  # checked against the generator (ToyDomain.check)


class ToyData(Section):
    """``experiment`` and its sub-block. ``seed``: the data set's seed; ``null`` uses the recipe's
    seed, so every seeded trial redraws its data (the papers' random trials)."""

    experiment: Literal["ring_mi", "cpcl_mixture", "lmcl_clusters"]
    dataset: str | None = None
    seed: int | None = Field(None, ge=0)
    ring_mi: RingMIData = Field(default_factory=RingMIData)
    cpcl_mixture: MixtureData = Field(default_factory=MixtureData)
    lmcl_clusters: ClusterData = Field(default_factory=ClusterData)

    @model_validator(mode="before")
    @classmethod
    def _default_dataset(cls, data: Any) -> Any:
        experiment = data.get("experiment") if isinstance(data, dict) else None
        if isinstance(experiment, str) and data.get("dataset") is None and experiment in DATASETS:
            data = {**data, "dataset": DATASETS[data["experiment"]][0]}
        return data

    @model_validator(mode="after")
    def _known_dataset(self) -> ToyData:
        allowed = DATASETS[self.experiment]
        if self.dataset not in allowed:
            raise ValueError(
                f"dataset {self.dataset!r} does not belong to experiment "
                f"{self.experiment!r}; expected one of: {', '.join(allowed)}"
            )
        return self


class ToyEncoderConfig(Section):
    """A linear map or MLP (``depth`` linear layers of width ``hidden``) to ``embed_dim``,
    L2-normalised when ``normalize``. For ``ring_mi`` it is the critic's pair of MLPs
    (Ring App. B: depth 5, hidden 10; ``normalize`` must then be false: the critic is a raw
    dot product)."""

    depth: int = Field(3, ge=1)
    hidden: int = Field(64, ge=1)
    embed_dim: int = Field(16, ge=1)
    bias: bool = True
    normalize: bool = True
    init: Literal["default", "identity", "zero"] = "default"

    @model_validator(mode="after")
    def _zero_init(self) -> ToyEncoderConfig:
        if self.init == "zero" and self.normalize:
            raise ValueError(
                "init 'zero' with normalize true is degenerate: P x = 0 has no "
                "direction and no gradient (docs/methods.md, section LMCL "
                "Table 1); use 'identity'"
            )
        return self


class RingMIEvaluation(Section):
    """The estimators of Ring App. B: ``critic`` ``optimal`` (exact ``log p(y|x)/p(y)``) or
    ``mlp`` (trained with the recipe's optimizer/budget); ``num_negatives`` sampled negatives
    per anchor, or ``null`` for all candidates (deterministic); CNCE at each ``percentiles``
    ``w_l``; ``cnce_trained``: each ``w_l``'s critic trained on CNCE at that ``w_l``."""

    critic: Literal["optimal", "mlp"] = "optimal"
    num_negatives: int | None = Field(100, ge=1)
    cnce_trained: bool = Field(
        False,
        description=(
            "mlp critic: for each w_l train a fresh critic on the CNCE objective at that w_l (negatives "
            "from the top of the 2000-point bank) and report its CNCE estimate; NCE keeps the NCE-trained "
            "critic"
        ),
    )
    percentiles: list[float] = Field(default_factory=lambda: [10.0, 25.0, 50.0, 75.0, 90.0, 95.0])

    @model_validator(mode="after")
    def _percentiles(self) -> RingMIEvaluation:
        bad = [w for w in self.percentiles if not 0.0 <= w < 100.0]
        if bad or not self.percentiles:
            raise ValueError(f"percentiles must be a non-empty list of w_l in [0, 100), got {self.percentiles!r}")
        if self.cnce_trained and self.critic != "mlp":
            raise ValueError("cnce_trained needs critic 'mlp' (the optimal critic is not trained)")
        return self


class ToyEvaluation(Section):
    """Probe settings. ``protocol``: ``auto`` (cpcl_mixture -> ``linear_probe``, lmcl_clusters
    -> ``kmeans``), or either explicitly. ``probe_c``: inverse L2 strength of the logistic
    regression (``toolkit.evaluation.probes``), or chosen from ``probe_c_grid`` with ``probe_select_c``. ``histogram``: log the pairwise-distance histogram with the LMCL margin ``[d_plus, d_minus]``."""

    protocol: Literal["auto", "linear_probe", "kmeans"] = "auto"
    probe_c: float = Field(1.0, gt=0)
    probe_max_iter: int = Field(2000, ge=10)
    probe_standardize: bool = Field(True, description="standardise the features with the training points' mean / std")
    probe_select_c: bool = Field(
        False, description="choose probe_c from probe_c_grid on a held-out tenth of the training points"
    )
    probe_c_grid: list[PositiveFloat] = Field(default_factory=lambda: list(C_GRID), min_length=1)
    augmentation_feature: bool = Field(True, description="cpcl: also probe the AF baseline")
    histogram: bool = True
    d_plus: float = Field(0.1, ge=0, le=1)
    d_minus: float = Field(0.5, ge=0, le=1)
    ring_mi: RingMIEvaluation = Field(default_factory=RingMIEvaluation)
