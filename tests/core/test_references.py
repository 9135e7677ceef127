"""The fused kernels against the plain-torch references that sit next to them (each loss's
readable definition), and those references against the hand-written loops of the other test
files for the main losses, so that a wrong reference is caught too."""

from __future__ import annotations

import pytest
import torch

from tests.core.test_cacr import ref_cacr
from tests.core.test_debiased import ref_in_batch, ref_scores
from tests.core.test_infonce import ref_moco, ref_nt_xent
from toolkit.losses.functional import (
    _kernel,
    cacr,
    cacr_minibatch,
    dcl,
    dcl_scores,
    distance_polarization,
    hcl,
    hcl_scores,
    moco_infonce,
    nt_xent,
    uniform,
    wl_sims_from_bank,
)
from toolkit.losses.functional.cacr import cacr_reference
from toolkit.losses.functional.debiased import dcl_reference, debiased_scores_reference
from toolkit.losses.functional.geometry import uniform_reference
from toolkit.losses.functional.infonce import moco_infonce_reference, nt_xent_reference
from toolkit.losses.functional.polarization import distance_polarization_reference
from toolkit.losses.functional.wang_liu import wl_sims_from_bank_reference


def agree(close, dtype, loss, ref, inputs, ref_inputs):
    """Values and gradients (w.r.t. every input) of a kernel and a float64 reference."""
    close(loss, ref, dtype)
    for g, gr in zip(torch.autograd.grad(loss, inputs), torch.autograd.grad(ref, ref_inputs)):
        close(g, gr, dtype)


def in_batch_mask(b: int, seed: int) -> torch.Tensor:
    keep = torch.rand(2 * b, 2 * b, generator=torch.Generator().manual_seed(seed)) > 0.5
    a = torch.arange(2 * b)
    keep[a, (a + 1) % (2 * b)] = keep[a, (a - 1) % (2 * b)] = True  # a kept negative per row
    return keep


# ----------------------------------------------------------------------------- references vs loops
@pytest.mark.parametrize("masked", [False, True])
def test_infonce_references_match_loops(close, rows, leaves, masked):
    z1, z2 = rows(5, 4, seed=1), rows(5, 4, seed=2)
    keep = in_batch_mask(5, 3) if masked else None
    r1, r2 = leaves(z1, z2)
    agree(
        close,
        torch.float64,
        nt_xent_reference(z1, z2, 0.3, neg_mask=keep),
        ref_nt_xent(r1, r2, 0.3, None if keep is None else keep.tolist()),
        (z1, z2),
        (r1, r2),
    )
    queue = rows(7, 4, seed=4, grad=False)
    qkeep = (torch.rand(5, 7, generator=torch.Generator().manual_seed(5)) > 0.5) if masked else None
    agree(
        close,
        torch.float64,
        moco_infonce_reference(z1, z2, queue, 0.2, neg_mask=qkeep),
        ref_moco(r1, r2.detach(), queue, 0.2, None if qkeep is None else qkeep.tolist()),
        (z1,),
        (r1,),
    )


@pytest.mark.parametrize("beta", [None, 0.5, 1.0])
@pytest.mark.parametrize("tau_plus,clamp", [(0.1, True), (0.5, True), (0.05, False)])
def test_debiased_references_match_loops(close, rows, leaves, beta, tau_plus, clamp):
    z1, z2 = rows(5, 4, seed=6), rows(5, 4, seed=7)
    r1, r2 = leaves(z1, z2)
    agree(
        close,
        torch.float64,
        dcl_reference(z1, z2, 0.5, tau_plus, beta, clamp),
        ref_in_batch(r1, r2, 0.5, tau_plus, beta=beta, clamp=clamp),
        (z1, z2),
        (r1, r2),
    )
    s, pos, valid = _multi_positive_scores()
    (rs,) = leaves(s)
    agree(
        close,
        torch.float64,
        debiased_scores_reference(s, pos, valid, 0.5, tau_plus, beta),
        ref_scores(rs, pos.tolist(), valid.tolist(), 0.5, tau_plus, beta=beta),
        (s,),
        (rs,),
    )


def test_cacr_reference_matches_loop(close, rows, leaves):
    q, pos = rows(4, 3, seed=8), rows(4 * 2, 3, seed=9).view(4, 2, 3)
    neg = rows(5, 3, seed=10)
    rq, rp, rn = leaves(q, pos, neg)
    agree(
        close,
        torch.float64,
        cacr_reference(q, pos, neg, 1.0, 2.0),
        ref_cacr(rq, rp, [rn] * 4, 1.0, 2.0),
        (q, pos, neg),
        (rq, rp, rn),
    )


