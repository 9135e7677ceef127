"""BYOL, SimSiam, MoCo v3, Barlow Twins, VICReg, SwAV (and its Sinkhorn-Knopp), DINO, SupCon and
NNCLR against float64 references written from the equations with loops over rows, dimensions,
views and anchors (values and gradients), plus stop-gradients, Sinkhorn's marginals, SupCon's
anchors without positives, known values, argument errors and the absence of host reads."""

from __future__ import annotations

import math
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.conftest import tolerance
from toolkit.losses import functional
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
from toolkit.training.syncs import SyncCounter, cuda_branches


# ----------------------------------------------------------------------------- loop references
def dot(a, b):
    return sum(a[i] * b[i] for i in range(len(a)))


def norm(a):
    return torch.sqrt(sum(a[i] * a[i] for i in range(len(a))))


def cos(a, b):
    return dot(a, b) / (norm(a) * norm(b))


def unit(a):
    n = norm(a)
    return [a[i] / n for i in range(len(a))]


def lse(terms):
    """log sum exp of 0-d tensors, shifted by their (constant) maximum."""
    m = max(float(t.detach()) for t in terms)
    return m + torch.log(sum(torch.exp(t - m) for t in terms))


def ref_byol(p, z):
    return sum(2 - 2 * cos(p[i], z[i].detach()) for i in range(len(p))) / len(p)


def ref_simsiam(p, z):
    return sum(-cos(p[i], z[i].detach()) for i in range(len(p))) / len(p)


def ref_moco_v3(q, k, tau):
    qs = [unit(q[i]) for i in range(len(q))]
    ks = [unit(k[j].detach()) for j in range(len(k))]
    total = 0
    for i in range(len(q)):
        total = total + (-dot(qs[i], ks[i]) / tau + lse([dot(qs[i], ks[j]) / tau for j in range(len(k))]))
    return 2 * tau * total / len(q)


def standardised_columns(z, eps):
    """cols[i][b]: dimension i of row b, minus the column mean, over sqrt(biased var + eps)."""
    n, d = z.shape
    cols = []
    for i in range(d):
        mean = sum(z[b, i] for b in range(n)) / n
        var = sum((z[b, i] - mean) ** 2 for b in range(n)) / n
        cols.append([(z[b, i] - mean) / torch.sqrt(var + eps) for b in range(n)])
    return cols


def ref_barlow_twins(z1, z2, lambd):
    n, d = z1.shape
    a, b = standardised_columns(z1, 1e-5), standardised_columns(z2, 1e-5)
    total = 0
    for i in range(d):
        for j in range(d):
            c = sum(a[i][r] * b[j][r] for r in range(n)) / n
            total = total + ((1 - c) ** 2 if i == j else lambd * c**2)
    return total


def ref_vicreg(z1, z2, sim, std, cov):
    n, d = z1.shape
    invariance = sum((z1[b, i] - z2[b, i]) ** 2 for b in range(n) for i in range(d)) / (n * d)

    def var_cov(z):
        means = [sum(z[b, i] for b in range(n)) / n for i in range(d)]
        c = [
            [sum((z[b, i] - means[i]) * (z[b, j] - means[j]) for b in range(n)) / (n - 1) for j in range(d)]
            for i in range(d)
        ]
        hinge = sum(torch.relu(1 - torch.sqrt(c[i][i] + 1e-4)) for i in range(d)) / d
        off = sum(c[i][j] ** 2 for i in range(d) for j in range(d) if i != j) / d
        return hinge, off

    (v1, c1), (v2, c2) = var_cov(z1), var_cov(z2)
    return sim * invariance + std * (v1 + v2) / 2 + cov * (c1 + c2)


def ref_sinkhorn(scores, eps, iterations):
    """Python floats, no shift: Q[k][b] = exp(s_bk / eps), normalised as written in the docs."""
    s = scores.detach().double().tolist()
    bsz, k = len(s), len(s[0])
    q = [[math.exp(s[b][j] / eps) for b in range(bsz)] for j in range(k)]
    total = sum(sum(row) for row in q)
    q = [[x / total for x in row] for row in q]
    for _ in range(iterations):
        q = [[x / sum(row) / k for x in row] for row in q]
        col = [sum(q[j][b] for j in range(k)) for b in range(bsz)]
        q = [[q[j][b] / col[b] / bsz for b in range(bsz)] for j in range(k)]
    return torch.tensor([[q[j][b] * bsz for j in range(k)] for b in range(bsz)], dtype=torch.float64)


def ref_swav(s1, s2, tau, eps, iterations):
    q1, q2 = ref_sinkhorn(s1, eps, iterations), ref_sinkhorn(s2, eps, iterations)

    def ce(q, s):
        bsz, k = s.shape
        total = 0
        for b in range(bsz):
            log_z = lse([s[b, j] / tau for j in range(k)])
            total = total + sum(float(q[b, j]) * (s[b, j] / tau - log_z) for j in range(k))
        return -total / bsz

    return (ce(q1, s2) + ce(q2, s1)) / 2


