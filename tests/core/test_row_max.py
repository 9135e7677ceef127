"""CUDA's row-max shift of the fused in-batch kernel (taken here on the CPU): without a mask it
keeps the symmetric form, one shift for all rows and ONE matmul in the backward, as the bound's
path; with a mask, or where one shift could underflow for unit rows (a small temperature), each
row's own max and two. Values and gradients against the float64 references either way."""

from __future__ import annotations

import pytest
import torch

from tests.core.test_references import agree, in_batch_mask
from toolkit.losses.functional import _kernel, dcl, hcl, nt_xent
from toolkit.losses.functional.debiased import dcl_reference
from toolkit.losses.functional.infonce import nt_xent_reference

MATMULS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "addbmm"}


class _Matmuls(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the matrix products an autograd backward runs."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in MATMULS:
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture
def row_max(monkeypatch):
    monkeypatch.setattr(_kernel, "ROW_MAX_DEVICES", ("cuda", "cpu"))


def _losses(tau, keep=None):
    """name -> (the kernel's loss, the float64 reference), on z1, z2."""
    return {
        "nt_xent": (lambda a, b: nt_xent(a, b, tau, neg_mask=keep), lambda a, b: nt_xent_reference(a, b, tau, neg_mask=keep)),
        "dcl": (lambda a, b: dcl(a, b, tau, 0.1), lambda a, b: dcl_reference(a, b, tau, 0.1)),
        "hcl": (lambda a, b: hcl(a, b, tau, 0.1, 1.0), lambda a, b: dcl_reference(a, b, tau, 0.1, 1.0)),
        "hcl_beta": (lambda a, b: hcl(a, b, tau, 0.1, 0.5), lambda a, b: dcl_reference(a, b, tau, 0.1, 0.5)),
    }  # fmt: skip


def _backward_matmuls(loss_fn, z1, z2) -> int:
    loss = loss_fn(z1, z2)
    with _Matmuls() as counted:
        torch.autograd.grad(loss, (z1, z2))
    return counted.count


@pytest.mark.parametrize("name", ["nt_xent", "dcl", "hcl"])
@pytest.mark.parametrize("tau", [0.1, 0.2, 0.5])
def test_unmasked_row_max_keeps_one_backward_matmul(row_max, dtype, close, rows, leaves, name, tau):
    z1, z2 = rows(12, 6, seed=31, dtype=dtype), rows(12, 6, seed=32, dtype=dtype)
    ours, ref = _losses(tau)[name]
    r1, r2 = leaves(z1, z2)
    agree(close, dtype, ours(z1, z2), ref(r1, r2), (z1, z2), (r1, r2))
    assert _backward_matmuls(ours, z1, z2) == 1


@pytest.mark.parametrize("name", ["nt_xent", "dcl", "hcl", "hcl_beta"])
@pytest.mark.parametrize("tau", [0.05, 0.2])
def test_row_max_takes_as_many_backward_matmuls_as_the_bound(monkeypatch, dtype, close, rows, leaves, name, tau):
    """The CPU's shift takes one matmul (HCL at beta != 0, 1: two, on both paths); the row max
    the same wherever one shift cannot underflow for unit rows: float64 always, float32 unless
    2 max(scales) > ln(1 / floor) (HCL at tau = 0.05: 4 / tau = 80 > 71 - ln 24)."""
    z1, z2 = rows(12, 6, seed=33, dtype=dtype), rows(12, 6, seed=34, dtype=dtype)
    ours, ref = _losses(tau)[name]
    bound = _backward_matmuls(ours, z1, z2)
    assert bound == (2 if name == "hcl_beta" else 1)
    monkeypatch.setattr(_kernel, "ROW_MAX_DEVICES", ("cuda", "cpu"))
    r1, r2 = leaves(z1, z2)
    agree(close, dtype, ours(z1, z2), ref(r1, r2), (z1, z2), (r1, r2))
    underflows = dtype == torch.float32 and name == "hcl" and tau == 0.05
    assert _backward_matmuls(ours, z1, z2) == (2 if underflows else bound)


def test_a_mask_takes_row_shifts_and_two_matmuls(row_max, dtype, close, rows, leaves):
    z1, z2 = rows(12, 6, seed=35, dtype=dtype), rows(12, 6, seed=36, dtype=dtype)
    ours, ref = _losses(0.2, in_batch_mask(12, 37))["nt_xent"]
    r1, r2 = leaves(z1, z2)
    agree(close, dtype, ours(z1, z2), ref(r1, r2), (z1, z2), (r1, r2))
    assert _backward_matmuls(ours, z1, z2) == 2


@pytest.mark.parametrize("name", ["nt_xent", "hcl"])
def test_a_small_temperature_takes_row_shifts_exactly(row_max, close, rows, leaves, name):
    """tau = 0.01: unit rows may lie 2/tau = 200 apart, past float32's underflow floor under one
    shift, so each row keeps its own max (exact, two matmuls)."""
    z1, z2 = rows(12, 6, seed=38, dtype=torch.float32), rows(12, 6, seed=39, dtype=torch.float32)
    ours, ref = _losses(0.01)[name]
    r1, r2 = leaves(z1, z2)
    agree(close, torch.float32, ours(z1, z2), ref(r1, r2), (z1, z2), (r1, r2))
    assert _backward_matmuls(ours, z1, z2) == 2


def test_rows_far_below_the_shared_shift_give_nan_not_an_inexact_loss(row_max, rows):
    """Non-unit rows can fall below the floor under the one shift (tau = 0.2 takes it for unit
    rows): one row scaled by 40 puts another row's largest term ~e^-300 under it. The bound's
    path recomputes such a row exactly (a host read); the row-max path has no read, so the loss
    is NaN (the trainer's non-finite check stops the run) rather than quietly wrong. float64's
    floor is ~e^-700 below: the same rows are exact there."""
    z1, z2 = rows(6, 4, seed=40, dtype=torch.float32), rows(6, 4, seed=41, dtype=torch.float32)
    far = torch.cat([z1[:1] * 40.0, z1[1:]]).detach().requires_grad_()
    assert torch.isnan(nt_xent(far, z2, 0.2))
    assert torch.isfinite(nt_xent(z1, z2, 0.2))
    wide = far.detach().double().requires_grad_()
    torch.testing.assert_close(nt_xent(wide, z2.double(), 0.2), nt_xent_reference(wide, z2.double(), 0.2))
