"""CACR forms against loop references written from Eq. 2-5, App. B / Alg. 3 and the authors'
small-scale pairing, plus the identities of METHODS rows 12-15 (K = 1, UAUR, V = 2)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from toolkit.losses.functional import cacr, cacr_minibatch, cacr_moco, cacr_multiview


# ----------------------------------------------------------------------------- loop references
def sqd(a, b):
    """||a - b||^2 by a loop over coordinates."""
    return sum((a[k] - b[k]) ** 2 for k in range(len(a)))


def softmax(logits):
    m = max(float(t.detach()) for t in logits)
    e = [torch.exp(t - m) for t in logits]
    z = sum(e)
    return [x / z for x in e]


def weighted(costs, temp, sign, detach=False):
    """sum_k softmax_k(sign * temp * c) c_k (detach: the weights see the costs detached)."""
    w = softmax([sign * temp * (c.detach() if detach else c) for c in costs])
    return sum(wi * ci for wi, ci in zip(w, costs))


def ref_cacr(q, pos, negs, tp, tn, detach_pos=False, detach_neg=False):
    """Eq. 2 on samples: pos[i] is the list of positives of anchor i, negs[i] its negatives."""
    n = len(q)
    ca = sum(weighted([sqd(q[i], p) for p in pos[i]], tp, 1.0, detach_pos) for i in range(n))
    cr = sum(weighted([sqd(q[i], x) for x in negs[i]], tn, -1.0, detach_neg) for i in range(n))
    return (ca - cr) / n


def ref_multiview(v, tp, tn, alpha, beta):
    """our_loss1 + our_loss2: v[x][i] is view x of instance i."""
    nv, n = len(v), len(v[0])
    l1 = sum(
        alpha * weighted([sqd(v[x][i], v[y][i]) for y in range(nv) if y != x], tp, 1.0)
        for x in range(nv)
        for i in range(n)
    ) / (nv * n)
    pairs = [(x, y) for x in range(nv) for y in range(x + 1, nv)]
    l2 = sum(
        -beta * weighted([sqd(v[x][i], v[y][j]) for j in range(n) if j != i], tn, -1.0)
        for x, y in pairs
        for i in range(n)
    ) / (len(pairs) * n)
    return l1 + l2


def ref_moco(qv, kv, queue, tp, tn, intra=True, detach_q=True, reuse=False):
    """Alg. 3 / the authors' builder, one query view x at a time."""
    n, nv = qv.shape[0], qv.shape[1]
    ca = cr = 0.0
    for x in range(nv):
        for i in range(n):
            c = [sqd(qv[i, x], kv[i, y]) for y in range(nv) if y != x]
            ca = ca + weighted(c, tp, 1.0, detach=True)  # pi+ under no_grad
            src = qv[i, 0] if reuse else qv[i, x]
            cq = [sqd(src, queue[j]) for j in range(len(queue))]
            ci = [sqd(qv[i, x], qv[j, x]) for j in range(n) if j != i] if intra else []
            logits = [-tn * (c.detach() if detach_q else c) for c in cq] + [-tn * c for c in ci]
            w = softmax(logits)
            cr = cr - sum(wi * ci_ for wi, ci_ in zip(w, cq + ci))
    return (ca + cr) / (n * nv)


def grads(loss, *xs):
    return torch.autograd.grad(loss, xs)


def views(rows, n, v, d, seed, dtype, unit=True, scale=1.0):
    return torch.stack(
        [rows(n, d, seed=seed + k, dtype=dtype, unit=unit, scale=scale, grad=False) for k in range(v)], dim=1
    ).requires_grad_()


# ----------------------------------------------------------------------------- generic form
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("tp,tn", [(1.0, 2.0), (0.5, 3.0)])
def test_cacr_matches_loop(dtype, close, rows, leaves, shared, tp, tn):
    n, k, m, d = 4, 3, 5, 3
    q = rows(n, d, seed=1, dtype=dtype, unit=False, scale=0.8)
    pos = views(rows, n, k, d, 10, dtype, unit=False, scale=0.8)
    neg = rows(m, d, seed=2, dtype=dtype, grad=False) if shared else views(rows, n, m, d, 20, dtype).detach()
    rq, rp = leaves(q, pos)
    negs = [list(neg) for _ in range(n)] if shared else [list(neg[i]) for i in range(n)]
    loss = cacr(q, pos, neg, tp, tn)
    ref = ref_cacr(rq, [list(rp[i]) for i in range(n)], [[x.double() for x in row] for row in negs], tp, tn)
    close(loss, ref, dtype)
    for g, rg in zip(grads(loss, q, pos), grads(ref, rq, rp)):
        close(g, rg, dtype)