def ref_dino(student, teacher, center, tau_s, tau_t):
    vs, bsz, k = student.shape
    vt = teacher.shape[0]
    total, pairs = 0, 0
    for i in range(vt):
        for v in range(vs):
            if v == i:
                continue
            h = 0
            for b in range(bsz):
                t_logits = [
                    (float(teacher[i, b, j].detach()) - float(center.reshape(-1)[j].detach())) / tau_t for j in range(k)
                ]
                m = max(t_logits)
                t = [math.exp(x - m) for x in t_logits]
                t = [x / sum(t) for x in t]
                log_z = lse([student[v, b, j] / tau_s for j in range(k)])
                h = h - sum(t[j] * (student[v, b, j] / tau_s - log_z) for j in range(k))
            total, pairs = total + h / bsz, pairs + 1
    return total / pairs


def ref_supcon(features, labels, tau, base):
    """(loss, anchors without a positive); anchors are (sample, view)."""
    bsz, views, _ = features.shape
    anchors = [(s, v) for s in range(bsz) for v in range(views)]
    z = {a: unit(features[a[0], a[1]]) for a in anchors}
    losses, without = [], 0
    for a in anchors:
        positives = [p for p in anchors if p != a and int(labels[p[0]]) == int(labels[a[0]])]
        if not positives:
            without += 1
            continue
        log_z = lse([dot(z[a], z[c]) / tau for c in anchors if c != a])
        losses.append(-(tau / base) * sum(dot(z[a], z[p]) / tau - log_z for p in positives) / len(positives))
    return (sum(losses) / len(losses) if losses else None), without


def ref_nnclr(z1, z2, support, tau):
    bsz = len(z1)
    s = [unit(support[m].detach()) for m in range(len(support))]
    z2n = [unit(z2[j]) for j in range(bsz)]
    total = 0
    for i in range(bsz):
        a = unit(z1[i].detach())
        sims = [float(dot(a, s[m])) for m in range(len(s))]
        anchor = s[sims.index(max(sims))]
        total = total + (-dot(anchor, z2n[i]) / tau + lse([dot(anchor, z2n[j]) / tau for j in range(bsz)]))
    return total / bsz


# ----------------------------------------------------------------------------- helpers
def randn(*shape, seed=0, dtype=torch.float64, scale=1.0, grad=True):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype).requires_grad_(grad)


def agree(close, dtype, loss, ref, inputs, ref_inputs):
    """Values, and gradients with respect to every input in ``inputs`` (the absolute tolerance
    scaled by the largest entry of the reference gradient: round-off is relative to it)."""
    close(loss, ref, dtype)
    for g, gr in zip(torch.autograd.grad(loss, inputs), torch.autograd.grad(ref, ref_inputs)):
        close(g, gr, dtype, atol=tolerance(dtype)["atol"] * max(1.0, float(gr.detach().abs().max())))


def no_gradient_reaches(loss, *xs):
    grads = torch.autograd.grad(loss, xs, allow_unused=True)
    assert all(g is None for g in grads)


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


# ----------------------------------------------------------------------------- random scales (hypothesis)
@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(2, 5),
    scale=st.floats(0.01, 50.0),
    tau=st.floats(0.05, 2.0),
    seed=st.integers(0, 2**16),
)
def test_random_batches_match_loops(n, scale, tau, seed):
    def close64(a, b):
        torch.testing.assert_close(a.detach().double(), b.detach().double(), rtol=1e-8, atol=1e-10)

    z1, z2 = randn(n, 3, seed=seed, scale=scale), randn(n, 3, seed=seed + 1, scale=scale)
    r1, r2 = (x.detach().clone().requires_grad_() for x in (z1, z2))
    for ours, ref, xs, rxs in (
        (moco_v3(z1, z2, tau), ref_moco_v3(r1, r2, tau), (z1,), (r1,)),
        (barlow_twins(z1, z2), ref_barlow_twins(r1, r2, 0.0051), (z1, z2), (r1, r2)),
        (vicreg(z1, z2), ref_vicreg(r1, r2, 25.0, 25.0, 1.0), (z1, z2), (r1, r2)),
    ):
        close64(ours, ref)
        for g, gr in zip(torch.autograd.grad(ours, xs), torch.autograd.grad(ref, rxs)):
            close64(g, gr)


