"""The vision domain's evaluation: offline probes on the frozen backbone, baselines, geometry.

Metrics (flat snake_case):

* ``linear_top1`` (``linear_top5`` when there are more than 10 classes): softmax regression on
  backbone features extracted once from the un-augmented training images
  (:func:`toolkit.evaluation.probes.linear_probe` for ``lbfgs``, C chosen as ``linear.c_search``
  says, the probes of every feature set at once; the papers' Adam / SGD schedules in ``probes.py``);
* ``knn_top1``: weighted kNN, k=200, t=0.1 (Wu et al. 2018); ``knn5_top1``: 5-NN vote;
* ``linear_top1_random_init`` / ``linear_top1_raw_pixels`` (``evaluation.baselines``): the
  same probe on a randomly initialised encoder of the same architecture, and on the pixels
  (whose kNN accuracies are reported too: ``knn_top1_raw_pixels``, ``knn5_top1_raw_pixels``);
  ``linear_c*``, the inverse L2 strength each probe chose, is what the probe chose (the run's params
  ``measured.evaluation.chosen.linear_c*``), not a result;
* geometry of the L2-normalised projections of test images (``diagnostics.py``):
  ``alignment``, ``uniformity`` / ``neg_uniformity``, ``tolerance``, ``cond_entropy``,
  ``dp_margin_occupancy``, plus the LMCL distance histogram and the Wang & Liu similarity
  profile as figures.

``monitor`` is the cheap online kNN the loop calls during training (``online_knn_top1``).
"""

from __future__ import annotations

from typing import Any

import torch

from domains.base import Evaluation
from domains.vision.config import EvaluationConfig, MonitorConfig
from domains.vision.probes import extract, minibatch_linear_probe
from toolkit.evaluation.collapse import collapse_figures
from toolkit.evaluation.knn import knn_score_sets, knn_scores, topk_accuracy
from toolkit.evaluation.probes import linear_probes

__all__ = ["evaluate", "monitor", "probe_features", "probe_sets"]