def _multi_positive_scores(dtype=torch.float64):
    g = torch.Generator().manual_seed(11)
    s = torch.randn(6, 9, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    pos = torch.zeros(6, 9, dtype=torch.bool)
    pos[0, 1] = pos[0, 3] = pos[1, 2] = pos[3, 0] = pos[3, 7] = pos[5, 4] = True
    valid = (torch.rand(6, 9, generator=g) > 0.25) | pos
    valid[:, 8] = True
    return s, pos, valid


# ----------------------------------------------------------------------------- kernels vs references
@pytest.fixture(params=["bound", "row max"])
def shift(request, monkeypatch):
    """Both shifts of the fused kernels: the CPU's Cauchy-Schwarz bound (with its underflow guard)
    and CUDA's row max (no host read), the second taken here on the CPU."""
    if request.param == "row max":
        monkeypatch.setattr(_kernel, "ROW_MAX_DEVICES", ("cuda", "cpu"))
    return request.param


@pytest.mark.parametrize("tau", [0.05, 0.2, 1.0])
@pytest.mark.parametrize("masked", [False, True])
def test_nt_xent_kernel_matches_reference(shift, dtype, close, rows, leaves, tau, masked):
    z1, z2 = rows(12, 6, seed=12, dtype=dtype), rows(12, 6, seed=13, dtype=dtype)
    keep = in_batch_mask(12, 14) if masked else None
    r1, r2 = leaves(z1, z2)
    agree(
        close,
        dtype,
        nt_xent(z1, z2, tau, neg_mask=keep),
        nt_xent_reference(r1, r2, tau, neg_mask=keep),
        (z1, z2),
        (r1, r2),
    )


@pytest.mark.parametrize("tau", [0.05, 0.2])
@pytest.mark.parametrize("masked", [False, True])
def test_moco_kernel_matches_reference(shift, dtype, close, rows, leaves, tau, masked):
    q, k = rows(10, 6, seed=15, dtype=dtype), rows(10, 6, seed=16, dtype=dtype)
    queue = rows(40, 6, seed=17, dtype=dtype, grad=False)
    keep = None
    if masked:
        keep = torch.rand(10, 40, generator=torch.Generator().manual_seed(18)) > 0.7
        keep[:, 0] = True
    (rq,) = leaves(q)
    agree(
        close,
        dtype,
        moco_infonce(q, k, queue, tau, neg_mask=keep),
        moco_infonce_reference(rq, k.double(), queue.double(), tau, neg_mask=keep),
        (q,),
        (rq,),
    )


@pytest.mark.parametrize("beta", [None, 0.0, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("tau,tau_plus", [(0.5, 0.1), (0.2, 0.05), (0.5, 0.5)])
def test_debiased_kernels_match_reference(shift, dtype, close, rows, leaves, beta, tau, tau_plus):
    """In-batch DCL / HCL (``_InBatchLoss`` with the debiased head) and the score forms (the
    ``_DebiasedTail`` node), clamp inactive and (tau+ = 0.5) active."""
    z1, z2 = rows(8, 5, seed=19, dtype=dtype), rows(8, 5, seed=20, dtype=dtype)
    r1, r2 = leaves(z1, z2)
    loss = dcl(z1, z2, tau, tau_plus) if beta is None else hcl(z1, z2, tau, tau_plus, beta)
    agree(close, dtype, loss, dcl_reference(r1, r2, tau, tau_plus, beta), (z1, z2), (r1, r2))
    s, pos, valid = _multi_positive_scores(dtype)
    (rs,) = leaves(s)
    loss = dcl_scores(s, pos, valid, tau, tau_plus) if beta is None else hcl_scores(s, pos, valid, tau, tau_plus, beta)
    agree(close, dtype, loss, debiased_scores_reference(rs, pos, valid, tau, tau_plus, beta), (s,), (rs,))


@pytest.mark.parametrize("t", [0.5, 2.0, 8.0])
@pytest.mark.parametrize("unit", [True, False])
def test_uniform_kernel_matches_reference(shift, dtype, close, rows, leaves, t, unit):
    x = rows(11, 4, seed=21, dtype=dtype, unit=unit)
    (rx,) = leaves(x)
    agree(close, dtype, uniform(x, t), uniform_reference(rx, t), (x,), (rx,))


@pytest.mark.parametrize("t_pos,t_neg", [(1.0, 2.0), (0.5, 5.0), (0.0, 0.0)])
@pytest.mark.parametrize("detach", [False, True])
def test_cacr_repulsion_kernel_matches_reference(dtype, close, rows, leaves, t_pos, t_neg, detach):
    """The one-block repulsion (``_SoftminExpectation``), shared and per-anchor negatives, and
    the mini-batch form (negatives = the other queries)."""
    q, pos = rows(6, 4, seed=22, dtype=dtype), rows(6 * 3, 4, seed=23, dtype=dtype).view(6, 3, 4)
    for neg in (rows(9, 4, seed=24, dtype=dtype), rows(6 * 9, 4, seed=25, dtype=dtype).view(6, 9, 4)):
        rq, rp, rn = leaves(q, pos, neg)
        kw = dict(detach_pos_weights=detach, detach_neg_weights=detach)
        agree(
            close,
            dtype,
            cacr(q, pos, neg, t_pos, t_neg, **kw),
            cacr_reference(rq, rp, rn, t_pos, t_neg, **kw),
            (q, pos, neg),
            (rq, rp, rn),
        )
    rq, rp = leaves(q, pos)
    others = torch.stack([torch.cat([rq[:i], rq[i + 1 :]]) for i in range(6)])
    agree(
        close,
        dtype,
        cacr_minibatch(q, pos, t_pos, t_neg),
        cacr_reference(rq, rp, others, t_pos, t_neg),
        (q, pos),
        (rq, rp),
    )


@pytest.mark.parametrize("d_plus,d_minus", [(0.1, 0.5), (0.0, 0.3)])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_polarization_kernel_matches_reference(dtype, close, rows, leaves, d_plus, d_minus, reduction):
    f = rows(10, 3, seed=26, dtype=dtype)
    (rf,) = leaves(f)
    agree(
        close,
        dtype,
        distance_polarization(f, d_plus, d_minus, reduction),
        distance_polarization_reference(rf, d_plus, d_minus, reduction),
        (f,),
        (rf,),
    )


def test_bank_split_matches_reference(dtype, close, rows, leaves):
    q, bank = rows(5, 4, seed=27, dtype=dtype), rows(8, 4, seed=28, dtype=dtype, grad=False)
    idx = torch.tensor([0, 7, 3, 3, 5])
    (rq,) = leaves(q)
    s_pos, s_neg = wl_sims_from_bank(q, bank, idx)
    r_pos, r_neg = wl_sims_from_bank_reference(rq, bank.double(), idx)
    weights = torch.randn(5, 7, generator=torch.Generator().manual_seed(29), dtype=torch.float64)
    agree(
        close,
        dtype,
        (s_pos * 1.5).sum() + (s_neg * weights.to(dtype)).sum(),
        (r_pos * 1.5).sum() + (r_neg * weights).sum(),
        (q,),
        (rq,),
    )


@pytest.mark.parametrize("loss", ["nt_xent", "dcl", "hcl", "moco"])
def test_kernels_stay_exact_where_the_bound_underflows(shift, close, leaves, loss):
    """Rows of very unequal norms at tau = 0.01: the bound's shift is far above most rows'
    maxima, so their sums underflow in float32 unless recomputed (bound) or shifted by their
    own max (row max); both agree with the float64 reference."""
    g = torch.Generator().manual_seed(31)
    scale = torch.tensor([1.0, 0.05, 0.05, 0.2, 1.0, 0.05, 0.3, 0.05])
    z1 = (torch.randn(8, 5, generator=g) * scale[:, None]).requires_grad_()
    z2 = (torch.randn(8, 5, generator=g) * scale.flip(0)[:, None]).requires_grad_()
    r1, r2 = leaves(z1, z2)
    tau = 0.01
    if loss == "nt_xent":
        ours, ref = nt_xent(z1, z2, tau), nt_xent_reference(r1, r2, tau)
    elif loss == "moco":
        queue = torch.randn(30, 5, generator=g) * 3.0
        ours, ref = (
            moco_infonce(z1, z2.detach(), queue, tau),
            moco_infonce_reference(r1, r2.detach(), queue.double(), tau),
        )
        agree(close, torch.float32, ours, ref, (z1,), (r1,))
        return
    else:
        beta = None if loss == "dcl" else 1.0
        ours = dcl(z1, z2, tau, 0.1) if beta is None else hcl(z1, z2, tau, 0.1, beta)
        ref = dcl_reference(r1, r2, tau, 0.1, beta)
    agree(close, torch.float32, ours, ref, (z1, z2), (r1, r2))


def test_the_row_max_shift_reads_nothing_back_from_the_device(monkeypatch):
    """NT-Xent and uniformity, forward and backward, as a CUDA step takes them: no host read
    (counted by the same counter as the training step's reads)."""
    from toolkit.training.syncs import SyncCounter

    z1 = torch.nn.functional.normalize(torch.randn(16, 8), dim=1).requires_grad_()
    z2 = torch.nn.functional.normalize(torch.randn(16, 8), dim=1).requires_grad_()
    with SyncCounter() as bound:
        (nt_xent(z1, z2, 0.1) + uniform(z1, 2.0)).backward()
    assert sum(bound.calls.values()) == 2, dict(bound.calls)  # the two underflow guards, on the CPU path
    monkeypatch.setattr(_kernel, "ROW_MAX_DEVICES", ("cuda", "cpu"))
    with SyncCounter() as row_max:
        (nt_xent(z1, z2, 0.1) + uniform(z1, 2.0)).backward()
    assert not row_max.calls, dict(row_max.calls)
