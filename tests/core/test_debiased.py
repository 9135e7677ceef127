"""DCL and HCL against loop references of the authors' formulas (METHODS rows 4-5), their limit
identities, and the score-matrix forms."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch

from toolkit.losses.functional import dcl, dcl_scores, hcl, hcl_scores, nt_xent
from toolkit.losses.functional.debiased import dcl_reference


# ----------------------------------------------------------------------------- loop references
def ref_ng(pos, negs, sims, n, tau, tau_plus, beta, clamp, exp=torch.exp):
    """Ng of chingyaoc/DCL (beta None) or joshr17/HCL: (-tau+ N pos + R) / (1 - tau+), clamp.
    ``exp``: torch.exp on 0-d tensors, or mpmath.exp on mpf numbers (any exponent)."""
    if beta is None:
        r = sum(negs)
    else:
        imps = [exp(beta * s / tau) for s in sims]
        r = sum(i * g for i, g in zip(imps, negs)) / (sum(imps) / n)
    ng = (-tau_plus * n * pos + r) / (1 - tau_plus)
    if clamp:
        floor = n * exp(-1 / tau) if exp is mpmath.exp else n * math.exp(-1 / tau)
        ng = torch.clamp(ng, min=floor) if torch.is_tensor(ng) else max(ng, floor)
    return ng


def ref_in_batch(z1, z2, tau, tau_plus, beta=None, clamp=True, dot=torch.dot, exp=torch.exp, log=torch.log):
    """The 2B-form loop; ``dot, exp, log`` from mpmath (rows as lists of mpf) give the loss at
    any precision, where e^{s/tau} overflows float64."""
    z = list(z1) + list(z2)
    m, b = len(z), len(z1)
    n = m - 2
    total = 0.0
    for a in range(m):
        p = (a + b) % m
        pos = exp(dot(z[a], z[p]) / tau)
        sims = [dot(z[a], z[c]) for c in range(m) if c not in (a, p)]
        negs = [exp(s / tau) for s in sims]
        ng = ref_ng(pos, negs, sims, n, tau, tau_plus, beta, clamp, exp)
        total = total - log(pos / (pos + ng))
    return total / m


def ref_in_batch_mp(z1, z2, tau, tau_plus, beta=None):
    """Value and gradient of :func:`ref_in_batch` in mpmath at 60 digits: the gradient by
    mpmath's numerical differentiation, one coordinate at a time (exact to ~1e-20 here)."""
    with mpmath.workdps(60):
        flat = [mpmath.mpf(float(v)) for v in torch.cat([z1, z2]).detach().flatten()]
        b, d = z1.shape

        def loss(values):
            rows = [values[i * d : (i + 1) * d] for i in range(2 * b)]
            return ref_in_batch(
                rows[:b], rows[b:], tau, tau_plus, beta, dot=mpmath.fdot, exp=mpmath.exp, log=mpmath.log
            )

        def partial(j):
            return mpmath.diff(lambda t: loss(flat[:j] + [t] + flat[j + 1 :]), flat[j])

        value = float(loss(flat))
        g = torch.tensor([float(partial(j)) for j in range(len(flat))], dtype=torch.float64)
    return torch.tensor(value, dtype=torch.float64), g.view(2 * b, d)


def ref_scores(s, pos_mask, valid, tau, tau_plus, beta=None, clamp=True):
    per_anchor = []
    for a in range(s.shape[0]):
        ps = [c for c in range(s.shape[1]) if pos_mask[a][c]]
        if not ps:
            continue
        sims = [s[a, c] for c in range(s.shape[1]) if valid[a][c] and not pos_mask[a][c]]
        negs = [torch.exp(x / tau) for x in sims]
        losses = []
        for p in ps:
            pos = torch.exp(s[a, p] / tau)
            ng = ref_ng(pos, negs, sims, len(sims), tau, tau_plus, beta, clamp)
            losses.append(-torch.log(pos / (pos + ng)))
        per_anchor.append(sum(losses) / len(losses))
    return sum(per_anchor) / len(per_anchor)


def grads(loss, *xs):
    return torch.autograd.grad(loss, xs)


