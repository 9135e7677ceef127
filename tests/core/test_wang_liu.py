"""Wang & Liu losses against loop references written from Eq. 1, 3, 5 and 9, and the paper's
identities (Eq. 7 temperature limit, alpha = 1, gradient ratio); METHODS rows 8-11."""

from __future__ import annotations

import math

import pytest
import torch

from toolkit.losses.functional import (
    wl_contrastive,
    wl_gradient_ratio,
    wl_hard,
    wl_hard_simple,
    wl_simple,
    wl_sims_from_bank,
)


# ----------------------------------------------------------------------------- loop references
def lse(terms):
    m = max(float(t.detach()) for t in terms)
    return m + torch.log(sum(torch.exp(t - m) for t in terms))


def val(x) -> float:
    return float(x.detach()) if torch.is_tensor(x) else float(x)


def kth_largest(values, k):
    return sorted((val(v) for v in values), reverse=True)[k - 1]


def ref_contrastive(s_pos, s_neg, tau, k=None):
    """Eq. 1 (k=None) or Eq. 9 (negatives >= the k-th largest), loops over anchors/negatives."""
    total = 0.0
    for i in range(len(s_pos)):
        row = list(s_neg[i])
        thr = kth_largest(row, k) if k is not None else -math.inf
        terms = [s / tau for s in row if val(s) >= thr] + [s_pos[i] / tau]
        total = total + (-s_pos[i] / tau + lse(terms))
    return total / len(s_pos)


def ref_simple(s_pos, s_neg, lam, k=None):
    """Eq. 3 (lam=None: 1 / number of kept negatives)."""
    total = 0.0
    for i in range(len(s_pos)):
        row = list(s_neg[i])
        thr = kth_largest(row, k) if k is not None else -math.inf
        kept = [s for s in row if val(s) >= thr]
        weight = 1.0 / len(kept) if lam is None else lam
        total = total + (-s_pos[i] + weight * sum(kept))
    return total / len(s_pos)