@pytest.mark.parametrize("detach_pos,detach_neg", [(True, False), (False, True), (True, True)])
def test_cacr_detach_options_change_only_the_gradient(close, rows, leaves, detach_pos, detach_neg):
    q, neg = rows(4, 3, seed=3), rows(6, 3, seed=4, grad=False)
    pos = views(rows, 4, 3, 3, 30, torch.float64)
    rq, rp = leaves(q, pos)
    loss = cacr(q, pos, neg, 1.0, 2.0, detach_pos_weights=detach_pos, detach_neg_weights=detach_neg)
    ref = ref_cacr(rq, [list(rp[i]) for i in range(4)], [list(neg)] * 4, 1.0, 2.0, detach_pos, detach_neg)
    close(loss, ref, torch.float64)
    got = grads(loss, q, pos)
    for g, rg in zip(got, grads(ref, rq, rp)):
        close(g, rg, torch.float64)
    plain = cacr(q, pos, neg, 1.0, 2.0)
    close(loss, plain, torch.float64)
    assert (grads(plain, q)[0] - got[0]).abs().max() > 1e-6


def test_k1_gives_unit_positive_weight(close, rows):
    """K = 1: pi+ = 1, so t+ has no effect and L_CA = mean ||q - pos||^2."""
    q, p, neg = rows(5, 4, seed=5), rows(5, 4, seed=6), rows(7, 4, seed=7, grad=False)
    ref = ref_cacr(q, [[p[i]] for i in range(5)], [list(neg)] * 5, 1.0, 2.0)
    for t_pos in (0.1, 50.0):  # the loop reference with pi+ = 1 whatever t+ is
        close(cacr(q, p, neg, t_pos=t_pos), ref, torch.float64)
        close(cacr(q, p.unsqueeze(1), neg, t_pos=t_pos), ref, torch.float64)
    stats = {}
    uniform = ((q - p) ** 2).sum(1).mean() - torch.cdist(q, neg).pow(2).mean()
    close(cacr(q, p, neg, t_neg=0.0, stats=stats), uniform, torch.float64)
    # t- = 0: pi- uniform over the 7 negatives, so H(X-|X) = log 7 exactly (CACR Eq. 8)
    close(stats["weight_entropy"], math.log(7), torch.float64)
    close(stats["pos_sim"], (q * p).sum(1).mean(), torch.float64)
    close(stats["neg_sim"], (q @ neg.T).mean(), torch.float64)


def test_small_t_neg_is_uaur(close, rows):
    """t- -> 0: pi- uniform (the UAUR ablation); t- = 0 is that limit exactly."""
    q, neg = rows(4, 3, seed=8), rows(6, 3, seed=9, grad=False)
    pos = views(rows, 4, 2, 3, 40, torch.float64)
    uaur = cacr(q, pos, neg, t_neg=0.0)
    close(cacr(q, pos, neg, t_neg=1e-9), uaur, torch.float64, rtol=1e-7, atol=1e-8)
    ca = sum(weighted([sqd(q[i], p) for p in pos[i]], 1.0, 1.0) for i in range(4)) / 4
    cr = sum(sqd(q[i], x) for i in range(4) for x in neg) / (4 * 6)
    close(uaur, ca - cr, torch.float64)
    stats = {}
    cacr(q, pos, neg, t_neg=0.0, stats=stats)
    assert float(stats["weight_entropy"]) == pytest.approx(math.log(6))
    # the in-batch form: uniform over the other queries j != i
    zp = pos[:, 0]
    ref = sum(sqd(q[i], zp[i]) - sum(sqd(q[i], q[j]) for j in range(4) if j != i) / 3 for i in range(4)) / 4
    close(cacr_minibatch(q, zp, t_neg=0.0), ref, torch.float64)


