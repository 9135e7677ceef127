"""Ring App. B toy: true MI, optimal critic, NCE / CNCE estimates, against references written
from the equations (Gaussian densities and plain loops)."""

from __future__ import annotations

import math

import pytest
import torch

from domains.toy import ring_mi as R

torch.set_num_threads(1)

SIGMA = [[2.0, 0.4], [0.4, 2.0]]  # Sigma_Z + Sigma_eps of Ring App. B, by hand


def _log_normal(v: float, var: float) -> float:
    return -0.5 * math.log(2 * math.pi * var) - v * v / (2 * var)


def _log_joint(x: float, y: float) -> float:
    (a, b), (c, d) = SIGMA
    det = a * d - b * c
    q = (d * x * x - 2 * b * x * y + a * y * y) / det
    return -math.log(2 * math.pi) - 0.5 * math.log(det) - 0.5 * q


def test_true_mi_matches_table5():
    assert R.true_mutual_information() == pytest.approx(0.0204110, abs=5e-8)
    assert R.RING_TABLE5["mi_true"][0] == pytest.approx(R.true_mutual_information(), abs=5e-6)


def test_true_mi_against_monte_carlo_with_exact_densities():
    g = torch.Generator().manual_seed(0)
    x, y = R.sample_pairs(40_000, g)
    pmi = torch.tensor(
        [_log_joint(a, b) - _log_normal(a, 2.0) - _log_normal(b, 2.0) for a, b in zip(x.tolist(), y.tolist())],
        dtype=torch.float64,
    )
    se = float(pmi.std()) / math.sqrt(len(pmi))
    assert abs(float(pmi.mean()) - R.true_mutual_information()) < 4 * se
    # and the sampler has the covariance of the paper
    cov = torch.cov(torch.stack([x, y]))
    assert torch.allclose(cov, torch.tensor(SIGMA, dtype=torch.float64), atol=0.06)


def test_optimal_critic_is_pointwise_mutual_information():
    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    y = torch.tensor([1.1, 0.0, -0.7, 0.4], dtype=torch.float64)
    s = R.optimal_critic(x, y)
    assert s.shape == (3, 4)
    for i, a in enumerate(x.tolist()):
        for j, b in enumerate(y.tolist()):
            ref = _log_joint(a, b) - _log_normal(a, 2.0) - _log_normal(b, 2.0)
            assert float(s[i, j]) == pytest.approx(ref, abs=1e-12)
    aligned = R.pointwise_mutual_information(x, y[:3])
    assert torch.allclose(aligned, s[torch.arange(3), torch.arange(3)])


def _loop_estimate(scores: torch.Tensor, lower: float) -> float:
    """mean_i [f_ii - log mean over {i} u S_B(i) of exp f_ij], S_B from a full sort."""
    n = scores.shape[0]
    total = 0.0
    for i in range(n):
        cand = sorted(float(scores[i, j]) for j in range(n) if j != i)
        kept = cand[int(lower / 100 * (n - 1)) :]
        terms = [float(scores[i, i])] + kept
        total += float(scores[i, i]) - math.log(sum(math.exp(t) for t in terms) / len(terms))
    return total / n


@pytest.mark.parametrize("lower", [0.0, 10.0, 50.0, 90.0, 95.0])
def test_all_candidates_estimate_matches_loop(lower):
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(23, 23, generator=g, dtype=torch.float64)
    assert R.contrastive_mi_estimate(scores, lower) == pytest.approx(_loop_estimate(scores, lower), abs=1e-12)


def test_sampled_negatives_are_drawn_from_the_ring_without_replacement():
    g = torch.Generator().manual_seed(4)
    scores = torch.randn(60, 60, generator=g, dtype=torch.float64)
    stats: dict = {}
    R.contrastive_mi_estimate(scores, 50.0, 10, torch.Generator().manual_seed(0), stats=stats)
    assert stats["negatives_mean"] == 10
    # asking for more than the ring holds takes the whole ring: the deterministic value
    big = R.contrastive_mi_estimate(scores, 50.0, 59, torch.Generator().manual_seed(0))
    assert big == pytest.approx(_loop_estimate(scores, 50.0), abs=1e-12)
    ring = R.percentile_candidates(scores, 50.0)
    assert ring.sum(1).eq(59 - int(0.5 * 59)).all() and not ring.diagonal().any()
    a = R.contrastive_mi_estimate(scores, 50.0, 10, torch.Generator().manual_seed(1))
    b = R.contrastive_mi_estimate(scores, 50.0, 10, torch.Generator().manual_seed(1))
    assert a == b  # seeded


def test_every_anchor_term_is_below_the_log_bound():
    g = torch.Generator().manual_seed(5)
    scores = 5 * torch.randn(40, 40, generator=g, dtype=torch.float64)
    scores.diagonal().add_(20.0)  # a near-perfect critic saturates the bound
    stats: dict = {}
    est = R.contrastive_mi_estimate(scores, 0.0, 9, torch.Generator().manual_seed(0), stats=stats)
    assert est <= math.log(10) + 1e-12
    assert stats["log_bound"] == pytest.approx(math.log(10))
    assert est > math.log(10) - 0.01


def _pmi_matrix(x, y):
    """pmi(x_i, y_j) = log p(x_i, y_j) - log p(x_i) - log p(y_j) for the Gaussian of SIGMA,
    vectorised from the closed form (independent of domains.toy.ring_mi)."""
    (a, b), (_, d) = SIGMA
    det = a * d - b * b
    xi, yj = x[:, None], y[None, :]
    quad = (d * xi * xi - 2 * b * xi * yj + a * yj * yj) / det
    return -0.5 * math.log(det) - 0.5 * quad + 0.5 * math.log(a * d) + xi * xi / (2 * a) + yj * yj / (2 * d)


def _analytic_nce(k: int, points: int = 80) -> float:
    """E over (x, y) ~ p of f - log((e^f + S) / (k + 1)) for the optimal critic f = pmi and
    S = sum of k terms e^{f(x, y_j)}, y_j ~ p(y): E[S | x] = k exactly and
    Var[S | x] = k (m2(x) - 1), m2(x) = int p(y|x)^2 / p(y) dy = w / sqrt(v (2w - v))
    e^{mu^2 / (2w - v)} (mu = b x / a, v = d - b^2 / a, w = d), so to second order
    E log(e^f + S) = log(e^f + k) - k (m2 - 1) / (2 (e^f + k)^2). The outer expectation by
    Gauss-Hermite quadrature over the joint Gaussian."""
    import numpy as np

    (a, b), (_, d) = SIGMA
    nodes, weights = np.polynomial.hermite_e.hermegauss(points)
    weights = weights / weights.sum()
    u, w_u = nodes[:, None], weights[:, None]
    e, w_e = nodes[None, :], weights[None, :]
    x = math.sqrt(a) * u  # x ~ N(0, a), y | x ~ N(b x / a, d - b^2 / a)
    v = d - b * b / a
    mu = b / a * x
    y = mu + math.sqrt(v) * e
    det = a * d - b * b
    quad = (d * x * x - 2 * b * x * y + a * y * y) / det
    f = -0.5 * math.log(det) - 0.5 * quad + 0.5 * math.log(a * d) + x * x / (2 * a) + y * y / (2 * d)
    m2 = d / math.sqrt(v * (2 * d - v)) * np.exp(mu * mu / (2 * d - v))
    term = f - np.log((np.exp(f) + k) / (k + 1)) + k * (m2 - 1) / (2 * (np.exp(f) + k) ** 2)
    return float((w_u * w_e * term).sum())


def test_analytic_reference_is_the_true_mi_in_the_many_negatives_limit():
    assert _analytic_nce(10**9) == pytest.approx(R.true_mutual_information(), abs=1e-7)


