"""The losses' checks that need a value of their inputs, as a GPU takes them (the CPU listed
among the read-free devices, ``toolkit.training.syncs.cuda_branches``): nothing is read back,
a failed check makes the loss NaN or infinite (the trainer's non-finite check stops the run at
its next log step, printing the records) instead of a ValueError, and the records are device
tensors. On valid inputs both paths compute the same values and gradients."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from tests.core.test_debiased import clamped_pair
from tests.core.test_references import _multi_positive_scores
from toolkit.losses.functional import (
    cmc,
    dcl,
    dcl_scores,
    hcl_scores,
    info_nce_scores,
    ir_nce,
    moco_infonce,
    nt_xent,
    wl_simple,
    wl_sims_from_bank,
)
from toolkit.samplers.sources import MemoryBank
from toolkit.training.syncs import SyncCounter, cuda_branches


def _z(n=4, d=3, seed=0):
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (x / x.norm(dim=1, keepdim=True)).requires_grad_()


def _empty_row_mask(n: int) -> torch.Tensor:
    keep = torch.ones(n, n, dtype=torch.bool)
    keep[1] = False  # anchor 1 keeps no negative (self and its positive are not negatives)
    return keep


def test_nt_xent_anchor_without_negatives():
    z1, z2 = _z(seed=1), _z(seed=2)
    with pytest.raises(ValueError, match="neg_mask keeps no candidate negative for anchor"):
        nt_xent(z1, z2, 0.5, neg_mask=_empty_row_mask(8))
    stats: dict = {}
    with cuda_branches(), SyncCounter() as reads:
        loss = nt_xent(z1, z2, 0.5, neg_mask=_empty_row_mask(8), stats=stats)
        loss.backward()
    assert reads.total == 0, reads.report()
    assert torch.isnan(loss)
    assert torch.is_tensor(stats["anchors_without_negatives"]) and int(stats["anchors_without_negatives"]) == 1
    assert torch.isfinite(z1.grad).all()  # the NaN is the check's, not the gradient's


def test_moco_query_without_negatives():
    q, k, queue = _z(seed=3), _z(seed=4), _z(6, seed=5).detach()
    keep = torch.ones(4, 6, dtype=torch.bool)
    keep[2] = False
    with pytest.raises(ValueError, match="neg_mask keeps no candidate negative for anchor"):
        moco_infonce(q, k, queue, neg_mask=keep)
    stats: dict = {}
    with cuda_branches(), SyncCounter() as reads:
        loss = moco_infonce(q, k, queue, neg_mask=keep, stats=stats)
    assert reads.total == 0, reads.report()
    assert torch.isnan(loss) and int(stats["anchors_without_negatives"]) == 1


@pytest.mark.parametrize("masked", [False, True])
def test_masked_losses_agree_on_both_paths_and_keep_their_records_on_the_device(masked):
    z1, z2, q, queue = _z(6, seed=6), _z(6, seed=7), _z(6, seed=8), _z(10, seed=9).detach()
    keep = torch.rand(12, 12, generator=torch.Generator().manual_seed(10)) > 0.3 if masked else None
    queue_keep = torch.rand(6, 10, generator=torch.Generator().manual_seed(11)) > 0.3 if masked else None
    if masked:
        keep[:, 3] = keep[:, 4] = True  # a negative for every anchor (never self and partner both)
        queue_keep[:, 0] = True
    results = []
    for forced in (False, True):
        stats_nt, stats_moco = {}, {}
        with cuda_branches() if forced else contextlib.nullcontext():
            nt = nt_xent(z1, z2, 0.3, neg_mask=keep, stats=stats_nt)
            moco = moco_infonce(q, z2.detach(), queue, 0.3, neg_mask=queue_keep, stats=stats_moco)
            grads = torch.autograd.grad(nt + moco, (z1, z2, q))
        results.append((nt, moco, grads, stats_nt, stats_moco))
    (nt0, moco0, g0, s0, m0), (nt1, moco1, g1, s1, m1) = results
    torch.testing.assert_close(nt1, nt0)
    torch.testing.assert_close(moco1, moco0)
    for a, b in zip(g1, g0, strict=True):
        torch.testing.assert_close(a, b)
    for key in ("pos_sim", "neg_sim", "neg_kept"):
        torch.testing.assert_close(
            torch.as_tensor(s1[key], dtype=torch.float64), torch.as_tensor(s0[key], dtype=torch.float64)
        )
        torch.testing.assert_close(
            torch.as_tensor(m1[key], dtype=torch.float64), torch.as_tensor(m0[key], dtype=torch.float64)
        )
    if masked:
        assert torch.is_tensor(s1["neg_kept"]) and torch.is_tensor(m1["neg_kept"])
        assert int(s1["anchors_without_negatives"]) == 0 and "anchors_without_negatives" not in s0


@pytest.mark.parametrize("form", ["info_nce", "dcl", "hcl"])
def test_score_forms_agree_on_both_paths(form):
    """Multi-positive scores, some candidates invalid (their scores replaced by -inf and NaN:
    never read), some anchors without a positive: the same value, gradient and records."""
    s, pos, valid = _multi_positive_scores()
    s = s.detach().masked_fill(~valid, -math.inf)
    s[0, ~valid[0]] = math.nan
    fn = {
        "info_nce": lambda x, st: info_nce_scores(x, pos, valid, 0.5, stats=st),
        "dcl": lambda x, st: dcl_scores(x, pos, valid, 0.5, 0.1, stats=st),
        "hcl": lambda x, st: hcl_scores(x, pos, valid, 0.5, 0.1, 1.0, stats=st),
    }[form]
    out = []
    for forced in (False, True):
        x = s.clone().requires_grad_()
        stats: dict = {}
        with cuda_branches() if forced else contextlib.nullcontext(), SyncCounter() as reads:
            loss = fn(x, stats)
            (grad,) = torch.autograd.grad(loss, x)
        out.append((loss, grad, stats, reads.total))
    (l0, g0, st0, _), (l1, g1, st1, reads) = out
    assert reads == 0
    assert torch.isfinite(l1) and torch.isfinite(g1).all()
    torch.testing.assert_close(l1, l0)
    torch.testing.assert_close(g1, g0)
    assert set(st1) == set(st0)
    for key in st0:
        torch.testing.assert_close(torch.as_tensor(st1[key]), torch.as_tensor(st0[key]))
        assert torch.is_tensor(st1[key]), key


def test_score_forms_invalid_masks_are_not_finite_off_the_cpu():
    s = torch.randn(4, 5, dtype=torch.float64)
    eye = torch.eye(4, 5, dtype=torch.bool)
    nothing = torch.zeros(4, 5, dtype=torch.bool)
    only_pos = eye.clone()  # valid = the positives alone: positives but no negative
    with cuda_branches(), SyncCounter() as reads:
        no_anchor = info_nce_scores(s, nothing)
        outside = info_nce_scores(s, eye, ~eye)  # every positive outside the partition
        no_negative = dcl_scores(s, eye, only_pos)
    assert reads.total == 0, reads.report()
    assert torch.isnan(no_anchor) and not torch.isfinite(outside) and torch.isnan(no_negative)
    for call in (
        lambda: info_nce_scores(s, nothing),
        lambda: info_nce_scores(s, eye, ~eye),
        lambda: dcl_scores(s, eye, only_pos),
    ):
        with pytest.raises(ValueError):
            call()


def test_debiased_clamp_records_and_clamp_off():
    z1, z2 = clamped_pair()
    stats: dict = {}
    with cuda_branches(), SyncCounter() as reads:
        clamped = dcl(z1, z2, 0.5, 0.5, stats=stats)
        unclamped = dcl(z1, z2, 0.5, 0.5, clamp=False)
    assert reads.total == 0, reads.report()
    assert torch.is_tensor(stats["clamp_active"]) and float(stats["clamp_active"]) == 1.0
    assert torch.isfinite(clamped) and torch.isnan(unclamped)  # the CPU raises (test_debiased)


def test_cmc_records_are_device_tensors():
    views = [_z(5, seed=s) for s in (12, 13, 14)]
    stats: dict = {}
    with SyncCounter() as reads:
        cmc(views, 0.2, stats=stats)
    assert reads.total == 0, reads.report()
    assert torch.is_tensor(stats["pos_sim"]) and torch.is_tensor(stats["neg_sim"])
    v = torch.stack([x.detach() for x in views])
    pos = sum(float((v[i] * v[j]).sum(1).mean()) for i in range(3) for j in range(i + 1, 3)) / 3
    assert float(stats["pos_sim"]) == pytest.approx(pos)


def test_index_ranges_are_checked_on_the_cpu_only():
    """Out-of-range bank indices: a ValueError where reading is free; on a GPU indexing's own
    bounds check (a device-side assert) catches them, so nothing is read to check them."""
    q, bank = _z(3, seed=15), _z(8, seed=16).detach()
    bad = torch.tensor([0, 1, 8])
    with pytest.raises(ValueError, match="indices"):
        wl_sims_from_bank(q, bank, bad)
    with pytest.raises(ValueError, match="indices"):
        ir_nce(q, bank, bad, torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="indices"):
        MemoryBank(8, 3).update(bad, q.detach())
    good = torch.tensor([0, 5, 7])
    memory = MemoryBank(8, 3)
    with cuda_branches(), SyncCounter() as reads:
        wl_sims_from_bank(q, bank, good)
        ir_nce(q, bank, good, torch.ones(3, 2, dtype=torch.long))
        memory.update(good, q.detach())
        wl_simple(q[:, 0], bank[:3, :2].expand(3, 2).clone(), None, neg_mask=torch.ones(3, 2, dtype=torch.bool))
    assert reads.total == 0, reads.report()
