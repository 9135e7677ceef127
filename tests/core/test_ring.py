"""Ring / CNCE against loop references written from Alg. 1, Eq. 3 and the authors' official
parametrisation (sorted lists, explicit slices); identities of METHODS rows 16-18."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolkit.losses.functional import ir_nce, ir_ring, moco_infonce, ring_nce, ring_official_thresholds_to_percentiles


# ----------------------------------------------------------------------------- loop references
def lse(terms):
    m = max(float(t.detach()) for t in terms)
    return m + torch.log(sum(torch.exp(t - m) for t in terms))


def ascending(terms):
    return sorted(terms, key=lambda t: float(t.detach()))


def ref_ring(q, k, queue, tau, lower, upper, include_positive=True):
    """Alg. 1: sort q.Q/tau ascending, keep [int(lower/100 M), int(upper/100 M))."""
    m, total = len(queue), 0.0
    for i in range(len(q)):
        pos = torch.dot(q[i], k[i]) / tau
        ring = ascending([torch.dot(q[i], queue[j]) / tau for j in range(m)])
        ring = ring[int(lower * m / 100) : int(upper * m / 100)]
        total = total + (-pos + lse(([pos] if include_positive else []) + ring))
    return total / len(q)


def ref_ring_official(q, k, queue, tau, theta_outer, theta_inner):
    """The authors' MoCoRing: sort descending, outer = first int(theta_o M), drop the first
    int(theta_i * len(outer)) of it, prepend the positive."""
    m, total = len(queue), 0.0
    for i in range(len(q)):
        pos = torch.dot(q[i], k[i]) / tau
        desc = ascending([torch.dot(q[i], queue[j]) / tau for j in range(m)])[::-1]
        outer = desc[: int(theta_outer * m)]
        ring = outer[int(theta_inner * len(outer)) :]
        total = total + (-pos + lse([pos] + ring))
    return total / len(q)


def ref_moco_ce(q, k, queue, tau):
    """MoCo InfoNCE as cross-entropy with label 0 over [q.k, q.Q]."""
    logits = torch.cat([(q * k).sum(1, keepdim=True), q @ queue.T], dim=1) / tau
    return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long))


def ref_ir_nce(q, bank, idx, noise, tau):
    total = 0.0
    for i in range(len(q)):
        pos = torch.dot(q[i], bank[idx[i]]) / tau
        terms = [pos] + [torch.dot(q[i], bank[j]) / tau for j in noise[i].tolist()]
        total = total + (-pos + lse(terms))
    return total / len(q)


def ref_ir_ring(q, bank, idx, noise, tau, lower, upper, include_positive=True):
    """Ring over all bank entries, ring members ordered closest first, draws by position."""
    n, total = len(bank), 0.0
    for i in range(len(q)):
        pos = torch.dot(q[i], bank[idx[i]]) / tau
        ring = ascending([torch.dot(q[i], bank[j]) / tau for j in range(n)])
        ring = ring[int(lower * n / 100) : int(upper * n / 100)][::-1]
        drawn = [ring[p] for p in noise[i].tolist()]
        total = total + (-pos + lse(([pos] if include_positive else []) + drawn))
    return total / len(q)


def inputs(rows, n, m, d, dtype, seed=0):
    return (
        rows(n, d, seed=seed, dtype=dtype),
        rows(n, d, seed=seed + 1, dtype=dtype, grad=False),
        rows(m, d, seed=seed + 2, dtype=dtype, grad=False),
    )


def grads(loss, *xs):
    return torch.autograd.grad(loss, xs)


# ----------------------------------------------------------------------------- MoCoRing
@pytest.mark.parametrize("lower,upper", [(0, 100), (90, 99), (50, 90), (75, 100), (10, 60), (0, 90), (30, 80)])
@pytest.mark.parametrize("include_positive", [True, False])
def test_ring_nce_matches_loop(dtype, close, rows, leaves, lower, upper, include_positive):
    q, k, queue = inputs(rows, 4, 40, 5, dtype)
    (rq,) = leaves(q)
    loss = ring_nce(q, k, queue, 0.1, lower, upper, include_positive)
    ref = ref_ring(rq, k.double(), queue.double(), 0.1, lower, upper, include_positive)
    close(loss, ref, dtype)
    close(grads(loss, q)[0], grads(ref, rq)[0], dtype)


def test_full_ring_is_moco_infonce(dtype, close, rows):
    q, k, queue = inputs(rows, 6, 32, 8, dtype, seed=3)
    ref = ref_moco_ce(q.detach().double(), k.double(), queue.double(), 0.07)
    loss = ring_nce(q, k, queue, 0.07, 0, 100)
    close(loss, ref, dtype)
    close(loss, moco_infonce(q, k, queue, 0.07), dtype)


@pytest.mark.parametrize("theta", [(0.5, 0.2), (0.1, 0.1), (0.25, 0.2), (1.0, 0.3)])
def test_official_parametrisation_agrees_where_truncation_coincides(close, rows, theta):
    """|Q| = 100: int(theta_o * 100) and int(theta_i * int(theta_o * 100)) are exact."""
    q, k, queue = inputs(rows, 3, 100, 6, torch.float64, seed=5)
    lower, upper = ring_official_thresholds_to_percentiles(*theta)
    official = ref_ring_official(q.detach(), k, queue, 0.07, *theta)
    close(ring_nce(q, k, queue, 0.07, lower, upper), official, torch.float64)


def test_official_parametrisation_can_differ_by_truncation(rows):
    """|Q| = 30, (0.5, 0.3): the code keeps descending [4, 15), the percentiles (50, 85) keep
    ascending [15, 25): one element fewer, so the two forms differ (documented)."""
    q, k, queue = inputs(rows, 3, 30, 6, torch.float64, seed=6)
    lower, upper = ring_official_thresholds_to_percentiles(0.5, 0.3)
    paper = float(ring_nce(q, k, queue, 0.07, lower, upper).detach())
    official = float(ref_ring_official(q.detach(), k, queue, 0.07, 0.5, 0.3))
    assert abs(paper - official) > 1e-6


@pytest.mark.parametrize("row_max", [False, True], ids=["bound", "row max"])
def test_ring_nce_stats(rows, monkeypatch, row_max):
    if row_max:  # CUDA's shift, taken on the CPU: the ring's mean similarity must not move
        from toolkit.losses.functional import _kernel

        monkeypatch.setattr(_kernel, "ROW_MAX_DEVICES", ("cuda", "cpu"))
    q, k, queue = inputs(rows, 4, 50, 5, torch.float64, seed=7)
    stats = {}
    ring_nce(q, k, queue, 0.1, 40, 80, stats=stats)
    assert stats["neg_kept"] == pytest.approx(20 / 50)
    qd = q.detach()
    assert float(stats["pos_sim"]) == pytest.approx(float((qd * k).sum(1).mean()))
    ring_vals = [v for i in range(4) for v in sorted((qd[i] @ queue.T).tolist())[20:40]]
    assert float(stats["neg_sim"]) == pytest.approx(sum(ring_vals) / len(ring_vals))


def test_no_gradient_into_keys_or_queue(rows):
    q = rows(3, 4, seed=8)
    k, queue = rows(3, 4, seed=9), rows(20, 4, seed=10)
    ring_nce(q, k, queue, 0.1, 50, 95).backward()
    assert q.grad is not None and k.grad is None and queue.grad is None


# ----------------------------------------------------------------------------- memory bank
@pytest.mark.parametrize("bank_size", [6, 60])  # full-bank matmul and distinct-rows paths
def test_ir_nce_matches_loop(dtype, close, rows, leaves, bank_size):
    q = rows(3, 4, seed=11, dtype=dtype)
    bank = rows(bank_size, 4, seed=12, dtype=dtype, grad=False)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, bank_size, (3,), generator=g)
    noise = torch.randint(0, bank_size, (3, 5), generator=g)
    (rq,) = leaves(q)
    loss = ir_nce(q, bank, idx, noise, 0.07)
    ref = ref_ir_nce(rq, bank.double(), idx, noise, 0.07)
    close(loss, ref, dtype)
    close(grads(loss, q)[0], grads(ref, rq)[0], dtype)


@pytest.mark.parametrize("lower,upper", [(90, 99), (50, 90), (0, 100)])
@pytest.mark.parametrize("include_positive", [True, False])
def test_ir_ring_matches_loop(dtype, close, rows, leaves, lower, upper, include_positive):
    n_bank = 40
    q = rows(3, 4, seed=13, dtype=dtype)
    bank = rows(n_bank, 4, seed=14, dtype=dtype, grad=False)
    ring_size = int(upper * n_bank / 100) - int(lower * n_bank / 100)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, n_bank, (3,), generator=g)
    noise = torch.randint(0, ring_size, (3, 7), generator=g)  # draws with replacement
    (rq,) = leaves(q)
    loss = ir_ring(q, bank, idx, noise, lower, upper, 0.07, include_positive)
    ref = ref_ir_ring(rq, bank.double(), idx, noise, 0.07, lower, upper, include_positive)
    close(loss, ref, dtype)
    close(grads(loss, q)[0], grads(ref, rq)[0], dtype)


# ----------------------------------------------------------------------------- gradcheck
def test_gradcheck_float64(rows):
    q, k, queue = inputs(rows, 3, 20, 4, torch.float64, seed=15)
    bank = rows(10, 4, seed=16, grad=False)
    idx, noise = torch.tensor([0, 4, 9]), torch.tensor([[1, 2], [3, 3], [0, 5]])
    for fn in (
        lambda a: ring_nce(a, k, queue, 0.2, 0, 100),
        lambda a: ring_nce(a, k, queue, 0.2, 50, 90),
        lambda a: ring_nce(a, k, queue, 0.2, 10, 60, include_positive=False),
        lambda a: ir_nce(a, bank, idx, noise, 0.2),
        lambda a: ir_ring(a, bank, idx, noise[:, :1], 30, 90, 0.2),
    ):
        assert torch.autograd.gradcheck(fn, (q,), fast_mode=True)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"lower": 90, "upper": 90}, "lower must be < upper"),
        ({"lower": 95, "upper": 40}, "lower must be < upper"),
        ({"lower": -5, "upper": 40}, "lower"),
        ({"lower": 5, "upper": 140}, "upper"),
        ({"lower": 50, "upper": 52}, "empty"),  # int(10) == int(10.4): no negative left
        ({"temperature": 0.0}, "temperature"),
    ],
)
def test_ring_nce_rejects_bad_arguments(rows, kwargs, match):
    q, k, queue = inputs(rows, 2, 20, 3, torch.float64, seed=17)
    with pytest.raises(ValueError, match=match):
        ring_nce(q, k, queue, **kwargs)


def test_shape_and_index_errors(rows):
    q, k, queue = inputs(rows, 2, 20, 3, torch.float64, seed=18)
    with pytest.raises(ValueError, match="same shape"):
        ring_nce(q, k[:1], queue)
    with pytest.raises(ValueError, match="embedding size"):
        ring_nce(q, k, queue[:, :2])
    bank = rows(8, 3, seed=19, grad=False)
    with pytest.raises(ValueError, match="noise_idx"):
        ir_nce(q, bank, torch.tensor([0, 1]), torch.tensor([[8], [0]]))
    with pytest.raises(ValueError, match="indices"):
        ir_nce(q, bank, torch.tensor([0.0, 1.0]), torch.tensor([[1], [0]]))
    with pytest.raises(ValueError, match="noise_idx"):  # ring of 8 at (50, 100) has 4 slots
        ir_ring(q, bank, torch.tensor([0, 1]), torch.tensor([[4], [0]]), 50, 100)


# ----------------------------------------------------------------------------- defaults
def test_every_ring_component_defaults_to_the_authors_ring():
    """ring_nce (function and module), ir_ring and the ring selector all default to the
    authors' thres_outer = thres_inner = 0.1, i.e. percentiles [90, 99) (the configs of
    mhw32/contrastive-ring-public; docs/methods.md, section Ring)."""
    import inspect

    from toolkit.losses.base import LOSSES
    from toolkit.samplers.selectors import make_selector

    authors = (90.0, 99.0)
    assert ring_official_thresholds_to_percentiles(0.1, 0.1) == pytest.approx(authors)
    fn = inspect.signature(ring_nce).parameters
    assert (fn["lower"].default, fn["upper"].default) == authors
    for name in ("ring_nce", "ir_ring"):
        loss = LOSSES.get(name)()
        assert (loss.lower, loss.upper) == authors, name
    selector = make_selector("ring")
    assert selector.resolve(selector.args) == pytest.approx({"lower": 90.0, "upper": 99.0})