def clamped_pair(dtype=torch.float64):
    """Positives almost identical, negatives spread: with tau+ = 0.5 the debiased estimate is
    negative for every anchor, so the clamp decides (the case the authors' clamp exists for)."""
    g = torch.Generator().manual_seed(3)
    base = torch.eye(6, dtype=torch.float64)[:5] + 0.05 * torch.randn(5, 6, generator=g, dtype=torch.float64)
    noisy = base + 0.02 * torch.randn(5, 6, generator=g, dtype=torch.float64)
    z1 = base / base.norm(dim=1, keepdim=True)
    z2 = noisy / noisy.norm(dim=1, keepdim=True)
    return z1.to(dtype).requires_grad_(), z2.to(dtype).requires_grad_()


# ----------------------------------------------------------------------------- in-batch
@pytest.mark.parametrize("tau,tau_plus", [(0.5, 0.1), (0.2, 0.05), (1.0, 0.3)])
def test_dcl_matches_loop_reference(dtype, close, rows, leaves, tau, tau_plus):
    z1, z2 = rows(6, 5, seed=1, dtype=dtype), rows(6, 5, seed=2, dtype=dtype)
    r1, r2 = leaves(z1, z2)
    loss, ref = dcl(z1, z2, tau, tau_plus), ref_in_batch(r1, r2, tau, tau_plus)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, z1, z2), grads(ref, r1, r2)):
        close(g, gr, dtype)


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_hcl_matches_loop_reference(dtype, close, rows, leaves, beta):
    z1, z2 = rows(6, 5, seed=3, dtype=dtype), rows(6, 5, seed=4, dtype=dtype)
    r1, r2 = leaves(z1, z2)
    loss, ref = hcl(z1, z2, 0.5, 0.1, beta), ref_in_batch(r1, r2, 0.5, 0.1, beta=beta)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, z1, z2), grads(ref, r1, r2)):
        close(g, gr, dtype)


@pytest.mark.parametrize("beta", [None, 1.0])
def test_clamp_active_matches_reference(dtype, close, leaves, beta):
    z1, z2 = clamped_pair(dtype)
    stats: dict = {}
    loss = dcl(z1, z2, 0.5, 0.5, stats=stats) if beta is None else hcl(z1, z2, 0.5, 0.5, beta, stats=stats)
    assert stats["clamp_active"] == 1.0
    r1, r2 = leaves(z1, z2)
    ref = dcl_reference(r1, r2, 0.5, 0.5, beta)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, z1, z2), grads(ref, r1, r2)):
        close(g, gr, dtype)


def test_clamp_off_raises_instead_of_nan():
    z1, z2 = clamped_pair()
    with pytest.raises(ValueError, match="clamp"):
        dcl(z1, z2, 0.5, 0.5, clamp=False)
    # where the estimate stays positive, clamp=False is the unclamped formula
    z1, z2 = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    z1, z2 = z1 / z1.norm(dim=1, keepdim=True), z2 / z2.norm(dim=1, keepdim=True)
    torch.testing.assert_close(dcl(z1, z2, 0.5, 0.01, clamp=False), dcl_reference(z1, z2, 0.5, 0.01, clamp=False))


def test_extreme_logits_match_the_loop_at_60_digits(close, rows):
    """Non-unit rows (norms ~6) and tau = 0.01: logits in the thousands, e^{s/tau} (and HCL's
    e^{2s/tau}) overflow float64; the loop in mpmath has no overflow. Value and gradients
    at float64 round-off."""
    z1, z2 = rows(5, 4, seed=5, unit=False, scale=3.0), rows(5, 4, seed=6, unit=False, scale=3.0)
    for tau_plus, beta in ((0.1, None), (0.1, 2.0), (0.0, None)):
        loss = dcl(z1, z2, 0.01, tau_plus) if beta is None else hcl(z1, z2, 0.01, tau_plus, beta)
        ref, g_ref = ref_in_batch_mp(z1, z2, 0.01, tau_plus, beta)
        close(loss, ref, torch.float64)
        close(torch.cat(grads(loss, z1, z2)), g_ref, torch.float64)


@pytest.mark.parametrize("tau", [0.5, 0.05, 0.02])
def test_hcl_beta_one_float32_against_float64_loop(rows, tau):
    """beta = 1 is the kernel's (2c, c) path (E_2c = E_c^2, the GEMM at c). Non-unit rows and
    small tau put some rows far below their Cauchy-Schwarz shift, so the exact-row fallback
    runs too; float32 value and gradients against the float64 loop reference."""
    z1 = rows(6, 5, seed=11, unit=False, dtype=torch.float32)  # norms ~0.9-3: the reference
    # stays finite in float64 down to tau = 0.02 (e^{2s/tau} < e^{709})
    z2 = rows(6, 5, seed=12, unit=False, dtype=torch.float32)
    r1, r2 = (z.detach().double().requires_grad_() for z in (z1, z2))
    loss = hcl(z1, z2, tau, 0.1, beta=1.0)
    ref = ref_in_batch(r1, r2, tau, 0.1, beta=1.0)
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=2e-5, atol=1e-5)
    for g, gr in zip(grads(loss, z1, z2), grads(ref, r1, r2)):
        torch.testing.assert_close(g.double(), gr, rtol=2e-4, atol=1e-4)


