"""Alignment / uniformity, spectral, CPCL and ACA against loop references (METHODS rows 6, 7,
23-25)."""

from __future__ import annotations

import math

import pytest
import torch

from toolkit.losses.functional import aca, align, align_uniform, cpcl_a, cpcl_full, spectral, uniform
from toolkit.losses.functional.geometry import uniform_reference


# ----------------------------------------------------------------------------- loop references
def sq_dist(a, b):
    return sum((a[k] - b[k]) ** 2 for k in range(len(a)))


def ref_align(x, y, alpha):
    return sum(sq_dist(x[i], y[i]) ** (alpha / 2) for i in range(len(x))) / len(x)


def ref_cross_terms(z1, z2):
    b = len(z1)
    pos = sum(torch.dot(z1[i], z2[i]) for i in range(b)) / b
    off = sum(torch.dot(z1[i], z2[j]) ** 2 for i in range(b) for j in range(b) if i != j)
    return pos, off / (b * (b - 1))


def ref_clip(z, mu):
    """The official D(): rows with ||z|| < sqrt(mu) kept, the others rescaled to sqrt(mu)."""
    out = []
    for r in z:
        norm = torch.sqrt(sum(v * v for v in r))
        out.append(r if float(norm.detach()) < math.sqrt(mu) else r / norm * math.sqrt(mu))
    return torch.stack(out)


def ref_spectral(z1, z2, mu):
    pos, off = ref_cross_terms(ref_clip(z1, mu), ref_clip(z2, mu))
    return (-2 * pos + off) / mu


def ref_cpcl_a(z1, z2, k):
    pos, off = ref_cross_terms(z1, z2)
    return -2 * pos + k * off


def ref_cpcl_full(zbar, z1, z2, k, alpha, detach_target=False):
    b = len(z1)
    proj = 0.0
    for i in range(b):
        target = (z1[i] + z2[i]) / 2
        if detach_target:
            target = target.detach()
        proj = proj + sq_dist(zbar[i], target)
    return ref_cpcl_a(z1, z2, k) + alpha * proj / b


def ref_aca(zbar, z1, z2, k, lamb, temp, normalize_projection=False):
    """ACAPCLoss + ProjectionLoss of hanlu-nju/AugCA, row by row: each of the 2B rows holds the
    B cross-view logits and the B-1 same-view logits (self removed); the positive is the
    cross-view entry of the same image; pc = -2 mean(pos) + K mean(rest^2)."""
    b, d = z1.shape
    unit = lambda r: r / torch.sqrt(sum(v * v for v in r))  # noqa: E731
    u = [[unit(r) for r in z1], [unit(r) for r in z2]]
    pos, neg = [], []
    for view in (0, 1):
        for i in range(b):
            for j in range(b):  # cross-view block
                logit = torch.dot(u[view][i], u[1 - view][j]) / temp
                (pos if i == j else neg).append(logit)
            for j in range(b):  # same-view block without self
                if j != i:
                    neg.append(torch.dot(u[view][i], u[view][j]) / temp)
    assert len(pos) == 2 * b and len(neg) == 2 * b * (2 * b - 2)
    pc = -2 * sum(pos) / len(pos) + k * sum(v**2 for v in neg) / len(neg)
    proj = 0.0
    for i in range(b):
        target = ((z1[i] + z2[i]) / 2).detach()
        out = zbar[i]
        if normalize_projection:
            target, out = unit(target), unit(out)
        proj = proj + sq_dist(out, target)
    return pc + lamb * proj / (b * d)


def grads(loss, *xs):
    return torch.autograd.grad(loss, xs)


# ----------------------------------------------------------------------------- AU-CL
@pytest.mark.parametrize("alpha", [2.0, 1.0, 0.5])
def test_align_matches_loop_reference(dtype, close, rows, leaves, alpha):
    x, y = rows(6, 4, seed=1, dtype=dtype), rows(6, 4, seed=2, dtype=dtype)
    rx, ry = leaves(x, y)
    loss, ref = align(x, y, alpha), ref_align(rx, ry, alpha)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, x, y), grads(ref, rx, ry)):
        close(g, gr, dtype)


def test_align_at_coincident_pairs_has_finite_gradient(rows):
    x = rows(4, 3, seed=3)
    y = x.detach().clone().requires_grad_()
    for alpha in (0.5, 1.0, 2.0):
        loss = align(x, y, alpha)
        assert float(loss.detach()) == 0.0
        assert all(torch.isfinite(g).all() for g in grads(loss, x, y))


@pytest.mark.parametrize("unit,t", [(True, 2.0), (False, 2.0), (False, 0.5), (True, 30.0)])
def test_uniform_matches_loop_reference(dtype, close, rows, leaves, unit, t):
    x = rows(7, 4, seed=4, dtype=dtype, unit=unit, scale=1.0 if unit else 0.7)
    (rx,) = leaves(x)
    loss, ref = uniform(x, t), uniform_reference(rx, t)
    close(loss, ref, dtype)
    close(grads(loss, x)[0], grads(ref, rx)[0], dtype)