def test_weight_entropy_and_similarities(close, rows):
    q, neg = rows(4, 3, seed=10), rows(6, 3, seed=11, grad=False)
    pos = views(rows, 4, 2, 3, 50, torch.float64)
    stats = {}
    cacr(q, pos, neg, 1.0, 2.0, stats=stats)
    ent = 0.0
    for i in range(4):
        w = [float(wi) for wi in softmax([-2.0 * sqd(q[i].detach(), x) for x in neg])]
        ent += -sum(wi * math.log(wi) for wi in w)
    assert float(stats["weight_entropy"]) == pytest.approx(ent / 4, rel=1e-10)
    assert float(stats["weight_entropy"]) <= math.log(6)
    pos_sim = (q.unsqueeze(1) * pos).sum(-1).mean().detach()
    assert float(stats["pos_sim"]) == pytest.approx(float(pos_sim))
    assert float(stats["neg_sim"]) == pytest.approx(float((q @ neg.T).mean().detach()))
    assert not any(torch.is_tensor(v) and v.requires_grad for v in stats.values())


# ----------------------------------------------------------------------------- paper mini-batch
@pytest.mark.parametrize("k", [1, 3])
def test_minibatch_matches_loop(dtype, close, rows, leaves, k):
    n, d = 5, 3
    z = rows(n, d, seed=12, dtype=dtype)
    zpos = views(rows, n, k, d, 60, dtype)
    rz, rp = leaves(z, zpos)
    loss = cacr_minibatch(z, zpos, 1.0, 3.0)
    ref = ref_cacr(
        rz, [list(rp[i]) for i in range(n)], [[rz[j] for j in range(n) if j != i] for i in range(n)], 1.0, 3.0
    )
    close(loss, ref, dtype)
    for g, rg in zip(grads(loss, z, zpos), grads(ref, rz, rp)):
        close(g, rg, dtype)
    stats = {}
    cacr_minibatch(z, zpos, stats=stats)
    off = ~torch.eye(n, dtype=torch.bool)
    assert float(stats["neg_sim"]) == pytest.approx(float((z @ z.T)[off].mean().detach()), rel=1e-5)
    assert float(stats["weight_entropy"]) <= math.log(n - 1) + 1e-6


# ----------------------------------------------------------------------------- multiview (code)
@pytest.mark.parametrize("nv", [2, 3, 5])
def test_multiview_matches_loop(dtype, close, rows, leaves, nv):
    v = views(rows, 4, nv, 3, 70, dtype)
    (rv,) = leaves(v)
    loss = cacr_multiview(v, 1.0, 2.0, alpha=1.5, beta=0.7)
    ref = ref_multiview([[rv[i, x] for i in range(4)] for x in range(nv)], 1.0, 2.0, 1.5, 0.7)
    close(loss, ref, dtype)
    close(grads(loss, v)[0], grads(ref, rv)[0], dtype)


def test_multiview_two_views_is_cacr_with_cross_view_negatives(close, rows):
    v0, v1 = rows(5, 4, seed=80), rows(5, 4, seed=81)
    neg = torch.stack([torch.stack([v1[j] for j in range(5) if j != i]) for i in range(5)])
    close(cacr_multiview([v0, v1], 1.0, 2.0), cacr(v0, v1, neg, 1.0, 2.0), torch.float64)
    # the paper's in-batch form uses the other *queries* as negatives: a different number
    code, paper = cacr_multiview([v0, v1]).detach(), cacr_minibatch(v0, v1).detach()
    assert abs(float(code) - float(paper)) > 1e-4


# ----------------------------------------------------------------------------- MoCo form
@pytest.mark.parametrize("intra,detach_q,reuse", list(itertools.product([True, False], repeat=3)))
def test_moco_matches_loop(close, rows, leaves, intra, detach_q, reuse):
    n, nv, m, d = 4, 3, 5, 3
    qv = views(rows, n, nv, d, 90, torch.float64)
    kv = views(rows, n, nv, d, 95, torch.float64).detach()
    queue = rows(m, d, seed=99, grad=False)
    (rq,) = leaves(qv)
    loss = cacr_moco(qv, kv, queue, 1.0, 2.0, intra, detach_q, reuse)
    ref = ref_moco(rq, kv, queue, 1.0, 2.0, intra, detach_q, reuse)
    close(loss, ref, torch.float64)
    close(grads(loss, qv)[0], grads(ref, rq)[0], torch.float64)