# ----------------------------------------------------------------------------- limit identities
def test_limits_reduce_to_nt_xent_on_unit_vectors(dtype, close, rows):
    z1, z2 = rows(7, 4, seed=7, dtype=dtype), rows(7, 4, seed=8, dtype=dtype)
    ref = nt_xent(z1, z2, 0.3)
    g_ref = grads(ref, z1, z2)
    for loss in (dcl(z1, z2, 0.3, tau_plus=0.0), hcl(z1, z2, 0.3, tau_plus=0.0, beta=0.0)):
        close(loss, ref, dtype)
        for g, gr in zip(grads(loss, z1, z2), g_ref):
            close(g, gr, dtype)
    # HCL at beta = 0 is DCL for any tau+
    close(hcl(z1, z2, 0.3, 0.2, beta=0.0), dcl(z1, z2, 0.3, 0.2), dtype)


def test_hcl_tau_plus_zero_never_clamps_on_unit_vectors(rows):
    z1, z2 = rows(6, 3, seed=9), rows(6, 3, seed=10)
    stats: dict = {}
    hcl(z1, z2, 0.1, 0.0, beta=3.0, stats=stats)
    assert stats["clamp_active"] == 0.0


def test_limit_condition_clamp_can_bite_off_the_sphere():
    """With s_ab < -1 (non-unit rows) mean_b e^{s_ab/tau} < e^{-1/tau}: the clamp is active at
    tau+ = 0, so DCL differs from NT-Xent unless clamp=False. This is the documented condition."""
    g = torch.Generator().manual_seed(0)
    base = torch.tensor([[3.0, 0.0], [-3.0, 0.0]], dtype=torch.float64)
    z1 = base + 0.01 * torch.randn(2, 2, generator=g, dtype=torch.float64)
    z2 = base + 0.01 * torch.randn(2, 2, generator=g, dtype=torch.float64)
    stats: dict = {}
    clamped = dcl(z1, z2, 5.0, 0.0, stats=stats)
    assert stats["clamp_active"] == 1.0
    assert float(clamped - nt_xent(z1, z2, 5.0)) > 0.1  # N e^{-1/tau} replaced the negatives
    torch.testing.assert_close(clamped, ref_in_batch(z1, z2, 5.0, 0.0), rtol=1e-12, atol=0)
    torch.testing.assert_close(dcl(z1, z2, 5.0, 0.0, clamp=False), nt_xent(z1, z2, 5.0))


# ----------------------------------------------------------------------------- score forms
def _simclr_masks(b):
    idx = torch.arange(2 * b)
    pos = torch.zeros(2 * b, 2 * b, dtype=torch.bool)
    pos[idx, (idx + b) % (2 * b)] = True
    return pos, ~torch.eye(2 * b, dtype=torch.bool)


@pytest.mark.parametrize("beta", [None, 0.0, 1.5])
def test_score_forms_on_simclr_matrix_equal_in_batch(dtype, close, rows, beta):
    b = 5
    z1, z2 = rows(b, 4, seed=11, dtype=dtype), rows(b, 4, seed=12, dtype=dtype)
    z = torch.cat([z1, z2])
    pos, valid = _simclr_masks(b)
    if beta is None:
        a, ref = dcl_scores(z @ z.t(), pos, valid, 0.4, 0.1), dcl(z1, z2, 0.4, 0.1)
    else:
        a, ref = hcl_scores(z @ z.t(), pos, valid, 0.4, 0.1, beta), hcl(z1, z2, 0.4, 0.1, beta)
    close(a, ref, dtype)
    for g, gr in zip(grads(a, z1, z2), grads(ref, z1, z2)):
        close(g, gr, dtype)


