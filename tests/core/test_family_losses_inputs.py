"""The family's losses on random scales (hypothesis) against the loop references, in half
precision, without host reads, and with bad arguments (named in the error)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.family_references import (
    randn,
    ref_barlow_twins,
    ref_moco_v3,
    ref_vicreg,
)
from toolkit.losses import functional
from toolkit.losses.functional import (
    barlow_twins,
    byol,
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
