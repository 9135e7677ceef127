"""InfoNCE family against loop references written from the equations (METHODS rows 1-3)."""

from __future__ import annotations

import math

import pytest
import torch

from toolkit.losses.functional import cmc, info_nce_scores, moco_infonce, nt_xent
from toolkit.losses.functional.infonce import moco_infonce_reference, nt_xent_reference


# ----------------------------------------------------------------------------- loop references
def lse(terms):
    """log sum exp of a list of 0-d tensors, shifted by their (constant) maximum."""
    m = max(float(t.detach()) for t in terms)
    return m + torch.log(sum(torch.exp(t - m) for t in terms))


def ref_nt_xent(z1, z2, tau, keep=None):
    """SimCLR 2B form: l_a = -s_{a,p(a)}/tau + log sum_{b != a} e^{s_ab/tau}, mean over 2B;
    ``keep[a][b]`` drops negatives only (self never counts, the positive always does)."""
    z = list(z1) + list(z2)
    n, b = len(z), len(z1)
    total = 0.0
    for a in range(n):
        p = (a + b) % n
        terms = []
        for c in range(n):
            if c == a:
                continue
            if c != p and keep is not None and not keep[a][c]:
                continue
            terms.append(torch.dot(z[a], z[c]) / tau)
        total = total + (-torch.dot(z[a], z[p]) / tau + lse(terms))
    return total / n


def ref_moco(q, k, queue, tau, keep=None):
    total = 0.0
    for i in range(len(q)):
        pos = torch.dot(q[i], k[i]) / tau
        terms = [pos] + [torch.dot(q[i], queue[j]) / tau for j in range(len(queue)) if keep is None or keep[i][j]]
        total = total + (-pos + lse(terms))
    return total / len(q)


def ref_info_nce_scores(s, pos, valid, tau):
    losses = []
    for a in range(s.shape[0]):
        ps = [c for c in range(s.shape[1]) if pos[a][c]]
        if not ps:
            continue
        denom = lse([s[a, c] / tau for c in range(s.shape[1]) if valid is None or valid[a][c]])
        losses.append(sum(-s[a, p] / tau + denom for p in ps) / len(ps))
    return sum(losses) / len(losses)


def ref_cmc(views, tau, reduction):
    total, pairs = 0.0, 0
    for i in range(len(views)):
        for j in range(i + 1, len(views)):
            for a, b in ((views[i], views[j]), (views[j], views[i])):
                n = len(a)
                total = (
                    total
                    + sum(
                        -torch.dot(a[r], b[r]) / tau + lse([torch.dot(a[r], b[m]) / tau for m in range(n)])
                        for r in range(n)
                    )
                    / n
                )
            pairs += 1
    return total if reduction == "sum" else total / pairs


def grads(loss, *xs):
    return torch.autograd.grad(loss, xs)


# ----------------------------------------------------------------------------- NT-Xent
@pytest.mark.parametrize("tau", [0.1, 0.5, 1.0])
def test_nt_xent_matches_loop_reference(dtype, close, rows, leaves, tau):
    z1, z2 = rows(6, 5, seed=1, dtype=dtype), rows(6, 5, seed=2, dtype=dtype)
    r1, r2 = leaves(z1, z2)
    loss, ref = nt_xent(z1, z2, tau), ref_nt_xent(r1, r2, tau)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, z1, z2), grads(ref, r1, r2)):
        close(g, gr, dtype)


def test_nt_xent_large_logits_match_the_loop(close, rows, leaves):
    """Non-unit rows and tau = 0.02: logits up to ~450, e^450 overflows even float64."""
    z1, z2 = rows(5, 4, seed=3, unit=False, scale=3.0), rows(5, 4, seed=4, unit=False, scale=3.0)
    loss = nt_xent(z1, z2, 0.02)
    r1, r2 = leaves(z1, z2)
    close(loss, nt_xent_reference(r1, r2, 0.02), torch.float64)
    ref = ref_nt_xent(r1, r2, 0.02)  # the loop's shifted log-sum-exp: exact in float64
    close(loss, ref, torch.float64)
    for g, gr in zip(grads(loss, z1, z2), grads(ref, r1, r2)):
        close(g, gr, torch.float64)


