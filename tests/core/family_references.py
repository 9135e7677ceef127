"""Float64 references of the non-contrastive family written from the papers' equations with
loops over rows, dimensions, views and anchors (never calling the functions under test), and the
helpers the family's loss tests compare with."""

from __future__ import annotations

import math

import torch

from tests.core.conftest import tolerance


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
