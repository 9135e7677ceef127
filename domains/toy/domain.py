"""``ToyDomain``: the papers' synthetic experiments (``data.experiment``).

* ``cpcl_mixture`` (CPCL Sec. 5): 4-component Gaussian mixture, Gaussian-noise views of
  variance 4, an MLP encoder, linear-probe error of the embedding (+ the augmentation-feature
  and raw-point baselines).
* ``lmcl_clusters`` (LMCL Sec. 5.1): 2-D cluster sets, views ``(x, x + noise)``, the linear map
  ``P x / ||P x||``, k-means accuracy of the embedding (+ k-means on the raw points).
* ``ring_mi`` (Ring App. B): NCE / CNCE estimates of a known mutual information.

The first two train through the toolkit's shared pretraining loop with any core loss (SimCLR =
``nt_xent``, ``spectral``, ``cpcl_a``, ``cpcl_full``, CL + DP = ``nt_xent`` + the
``distance_polarization`` regularizer); ``ring_mi`` computes its estimates itself, behind the
same trainer face (:meth:`ToyDomain.trainer` picks one by ``data.experiment``). Both run with
one CPU thread: toy tensors are tiny, so more threads only add synchronisation (on a shared
2-core machine they made a 40 s run take minutes).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from domains.base import DataBundle, Domain, Encoder, Evaluation
from domains.toy import clusters, mixture
from domains.toy.config import ToyData, ToyEncoderConfig, ToyEvaluation
from domains.toy.encoders import ToyEncoder
from domains.toy.evaluation import embed, kmeans_accuracy, linear_probe_error, sector_accuracy_ceiling
from toolkit import recipe as rc
from toolkit.training.pretrainer import Pretrainer
from toolkit.training.trainer import RunOptions, Trainer

__all__ = ["ToyDomain"]


class ToyDomain(Domain):
    """Synthetic experiments of Ring (App. B), CPCL (Sec. 5) and LMCL (Sec. 5.1)."""

    name = "toy"
    description = (
        "the papers' synthetic experiments: Ring's MI toy, CPCL's Gaussian mixture, "
        "LMCL's 2-D cluster sets (seconds on a CPU)"
    )
    DataConfig = ToyData
    EncoderConfig = ToyEncoderConfig
    single_process_only = "toy runs take seconds in one process (run seeds in parallel with ctk sweep)"
    auto_fp32 = (
        "the toy problems are tiny and numerically delicate (MI estimates near 0.02): mixed "
        "precision buys no time and costs accuracy"
    )
    EvaluationConfig = ToyEvaluation

    def __init__(self, recipe: rc.Recipe) -> None:
        super().__init__(recipe)
        self._pool: Tensor | None = None
        self._aug_matrix: Tensor | None = None

    @classmethod
    def result_metrics(cls, recipe: Any) -> dict[str, str] | None:
        """cpcl_mixture: probe errors; lmcl_clusters: k-means accuracies; both the DP margin
        occupancy. ring_mi's estimates are named by its grid of w_l: not listed (None)."""
        data, ev = recipe.data, recipe.evaluation
        if data.experiment == "ring_mi":
            return None
        protocol = (
            ev.protocol
            if ev.protocol != "auto"
            else ("linear_probe" if data.experiment == "cpcl_mixture" else "kmeans")
        )
        if protocol == "linear_probe":
            out = {"linear_probe_error": "min", "raw_probe_error": "min", "af_probe_error": "min", "bayes_error": "min"}
        else:
            out = {"kmeans_accuracy": "max", "kmeans_accuracy_euclidean": "max", "kmeans_accuracy_ceiling": "max"}
        out["dp_margin_occupancy"] = ""
        return out

    @classmethod
    def record_metrics(cls, recipe: Any) -> dict[str, tuple[str, ...]]:
        """ring_mi: the contrastive MI estimate beside the true MI; lmcl_clusters: k-means
        accuracy beside its Euclidean twin; cpcl_mixture: the probe error beside the raw
        inputs' and the autoencoder's."""
        if recipe.data.experiment == "ring_mi":
            return {"mi_nce": ("mi_true",)}
        if "linear_probe_error" in (cls.result_metrics(recipe) or {}):
            return {"linear_probe_error": ("raw_probe_error", "af_probe_error")}
        return {"kmeans_accuracy": ("kmeans_accuracy_euclidean",)}

    @classmethod
    def check(cls, raw: Mapping[str, Any], sections: Mapping[str, Any]) -> list[tuple[str, str]]:
        """ring_mi needs neither objective nor budget; the other experiments train an encoder.
        cpcl_mixture: ``views: pool`` needs augmentation noise, the batch fits the training set;
        the linear probe needs cpcl_mixture's test split."""
        data, ev = sections.get("data"), sections.get("evaluation")
        if data is None:
            return []
        problems: list[tuple[str, str]] = []
        if data.experiment != "ring_mi":
            problems += [
                (key, f"required key is missing: data.experiment {data.experiment!r} trains an encoder")
                for key in ("objective", "budget")
                if raw.get(key) is None
            ]
        if data.experiment == "cpcl_mixture":
            m = data.cpcl_mixture
            if m.views == "pool" and m.augment_variance <= 0:
                problems.append(
                    (
                        "data.cpcl_mixture.views",
                        "'pool' draws views from augmented copies and needs augment_variance > 0, got 0",
                    )
                )
            if m.classes is not None and m.classes > m.components:
                problems.append(
                    ("data.cpcl_mixture.classes", f"must be at most components ({m.components}), got {m.classes}")
                )
            points = m.per_component * m.components
            batch = rc.get_path(raw, "budget.batch_size", 256)
            if isinstance(batch, int) and batch > points:
                problems.append(
                    (
                        "budget.batch_size",
                        f"must be at most the {points} training points of "
                        f"data.cpcl_mixture (components x per_component), got {batch}",
                    )
                )
        if data.experiment == "lmcl_clusters":
            problems += _cluster_problems(data, raw)
        if ev is not None and ev.protocol == "linear_probe" and data.experiment != "cpcl_mixture":
            problems.append(
                (
                    "evaluation.protocol",
                    "'linear_probe' needs a test split; only "
                    f"data.experiment 'cpcl_mixture' draws one (got {data.experiment!r})",
                )
            )
        return problems

    def trainer(self, recipe: rc.Recipe, tracker: Any, options: RunOptions | None = None) -> Trainer:
        options = options or RunOptions()
        if options.distributed is not None:
            raise ValueError(self.single_process_only)
        if recipe.data.experiment == "ring_mi":
            return RingMIRun(recipe, tracker, options)
        options.progress = False
        return OneThreadPretrainer(recipe, self, tracker, options)

    # -- data -----------------------------------------------------------------------------
    @staticmethod
    def data_seed(recipe: Any) -> int:
        """``data.seed`` if pinned, else the recipe's seed (each trial redraws its data)."""
        return recipe.data.seed if recipe.data.seed is not None else recipe.seed

    def build_data(self, recipe: Any) -> DataBundle:
        from toolkit.training.batches import TensorBatches

        cfg = recipe.data
        if cfg.experiment == "ring_mi":
            raise ValueError(
                "data.experiment 'ring_mi' has no training data for the pretrainer; "
                "its trainer is RingMIRun (ToyDomain.trainer)"
            )
        gen = torch.Generator().manual_seed(self.data_seed(recipe))
        if cfg.experiment == "cpcl_mixture":
            m = cfg.cpcl_mixture
            shape = dict(components=m.components, radius=m.radius, variance=m.component_variance, classes=m.classes)
            x, y = mixture.sample_mixture(m.per_component, generator=gen, **shape)
            test_x, test_y = mixture.sample_mixture(m.test_per_component, generator=gen, **shape)
            pool = mixture.gaussian_augment(x.repeat(m.pool_augmentations, 1), m.augment_variance, gen)
            self._pool = pool
            self._aug_matrix = (
                mixture.augmentation_matrix(x, pool, m.augment_variance).float() if m.augment_variance > 0 else None
            )
            extra = {"test_x": test_x, "test_y": test_y, "pool": pool}
        else:
            c = cfg.lmcl_clusters
            x, y = clusters.make_cluster_set(cfg.dataset, c.per_class, gen, **c.params)
            extra = {}
        batch = recipe.budget.batch_size if recipe.budget is not None else 128
        if batch > len(x):
            raise ValueError(
                f"budget.batch_size must be at most the {len(x)} training points of data.{cfg.experiment}, got {batch}"
            )
        train = TensorBatches({"x": x, "y": y}, batch, seed=recipe.seed)
        return DataBundle(train=train, num_instances=len(x), sampler=train, eval={"x": x, "y": y, **extra, "cache": {}})

    def make_views(self, batch: Mapping[str, Any], num_views: int, generator: torch.Generator | None = None) -> Tensor:
        """``[N, V, 2]`` views. cpcl_mixture: ``x + N(0, s_a I)`` (``fresh``) or draws from the
        augmentation pool with probabilities ``A[x_bar, :]`` (``pool``); lmcl_clusters: view 0
        is the point itself, the others add ``N(0, view_std^2 I)`` (LMCL Sec. 5.1: "each data
        point and its augmentation" form the positive pair)."""
        x = batch["x"]
        cfg = self._config()
        if cfg.experiment == "cpcl_mixture":
            m = cfg.cpcl_mixture
            if m.views == "pool":
                probs = self._aug_matrix.to(x.device)[batch["index"].to(x.device)]
                idx = torch.multinomial(probs, num_views, replacement=True, generator=generator)
                return self._pool.to(x.device)[idx]
            noise = torch.randn((len(x), num_views, x.shape[-1]), generator=generator, device=x.device, dtype=x.dtype)
            return x[:, None, :] + math.sqrt(m.augment_variance) * noise
        std = cfg.lmcl_clusters.view_std
        noise = torch.randn((len(x), num_views, x.shape[-1]), generator=generator, device=x.device, dtype=x.dtype)
        noise[:, 0] = 0.0
        return x[:, None, :] + std * noise

    def natural_view(self, batch: Mapping[str, Any]) -> Tensor:
        """The un-augmented point (CPCL-Full's projection term)."""
        return batch["x"]

    def _config(self) -> Any:
        return self.recipe.data

    # -- encoder --------------------------------------------------------------------------
    def build_encoder(self, recipe: Any) -> Encoder:
        e = recipe.encoder
        torch.manual_seed(recipe.seed)
        return ToyEncoder(
            in_dim=2,
            embed_dim=e.embed_dim,
            depth=e.depth,
            hidden=e.hidden,
            bias=e.bias,
            normalize=e.normalize,
            init=e.init,
        )

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self, encoder: Encoder, data: DataBundle, recipe: Any) -> Evaluation:
        """cpcl_mixture: ``linear_probe_error`` of the embedding, plus the encoder-independent
        ``raw_probe_error`` (the same probe on the 2-D points) and ``af_probe_error`` (on the
        augmentation feature, Fig. 3b's dashed line). lmcl_clusters: ``kmeans_accuracy`` of the
        embedding and ``kmeans_accuracy_euclidean`` of the raw points (Table 1). Both: the
        ``dp_margin_occupancy`` of the pairwise distances and their histogram (LMCL Fig. 2)."""
        ev, cfg = recipe.evaluation, recipe.data
        store = data.eval
        cache = store["cache"]  # encoder-independent baselines, computed once per run
        protocol = ev.protocol
        if protocol == "auto":
            protocol = "linear_probe" if cfg.experiment == "cpcl_mixture" else "kmeans"
        z = embed(encoder, store["x"])
        metrics: dict[str, float] = {}
        if protocol == "linear_probe":
            probe = dict(
                c=ev.probe_c,
                max_iter=ev.probe_max_iter,
                standardize=ev.probe_standardize,
                select_c=ev.probe_select_c,
                c_grid=ev.probe_c_grid,
                seed=recipe.seed,
            )
            z_test = embed(encoder, store["test_x"])
            metrics["linear_probe_error"] = linear_probe_error(z, store["y"], z_test, store["test_y"], **probe)
            if "raw_probe_error" not in cache:
                cache.update(self._probe_baselines(store, cfg, ev, probe))
        else:
            metrics["kmeans_accuracy"] = kmeans_accuracy(z, store["y"], seed=recipe.seed)
            if "kmeans_accuracy_euclidean" not in cache:
                cache["kmeans_accuracy_euclidean"] = kmeans_accuracy(store["x"], store["y"], seed=recipe.seed)
                ceiling = sector_accuracy_ceiling(store["x"], store["y"])
                if ceiling is not None and encoder.normalize and z.shape[1] == 2:
                    cache["kmeans_accuracy_ceiling"] = ceiling
        metrics.update(cache)
        figures: dict[str, Any] = {}
        if encoder.normalize:
            from toolkit.evaluation.metrics import distance_histogram
            from toolkit.evaluation.plots import distance_histogram_figure

            hist = distance_histogram(z, d_plus=ev.d_plus, d_minus=ev.d_minus)
            metrics["dp_margin_occupancy"] = float(hist["margin_occupancy"])
            if ev.histogram:
                figures["distance_histogram"] = distance_histogram_figure(
                    z,
                    store["y"],
                    d_plus=ev.d_plus,
                    d_minus=ev.d_minus,
                    title=f"toy {cfg.dataset}: pairwise distances of the embedding",
                )
        if ev.histogram and z.shape[1] == 2:
            from domains.toy.figures import embedding_scatter

            figures["embedding"] = embedding_scatter(z, store["y"])
        return Evaluation(metrics=metrics, figures=figures)

    @staticmethod
    def _probe_baselines(store: dict[str, Any], cfg: Any, ev: Any, probe: dict[str, Any]) -> dict[str, float]:
        m = cfg.cpcl_mixture
        out = {
            "raw_probe_error": linear_probe_error(store["x"], store["y"], store["test_x"], store["test_y"], **probe),
            "bayes_error": mixture.bayes_error(
                store["test_x"], store["test_y"], m.components, m.radius, m.component_variance, m.classes
            ),
        }
        var = m.augment_variance
        if ev.augmentation_feature and var > 0:
            af_train = mixture.augmentation_matrix(store["x"], store["pool"], var)
            af_test = mixture.augmentation_matrix(store["test_x"], store["pool"], var)
            out["af_probe_error"] = linear_probe_error(af_train, store["y"], af_test, store["test_y"], **probe)
        return out


