"""BYOL, SimSiam, MoCo v3, Barlow Twins, VICReg, SwAV (and its Sinkhorn-Knopp), DINO, SupCon and
NNCLR against float64 references written from the equations with loops over rows, dimensions,
views and anchors (values and gradients), plus stop-gradients, Sinkhorn's marginals, SupCon's
anchors without positives and known values (random scales, half precision, host reads and
argument errors: test_family_losses_inputs.py; the references: family_references.py)."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from tests.core.family_references import (
    agree,
    no_gradient_reaches,
    randn,
    ref_barlow_twins,
    ref_byol,
    ref_dino,
    ref_moco_v3,
    ref_nnclr,
    ref_simsiam,
    ref_sinkhorn,
    ref_supcon,
    ref_swav,
    ref_vicreg,
)
from toolkit.losses.functional import (
    _kernel,
    barlow_twins,
    byol,
    check_supcon_positives,
    dino,
    moco_v3,
    nnclr,
    simsiam,
    sinkhorn_knopp,
    supcon,
    swav,
    vicreg,
)


# ----------------------------------------------------------------------------- BYOL, SimSiam
@pytest.mark.parametrize("scale", [0.1, 1.0, 30.0])
@pytest.mark.parametrize("n", [1, 5])
def test_byol_and_simsiam_match_loops(dtype, close, leaves, scale, n):
    p, z = randn(n, 4, seed=1, dtype=dtype, scale=scale), randn(n, 4, seed=2, dtype=dtype, scale=2.0)
    rp, rz = leaves(p, z)
    agree(close, dtype, byol(p, z), ref_byol(rp, rz), (p,), (rp,))
    agree(close, dtype, simsiam(p, z), ref_simsiam(rp, rz), (p,), (rp,))


def test_byol_and_simsiam_detach_the_target():
    p, z = randn(4, 3, seed=3), randn(4, 3, seed=4)
    no_gradient_reaches(byol(p, z), z)
    no_gradient_reaches(simsiam(p, z), z)


def test_byol_and_simsiam_known_values(close):
    x = randn(6, 5, seed=5, grad=False)
    close(byol(x, 3.0 * x), 0.0, torch.float64)
    close(byol(x, -x), 4.0, torch.float64)
    close(simsiam(x, 2.0 * x), -1.0, torch.float64)
    stats: dict = {}
    byol(x, x, stats=stats)
    close(stats["pos_sim"], 1.0, torch.float64)


# ----------------------------------------------------------------------------- MoCo v3
@pytest.mark.parametrize("tau", [0.05, 0.2, 1.0])
@pytest.mark.parametrize("n", [2, 6])
def test_moco_v3_matches_loop(dtype, close, leaves, tau, n):
    q, k = randn(n, 4, seed=6, dtype=dtype, scale=3.0), randn(n, 4, seed=7, dtype=dtype)
    rq, rk = leaves(q, k)
    agree(close, dtype, moco_v3(q, k, tau), ref_moco_v3(rq, rk, tau), (q,), (rq,))
    no_gradient_reaches(moco_v3(q, k, tau), k)


def test_moco_v3_known_value_and_records(close):
    """Orthonormal q = k: l = log(e^{1/tau} + N - 1) - 1/tau, times 2 tau."""
    n, tau = 4, 0.2
    q = torch.eye(n, dtype=torch.float64)
    stats: dict = {}
    close(
        moco_v3(q, 5.0 * q, tau, stats=stats), 2 * tau * (math.log(math.exp(1 / tau) + n - 1) - 1 / tau), torch.float64
    )
    close(stats["pos_sim"], 1.0, torch.float64)
    close(stats["neg_sim"], 0.0, torch.float64)


# ----------------------------------------------------------------------------- Barlow Twins, VICReg
@pytest.mark.parametrize("lambd", [0.0, 0.0051, 0.5])
@pytest.mark.parametrize("n,d,scale", [(3, 3, 1.0), (6, 4, 0.01), (7, 3, 20.0)])
def test_barlow_twins_matches_loop(dtype, close, leaves, lambd, n, d, scale):
    z1, z2 = randn(n, d, seed=8, dtype=dtype, scale=scale), randn(n, d, seed=9, dtype=dtype, scale=scale)
    r1, r2 = leaves(z1, z2)
    agree(close, dtype, barlow_twins(z1, z2, lambd), ref_barlow_twins(r1, r2, lambd), (z1, z2), (r1, r2))


def test_barlow_twins_matches_batchnorm_without_affine(close):
    z1, z2 = randn(8, 5, seed=10, grad=False), randn(8, 5, seed=11, grad=False)
    bn = torch.nn.BatchNorm1d(5, affine=False).double().train()
    c = bn(z1).t() @ bn(z2) / 8
    expected = (1 - c.diagonal()).square().sum() + 0.0051 * (c.square().sum() - c.diagonal().square().sum())
    close(barlow_twins(z1, z2), expected, torch.float64)


def hadamard_columns(scale=1.0):
    """4 x 3, columns of mean 0, orthogonal, biased variance scale^2."""
    h = [[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]]
    return torch.tensor(h, dtype=torch.float64) * scale


def test_barlow_twins_known_values(close):
    """Identical, decorrelated views: C = I up to the BatchNorm eps, so the loss is
    D (eps / (var + eps))^2, and zero in the limit."""
    z = hadamard_columns()
    stats: dict = {}
    close(barlow_twins(z, z, stats=stats), 3 * (1e-5 / (1 + 1e-5)) ** 2, torch.float64)
    close(stats["off_diag"], 0.0, torch.float64)
    assert float(barlow_twins(z * 1e3, z * 1e3)) < 1e-20


@pytest.mark.parametrize("coeffs", [(25.0, 25.0, 1.0), (1.0, 0.0, 3.0), (0.0, 2.0, 0.0)])
@pytest.mark.parametrize("n,d,scale", [(2, 3, 1.0), (6, 4, 0.3), (5, 3, 4.0)])
def test_vicreg_matches_loop(dtype, close, leaves, coeffs, n, d, scale):
    z1, z2 = randn(n, d, seed=12, dtype=dtype, scale=scale), randn(n, d, seed=13, dtype=dtype, scale=scale)
    r1, r2 = leaves(z1, z2)
    agree(close, dtype, vicreg(z1, z2, *coeffs), ref_vicreg(r1, r2, *coeffs), (z1, z2), (r1, r2))


def test_vicreg_known_values(close):
    z = hadamard_columns(2.0)  # unbiased variance 16/3 > 1, no covariance
    close(vicreg(z, z.clone()), 0.0, torch.float64)
    collapsed = torch.ones(5, 4, dtype=torch.float64)
    stats: dict = {}
    close(vicreg(collapsed, collapsed, stats=stats), 25.0 * (1 - math.sqrt(1e-4)), torch.float64)
    close(stats["variance"], 1 - math.sqrt(1e-4), torch.float64)
    close(stats["invariance"], 0.0, torch.float64)
    close(stats["covariance"], 0.0, torch.float64)


# ----------------------------------------------------------------------------- Sinkhorn, SwAV
@pytest.mark.parametrize("eps", [0.05, 0.2, 1.0])
@pytest.mark.parametrize("iterations", [1, 3, 10])
@pytest.mark.parametrize("b,k", [(3, 5), (8, 4)])
def test_sinkhorn_matches_loop(dtype, close, eps, iterations, b, k):
    scores = (
        torch.nn.functional.normalize(randn(b, 6, seed=14), dim=1)
        @ torch.nn.functional.normalize(randn(k, 6, seed=15), dim=1).t()
    )
    codes = sinkhorn_knopp(scores.detach().to(dtype), eps, iterations)
    assert codes.dtype == dtype and not codes.requires_grad
    close(codes, ref_sinkhorn(scores, eps, iterations), dtype)


def test_sinkhorn_marginals():
    scores = randn(12, 5, seed=16, scale=0.5, grad=False)
    codes = sinkhorn_knopp(scores, 0.05, 3)
    torch.testing.assert_close(codes.sum(dim=1), torch.ones(12, dtype=torch.float64), rtol=0, atol=1e-12)
    assert (codes >= 0).all()
    # enough rounds: every prototype gets the equal share B/K of the codes (Q's rows: 1/K)
    converged = sinkhorn_knopp(scores, 0.05, 500)
    torch.testing.assert_close(converged.sum(dim=1), torch.ones(12, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(converged.sum(dim=0), torch.full((5,), 12 / 5, dtype=torch.float64), rtol=0, atol=1e-9)


def test_sinkhorn_shift_keeps_large_scores_finite_and_exact(close):
    """s / eps up to 200: exp overflows float32 without the shift; the float64 loop (no shift)
    still represents it, and the shifted float32 codes equal it."""
    scores = randn(6, 4, seed=17, scale=4.0, grad=False).clamp(-10, 10)
    codes = sinkhorn_knopp(scores.float(), 0.05, 3)
    assert torch.isfinite(codes).all()
    close(codes, ref_sinkhorn(scores, 0.05, 3), torch.float32, atol=1e-5)


def test_sinkhorn_all_reduce_gives_the_global_batch_codes():
    """Two ranks as threads, all_reduce a summing barrier: each rank's codes are its rows of the
    single-process codes of the whole batch (the halves have different maxima)."""
    scores = randn(10, 4, seed=18, grad=False)
    scores[:5] += 1.5
    halves = [scores[:6], scores[6:]]  # unequal local batches
    barrier, box, out = threading.Barrier(2), [None, None], [None, None]

    def rank(r):
        def all_reduce(t):
            box[r] = t.clone()
            barrier.wait()
            total = box[0] + box[1]
            barrier.wait()
            return total

        out[r] = sinkhorn_knopp(halves[r], 0.05, 3, all_reduce=all_reduce)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.testing.assert_close(torch.cat(out), sinkhorn_knopp(scores, 0.05, 3), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(torch.cat(out), ref_sinkhorn(scores, 0.05, 3), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("tau,eps,iterations", [(0.1, 0.05, 3), (0.5, 0.2, 1), (1.0, 0.05, 5)])
@pytest.mark.parametrize("b,k", [(2, 3), (6, 5)])
def test_swav_matches_loop(dtype, close, leaves, tau, eps, iterations, b, k):
    s1, s2 = randn(b, k, seed=19, dtype=dtype, scale=0.5), randn(b, k, seed=20, dtype=dtype, scale=0.5)
    r1, r2 = leaves(s1, s2)
    agree(close, dtype, swav(s1, s2, tau, eps, iterations), ref_swav(r1, r2, tau, eps, iterations), (s1, s2), (r1, r2))


def test_swav_codes_carry_no_gradient(close):
    """With constant codes, d loss / d s1 = -(q2 - softmax(s1 / tau)) / (2 B tau) exactly; a
    gradient through the codes would add to it."""
    s1, s2 = randn(5, 4, seed=21), randn(5, 4, seed=22)
    tau = 0.3
    (g1,) = torch.autograd.grad(swav(s1, s2, tau), (s1,))
    q2 = sinkhorn_knopp(s2, 0.05, 3)
    close(g1, -(q2 - torch.softmax(s1.detach() / tau, dim=1)) / (2 * 5 * tau), torch.float64)


def test_swav_known_value(close):
    """Equal scores: uniform codes and predictions, loss log K."""
    s = torch.zeros(4, 6, dtype=torch.float64)
    close(swav(s, s), math.log(6), torch.float64)
    close(sinkhorn_knopp(s), torch.full((4, 6), 1 / 6, dtype=torch.float64), torch.float64)


# ----------------------------------------------------------------------------- DINO
@pytest.mark.parametrize("tau_s,tau_t", [(0.1, 0.04), (0.1, 0.07), (1.0, 0.5)])
@pytest.mark.parametrize("vs,vt,b,k", [(2, 2, 3, 4), (4, 2, 2, 5), (3, 1, 2, 3)])
def test_dino_matches_loop(dtype, close, leaves, tau_s, tau_t, vs, vt, b, k):
    student = randn(vs, b, k, seed=23, dtype=dtype)
    teacher = randn(vt, b, k, seed=24, dtype=dtype, scale=0.3)
    center = randn(k, seed=25, dtype=dtype, scale=0.1)
    (rs,) = leaves(student)
    loss = dino(student, teacher, center, tau_s, tau_t)
    agree(close, dtype, loss, ref_dino(rs, teacher, center, tau_s, tau_t), (student,), (rs,))
    no_gradient_reaches(dino(student, teacher, center, tau_s, tau_t), teacher, center)


def test_dino_center_as_row_and_known_value(close):
    teacher = randn(2, 3, 5, seed=26)
    center = randn(5, seed=27, grad=False)
    student = randn(4, 3, 5, seed=28, grad=False)
    close(dino(student, teacher, center[None]), dino(student, teacher, center), torch.float64)
    # a uniform student: every cross-entropy is log K, whatever the teacher
    stats: dict = {}
    close(dino(torch.zeros(4, 3, 5, dtype=torch.float64), teacher, center, stats=stats), math.log(5), torch.float64)
    assert 0 < float(stats["teacher_entropy"]) < math.log(5)


# ----------------------------------------------------------------------------- SupCon
@pytest.mark.parametrize("tau,base", [(0.07, 0.07), (0.1, 0.07), (0.5, 1.0)])
@pytest.mark.parametrize("labels,views", [([0, 1, 0, 2, 1], 2), ([3, 3, 1, 1, 1], 1), ([0, 1, 2], 3)])
def test_supcon_matches_loop(dtype, close, leaves, tau, base, labels, views):
    features = randn(len(labels), views, 4, seed=29, dtype=dtype, scale=2.0)
    y = torch.tensor(labels)
    (rf,) = leaves(features)
    stats: dict = {}
    ref, without = ref_supcon(rf, y, tau, base)
    agree(close, dtype, supcon(features, y, tau, base, stats), ref, (features,), (rf,))
    assert int(stats["supcon_anchors_without_positive"]) == without == 0
    assert stats["supcon_anchors"] == len(labels) * views


def test_supcon_excludes_and_counts_anchors_without_positive(close, leaves):
    """Single view, labels 0 0 1 2 2 7: the anchors of 1 and 7 have no positive."""
    features = randn(6, 1, 3, seed=30)
    y = torch.tensor([0, 0, 1, 2, 2, 7])
    (rf,) = leaves(features)
    stats: dict = {}
    ref, without = ref_supcon(rf, y, 0.1, 0.07)
    loss = supcon(features, y, 0.1, 0.07, stats)
    agree(close, torch.float64, loss, ref, (features,), (rf,))
    assert without == 2
    count = stats["supcon_anchors_without_positive"]
    assert isinstance(count, torch.Tensor) and int(count) == 2
    check_supcon_positives(stats)  # some anchors have positives: no error


def test_supcon_with_no_positive_at_all_raises():
    features = randn(4, 1, 3, seed=31)
    with pytest.raises(ValueError, match="positive"):
        supcon(features, torch.arange(4))


def test_supcon_off_the_cpu_path_is_nan_and_the_helper_raises(monkeypatch):
    """The path a GPU takes (no host read): the loss is NaN, never 0, and the records raise."""
    monkeypatch.setattr(_kernel, "ROW_MAX_DEVICES", ("cuda", "cpu"))
    stats: dict = {}
    loss = supcon(randn(4, 1, 3, seed=32), torch.arange(4), stats=stats)
    assert torch.isnan(loss)
    assert int(stats["supcon_anchors_without_positive"]) == 4
    with pytest.raises(ValueError, match="positive"):
        check_supcon_positives(stats)


def test_supcon_known_value(close):
    """Collapsed features: every log-probability is -log(A - 1)."""
    features = torch.ones(3, 2, 4, dtype=torch.float64)
    close(supcon(features, torch.tensor([0, 1, 0]), 0.1, 0.05), (0.1 / 0.05) * math.log(5), torch.float64)


# ----------------------------------------------------------------------------- NNCLR
@pytest.mark.parametrize("tau", [0.05, 0.1, 1.0])
@pytest.mark.parametrize("b,m", [(2, 3), (5, 9)])
def test_nnclr_matches_loop(dtype, close, leaves, tau, b, m):
    z1, z2 = randn(b, 4, seed=33, dtype=dtype, scale=3.0), randn(b, 4, seed=34, dtype=dtype)
    support = randn(m, 4, seed=35, dtype=dtype, scale=0.5)
    r1, r2 = leaves(z1, z2)
    agree(close, dtype, nnclr(z1, z2, support, tau), ref_nnclr(r1, r2, support.double(), tau), (z2,), (r2,))
    no_gradient_reaches(nnclr(z1, z2, support.requires_grad_(), tau), z1, support)


def test_nnclr_known_value(close):
    """The support holds the normalised z1 (and others): the neighbour is z1 itself; with
    orthonormal z1 = z2 the loss is log(e^{1/tau} + B - 1) - 1/tau."""
    b, tau = 4, 0.1
    z = torch.eye(b, 6, dtype=torch.float64)
    support = torch.cat([randn(5, 6, seed=36, grad=False) * 0.01, 2 * z])
    stats: dict = {}
    close(nnclr(3 * z, z, support, tau, stats=stats), math.log(math.exp(1 / tau) + b - 1) - 1 / tau, torch.float64)
    close(stats["nn_sim"], 1.0, torch.float64)
