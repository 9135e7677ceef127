"""Geometry of the learned embedding at evaluation (every run), with ``toolkit.evaluation.metrics`` and
``toolkit.evaluation.plots``, on the L2-normalised projections of a seeded subset of test images:

* ``alignment`` -- mean ||f(x') - f(x'')||^2 over two augmented views of each image
  (Wang & Isola 2020, Eq. 4);
* ``uniformity`` -- log mean_{i<j} exp(-t ||f_i - f_j||^2), t = 2, on the un-augmented images
  (the loss value; ``neg_uniformity`` is the number Wang & Liu's Table 1 prints);
* ``tolerance`` -- mean f_i . f_j over same-class pairs (Wang & Liu Eq. 11);
* ``cond_entropy`` -- CACR's H(X-|X) (Eq. 8) averaged over mini-batches of M = 512 images with
  the other images of the batch as negatives and the run's t- (CACR Fig. 3);
* ``dp_margin_occupancy`` -- share of pairs with LMCL distance (1 - f.f')/2 inside the margin
  (d+, d-) (LMCL Fig. 2), with the distance histogram as a figure;
* ``pos_similarity`` / ``top1_neg_similarity`` / ``top10_neg_similarity`` -- Wang & Liu Fig. 8:
  each image's first view against the second views of all images (its own is the positive),
  with the positive vs top-10-negative similarity profile as a figure.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from domains.vision.config import DiagnosticsConfig

__all__ = ["geometry", "margin_and_t_neg"]


def margin_and_t_neg(recipe: Any, cfg: DiagnosticsConfig) -> tuple[float, float, float]:
    """(d+, d-, t-): the diagnostics' own values, else the run's regularizer / loss, else
    LMCL's (0.1, 0.5) and CACR's t- = 2."""
    d_plus, d_minus, t_neg = 0.1, 0.5, 2.0
    obj = getattr(recipe, "objective", None)
    if obj is not None:
        t_neg = float(obj.loss.args.get("t_neg", t_neg))
        for reg in obj.regularizers:
            if reg.name == "distance_polarization":
                d_plus = float(reg.args.get("d_plus", d_plus))
                d_minus = float(reg.args.get("d_minus", d_minus))
    d_plus = cfg.d_plus if cfg.d_plus is not None else d_plus
    d_minus = cfg.d_minus if cfg.d_minus is not None else d_minus
    t_neg = cfg.t_neg if cfg.t_neg is not None else t_neg
    return d_plus, d_minus, t_neg


@torch.no_grad()
def geometry(encoder: torch.nn.Module, data: Any, recipe: Any) -> tuple[dict[str, float], dict[str, Any]]:
    """The metrics and figures listed in the module doc."""
    from toolkit.evaluation import metrics, plots

    cfg: DiagnosticsConfig = recipe.evaluation.diagnostics
    dev = next(encoder.parameters()).device
    n = min(cfg.samples, len(data.test))
    g = torch.Generator().manual_seed(data.seed + 101)
    idx = torch.randperm(len(data.test), generator=g)[:n].sort().values
    images, labels = data.test.images[idx], data.test.labels[idx]
    views_gen = torch.Generator().manual_seed(data.seed + 103)

    def embed(prepare) -> torch.Tensor:
        out = []
        for start in range(0, n, 512):
            x = images[start : start + 512].to(dev)
            out.append(encoder(prepare(x)).double().cpu())
        return torch.cat(out)

    z = embed(data.augment.natural)
    z1 = embed(lambda x: data.augment(x, views_gen))
    z2 = embed(lambda x: data.augment(x, views_gen))
    d_plus, d_minus, t_neg = margin_and_t_neg(recipe, cfg)

    unif = metrics.uniformity(z, t=cfg.uniformity_t)
    out = {"alignment": metrics.alignment(z1, z2), "uniformity": unif, "neg_uniformity": -unif}
    if len(torch.unique(labels)) < len(labels):  # tolerance needs a class seen twice
        out["tolerance"] = metrics.tolerance(z, labels)
    else:
        warnings.warn(
            f"tolerance left out: the {len(labels)} diagnostic images hold no class twice "
            "(raise evaluation.diagnostics.samples)",
            stacklevel=2,
        )
    m = min(cfg.entropy_batch, n)
    chunks = [z[s : s + m] for s in range(0, n - m + 1, m)]  # full batches only (CACR Fig. 3)
    out["cond_entropy"] = sum(metrics.conditional_entropy(c, None, t_neg) for c in chunks) / len(chunks)
    hist = metrics.distance_histogram(z, d_plus=d_plus, d_minus=d_minus)
    out["dp_margin_occupancy"] = float(hist["margin_occupancy"])
    profile = metrics.similarity_profile(z1, z2, torch.arange(n), top=min(10, n - 1))
    out["pos_similarity"] = float(profile["positive"])
    out["top1_neg_similarity"] = float(profile["negatives"][0])
    out["top10_neg_similarity"] = float(profile["negatives"][-1])

    figures: dict[str, Any] = {}
    if cfg.figures:
        figures["distance_histogram"] = plots.distance_histogram_figure(
            z, labels, d_plus=d_plus, d_minus=d_minus, title=f"LMCL distance histogram ({n} test images)"
        )
        figures["similarity_profile"] = plots.similarity_profile_figure(
            profile, title="Positive vs nearest-negative similarities (Wang & Liu Fig. 8)"
        )
    return out, figures