@pytest.mark.parametrize("mark_self_and_positive", [False, True])
def test_nt_xent_neg_mask(dtype, close, rows, leaves, mark_self_and_positive):
    b = 5
    z1, z2 = rows(b, 4, seed=5, dtype=dtype), rows(b, 4, seed=6, dtype=dtype)
    keep = torch.rand(2 * b, 2 * b, generator=torch.Generator().manual_seed(0)) > 0.4
    idx = torch.arange(2 * b)
    partner = (idx + b) % (2 * b)
    # whatever the mask says about self and the positive is ignored
    keep[idx, idx] = mark_self_and_positive
    keep[idx, partner] = mark_self_and_positive
    for a in range(2 * b):  # at least one kept negative per anchor
        keep[a, (a + 1) % (2 * b) if (a + 1) % (2 * b) != partner[a] else (a + 2) % (2 * b)] = True
    stats: dict = {}
    loss = nt_xent(z1, z2, 0.3, neg_mask=keep, stats=stats)
    r1, r2 = leaves(z1, z2)
    ref = nt_xent_reference(r1, r2, 0.3, neg_mask=keep)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, z1, z2), grads(ref, r1, r2)):
        close(g, gr, dtype)
    # records, by loops: neg_sim is the mean over every candidate negative (before selection)
    z = torch.cat([r1, r2]).detach()
    cands = [(a, c) for a in range(2 * b) for c in range(2 * b) if c != a and c != partner[a]]
    kept = [(a, c) for a, c in cands if keep[a, c]]
    assert stats["neg_kept"] == pytest.approx(len(kept) / len(cands))
    close(stats["neg_sim"], sum(float(z[a] @ z[c]) for a, c in cands) / len(cands), dtype)
    close(stats["pos_sim"], sum(float(r1[i].detach() @ r2[i].detach()) for i in range(b)) / b, dtype)


def test_nt_xent_stats_without_mask(close, rows):
    b = 4
    z1, z2 = rows(b, 3, seed=7), rows(b, 3, seed=8)
    stats: dict = {}
    nt_xent(z1, z2, stats=stats)
    z = torch.cat([z1, z2]).detach()
    negs = [float(z[a] @ z[c]) for a in range(2 * b) for c in range(2 * b) if c != a and c != (a + b) % (2 * b)]
    close(stats["neg_sim"], sum(negs) / len(negs), torch.float64)
    close(stats["pos_sim"], float((z1 * z2).detach().sum()) / b, torch.float64)
    assert stats["neg_kept"] == 1.0


def test_nt_xent_second_backward_recomputes(rows):
    """retain_graph: the kernel consumes its saved exponentials; a second pass recomputes."""
    z1, z2 = rows(4, 3, seed=9), rows(4, 3, seed=10)
    loss = nt_xent(z1, z2, 0.2)
    g1 = torch.autograd.grad(loss, (z1, z2), retain_graph=True)
    g2 = torch.autograd.grad(loss, (z1, z2))
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ----------------------------------------------------------------------------- MoCo
@pytest.mark.parametrize("masked", [False, True])
def test_moco_infonce_matches_loop_reference(dtype, close, rows, leaves, masked):
    q, k = rows(5, 4, seed=11, dtype=dtype), rows(5, 4, seed=12, dtype=dtype)
    queue = rows(9, 4, seed=13, dtype=dtype)
    keep = None
    if masked:
        keep = torch.rand(5, 9, generator=torch.Generator().manual_seed(1)) > 0.5
        keep[:, 0] = True
    stats: dict = {}
    loss = moco_infonce(q, k, queue, 0.07, neg_mask=keep, stats=stats)
    rq, rk = leaves(q, k)
    ref = ref_moco(rq, rk.detach(), queue.detach().double(), 0.07, None if keep is None else keep.tolist())
    close(loss, ref, dtype)
    (gq,), (gr,) = grads(loss, q), grads(ref, rq)
    close(gq, gr, dtype)
    # keys and the queue are constants
    assert torch.autograd.grad(loss, (k, queue), allow_unused=True) == (None, None)
    sims = [float(rq[i].detach() @ queue[j].detach().double()) for i in range(5) for j in range(9)]
    close(stats["neg_sim"], sum(sims) / len(sims), dtype)
    n_kept = 45 if keep is None else int(keep.sum())
    assert stats["neg_kept"] == pytest.approx(n_kept / 45)


def test_masked_rows_far_below_the_row_max_are_recomputed_exactly(close, rows, leaves, monkeypatch):
    """float32, tau = 0.01, and masks that keep only dissimilar candidates: against the
    unmasked row max (a dropped near-duplicate, e^{-200} = 0 in float32) every kept term
    underflows, so the kernel must recompute those rows with the max over the kept entries."""
    import toolkit.losses.functional._kernel as module

    calls = []
    real = module._exact_rows
    monkeypatch.setattr(module, "_exact_rows", lambda idx, *a: (calls.append(idx), real(idx, *a)))
    f32 = torch.float32
    q = rows(3, 4, seed=60, dtype=f32)
    k = rows(3, 4, seed=61, dtype=f32, grad=False)
    far = -q.detach() + 0.05 * rows(3, 4, seed=62, unit=False, dtype=f32, grad=False)
    queue = torch.cat([q.detach(), far / far.norm(dim=1, keepdim=True)])  # rows 0-2: q itself
    keep = torch.zeros(3, 6, dtype=torch.bool)
    keep[:, 3:] = True
    loss = moco_infonce(q, k, queue, 0.01, neg_mask=keep)
    assert len(calls) == 1 and calls[0].numel() == 3
    (rq,) = leaves(q)
    ref = moco_infonce_reference(rq, k.double(), queue.double(), 0.01, neg_mask=keep)
    close(loss, ref, f32)
    close(grads(loss, q)[0], grads(ref, rq)[0], f32)
    # in-batch: views nearly identical within a side, opposite across sides; the mask keeps
    # only other-side candidates, whose similarity is ~-1 while the dropped same-side ones are ~1
    v = rows(1, 4, seed=63, dtype=f32, grad=False)
    noise = 0.02 * rows(6, 4, seed=64, unit=False, dtype=f32, grad=False)
    z1 = (v + noise[:3]).requires_grad_()
    z2 = (-v + noise[3:]).requires_grad_()
    m = torch.zeros(6, 6, dtype=torch.bool)
    for a in range(6):
        m[a, (3 if a < 3 else 0) + (a + 1) % 3] = True
    loss2 = nt_xent(z1, z2, 0.01, neg_mask=m)
    assert len(calls) == 2
    r1, r2 = leaves(z1, z2)
    ref2 = nt_xent_reference(r1, r2, 0.01, neg_mask=m)
    close(loss2, ref2, f32)
    for g, gr in zip(grads(loss2, z1, z2), grads(ref2, r1, r2)):
        close(g, gr, f32)


def test_moco_large_logits_match_the_loop(close, rows, leaves):
    """Logits up to ~3000 (|q||k| ~ 30, tau = 0.01): e^{s/tau} overflows float64, the loop's
    shifted log-sum-exp does not; value and gradient at float64 round-off."""
    q, k = rows(3, 4, seed=14, unit=False, scale=4.0), rows(3, 4, seed=15, unit=False, scale=4.0)
    queue = rows(6, 4, seed=16, unit=False, scale=4.0, grad=False)
    loss = moco_infonce(q, k, queue, 0.01)
    (rq,) = leaves(q)
    ref = ref_moco(rq, k.detach(), queue, 0.01)
    close(loss, ref, torch.float64)
    close(grads(loss, q)[0], grads(ref, rq)[0], torch.float64)


