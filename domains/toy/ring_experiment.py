"""The Ring App. B run (``data.experiment: ring_mi``): the toy domain's own loop.

One run = one seed: draw ``n`` pairs, build the critic (exact optimal, or the paper's MLP
critic trained with the recipe's objective / optimizer / budget), then log the true MI, the
NCE estimate and one CNCE estimate per ``w_l`` (``mi_cnce_w10`` ...) and a figure of the
estimates against ``w_l`` with the true MI and Ring's Table 5 beside them.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from domains.toy import ring_mi
from toolkit.losses.base import ContrastiveBatch

__all__ = ["metric_name", "run_ring_mi", "estimate_figure"]


def metric_name(w: float) -> str:
    """``mi_cnce_w10`` for ``w_l = 10``; ``mi_cnce_w12p5`` for ``12.5``."""
    text = f"{w:g}".replace(".", "p")
    return f"mi_cnce_w{text}"


def run_ring_mi(recipe: Any, tracker: Any) -> dict[str, float]:
    """Run the experiment of ``recipe`` and log to ``tracker``; returns the metrics."""
    data, evaluation = recipe.data.ring_mi, recipe.evaluation.ring_mi
    seed = recipe.data.seed if recipe.data.seed is not None else recipe.seed
    data_gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    x, y = ring_mi.sample_pairs(data.num_points, data_gen, data.sigma_z, data.sigma_eps)
    metrics: dict[str, float] = {"mi_true": ring_mi.true_mutual_information(data.sigma_z, data.sigma_eps)}

    if evaluation.critic == "optimal":
        scores = ring_mi.optimal_critic(x, y, data.sigma_z, data.sigma_eps)
    else:
        scores, final_loss = _trained_scores(recipe, x, y, tracker)
        metrics["critic_final_loss"] = final_loss

    sample_gen = torch.Generator().manual_seed(seed + 1)
    stats: dict[str, float] = {}
    k = evaluation.num_negatives
    metrics["mi_nce"] = ring_mi.contrastive_mi_estimate(scores, 0.0, k, sample_gen, stats=stats)
    metrics["nce_log_bound"] = stats["log_bound"]
    for w in evaluation.percentiles:
        if evaluation.cnce_trained:  # this w_l's own critic, trained on CNCE at w_l
            name = metric_name(w)
            scores, metrics[f"critic_final_loss_{name[3:]}"] = _trained_scores(
                recipe, x, y, tracker, lower=w, prefix=f"{name}/"
            )
        metrics[metric_name(w)] = ring_mi.contrastive_mi_estimate(scores, w, k, sample_gen)
    metrics["seconds"] = time.perf_counter() - start
    tracker.log_metrics(metrics, step=0)
    tracker.log_figure(estimate_figure(metrics, evaluation.percentiles, evaluation.critic, k), "mi_vs_percentile")
    return metrics


def _trained_scores(
    recipe: Any, x: torch.Tensor, y: torch.Tensor, tracker: Any, lower: float | None = None, prefix: str = ""
) -> tuple[torch.Tensor, float]:
    """Train the MLP critic (recipe ``encoder``: depth / hidden / embed_dim) with the recipe's
    ``objective`` on domain scores (default InfoNCE, temperature 1), ``optimizer`` and
    ``budget`` (epochs, batch_size); returns the ``[n, n]`` scores on the drawn points. With
    ``lower`` the critic is trained on CNCE at ``w_l = lower`` instead
    (:func:`domains.toy.ring_mi.cnce_batch_loss`, the recipe's ``num_negatives``)."""
    from toolkit import objective as objective_mod
    from toolkit.recipe import Budget
    from toolkit.training.optim import build_optimizer

    enc = recipe.encoder
    if enc.normalize:
        raise ValueError(
            "encoder.normalize must be false for the ring_mi critic: Ring App. B's "
            "critic is the raw dot product g(x).h(y)"
        )
    torch.manual_seed(recipe.seed)
    critic = ring_mi.MLPCritic(depth=enc.depth, hidden=enc.hidden, embed_dim=enc.embed_dim)
    budget = recipe.budget or Budget(epochs=100, batch_size=128)
    epochs = int(budget.epochs) if budget.epochs else max(1, budget.steps * budget.batch_size // len(x))
    optimizer = build_optimizer(critic.parameters(), recipe.optimizer, budget.batch_size)
    loss_fn = None
    if recipe.objective is not None:
        objective = objective_mod.build(recipe.objective)

        def loss_fn(s: torch.Tensor) -> torch.Tensor:
            eye = torch.eye(len(s), dtype=torch.bool)
            return objective(ContrastiveBatch(scores=s, positive_mask=eye)).loss

    batch_loss = None
    gen = torch.Generator().manual_seed(recipe.seed + 2)
    if lower is not None:
        xf, yf, k = x.float(), y.float(), recipe.evaluation.ring_mi.num_negatives or len(x) - 1

        def batch_loss(idx: torch.Tensor) -> torch.Tensor:
            return ring_mi.cnce_batch_loss(critic, xf, yf, idx, lower, k, gen)

    history = ring_mi.train_critic(
        critic,
        x,
        y,
        optimizer,
        epochs=epochs,
        batch_size=budget.batch_size,
        generator=gen,
        loss_fn=loss_fn,
        batch_loss=batch_loss,
        on_epoch=lambda e, loss: tracker.log_metrics({f"{prefix}train/loss": loss}, step=e + 1, flush=False),
    )
    tracker.flush()
    with torch.no_grad():
        scores = critic(x.float(), y.float()).double()
    return scores, history[-1]


def estimate_figure(
    metrics: dict[str, float], percentiles: list[float], critic: str, num_negatives: int | None
) -> Figure:
    """CNCE estimate against ``w_l`` (NCE at ``w_l = 0``), the true MI, and Ring Table 5."""
    fig = Figure(figsize=(6, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ws = [0.0, *percentiles]
    ours = [metrics["mi_nce"], *(metrics[metric_name(w)] for w in percentiles)]
    negs = "all candidates" if num_negatives is None else f"{num_negatives} sampled negatives"
    ax.plot(ws, ours, "o-", label=f"ctk: {critic} critic, {negs}")
    table = ring_mi.RING_TABLE5
    paper_ws = [0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0]
    paper = [table["mi_nce"][0], *(table[metric_name(w)][0] for w in paper_ws[1:])]
    ax.plot(paper_ws, paper, "s--", color="grey", label="Ring Table 5 (trained MLP critic)")
    ax.axhline(metrics["mi_true"], color="k", lw=1, label=f"true MI = {metrics['mi_true']:.5f}")
    ax.set_xlabel("w_l (percentile; 0 = NCE)")
    ax.set_ylabel("estimate of I(X; Y) [nats]")
    ax.set_title("Ring App. B: NCE / CNCE estimates vs w_l")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig
