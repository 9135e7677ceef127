"""The correlated-Gaussian mutual-information toy of Ring, App. B (Wu et al. 2021, Table 5).

Setting (Ring App. B, after Tschannen et al. 2019): ``z ~ N(0, Sigma_Z)``, ``eps ~ N(0, Sigma_eps)``
with ``Sigma_Z = [[1, -0.5], [-0.5, 1]]`` and ``Sigma_eps = [[1, 0.9], [0.9, 1]]``;
``(X, Y) = z + eps`` is jointly Gaussian with ``Sigma = Sigma_Z + Sigma_eps = [[2, 0.4], [0.4, 2]]``
and

    I(X; Y) = -1/2 log(1 - Sigma_12 Sigma_21 / (Sigma_11 Sigma_22)) = -1/2 log 0.96 = 0.0204110.

A critic ``f(x, y)`` scores every pair; for anchor ``i`` the contrastive estimate is
(docs/methods.md, section Ring appendix B)

    Z_i = f(x_i, y_i) - log mean_{j in {i} u N_i} exp f(x_i, y_j),        estimate = mean_i Z_i,

where the negatives ``N_i`` are drawn from the other points ``j != i`` (NCE) or, for CNCE, from
``S_B(i)``: the candidates ``j != i`` whose score ``f(x_i, y_j)`` lies at or above the
``w_l``-th percentile of anchor ``i``'s candidate scores (Ring's percentile convention,
docs/methods.md, section Ring: sort ascending, keep positions ``int(w_l / 100 * (n - 1))``
onwards). Two variants:

* ``num_negatives=None``: *all candidates*, ``N_i = S_B(i)`` (deterministic);
* ``num_negatives=k``: ``k`` negatives drawn uniformly **without replacement** from ``S_B(i)``
  with a seeded generator (all of ``S_B(i)`` when it has fewer than ``k`` members): the paper's
  "we only sample 100 negatives from the top p percent".

Every ``Z_i <= log(|N_i| + 1)`` (the log-bound of InfoNCE) and, by Thm. 3.1, the CNCE
estimate lower-bounds the NCE one. Critics: the Bayes-optimal ``f*(x, y) = log p(y|x) - log p(y)``
(exact; with it NCE gives about 0.0249 and CNCE falling to -0.245 at w_l = 95 for it) and the
paper's trained critic ``f(x, y) = g(x) . h(y)`` with two 5-layer ReLU MLPs of width 10
(:class:`MLPCritic`, trained with in-batch NCE by :func:`train_critic`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from toolkit import checks
from toolkit.samplers import ring_mask

__all__ = [
    "RING_SIGMA_Z",
    "RING_SIGMA_EPS",
    "RING_TABLE5",
    "joint_covariance",
    "true_mutual_information",
    "sample_pairs",
    "pointwise_mutual_information",
    "optimal_critic",
    "percentile_candidates",
    "contrastive_mi_estimate",
    "cnce_batch_loss",
    "MLPCritic",
    "train_critic",
]

RING_SIGMA_Z: tuple[tuple[float, float], tuple[float, float]] = ((1.0, -0.5), (-0.5, 1.0))
RING_SIGMA_EPS: tuple[tuple[float, float], tuple[float, float]] = ((1.0, 0.9), (0.9, 1.0))

# Ring App. B, Table 5 (trained 5-layer MLP critic, 100 sampled negatives, 5 seeds):
# metric name -> (mean, stdev); "mi_true" has no stdev in the paper.
RING_TABLE5: dict[str, tuple[float, float | None]] = {
    "mi_true": (0.02041, None),
    "mi_nce": (0.01345, 0.001),
    "mi_cnce_w10": (0.01241, 3e-4),
    "mi_cnce_w25": (0.00220, 1e-4),
    "mi_cnce_w50": (7.29e-5, 9e-6),
    "mi_cnce_w75": (1.67e-5, 2e-6),
    "mi_cnce_w90": (5.87e-6, 1e-6),
    "mi_cnce_w95": (1.97e-6, 4e-6),
}

Matrix2 = Sequence[Sequence[float]]


def joint_covariance(sigma_z: Matrix2 = RING_SIGMA_Z, sigma_eps: Matrix2 = RING_SIGMA_EPS) -> Tensor:
    """``Sigma = Sigma_Z + Sigma_eps`` as a float64 ``[2, 2]`` tensor, checked to be a valid
    (symmetric positive-definite) covariance."""
    parts = []
    for name, m in (("sigma_z", sigma_z), ("sigma_eps", sigma_eps)):
        t = torch.as_tensor(m, dtype=torch.float64)
        if t.shape != (2, 2) or not torch.allclose(t, t.T) or torch.linalg.eigvalsh(t).min() < 0:
            raise ValueError(f"{name} must be a symmetric positive semi-definite 2x2 matrix, got {m!r}")
        parts.append(t)
    sigma = parts[0] + parts[1]
    if torch.linalg.eigvalsh(sigma).min() <= 0:
        raise ValueError(f"sigma_z + sigma_eps must be positive definite, got {sigma.tolist()!r}")
    return sigma


def true_mutual_information(sigma_z: Matrix2 = RING_SIGMA_Z, sigma_eps: Matrix2 = RING_SIGMA_EPS) -> float:
    """``I(X; Y) = -1/2 log(1 - S12 S21 / (S11 S22))`` in nats for ``S = Sigma_Z + Sigma_eps``
    (Ring App. B); 0.0204110 for the paper's matrices."""
    s = joint_covariance(sigma_z, sigma_eps)
    rho2 = float(s[0, 1] * s[1, 0] / (s[0, 0] * s[1, 1]))
    return -0.5 * math.log(1.0 - rho2)


def sample_pairs(
    n: int,
    generator: torch.Generator | None = None,
    sigma_z: Matrix2 = RING_SIGMA_Z,
    sigma_eps: Matrix2 = RING_SIGMA_EPS,
) -> tuple[Tensor, Tensor]:
    """``n`` draws of ``(X, Y) = z + eps`` (float64 ``[n]`` each), sampling ``z`` and ``eps``
    separately as the paper describes."""
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    joint_covariance(sigma_z, sigma_eps)  # validates both matrices
    draws = []
    for m in (sigma_z, sigma_eps):
        cov = torch.as_tensor(m, dtype=torch.float64)
        # eigh rather than Cholesky: a degenerate (semi-definite) part is allowed
        evals, evecs = torch.linalg.eigh(cov)
        root = evecs * evals.clamp_min(0).sqrt()
        draws.append(torch.randn(n, 2, generator=generator, dtype=torch.float64) @ root.T)
    xy = draws[0] + draws[1]
    return xy[:, 0], xy[:, 1]


def _conditional(sigma: Tensor) -> tuple[float, float, float]:
    """(slope, variance of Y | X, variance of Y) of the Gaussian regression of Y on X."""
    sxx, sxy, syy = float(sigma[0, 0]), float(sigma[0, 1]), float(sigma[1, 1])
    return sxy / sxx, syy - sxy * sxy / sxx, syy


def pointwise_mutual_information(
    x: Tensor, y: Tensor, sigma_z: Matrix2 = RING_SIGMA_Z, sigma_eps: Matrix2 = RING_SIGMA_EPS
) -> Tensor:
    """``log p(x, y) - log p(x) - log p(y)`` for aligned pairs (its mean is a Monte-Carlo
    estimate of the mutual information)."""
    return optimal_critic(x, y, sigma_z, sigma_eps, pairwise=False)


def optimal_critic(
    x: Tensor, y: Tensor, sigma_z: Matrix2 = RING_SIGMA_Z, sigma_eps: Matrix2 = RING_SIGMA_EPS, *, pairwise: bool = True
) -> Tensor:
    """The Bayes-optimal critic ``f*(x, y) = log p(y | x) - log p(y)`` (= the pointwise mutual
    information): ``[n, m]`` scores ``f*(x_i, y_j)`` when ``pairwise``, else ``[n]`` for aligned
    pairs. Any function of ``x`` alone may be added without changing an estimate."""
    checks.tensor("x", x, dim=1)
    checks.tensor("y", y, dim=1)
    b, var_cond, var_y = _conditional(joint_covariance(sigma_z, sigma_eps))
    xs, ys = (x[:, None], y[None, :]) if pairwise else (x, y)
    log_cond = -0.5 * (ys - b * xs) ** 2 / var_cond - 0.5 * math.log(var_cond)
    log_marg = -0.5 * ys**2 / var_y - 0.5 * math.log(var_y)
    return log_cond - log_marg


def percentile_candidates(scores: Tensor, lower: float) -> Tensor:
    """Boolean ``[n, n]`` mask of ``S_B(i)``: the candidates ``j != i`` of row ``i`` from the
    ``lower``-th percentile of their scores upwards, i.e. the toolkit's Ring selector
    (:func:`toolkit.samplers.ring_mask`, upper = 100) applied to the ``n - 1`` candidates:
    sorted ascending, positions ``int(lower / 100 * (n - 1))`` onwards are kept."""
    checks.tensor("scores", scores, dim=2, min_rows=2)
    n = scores.shape[0]
    if scores.shape[1] != n:
        raise ValueError(f"scores must be square [n, n] (critic of x_i against y_j), got {tuple(scores.shape)}")
    checks.in_range("lower", lower, 0.0, 100.0, high_open=True)
    off = ~torch.eye(n, dtype=torch.bool, device=scores.device)
    keep_candidates = ring_mask(scores[off].view(n, n - 1), lower, 100.0)
    keep = torch.zeros_like(off)
    keep[off] = keep_candidates.reshape(-1)
    return keep


def contrastive_mi_estimate(
    scores: Tensor,
    lower: float = 0.0,
    num_negatives: int | None = None,
    generator: torch.Generator | None = None,
    *,
    stats: dict | None = None,
    ranking: Tensor | None = None,
) -> float:
    """NCE (``lower = 0``) or CNCE (``lower = w_l``) estimate of I(X; Y) from critic scores.

    ``mean_i [ f_ii - log mean_{ {i} u N_i } exp f_ij ]`` with ``N_i`` all of ``S_B(i)``
    (``num_negatives=None``) or ``num_negatives`` uniform draws from it without replacement.
    ``S_B(i)`` ranks the candidates by ``ranking`` ``[n, n]`` (default: the scores themselves,
    the paper's CNCE; another similarity tests how the ring's definition moves the estimate).
    ``stats`` receives ``negatives_mean`` (mean ``|N_i|``) and ``log_bound`` (``log(mean |N_i| + 1)``).
    """
    if num_negatives is not None and (not isinstance(num_negatives, int) or num_negatives < 1):
        raise ValueError(f"num_negatives must be a positive integer or None (all candidates), got {num_negatives!r}")
    if ranking is not None and ranking.shape != scores.shape:
        raise ValueError(f"ranking must have the scores' shape {tuple(scores.shape)}, got {tuple(ranking.shape)}")
    keep = percentile_candidates(scores if ranking is None else ranking, lower)
    if num_negatives is not None:
        keys = torch.rand(scores.shape, generator=generator, dtype=torch.float64).to(scores.device)
        keys = keys.masked_fill(~keep, -1.0)
        k = min(num_negatives, scores.shape[0] - 1)
        top = keys.topk(k, dim=1)
        drawn = torch.zeros_like(keep).scatter_(1, top.indices, top.values >= 0)
        keep = drawn
    diag = scores.diagonal()
    masked = scores.masked_fill(~keep, -math.inf)
    log_sum = torch.logsumexp(torch.cat([diag[:, None], masked], dim=1), dim=1)
    count = keep.sum(dim=1).to(scores.dtype) + 1.0
    z = diag - (log_sum - count.log())
    if stats is not None:
        stats["negatives_mean"] = float(count.mean() - 1.0)
        stats["log_bound"] = math.log(float(count.mean()))
    return float(z.mean())


def cnce_batch_loss(
    critic: MLPCritic,
    x: Tensor,
    y: Tensor,
    idx: Tensor,
    lower: float,
    num_negatives: int = 100,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``-mean Z_i`` over the anchors ``idx``, with CNCE's negatives: ``num_negatives`` drawn
    without replacement from the candidates ``j != i`` of the whole bank ``y`` at or above the
    ``lower``-th percentile of ``f(x_i, .)`` (the selection itself carries no gradient). Trains
    a critic on the CNCE objective at ``w_l = lower``; ``lower = 0`` is NCE against the bank."""
    scores = critic(x[idx], y)  # [B, n]
    rows = torch.arange(len(idx), device=scores.device)
    with torch.no_grad():
        keep = percentile_candidates_rows(scores, idx, lower)
        keys = torch.rand(scores.shape, generator=generator, dtype=scores.dtype).masked_fill(~keep, -1.0)
        picked = keys.topk(min(num_negatives, int(keep[0].sum())), dim=1).indices  # every row keeps as many
    both = torch.cat([scores[rows, idx][:, None], scores.gather(1, picked)], dim=1)
    return -(both[:, 0] - torch.logsumexp(both, dim=1) + math.log(both.shape[1])).mean()


def percentile_candidates_rows(scores: Tensor, idx: Tensor, lower: float) -> Tensor:
    """:func:`percentile_candidates` for the rows ``idx`` of an ``[B, n]`` block: row ``b``'s
    candidates are the columns ``j != idx[b]`` from the ``lower``-th percentile upwards."""
    n = scores.shape[1]
    own = torch.zeros_like(scores, dtype=torch.bool)
    own[torch.arange(len(idx)), idx] = True
    others = scores.masked_fill(own, -math.inf)
    kept = (n - 1) - int(lower / 100.0 * (n - 1))
    keep = torch.zeros_like(own)
    return keep.scatter_(1, others.topk(kept, dim=1).indices, True)


class MLPCritic(nn.Module):
    """Separable critic ``f(x, y) = g(x) . h(y)`` (Ring App. B: "5-layer MLPs with 10 hidden
    dimensions and ReLU nonlinearities"; the dot product of the two embeddings, no
    normalisation, no temperature). ``depth`` counts linear layers."""

    def __init__(self, depth: int = 5, hidden: int = 10, embed_dim: int = 10) -> None:
        super().__init__()
        for name, v in (("depth", depth), ("hidden", hidden), ("embed_dim", embed_dim)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.g = _mlp(depth, hidden, embed_dim)
        self.h = _mlp(depth, hidden, embed_dim)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """``[n, m]`` scores ``g(x_i) . h(y_j)`` for ``x: [n]``, ``y: [m]``."""
        return self.g(x[:, None]) @ self.h(y[:, None]).T


def _mlp(depth: int, hidden: int, out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = 1
    for _ in range(depth - 1):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, out))
    return nn.Sequential(*layers)


def train_critic(
    critic: MLPCritic,
    x: Tensor,
    y: Tensor,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    epochs: int = 100,
    batch_size: int = 128,
    lr: float = 0.03,
    generator: torch.Generator | None = None,
    loss_fn: Callable[[Tensor], Tensor] | None = None,
    batch_loss: Callable[[Tensor], Tensor] | None = None,
    on_epoch: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train ``critic`` with in-batch NCE (Ring App. B: Adam, lr 0.03, batch 128, no weight
    decay, 100 epochs; ``optimizer`` replaces the Adam built from ``lr``).

    ``loss_fn(scores)`` maps the ``[B, B]`` batch scores ``g(x_i) . h(y_j)`` (positives on the
    diagonal) to a scalar; by default ``-mean_i log softmax_j(scores)_ii``; ``batch_loss(idx)``,
    when given, replaces both and computes the loss of the anchors ``idx`` itself (e.g.
    :func:`cnce_batch_loss` against the whole bank). The ragged last
    batch of an epoch is dropped. Returns the mean loss of each epoch (``on_epoch(epoch, loss)``
    is called after each)."""
    for name, v in (("epochs", epochs), ("batch_size", batch_size)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if batch_size > len(x):
        raise ValueError(f"batch_size must be at most the number of points ({len(x)}), got {batch_size}")
    if optimizer is None:
        optimizer = torch.optim.Adam(critic.parameters(), lr=checks.positive("lr", lr), weight_decay=0.0)
    if loss_fn is None:

        def loss_fn(s: Tensor) -> Tensor:
            return nn.functional.cross_entropy(s, torch.arange(len(s), device=s.device))

    dtype = next(critic.parameters()).dtype
    x, y = x.to(dtype), y.to(dtype)
    history = []
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        total, steps = 0.0, 0
        for start in range(0, len(x) - batch_size + 1, batch_size):
            idx = order[start : start + batch_size]
            loss = batch_loss(idx) if batch_loss is not None else loss_fn(critic(x[idx], y[idx]))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total, steps = total + float(loss.detach()), steps + 1
        history.append(total / steps)
        if on_epoch is not None:
            on_epoch(epoch, history[-1])
    return history