def test_uniform_far_apart_points_underflowing_float32(rows):
    """t ||x_i - x_j||^2 ~ 100-400: every e^{-t d^2} is below float32's smallest number, so the
    sum is taken again shifted by its maximum; value and gradient against the float64 loop."""
    x = (rows(6, 4, seed=9, dtype=torch.float32, unit=True) * 20.0).detach().requires_grad_()
    rx = x.detach().double().requires_grad_()
    loss, ref = uniform(x, 2.0), uniform_reference(rx, 2.0)
    assert float(ref.detach()) < -100.0  # the regime the test is about
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(grads(loss, x)[0].double(), grads(ref, rx)[0], rtol=1e-4, atol=1e-5)


def test_align_uniform_combines_the_terms(dtype, close, rows, leaves):
    x, y = rows(6, 3, seed=5, dtype=dtype), rows(6, 3, seed=6, dtype=dtype)
    stats: dict = {}
    loss = align_uniform(x, y, align_weight=0.5, uniform_weight=2.0, alpha=2.0, t=2.0, stats=stats)
    rx, ry = leaves(x, y)
    la, lu = ref_align(rx, ry, 2.0), (uniform_reference(rx, 2.0) + uniform_reference(ry, 2.0)) / 2
    ref = 0.5 * la + 2.0 * lu
    close(loss, ref, dtype)
    close(stats["align_loss"], la, dtype)
    close(stats["uniform_loss"], lu, dtype)
    for g, gr in zip(grads(loss, x, y), grads(ref, rx, ry)):
        close(g, gr, dtype)


# ----------------------------------------------------------------------------- spectral / CPCL
@pytest.mark.parametrize("mu", [0.25, 1.0, 4.0])
@pytest.mark.parametrize("shape", [(10, 3), (3, 8)])  # 2d <= B and 2d > B: two routes
def test_spectral_matches_official_reference(dtype, close, rows, leaves, mu, shape):
    b, d = shape
    z1 = rows(b, d, seed=7, dtype=dtype, unit=False, scale=0.6)
    z2 = rows(b, d, seed=8, dtype=dtype, unit=False, scale=0.9)
    r1, r2 = leaves(z1, z2)
    loss, ref = spectral(z1, z2, mu), ref_spectral(r1, r2, mu)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, z1, z2), grads(ref, r1, r2)):
        close(g, gr, dtype)


def test_spectral_strict_clip_test_projects_rows_on_the_boundary(leaves):
    """A row with norm exactly sqrt(mu) is rescaled (strict `<`), so its gradient has no
    radial component, unlike a row just inside."""
    z1 = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.5], [0.3, -0.2, 1.0]], dtype=torch.float64)
    z2 = torch.tensor([[1.0, 1.0, 0.0], [0.5, 0.2, 0.1], [0.0, -1.0, 0.7]], dtype=torch.float64)
    z1.requires_grad_()
    loss = spectral(z1, z2, mu=4.0)
    (g,) = grads(loss, z1)
    assert abs(float(g[0] @ z1[0].detach())) < 1e-12
    (r1,) = leaves(z1)
    torch.testing.assert_close(g, grads(ref_spectral(r1, z2, 4.0), r1)[0])
    inside = z1.detach().clone()
    inside[0, 0] = 2.0 - 1e-9
    inside.requires_grad_()
    (g_in,) = grads(spectral(inside, z2, mu=4.0), inside)
    (r_in,) = leaves(inside)
    torch.testing.assert_close(g_in, grads(ref_spectral(r_in, z2, 4.0), r_in)[0])
    assert abs(float(g_in[0] @ inside[0].detach())) > 1e-3  # and it has a radial part


@pytest.mark.parametrize("k", [1.0, 2.0, 5.0])
@pytest.mark.parametrize("shape", [(10, 3), (3, 8)])
def test_cpcl_a_matches_loop_reference(dtype, close, rows, leaves, k, shape):
    z1, z2 = rows(*shape, seed=9, dtype=dtype), rows(*shape, seed=10, dtype=dtype)
    r1, r2 = leaves(z1, z2)
    loss, ref = cpcl_a(z1, z2, k), ref_cpcl_a(r1, r2, k)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, z1, z2), grads(ref, r1, r2)):
        close(g, gr, dtype)


def test_cpcl_a_k1_equals_spectral_mu1_on_unit_vectors(dtype, close, rows):
    """Both equal -2/B sum_i z1_i.z2_i + 1/(B(B-1)) sum_{i!=j} (z1_i.z2_j)^2 (CPCL Eq. 5 with
    K = 1; Spectral with mu = 1 clips nothing on unit rows), written here with plain loops."""
    z1, z2 = rows(8, 5, seed=11, dtype=dtype), rows(8, 5, seed=12, dtype=dtype)
    a, b = z1.detach().double().tolist(), z2.detach().double().tolist()
    dot = [[sum(x * y for x, y in zip(a[i], b[j])) for j in range(8)] for i in range(8)]
    plain = -2.0 / 8 * sum(dot[i][i] for i in range(8)) + sum(
        dot[i][j] ** 2 for i in range(8) for j in range(8) if i != j
    ) / (8 * 7)
    close(cpcl_a(z1, z2, K=1.0), plain, dtype)
    close(spectral(z1, z2, mu=1.0), plain, dtype)