# ----------------------------------------------------------------------------- score-level
def test_info_nce_scores_matches_loop_reference(dtype, close, leaves):
    g = torch.Generator().manual_seed(2)
    s = torch.randn(6, 8, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    pos = torch.zeros(6, 8, dtype=torch.bool)
    pos[0, 1] = pos[0, 3] = pos[1, 2] = pos[3, 0] = pos[3, 7] = pos[3, 5] = pos[5, 4] = True
    valid = torch.rand(6, 8, generator=g) > 0.3
    valid |= pos
    with torch.no_grad():
        s_in = s.masked_fill(~valid, float("-inf"))  # invalid entries may hold anything
    s_in.requires_grad_()
    loss = info_nce_scores(s_in, pos, valid, temperature=0.7)
    (rs,) = leaves(s_in.detach().masked_fill(~valid, 0.0))
    ref = ref_info_nce_scores(rs, pos.tolist(), valid.tolist(), 0.7)
    close(loss, ref, dtype)
    (gs,), (gr,) = grads(loss, s_in), grads(ref, rs)
    close(gs.masked_fill(~valid, 0.0), gr, dtype)
    assert (gs[~valid] == 0).all()


def test_info_nce_scores_on_simclr_matrix_equals_nt_xent(dtype, close, rows):
    b = 5
    z1, z2 = rows(b, 4, seed=17, dtype=dtype), rows(b, 4, seed=18, dtype=dtype)
    z = torch.cat([z1, z2])
    idx = torch.arange(2 * b)
    pos = torch.zeros(2 * b, 2 * b, dtype=torch.bool)
    pos[idx, (idx + b) % (2 * b)] = True
    valid = ~torch.eye(2 * b, dtype=torch.bool)
    a = info_nce_scores(z @ z.t(), pos, valid, temperature=0.4)
    ref = nt_xent(z1, z2, 0.4)
    close(a, ref, dtype)
    for g, gr in zip(grads(a, z1, z2), grads(ref, z1, z2)):
        close(g, gr, dtype)


def test_info_nce_scores_on_queue_logits_equals_moco(dtype, close, rows):
    q, k, queue = (
        rows(4, 3, seed=19, dtype=dtype),
        rows(4, 3, seed=20, dtype=dtype, grad=False),
        rows(7, 3, seed=21, dtype=dtype, grad=False),
    )
    scores = torch.cat([(q * k).sum(1, keepdim=True), q @ queue.t()], dim=1)
    pos = torch.zeros(4, 8, dtype=torch.bool)
    pos[:, 0] = True
    a = info_nce_scores(scores, pos, temperature=0.07)
    ref = moco_infonce(q, k, queue, 0.07)
    close(a, ref, dtype)
    close(grads(a, q)[0], grads(ref, q)[0], dtype)


# ----------------------------------------------------------------------------- CMC
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_cmc_matches_loop_reference(dtype, close, rows, leaves, reduction, as_tensor):
    vs = [rows(5, 4, seed=30 + i, dtype=dtype) for i in range(3)]
    arg = torch.stack(vs, dim=1) if as_tensor else vs
    loss = cmc(arg, temperature=0.2, pair_reduction=reduction)
    rv = leaves(*vs)
    ref = ref_cmc(rv, 0.2, reduction)
    close(loss, ref, dtype)
    for g, gr in zip(grads(loss, *vs), grads(ref, *rv)):
        close(g, gr, dtype)


def test_cmc_two_views_is_both_directions_of_infonce(close, rows):
    """V = 2: L = L^{1->2} + L^{2->1}, each a MoCo-style InfoNCE with in-batch keys."""
    a, b = rows(4, 3, seed=40), rows(4, 3, seed=41)
    ref = ref_cmc([a, b], 0.1, "sum")
    close(cmc([a, b], 0.1), ref, torch.float64)


# ----------------------------------------------------------------------------- gradcheck
def test_gradcheck_infonce_family(rows):
    z1, z2 = rows(4, 3, seed=50), rows(4, 3, seed=51)
    keep = torch.rand(8, 8, generator=torch.Generator().manual_seed(3)) > 0.3
    keep[:, 1] = keep[:, 2] = True
    queue = rows(6, 3, seed=52, grad=False)
    qmask = torch.rand(4, 6, generator=torch.Generator().manual_seed(4)) > 0.4
    qmask[:, 0] = True
    s = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([[1, 0, 1, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 1, 1]], dtype=torch.bool)
    gc = torch.autograd.gradcheck
    assert gc(lambda a, b: nt_xent(a, b, 0.3), (z1, z2))
    assert gc(lambda a, b: nt_xent(a, b, 0.3, neg_mask=keep), (z1, z2))
    assert gc(lambda a: moco_infonce(a, z2, queue, 0.2), (z1,))
    assert gc(lambda a: moco_infonce(a, z2, queue, 0.2, neg_mask=qmask), (z1,))
    assert gc(lambda x: info_nce_scores(x, pos, temperature=0.5), (s,))
    assert gc(lambda a, b: cmc([a, b, a * b], 0.3), (z1, z2))


# ----------------------------------------------------------------------------- bad input
def _z(n=4, d=3):
    return torch.randn(n, d)


BAD = [
    ("shape", lambda: nt_xent(_z(4), _z(5)), "z1 and z2"),
    ("one row", lambda: nt_xent(_z(1), _z(1)), "z1"),
    ("empty", lambda: nt_xent(_z(0), _z(0)), "z1"),
    ("1-D", lambda: nt_xent(torch.randn(4), torch.randn(4)), "z1"),
    ("zero width", lambda: nt_xent(torch.randn(4, 0), torch.randn(4, 0)), "z1 must have at least one feature"),
    ("int", lambda: nt_xent(torch.ones(4, 3, dtype=torch.long), _z()), "z1"),
    ("tau0", lambda: nt_xent(_z(), _z(), 0.0), "temperature"),
    ("tau<0", lambda: nt_xent(_z(), _z(), -0.5), "temperature"),
    ("tau nan", lambda: nt_xent(_z(), _z(), float("nan")), "temperature"),
    ("mask shape", lambda: nt_xent(_z(), _z(), neg_mask=torch.ones(8, 7, dtype=torch.bool)), "neg_mask"),
    ("mask dtype", lambda: nt_xent(_z(), _z(), neg_mask=torch.ones(8, 8)), "neg_mask"),
    ("mask empty row", lambda: nt_xent(_z(), _z(), neg_mask=torch.zeros(8, 8, dtype=torch.bool)), "neg_mask"),
    ("dtype mix", lambda: nt_xent(_z(), _z().double()), "dtype"),
    ("moco width", lambda: moco_infonce(_z(), _z(), torch.randn(6, 5)), "queue"),
    ("moco k", lambda: moco_infonce(_z(), _z(3), torch.randn(6, 3)), "q and k"),
    ("moco tau", lambda: moco_infonce(_z(), _z(), torch.randn(6, 3), 0), "temperature"),
    (
        "moco mask",
        lambda: moco_infonce(_z(), _z(), torch.randn(6, 3), neg_mask=torch.zeros(4, 6, dtype=torch.bool)),
        "neg_mask",
    ),
    ("moco empty queue", lambda: moco_infonce(_z(), _z(), torch.randn(0, 3)), "queue"),
    ("scores no pos", lambda: info_nce_scores(_z(), torch.zeros(4, 3, dtype=torch.bool)), "positive_mask"),
    (
        "scores pos invalid",
        lambda: info_nce_scores(_z(), torch.eye(4, 3, dtype=torch.bool), torch.zeros(4, 3, dtype=torch.bool)),
        "valid_mask",
    ),
    ("scores mask shape", lambda: info_nce_scores(_z(), torch.ones(3, 3, dtype=torch.bool)), "positive_mask"),
    ("scores tau", lambda: info_nce_scores(_z(), torch.eye(4, 3, dtype=torch.bool), None, -1.0), "temperature"),
    ("cmc one view", lambda: cmc([_z()]), "views"),
    ("cmc shapes", lambda: cmc([_z(4), _z(5)]), "views"),
    ("cmc reduction", lambda: cmc([_z(), _z()], pair_reduction="max"), "pair_reduction"),
    ("cmc 2-D tensor", lambda: cmc(_z()), "views"),
]


@pytest.mark.parametrize("call,needle", [(c, n) for _, c, n in BAD], ids=[i for i, _, _ in BAD])
def test_bad_input_raises_value_error(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()


def test_reduction_is_mean_over_2b(rows):
    """Identical views, orthogonal images: every anchor has the same loss, equal to the mean."""
    e = torch.eye(4, dtype=torch.float64)
    loss = nt_xent(e, e.clone(), 1.0)
    # positive e^1, negatives: the other 3 images twice, e^0 each -> log(e + 6) - 1
    assert float(loss) == pytest.approx(math.log(math.e + 6) - 1, rel=1e-12)