def scores(n, m, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    s_pos = (torch.rand(n, generator=g, dtype=torch.float64) * 0.5 + 0.5).to(dtype)
    s_neg = (torch.rand(n, m, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)
    return s_pos.requires_grad_(), s_neg.requires_grad_()


def grads(loss, *xs):
    return torch.autograd.grad(loss, xs)


# ----------------------------------------------------------------------------- Eq. 1 / Eq. 9
@pytest.mark.parametrize("tau", [0.05, 0.2, 1.0])
def test_contrastive_matches_loop(dtype, close, leaves, tau):
    s_pos, s_neg = scores(5, 9, 0, dtype)
    r_pos, r_neg = leaves(s_pos, s_neg)
    loss, ref = wl_contrastive(s_pos, s_neg, tau), ref_contrastive(r_pos, r_neg, tau)
    close(loss, ref, dtype)
    for g, rg in zip(grads(loss, s_pos, s_neg), grads(ref, r_pos, r_neg)):
        close(g, rg, dtype)


@pytest.mark.parametrize("kwargs,k", [({"num_hard": 3}, 3), ({"alpha": 0.5}, 5), ({"alpha": 0.1}, 1)])
def test_hard_matches_loop(dtype, close, leaves, kwargs, k):
    s_pos, s_neg = scores(6, 10, 1, dtype)
    r_pos, r_neg = leaves(s_pos, s_neg)
    loss, ref = wl_hard(s_pos, s_neg, 0.3, **kwargs), ref_contrastive(r_pos, r_neg, 0.3, k)
    close(loss, ref, dtype)
    for g, rg in zip(grads(loss, s_pos, s_neg), grads(ref, r_pos, r_neg)):
        close(g, rg, dtype)


def test_hard_keeps_ties(close, leaves):
    s_pos = torch.tensor([0.9, 0.8], dtype=torch.float64)
    s_neg = torch.tensor([[0.5, 0.5, 0.5, -0.2], [0.4, 0.1, 0.1, 0.0]], dtype=torch.float64)
    close(wl_hard(s_pos, s_neg, 0.2, num_hard=2), ref_contrastive(s_pos, s_neg, 0.2, 2), torch.float64)
    stats = {}
    wl_hard(s_pos, s_neg, 0.2, num_hard=2, stats=stats)
    assert float(stats["neg_kept"]) == pytest.approx(6 / 8)  # row 0 keeps 3, row 1 keeps 3


def test_alpha_one_is_eq1(dtype, close):
    s_pos, s_neg = scores(4, 12, 2, dtype)
    close(wl_hard(s_pos, s_neg, 0.2, alpha=1.0), wl_contrastive(s_pos, s_neg, 0.2), dtype, rtol=0, atol=0)
    close(wl_hard(s_pos, s_neg, 0.2), wl_contrastive(s_pos, s_neg, 0.2), dtype, rtol=0, atol=0)


def test_neg_mask_drops_negatives(close, leaves):
    s_pos, s_neg = scores(3, 6, 3, torch.float64)
    mask = torch.tensor([[True, False, True, True, False, True]] * 3)
    ref_neg = s_neg.detach()[:, mask[0]]
    close(
        wl_contrastive(s_pos, s_neg, 0.2, neg_mask=mask), ref_contrastive(s_pos.detach(), ref_neg, 0.2), torch.float64
    )
    empty = torch.zeros(3, 6, dtype=torch.bool)  # no negative: every term is -log 1 = 0
    assert val(wl_contrastive(s_pos, s_neg, 0.2, neg_mask=empty)) == pytest.approx(0.0, abs=1e-15)


# ----------------------------------------------------------------------------- Eq. 3 and limits
@pytest.mark.parametrize("lam", [None, 0.0, 0.1, 2.0])
def test_simple_matches_loop(dtype, close, leaves, lam):
    s_pos, s_neg = scores(5, 7, 4, dtype)
    r_pos, r_neg = leaves(s_pos, s_neg)
    loss, ref = wl_simple(s_pos, s_neg, lam), ref_simple(r_pos, r_neg, lam)
    close(loss, ref, dtype)
    for g, rg in zip(grads(loss, s_pos, s_neg), grads(ref, r_pos, r_neg)):
        close(g, rg, dtype)


@pytest.mark.parametrize("lam,kwargs,k", [(None, {"num_hard": 4}, 4), (0.5, {"alpha": 0.3}, 3)])
def test_hard_simple_matches_loop(dtype, close, leaves, lam, kwargs, k):
    s_pos, s_neg = scores(5, 10, 5, dtype)
    r_pos, r_neg = leaves(s_pos, s_neg)
    close(wl_hard_simple(s_pos, s_neg, lam, **kwargs), ref_simple(r_pos, r_neg, lam, k), dtype)


@pytest.mark.parametrize("tau", [1e4, 1e6])
def test_simple_is_the_large_temperature_limit(tau):
    """Eq. 7: tau (L_tau - log(M+1)) -> M/(M+1) L_simple(lambda=1/M), error O(1/tau)."""
    s_pos, s_neg = scores(6, 8, 6, torch.float64)
    m = s_neg.shape[1]
    lhs = tau * (val(wl_contrastive(s_pos, s_neg, tau)) - math.log(m + 1))
    rhs = m / (m + 1) * val(wl_simple(s_pos, s_neg, 1.0 / m))
    assert abs(lhs - rhs) < 5.0 / tau
    assert abs(rhs) > 0.05  # the identity is not satisfied trivially


def test_gradient_ratio_is_eq5(close):
    """Eq. 4-5: |dL/ds_ij| / |dL/ds_ii| is the Boltzmann distribution over the negatives."""
    s_pos, s_neg = scores(4, 6, 7, torch.float64)
    g_pos, g_neg = grads(wl_contrastive(s_pos, s_neg, 0.3), s_pos, s_neg)
    ratio = g_neg.abs() / g_pos.abs().unsqueeze(1)
    close(wl_gradient_ratio(s_neg.detach(), 0.3), ratio, torch.float64)
    close(wl_gradient_ratio(s_neg.detach(), 0.3).sum(dim=1), torch.ones(4), torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[:, :2] = False
    g_pos, g_neg = grads(wl_contrastive(s_pos, s_neg, 0.3, neg_mask=mask), s_pos, s_neg)
    close(
        wl_gradient_ratio(s_neg.detach(), 0.3, neg_mask=mask), g_neg.abs() / g_pos.abs().unsqueeze(1), torch.float64
    )  # Eq. 8


# ----------------------------------------------------------------------------- memory bank
def test_sims_from_bank_matches_loop(rows):
    q = rows(4, 5, seed=8)
    bank = rows(9, 5, seed=9, grad=False)
    idx = torch.tensor([3, 0, 8, 3])
    s_pos, s_neg = wl_sims_from_bank(q, bank, idx)
    assert s_pos.shape == (4,) and s_neg.shape == (4, 8)
    for i in range(4):
        assert val(s_pos[i]) == pytest.approx(val(q[i] @ bank[idx[i]]), abs=1e-14)
        expected = [val(q[i] @ bank[j]) for j in range(9) if j != int(idx[i])]
        assert s_neg[i].tolist() == pytest.approx(expected, abs=1e-14)
    wl_contrastive(s_pos, s_neg).backward()
    assert q.grad is not None and q.grad.abs().sum() > 0
    assert bank.grad is None


def test_sims_from_bank_gradient(rows):
    """Both outputs carry their gradient back to q (own entry first, middle and last)."""
    q, bank = rows(4, 3, seed=20), rows(6, 3, seed=21, grad=False)
    idx = torch.tensor([0, 5, 2, 5])
    w_pos = torch.arange(1.0, 5.0, dtype=torch.float64)
    w_neg = torch.linspace(-1.0, 2.0, 20, dtype=torch.float64).view(4, 5)

    def weighted(a):
        s_pos, s_neg = wl_sims_from_bank(a, bank, idx)
        return (w_pos * s_pos).sum() + (w_neg * s_neg).sum()

    expected = torch.stack(
        [
            w_pos[i] * bank[idx[i]]
            + sum(w_neg[i, k] * bank[j] for k, j in enumerate(j for j in range(6) if j != int(idx[i])))
            for i in range(4)
        ]
    )
    (grad,) = torch.autograd.grad(weighted(q), q)
    torch.testing.assert_close(grad, expected)
    assert torch.autograd.gradcheck(weighted, (q,), fast_mode=True)


# ----------------------------------------------------------------------------- gradcheck
def test_gradcheck_float64():
    s_pos, s_neg = scores(3, 5, 10, torch.float64)
    for fn in (
        lambda a, b: wl_contrastive(a, b, 0.4),
        lambda a, b: wl_hard(a, b, 0.4, num_hard=2),
        lambda a, b: wl_simple(a, b, 0.3),
        lambda a, b: wl_hard_simple(a, b, None, alpha=0.4),
    ):
        assert torch.autograd.gradcheck(fn, (s_pos, s_neg), fast_mode=True)


# ----------------------------------------------------------------------------- stats and errors
def test_stats_are_recorded():
    s_pos, s_neg = scores(4, 6, 11, torch.float64)
    stats = {}
    wl_hard(s_pos, s_neg, 0.2, num_hard=2, stats=stats)
    mask = torch.stack([torch.tensor([val(v) >= kth_largest(r, 2) for v in r]) for r in s_neg])
    assert float(stats["pos_sim"]) == pytest.approx(val(s_pos.mean()))
    assert float(stats["neg_sim"]) == pytest.approx(val(s_neg[mask].mean()))
    assert float(stats["neg_kept"]) == pytest.approx(2 / 6)
    assert not stats["pos_sim"].requires_grad


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda p, n: wl_contrastive(p, n, 0.0), "temperature"),
        (lambda p, n: wl_contrastive(p, n, -1.0), "temperature"),
        (lambda p, n: wl_contrastive(p[:2], n), "one row per anchor"),
        (lambda p, n: wl_contrastive(p, n[0]), "s_neg"),
        (lambda p, n: wl_contrastive(p, n, neg_mask=torch.ones(2, 2, dtype=torch.bool)), "neg_mask"),
        (lambda p, n: wl_hard(p, n, alpha=0.5, num_hard=2), "exactly one"),
        (lambda p, n: wl_hard(p, n, num_hard=7), "num_hard"),
        (lambda p, n: wl_hard(p, n, alpha=0.0), "alpha"),
        (lambda p, n: wl_simple(p, n, -0.1), "lam"),
    ],
)
def test_bad_input_raises(call, match):
    s_pos, s_neg = scores(3, 6, 12, torch.float64)
    with pytest.raises(ValueError, match=match):
        call(s_pos, s_neg)


def test_bank_bad_input_raises(rows):
    q, bank = rows(3, 4, seed=1), rows(5, 4, seed=2, grad=False)
    with pytest.raises(ValueError, match="indices"):
        wl_sims_from_bank(q, bank, torch.tensor([0, 1, 5]))
    with pytest.raises(ValueError, match="indices"):
        wl_sims_from_bank(q, bank, torch.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="embedding size"):
        wl_sims_from_bank(q, rows(5, 3, seed=2, grad=False), torch.tensor([0, 1, 2]))