def _cluster_problems(data: ToyData, raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``data.lmcl_clusters.params`` against the generator of ``data.dataset`` (names and values,
    tried on a two-point draw), and the batch against the points the set will have."""
    import inspect

    c = data.lmcl_clusters
    where = "data.lmcl_clusters.params"
    accepted = [
        n
        for n in inspect.signature(clusters.CLUSTER_SETS[data.dataset]).parameters
        if n not in ("per_class", "generator")
    ]
    problems = [
        (f"{where}.{k}", f"unknown parameter of {data.dataset}; expected one of: {', '.join(accepted)}")
        for k in c.params
        if k not in accepted
    ]
    if problems:
        return problems
    try:
        _, y = clusters.make_cluster_set(data.dataset, 1, torch.Generator().manual_seed(0), **c.params)
    except (ValueError, TypeError) as exc:
        arg = getattr(exc, "arg", None) or next((k for k in c.params if str(exc).startswith(k + " ")), None)
        return [(f"{where}.{arg}" if arg in c.params else where, str(exc))]
    points = c.per_class * len(y)
    batch = rc.get_path(raw, "budget.batch_size", 256)
    if isinstance(batch, int) and not isinstance(batch, bool) and batch > points:
        problems.append(
            (
                "budget.batch_size",
                f"must be at most the {points} training points of "
                f"data.lmcl_clusters ({len(y)} classes x per_class {c.per_class}), got {batch}",
            )
        )
    return problems


class OneThreadPretrainer(Pretrainer):
    """The toolkit's pretrainer, training and evaluating with one CPU thread."""

    def fit(self) -> None:
        with _one_thread():
            super().fit()

    def evaluate(self) -> dict[str, float]:
        with _one_thread():
            return super().evaluate()


class RingMIRun(Trainer):
    """Ring App. B: the NCE / CNCE estimates of a known mutual information (seconds; nothing
    to checkpoint, a killed run simply runs again)."""

    def __init__(self, recipe: rc.Recipe, tracker: Any, options: RunOptions | None = None) -> None:
        super().__init__(recipe, tracker, options)
        self.metrics: dict[str, float] | None = None

    def fit(self) -> None:
        from domains.toy.ring_experiment import run_ring_mi

        with _one_thread():
            self.metrics = run_ring_mi(self.recipe, self.tracker)

    def evaluate(self) -> dict[str, float]:
        if self.metrics is None:
            raise RuntimeError("RingMIRun.evaluate needs fit() first")
        return dict(self.metrics)

    def state_dict(self) -> dict[str, Any]:
        return {"metrics": self.metrics}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.metrics = state.get("metrics")


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run with one intra-op CPU thread, then restore the setting. Toy tensors are tiny, so
    more threads only add synchronisation; on a shared 2-core machine they made a 40 s run
    take minutes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