def test_optimal_critic_estimate_equals_the_closed_form_on_the_same_draw():
    """All 1999 in-sample negatives (deterministic): the estimator on R's critic equals the
    estimate from the closed-form pmi written here, to round-off (a 1% error cannot pass)."""
    x, y = R.sample_pairs(2000, torch.Generator().manual_seed(0))
    f = _pmi_matrix(x.double(), y.double())
    ref = float((f.diagonal() - (torch.logsumexp(f, dim=1) - math.log(2000))).mean())
    assert R.contrastive_mi_estimate(R.optimal_critic(x, y), 0.0) == pytest.approx(ref, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("k", [100, 1999])
def test_optimal_critic_nce_matches_its_expectation_within_sampling_error(k):
    """Ring App. B settings: n = 2000 points, 100 sampled negatives (and all 1999). Over 5
    independent draws the mean estimate must lie within 4 standard errors of the analytic
    expectation (_analytic_nce), the standard error taken from the per-anchor terms
    (sd / sqrt(5 n), about 2e-3). True MI 0.0204110 (Table 5)."""
    values, terms = [], []
    for seed in range(5):
        x, y = R.sample_pairs(2000, torch.Generator().manual_seed(seed))
        s = R.optimal_critic(x, y)
        sample = None if k == 1999 else k
        values.append(R.contrastive_mi_estimate(s, 0.0, sample, torch.Generator().manual_seed(seed + 1)))
        terms.append(s.diagonal() - (torch.logsumexp(s, dim=1) - math.log(2000)))
    se = float(torch.cat(terms).std()) / math.sqrt(5 * 2000)
    expected = _analytic_nce(k)
    true = R.true_mutual_information()
    assert true == pytest.approx(0.0204110, abs=5e-8)
    assert 0 < true - expected < 1e-3  # NCE's bias is below I, and small at k >= 100
    assert abs(sum(values) / 5 - expected) < 4 * se
    assert max(values) < math.log(k + 1)


def test_cnce_decreases_as_the_percentile_rises():
    x, y = R.sample_pairs(600, torch.Generator().manual_seed(0))
    s = R.optimal_critic(x, y)
    ws = [0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0]
    exact = [R.contrastive_mi_estimate(s, w) for w in ws]
    assert all(a > b for a, b in zip(exact, exact[1:]))
    sampled = [R.contrastive_mi_estimate(s, w, 25, torch.Generator().manual_seed(1)) for w in ws]
    assert all(a > b for a, b in zip(sampled, sampled[1:]))
    assert exact[-1] < -0.15  # about -0.245 at w_l = 95 for n = 2000


def test_mlp_critic_training_lowers_the_nce_loss_and_estimates_positive_mi():
    torch.manual_seed(0)
    x, y = R.sample_pairs(1024, torch.Generator().manual_seed(1))
    critic = R.MLPCritic(depth=3, hidden=10, embed_dim=10)
    hist = R.train_critic(critic, x, y, epochs=15, batch_size=128, lr=0.03, generator=torch.Generator().manual_seed(2))
    assert len(hist) == 15 and hist[-1] < hist[0]
    assert hist[-1] < math.log(128)  # below chance: the critic found the dependence
    with torch.no_grad():
        s = critic(x.float(), y.float()).double()
    assert s.shape == (1024, 1024)
    assert R.contrastive_mi_estimate(s, 0.0) > 0.0


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: R.contrastive_mi_estimate(torch.zeros(4, 4), 100.0), "lower"),
        (lambda: R.contrastive_mi_estimate(torch.zeros(4, 4), 10.0, 0), "num_negatives"),
        (lambda: R.contrastive_mi_estimate(torch.zeros(4, 5), 10.0), "scores"),
        (lambda: R.sample_pairs(1), "n"),
        (lambda: R.true_mutual_information(sigma_z=[[1.0, 2.0], [2.0, 1.0]]), "sigma_z"),
        (lambda: R.MLPCritic(depth=0), "depth"),
    ],
)
def test_bad_arguments_name_themselves(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# -- a critic trained on CNCE (table ring-mi-toy-cnce-critic) ------------------------------
@pytest.mark.parametrize("lower", [0.0, 10.0, 90.0])
def test_cnce_batch_candidates_are_the_rows_of_the_full_selection(lower):
    x, y = R.sample_pairs(60, torch.Generator().manual_seed(3))
    scores = R.optimal_critic(x, y)
    idx = torch.tensor([5, 0, 59, 17])
    block = R.percentile_candidates_rows(scores[idx], idx, lower)
    assert torch.equal(block, R.percentile_candidates(scores, lower)[idx])


def test_cnce_batch_loss_is_minus_the_estimate_of_its_drawn_negatives():
    """With as many negatives as candidates the draw is the whole set: the loss is minus the
    all-candidates CNCE estimate of those anchors, written as a loop."""
    x, y = R.sample_pairs(40, torch.Generator().manual_seed(4))
    critic = R.MLPCritic(depth=2, hidden=4, embed_dim=3)
    idx = torch.arange(40)
    xf, yf = x.float(), y.float()
    loss = R.cnce_batch_loss(critic, xf, yf, idx, 50.0, num_negatives=1000, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        s = critic(xf, yf).double()
    keep = R.percentile_candidates(s, 50.0)
    z = [
        float(
            s[i, i] - torch.logsumexp(torch.cat([s[i, i : i + 1], s[i][keep[i]]]), 0) + math.log(1 + int(keep[i].sum()))
        )
        for i in range(40)
    ]
    assert float(loss.detach()) == pytest.approx(-sum(z) / 40, rel=1e-5)
