"""LMCL distance polarization against a loop over the full n x n distance matrix (METHODS
row 21)."""

from __future__ import annotations

import pytest
import torch

from toolkit.losses.functional import distance_polarization
from toolkit.losses.functional.polarization import distance_polarization_reference


def ref_dp(f, d_plus, d_minus, pairs="full"):
    """sum over (i, j) of |min((D_ij - d+)(D_ij - d-), 0)|, D_ij = (1 - f_i.f_j) / 2 and the
    distance of a point to itself D_ii = 0."""
    n = len(f)
    total = 0.0
    for i in range(n):
        for j in range(n):
            if pairs == "upper" and j <= i:
                continue
            dist = (1 - torch.dot(f[i], f[j])) / 2 if i != j else torch.zeros((), dtype=f.dtype)
            total = total + torch.abs(torch.clamp((dist - d_plus) * (dist - d_minus), max=0.0))
    return total


def occupancy(f, d_plus, d_minus):
    n = len(f)
    hits = sum(1 for i in range(n) for j in range(n) if i != j and d_plus < float((1 - f[i] @ f[j]) / 2) < d_minus)
    return hits / (n * (n - 1))


@pytest.mark.parametrize("d_plus,d_minus", [(0.1, 0.5), (0.0, 0.3), (0.2, 0.9)])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_dp_matches_loop_reference(dtype, close, rows, leaves, d_plus, d_minus, reduction):
    f = rows(9, 3, seed=1, dtype=dtype)
    stats: dict = {}
    loss = distance_polarization(f, d_plus, d_minus, reduction, stats=stats)
    (rf,) = leaves(f)
    ref = distance_polarization_reference(rf, d_plus, d_minus, reduction)
    if reduction == "sum":  # the plain-torch reference is itself held to the loop
        close(ref, ref_dp(rf, d_plus, d_minus), torch.float64)
    close(loss, ref, dtype)
    close(torch.autograd.grad(loss, f)[0], torch.autograd.grad(ref, rf)[0], dtype)
    assert stats["dp_margin_occupancy"] == pytest.approx(occupancy(rf.detach(), d_plus, d_minus))


def test_dp_full_sum_is_twice_the_upper_triangle(close, rows):
    f = rows(8, 4, seed=2)
    close(distance_polarization(f), 2 * ref_dp(f.detach(), 0.1, 0.5, pairs="upper"), torch.float64)


def test_dp_zero_when_no_distance_inside_the_margin():
    """Two antipodal clusters: D is 0 within a cluster and 1 across, outside (0.1, 0.5)."""
    e = torch.tensor([[1.0, 0.0, 0.0]] * 3 + [[-1.0, 0.0, 0.0]] * 3, dtype=torch.float64)
    f = e.requires_grad_()
    stats: dict = {}
    loss = distance_polarization(f, 0.1, 0.5, stats=stats)
    assert float(loss.detach()) == 0.0 and stats["dp_margin_occupancy"] == 0.0
    assert (torch.autograd.grad(loss, f)[0] == 0).all()
    # the orthogonal case sits exactly on d- = 0.5: the product is 0 there too
    assert float(distance_polarization(torch.eye(4))) == 0.0


def test_dp_is_positive_inside_the_margin():
    f = torch.tensor([[1.0, 0.0], [0.6, 0.8]], dtype=torch.float64)  # D = (1 - 0.6)/2 = 0.2
    # (0.2 - 0.1)(0.2 - 0.5) = -0.03, both (i, j) and (j, i)
    assert float(distance_polarization(f)) == pytest.approx(0.06, rel=1e-12)
    assert float(distance_polarization(f, reduction="mean")) == pytest.approx(0.03, rel=1e-12)


def test_gradcheck_dp(rows):
    f = rows(6, 3, seed=3)
    assert torch.autograd.gradcheck(lambda x: distance_polarization(x, 0.1, 0.6), (f,))
    assert torch.autograd.gradcheck(lambda x: distance_polarization(x, 0.0, 0.4, "mean"), (f,))


BAD = [
    ("d_plus<0", dict(d_plus=-0.1), "d_plus"),
    ("d_plus>=d_minus", dict(d_plus=0.5, d_minus=0.5), "d_plus must be < d_minus"),
    ("d_minus<=0", dict(d_minus=0.0), "d_minus"),
    ("reduction", dict(reduction="max"), "reduction"),
]


@pytest.mark.parametrize("kwargs,needle", [(k, n) for _, k, n in BAD], ids=[i for i, _, _ in BAD])
def test_bad_arguments_raise_value_error(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        distance_polarization(torch.randn(4, 3), **kwargs)


@pytest.mark.parametrize(
    "f", [torch.randn(4), torch.randn(0, 3), torch.ones(3, 2, dtype=torch.long)], ids=["1-D", "empty", "int"]
)
def test_bad_embeddings_raise_value_error(f):
    with pytest.raises(ValueError, match="f"):
        distance_polarization(f)