@pytest.mark.parametrize("detach_target", [False, True])
def test_cpcl_full_matches_loop_reference(dtype, close, rows, leaves, detach_target):
    zbar, z1, z2 = (rows(5, 4, seed=s, dtype=dtype) for s in (13, 14, 15))
    stats: dict = {}
    loss = cpcl_full(zbar, z1, z2, K=2.0, alpha=0.2, detach_target=detach_target, stats=stats)
    rb, r1, r2 = leaves(zbar, z1, z2)
    ref = ref_cpcl_full(rb, r1, r2, 2.0, 0.2, detach_target)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, zbar, z1, z2), grads(ref, rb, r1, r2)):
        close(g, gr, dtype)
    close(stats["proj_loss"], (ref - ref_cpcl_a(r1, r2, 2.0)) / 0.2, dtype)


@pytest.mark.parametrize("normalize_projection", [False, True])
@pytest.mark.parametrize("k,lamb,temp", [(1.0, 1.0, 0.5), (2.0, 0.1, 0.2)])
def test_aca_matches_released_code_reference(dtype, close, rows, leaves, normalize_projection, k, lamb, temp):
    zbar, z1, z2 = (rows(4, 3, seed=s, dtype=dtype, unit=False) for s in (16, 17, 18))
    loss = aca(zbar, z1, z2, K=k, lamb=lamb, temperature=temp, normalize_projection=normalize_projection)
    rb, r1, r2 = leaves(zbar, z1, z2)
    ref = ref_aca(rb, r1, r2, k, lamb, temp, normalize_projection)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, zbar, z1, z2), grads(ref, rb, r1, r2)):
        close(g, gr, dtype)


def test_stats_of_cross_view_losses(close, rows):
    z1, z2 = rows(5, 3, seed=19), rows(5, 3, seed=20)
    stats: dict = {}
    cpcl_a(z1, z2, stats=stats)
    sims = (z1 @ z2.t()).detach()
    close(stats["pos_sim"], float(sims.diagonal().mean()), torch.float64)
    close(stats["neg_sim"], float(sum(sims[i, j] for i in range(5) for j in range(5) if i != j)) / 20, torch.float64)


# ----------------------------------------------------------------------------- gradcheck
def test_gradcheck_geometry(rows):
    x, y, w = rows(5, 3, seed=21), rows(5, 3, seed=22), rows(5, 3, seed=23)
    gc = torch.autograd.gradcheck
    assert gc(lambda a, b: align(a, b, 1.0), (x, y))
    assert gc(lambda a: uniform(a * 1.3, 2.0), (x,))
    assert gc(lambda a, b: align_uniform(a, b), (x, y))
    # mu = 1 and scales 0.5 / 1.5: rows well inside / outside the clipping radius
    assert gc(lambda a, b: spectral(0.5 * a, 1.5 * b, 1.0), (x, y))
    assert gc(lambda a, b: cpcl_a(a, b, 2.0), (x, y))
    assert gc(lambda c, a, b: cpcl_full(c, a, b, 2.0, 1.0), (w, x, y))
    # ACA's detached target: the numerical derivative sees it, so check pc alone in z1, z2
    assert gc(lambda a, b: aca(w, a, b, lamb=0.0), (x, y))
    assert gc(lambda c: aca(c, x, y, lamb=1.0), (w,))


# ----------------------------------------------------------------------------- bad input
def _z(n=4, d=3):
    return torch.randn(n, d)


BAD = [
    ("align shape", lambda: align(_z(4), _z(5)), "x and y"),
    ("align alpha", lambda: align(_z(), _z(), 0.0), "alpha"),
    ("uniform one row", lambda: uniform(_z(1)), "x"),
    ("uniform t", lambda: uniform(_z(), -2.0), "t"),
    ("au weight", lambda: align_uniform(_z(), _z(), align_weight=-1.0), "align_weight"),
    ("au empty", lambda: align_uniform(_z(0), _z(0)), "x"),
    ("spectral mu", lambda: spectral(_z(), _z(), 0.0), "mu"),
    ("spectral mu nan", lambda: spectral(_z(), _z(), float("nan")), "mu"),
    ("spectral shape", lambda: spectral(_z(4, 3), _z(4, 2)), "z1 and z2"),
    ("cpcl K", lambda: cpcl_a(_z(), _z(), K=0.0), "K"),
    ("cpcl one row", lambda: cpcl_a(_z(1), _z(1)), "z1"),
    ("cpcl_full zbar", lambda: cpcl_full(_z(3), _z(), _z()), "zbar"),
    ("cpcl_full alpha", lambda: cpcl_full(_z(), _z(), _z(), alpha=-1.0), "alpha"),
    ("aca T", lambda: aca(_z(), _z(), _z(), temperature=0.0), "temperature"),
    ("aca lamb", lambda: aca(_z(), _z(), _z(), lamb=-0.5), "lamb"),
]


@pytest.mark.parametrize("call,needle", [(c, n) for _, c, n in BAD], ids=[i for i, _, _ in BAD])
def test_bad_input_raises_value_error(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()