@pytest.mark.parametrize("beta", [None, 1.0])
@pytest.mark.parametrize("tau_plus", [0.1, 0.6])
def test_score_forms_multi_positive_match_loop_reference(dtype, close, leaves, beta, tau_plus):
    g = torch.Generator().manual_seed(5)
    s = torch.randn(6, 9, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    pos = torch.zeros(6, 9, dtype=torch.bool)
    pos[0, 1] = pos[0, 3] = pos[1, 2] = pos[3, 0] = pos[3, 7] = pos[3, 5] = pos[5, 4] = True
    valid = (torch.rand(6, 9, generator=g) > 0.25) | pos
    valid[:, 8] = True  # every anchor keeps a negative
    pos_l, valid_l = pos.tolist(), valid.tolist()
    (rs,) = leaves(s)
    if beta is None:
        loss, ref = (dcl_scores(s, pos, valid, 0.5, tau_plus), ref_scores(rs, pos_l, valid_l, 0.5, tau_plus))
    else:
        loss, ref = (
            hcl_scores(s, pos, valid, 0.5, tau_plus, beta),
            ref_scores(rs, pos_l, valid_l, 0.5, tau_plus, beta=beta),
        )
    close(loss, ref, dtype)
    close(grads(loss, s)[0], grads(ref, rs)[0], dtype)


# ----------------------------------------------------------------------------- gradcheck
def test_gradcheck_debiased(rows):
    z1, z2 = rows(4, 3, seed=20), rows(4, 3, seed=21)
    c1, c2 = clamped_pair()
    s = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    pos = torch.zeros(4, 6, dtype=torch.bool)
    pos[0, 0] = pos[1, 1] = pos[1, 2] = pos[3, 3] = True
    gc = torch.autograd.gradcheck
    assert gc(lambda a, b: dcl(a, b, 0.4, 0.1), (z1, z2))
    assert gc(lambda a, b: hcl(a, b, 0.4, 0.1, 1.0), (z1, z2))
    assert gc(lambda a, b: hcl(a, b, 0.4, 0.2, 0.5), (z1, z2))
    assert gc(lambda a, b: dcl(a, b, 0.5, 0.5), (c1, c2))  # clamp active everywhere
    assert gc(lambda x: dcl_scores(x, pos, None, 0.5, 0.1), (s,))
    assert gc(lambda x: hcl_scores(x, pos, None, 0.5, 0.1, 1.0), (s,))


def test_hcl_second_backward_sees_the_same_saved_matrix(rows):
    """retain_graph: the beta=1 kernel turns its exponentials into the gradient matrix in the
    forward; the backward must leave that matrix intact."""
    z1, z2 = rows(5, 3, seed=22), rows(5, 3, seed=23)
    loss = hcl(z1, z2, 0.3, 0.1, 1.0)
    g1 = torch.autograd.grad(loss, (z1, z2), retain_graph=True)
    g2 = torch.autograd.grad(loss, (z1, z2))
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ----------------------------------------------------------------------------- bad input
def _z(n=4, d=3):
    return torch.randn(n, d)


_EYE = torch.eye(4, 5, dtype=torch.bool)
BAD = [
    ("tau_plus=1", lambda: dcl(_z(), _z(), tau_plus=1.0), "tau_plus"),
    ("tau_plus<0", lambda: dcl(_z(), _z(), tau_plus=-0.1), "tau_plus"),
    ("tau_plus str", lambda: hcl(_z(), _z(), tau_plus="0.1"), "tau_plus"),
    ("beta<0", lambda: hcl(_z(), _z(), beta=-1.0), "beta"),
    ("tau=0", lambda: dcl(_z(), _z(), 0.0), "temperature"),
    ("shape", lambda: dcl(_z(4), _z(3)), "z1 and z2"),
    ("one row", lambda: hcl(_z(1), _z(1)), "z1"),
    ("scores no pos", lambda: dcl_scores(_z(4, 5), torch.zeros(4, 5, dtype=torch.bool)), "positive_mask"),
    ("scores no neg", lambda: dcl_scores(_z(4, 5), _EYE, _EYE), "negative"),
    ("scores pos invalid", lambda: hcl_scores(_z(4, 5), _EYE, ~_EYE), "valid_mask"),
    ("scores mask dtype", lambda: hcl_scores(_z(4, 5), _EYE.float()), "positive_mask"),
    ("scores tau_plus", lambda: dcl_scores(_z(4, 5), _EYE, tau_plus=1.5), "tau_plus"),
]


@pytest.mark.parametrize("call,needle", [(c, n) for _, c, n in BAD], ids=[i for i, _, _ in BAD])
def test_bad_input_raises_value_error(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()