# ----------------------------------------------------------------------------- precision, host reads
def _calls():
    """Each loss on small float64 inputs requiring grad, keyword arguments apart."""
    g = torch.Generator().manual_seed(40)

    def x(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_()

    return {
        "byol": (byol, (x(4, 3), x(4, 3))),
        "simsiam": (simsiam, (x(4, 3), x(4, 3))),
        "moco_v3": (moco_v3, (x(4, 3), x(4, 3))),
        "barlow_twins": (barlow_twins, (x(4, 3), x(4, 3))),
        "vicreg": (vicreg, (x(4, 3), x(4, 3))),
        "swav": (swav, (x(4, 5), x(4, 5))),
        "dino": (dino, (x(3, 4, 5), x(2, 4, 5), x(5))),
        "supcon": (supcon, (x(4, 2, 3), torch.tensor([0, 1, 0, 2]))),
        "nnclr": (nnclr, (x(4, 3), x(4, 3), x(6, 3))),
    }


@pytest.mark.parametrize("name", sorted(_calls()))
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_half_inputs_run_in_float32(name, half):
    fn, args = _calls()[name]
    low = tuple(a.detach().to(half).requires_grad_() if a.is_floating_point() else a for a in args)
    loss = fn(*low)
    assert loss.dtype == torch.float32
    expected = fn(*(a.detach().float() if a.is_floating_point() else a for a in low))
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-6, atol=1e-6)
    grads = torch.autograd.grad(loss, [a for a in low if a.is_floating_point()], allow_unused=True)
    assert all(g is None or g.dtype == half for g in grads)


@pytest.mark.parametrize("name", sorted(_calls()))
def test_no_host_read_forward_or_backward(name):
    """As a GPU step runs them (CUDA's branches taken, so supcon skips its CPU-only check): no
    value read back, forward or backward (the shared counter: tensor methods and the operators
    that read back, bool-mask indexing among them)."""
    fn, args = _calls()[name]
    stats: dict = {}
    kwargs = {} if name == "swav" else {"stats": stats}
    with cuda_branches(), SyncCounter() as counter:
        loss = fn(*args, **kwargs)
        loss.backward()
    assert counter.total == 0, counter.report()


# ----------------------------------------------------------------------------- arguments
X = torch.zeros(4, 3, dtype=torch.float64)


@pytest.mark.parametrize(
    "call,argument",
    [
        (lambda: byol(X, torch.zeros(4, 2, dtype=torch.float64)), "p"),
        (lambda: byol(X[0], X[0]), "p"),
        (lambda: simsiam(X, X.float()), "z"),
        (lambda: simsiam(X.long(), X), "p"),
        (lambda: moco_v3(X, X, 0.0), "temperature"),
        (lambda: moco_v3(X[:1], X[:1]), "q"),
        (lambda: barlow_twins(X, X, -1.0), "lambd"),
        (lambda: barlow_twins(X[:1], X[:1]), "z1"),
        (lambda: vicreg(X, X, sim_coeff=-1.0), "sim_coeff"),
        (lambda: vicreg(X, X, std_coeff=float("nan")), "std_coeff"),
        (lambda: vicreg(X, X, cov_coeff=-2), "cov_coeff"),
        (lambda: vicreg(X, X[:3]), "z1"),
        (lambda: sinkhorn_knopp(X, 0.0), "epsilon"),
        (lambda: sinkhorn_knopp(X, 0.05, 0), "iterations"),
        (lambda: sinkhorn_knopp(X, 0.05, 2.5), "iterations"),
        (lambda: sinkhorn_knopp(X, 0.05, 3, all_reduce=1), "all_reduce"),
        (lambda: sinkhorn_knopp(X[0]), "scores"),
        (lambda: swav(X, X, temperature=-0.1), "temperature"),
        (lambda: swav(X, X, epsilon=-1), "epsilon"),
        (lambda: swav(X, X[:, :2]), "scores1"),
        (lambda: dino(X[None], X[None], X[0]), "student"),
        (lambda: dino(X[None].expand(2, 4, 3), X[None].expand(3, 4, 3), X[0]), "teacher"),
        (lambda: dino(X[None].expand(2, 4, 3), X[None, :2], X[0]), "teacher"),
        (lambda: dino(X[None].expand(2, 4, 3), X[None], X[0, :2]), "center"),
        (lambda: dino(X[None].expand(2, 4, 3), X[None], X[0], student_temperature=0), "student_temperature"),
        (lambda: dino(X[None].expand(2, 4, 3), X[None], X[0], teacher_temperature=-1), "teacher_temperature"),
        (lambda: supcon(X, torch.arange(4)), "features"),
        (lambda: supcon(X[:, None], torch.arange(4.0)), "labels"),
        (lambda: supcon(X[:, None], torch.arange(3)), "labels"),
        (lambda: supcon(X[:1, None], torch.arange(1)), "features"),
        (lambda: supcon(X[:, None], torch.arange(4), temperature=0), "temperature"),
        (lambda: supcon(X[:, None], torch.arange(4), base_temperature=-1), "base_temperature"),
        (lambda: nnclr(X, X, torch.zeros(5, 2, dtype=torch.float64)), "support"),
        (lambda: nnclr(X, X, X[:0]), "support"),
        (lambda: nnclr(X, X, X, temperature=float("inf")), "temperature"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=rf"\b{argument}\b"):
        call()


def test_every_family_is_exported_from_the_package():
    for name in (
        "byol",
        "simsiam",
        "moco_v3",
        "barlow_twins",
        "vicreg",
        "swav",
        "sinkhorn_knopp",
        "dino",
        "supcon",
        "nnclr",
        "nt_xent",
        "cacr",
    ):
        assert name in functional.__all__ and callable(getattr(functional, name)), name
    assert not [n for n in functional.__all__ if n.startswith("_")]