def test_moco_uniform_weights(close, rows):
    qv = views(rows, 3, 3, 3, 150, torch.float64)
    kv = views(rows, 3, 3, 3, 155, torch.float64).detach()
    queue = rows(4, 3, seed=159, grad=False)
    close(cacr_moco(qv, kv, queue, 0.0, 0.0), ref_moco(qv, kv, queue, 0.0, 0.0), torch.float64)


def test_moco_float32_and_conventions(close, rows, leaves):
    qv = views(rows, 4, 2, 3, 100, torch.float32)
    kv = views(rows, 4, 2, 3, 105, torch.float32).detach()
    queue = rows(6, 3, seed=109, dtype=torch.float32, grad=False)
    (rq,) = leaves(qv)
    close(cacr_moco(qv, kv, queue), ref_moco(rq, kv.double(), queue.double(), 1.0, 2.0), torch.float32)
    # detach_queue_weights: same value, different gradient (official vs Alg. 3)
    a, b = cacr_moco(qv, kv, queue), cacr_moco(qv, kv, queue, detach_queue_weights=False)
    close(a, b, torch.float32)
    assert (grads(a, qv)[0] - grads(b, qv)[0]).abs().max() > 1e-5
    # the caching quirk changes the value
    assert abs(float(cacr_moco(qv, kv, queue, reuse_first_view_queue_dists=True).detach()) - float(a.detach())) > 1e-4


def test_moco_no_gradient_into_keys_or_queue(rows):
    qv = views(rows, 3, 2, 3, 110, torch.float64)
    kv = views(rows, 3, 2, 3, 115, torch.float64)
    queue = rows(4, 3, seed=119)
    cacr_moco(qv, kv, queue).backward()
    assert qv.grad is not None and kv.grad is None and queue.grad is None


# ----------------------------------------------------------------------------- gradcheck
def test_gradcheck_float64(rows):
    q, neg = rows(3, 3, seed=120, unit=False), rows(4, 3, seed=121, unit=False)
    pos = views(rows, 3, 2, 3, 125, torch.float64, unit=False)
    negs = views(rows, 3, 4, 3, 130, torch.float64)
    kv = views(rows, 3, 2, 3, 135, torch.float64).detach()

    def gc(fn, inputs):
        return torch.autograd.gradcheck(fn, inputs, fast_mode=True)

    assert gc(lambda a, b, c: cacr(a, b, c, 1.0, 2.0), (q, pos, neg))
    assert gc(lambda a, b, c: cacr(a, b, c, 0.7, 1.5), (q, pos, negs))
    assert gc(lambda a, b: cacr_minibatch(a, b, 1.0, 2.0), (q, pos))
    assert gc(lambda a: cacr_multiview(a, 1.0, 2.0), (pos,))
    # Detached weights are not the derivative of the value, so gradcheck applies to the
    # paper form only: two views (pi+ = 1) and queue weights with gradient.
    for reuse, intra in [(False, True), (True, True), (False, False)]:
        assert gc(
            lambda a, intra=intra, reuse=reuse: cacr_moco(a, kv, neg.detach(), 1.0, 2.0, intra, False, reuse), (pos,)
        )


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "call,match",
    [
        (lambda q, p, n: cacr(q, p, n, t_pos=-1.0), "t_pos"),
        (lambda q, p, n: cacr(q, p, n, t_neg=float("nan")), "t_neg"),
        (lambda q, p, n: cacr(q, p[:2], n), "pos"),
        (lambda q, p, n: cacr(q, p, n[:, :2]), "embedding size"),
        (lambda q, p, n: cacr(q, p, n.unsqueeze(0)), "neg"),
        (lambda q, p, n: cacr_minibatch(q[:1], p[:1]), "z"),
        (lambda q, p, n: cacr_multiview(q.unsqueeze(1)), "at least 2 views"),
        (lambda q, p, n: cacr_multiview(p, alpha=-1.0), "alpha"),
        (lambda q, p, n: cacr_moco(p, p[:2], n), "same shape"),
        (lambda q, p, n: cacr_moco(p, p, n[:, :1]), "embedding size"),
    ],
)
def test_bad_input_raises(rows, call, match):
    q, n = rows(3, 3, seed=140), rows(5, 3, seed=141, grad=False)
    p = views(rows, 3, 2, 3, 145, torch.float64)
    with pytest.raises(ValueError, match=match):
        call(q, p, n)