def _device(encoder: torch.nn.Module) -> torch.device:
    try:
        return next(encoder.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def probe_sets(
    sets: dict[str, tuple[torch.Tensor, torch.Tensor, bool]],
    train_y: torch.Tensor,
    test_y: torch.Tensor,
    num_classes: int,
    cfg: EvaluationConfig,
    seed: int,
    device: torch.device | None = None,
) -> dict[str, float]:
    """Linear probe (and kNN) metrics of several feature sets: ``sets`` maps a name suffix to
    ``(train_x, test_x, knn)``. The ``lbfgs`` probes run at once, one per worker process
    (:func:`toolkit.evaluation.probes.linear_probes`); the kNN and the mini-batch probes run on
    ``device`` (the encoder's)."""
    out: dict[str, float] = {}
    lin = cfg.linear
    results: dict[str, dict[str, float]] = {}
    if lin.enabled and lin.solver == "lbfgs":
        # the L2 term weight_decay / 2 ||W||^2 on the mean loss is scikit-learn's C = 1 / (wd N)
        c = 1.0 / (lin.weight_decay * len(train_y)) if lin.weight_decay > 0 else 1.0
        common = dict(
            train_y=train_y,
            test_y=test_y,
            c=c,
            standardize=lin.standardize,
            select=lin.select_c,
            c_grid=lin.c_grid,
            holdout=lin.holdout,
            search=lin.c_search,
            max_iter=lin.epochs,
            seed=seed,
            topk=(1, 5) if num_classes > 10 else (1,),
        )
        res = linear_probes([dict(common, train_x=tr, test_x=te) for tr, te, _ in sets.values()])
        results = dict(zip(sets, res))
    elif lin.enabled:
        with torch.enable_grad():  # the loop evaluates under no_grad
            for suffix, (tr, te, _) in sets.items():
                results[suffix] = minibatch_linear_probe(
                    tr,
                    train_y,
                    te,
                    test_y,
                    num_classes,
                    solver=lin.solver,
                    epochs=lin.epochs,
                    lr=lin.lr,
                    weight_decay=lin.weight_decay,
                    batch_size=lin.batch_size,
                    milestones=lin.milestones,
                    gamma=lin.gamma,
                    betas=lin.betas,
                    momentum=lin.momentum,
                    final_lr=lin.final_lr,
                    standardize=lin.standardize,
                    seed=seed,
                    device=device,
                )
    for suffix, (tr, te, knn) in sets.items():
        if lin.enabled:
            res = results[suffix]
            out[f"linear_top1{suffix}"] = res["top1"]
            if "top5" in res:
                out[f"linear_top5{suffix}"] = res["top5"]
            if "c" in res:  # the L2 strength used (chosen on the held-out split with select_c)
                out[f"linear_c{suffix}"] = res["c"]
        if knn and cfg.knn.enabled:
            classifiers = [(cfg.knn.k, True)] + ([(5, False)] if cfg.knn.five_nn else [])
            scores = knn_score_sets(
                tr, train_y, te, num_classes, classifiers, temperature=cfg.knn.temperature, device=device
            )
            out[f"knn_top1{suffix}"] = topk_accuracy(scores[0].cpu(), test_y, 1)
            if cfg.knn.five_nn:
                out[f"knn5_top1{suffix}"] = topk_accuracy(scores[1].cpu(), test_y, 1)
    return out


def probe_features(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    num_classes: int,
    cfg: EvaluationConfig,
    seed: int,
    suffix: str = "",
    knn: bool = True,
    device: torch.device | None = None,
) -> dict[str, float]:
    """:func:`probe_sets` of one feature set, names suffixed with ``suffix``."""
    return probe_sets({suffix: (train_x, test_x, knn)}, train_y, test_y, num_classes, cfg, seed, device=device)


def evaluate(domain: Any, encoder: torch.nn.Module, data: Any, recipe: Any) -> Evaluation:
    """All evaluation metrics and figures for a trained ``encoder`` (see the module doc)."""
    cfg: EvaluationConfig = recipe.evaluation
    dev = _device(encoder)
    aug = data.augment
    was_training = encoder.training
    encoder.eval()
    result = Evaluation()
    if data.streams is not None:  # a folder dataset: the whole splits stream through the backbone
        from domains.vision.streamed_eval import streamed_probes

        result.metrics.update(streamed_probes(encoder.features, data.streams, aug, cfg, data.seed))
        if "random_init" in cfg.baselines:
            fresh = _random_twin(domain, recipe, data.seed, dev)
            result.metrics.update(
                streamed_probes(fresh.features, data.streams, aug, cfg, data.seed, suffix="_random_init", knn=False)
            )
    else:
        _probe_in_memory(domain, encoder, data, recipe, dev, result)
        with torch.no_grad():
            feats = extract(encoder.features, data.test.images[:COLLAPSE_SAMPLES], aug.natural, cfg.batch_size, dev)
        result.metrics.update(_collapse(encoder, feats, dev))
    if cfg.diagnostics.enabled:
        from domains.vision.diagnostics import geometry

        metrics, figures = geometry(encoder, data, recipe)
        result.metrics.update(metrics)
        result.figures.update(figures)
    encoder.train(was_training)
    for key in [k for k in result.metrics if k == "linear_c" or k.startswith("linear_c_")]:
        result.settings[key] = result.metrics.pop(key)  # the probe's chosen L2 strength: a setting
    return result


def _random_twin(domain: Any, recipe: Any, seed: int, dev: torch.device) -> torch.nn.Module:
    """A randomly initialised encoder of the same architecture (the random-init baseline)."""
    state = torch.random.get_rng_state()
    torch.manual_seed(seed + 7919)
    fresh = domain.build_encoder(recipe).to(dev).eval()
    torch.random.set_rng_state(state)
    return fresh


def _probe_in_memory(
    domain: Any, encoder: torch.nn.Module, data: Any, recipe: Any, dev: torch.device, result: Evaluation
) -> None:
    """Features of the in-memory splits extracted once, then every probe at once."""
    cfg: EvaluationConfig = recipe.evaluation
    aug = data.augment
    with torch.no_grad():
        tr = extract(encoder.features, data.probe_train.images, aug.natural, cfg.batch_size, dev)
        te = extract(encoder.features, data.test.images, aug.natural, cfg.batch_size, dev)
    sets = {"": (tr, te, True)}
    if "random_init" in cfg.baselines:
        fresh = _random_twin(domain, recipe, data.seed, dev)
        with torch.no_grad():
            rtr = extract(fresh.features, data.probe_train.images, aug.natural, cfg.batch_size, dev)
            rte = extract(fresh.features, data.test.images, aug.natural, cfg.batch_size, dev)
        sets["_random_init"] = (rtr, rte, False)
    if "raw_pixels" in cfg.baselines:

        def pixels(x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1)

        ptr = extract(pixels, data.probe_train.images, aug.natural, cfg.batch_size)
        pte = extract(pixels, data.test.images, aug.natural, cfg.batch_size)
        sets["_raw_pixels"] = (ptr, pte, True)
    result.metrics.update(
        probe_sets(sets, data.probe_train.labels, data.test.labels, data.num_classes, cfg, data.seed, device=dev)
    )


@torch.no_grad()
def monitor(encoder: torch.nn.Module, data: Any, cfg: MonitorConfig | None = None) -> dict[str, float]:
    """Online weighted-kNN accuracy on fixed subsets of the labelled splits (cheap)."""
    cfg = cfg or data.monitor or MonitorConfig()
    dev = _device(encoder)
    was_training = encoder.training
    encoder.eval()
    g = torch.Generator().manual_seed(data.seed + 31)
    n_tr = min(cfg.train_samples, len(data.probe_train))
    n_te = min(cfg.test_samples, len(data.test))
    itr = torch.randperm(len(data.probe_train), generator=g)[:n_tr]
    ite = torch.randperm(len(data.test), generator=g)[:n_te]
    tr = extract(encoder.features, data.probe_train.images[itr], data.augment.natural, 512, dev)
    te = extract(encoder.features, data.test.images[ite], data.augment.natural, 512, dev)
    scores = knn_scores(
        tr, data.probe_train.labels[itr], te, data.num_classes, k=cfg.k, temperature=cfg.temperature, device=dev
    ).cpu()
    out = {"knn_top1": topk_accuracy(scores, data.test.labels[ite], 1)}
    out.update(_collapse(encoder, te, dev))
    encoder.train(was_training)
    return out


COLLAPSE_SAMPLES = 2000  # test images whose embedding the collapse figures are computed on


def _collapse(encoder: torch.nn.Module, features: torch.Tensor, dev: torch.device) -> dict[str, float]:
    """The embedding's collapse figures (:mod:`toolkit.evaluation.collapse`) on the projection of
    the first ``COLLAPSE_SAMPLES`` evaluation features (what the loss sees, un-augmented)."""
    project = getattr(encoder, "project", None)
    if project is None or features.shape[0] < 2:
        return {}
    with torch.no_grad():
        z = project(features[:COLLAPSE_SAMPLES].to(dev)).float().cpu()
    return collapse_figures(z)
