"""The registered IR / IRing modules (Ring Eq. 3 and Sec. 4) against the loop references of
test_ring.py, with the modules' own uniform draws replayed from the same seed."""

from __future__ import annotations

import pytest
import torch

from tests.core.test_ring import ref_ir_nce, ref_ir_ring
from toolkit.losses.base import LOSSES, ContrastiveBatch
from toolkit.samplers import build_selector


def _batch(n=5, bank_size=40, d=6, step=0, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(n, 1, d, generator=g, dtype=torch.float64), dim=2)
    bank = torch.nn.functional.normalize(torch.randn(bank_size, d, generator=g, dtype=torch.float64), dim=1)
    idx = torch.randperm(bank_size, generator=g)[:n]
    return ContrastiveBatch(views=q, negatives=bank, indices=idx, step=step)


def test_registered():
    assert {"ir_nce", "ir_ring"} <= set(LOSSES.names())


def test_ir_nce_module_is_eq3_with_its_draws():
    b = _batch()
    loss = LOSSES.get("ir_nce")(temperature=0.07, num_negatives=7)
    torch.manual_seed(3)
    value = loss(b).loss
    torch.manual_seed(3)
    noise = torch.randint(0, 40, (5, 7))
    ref = ref_ir_nce(b.views[:, 0], b.negatives, b.indices, noise, 0.07)
    torch.testing.assert_close(value, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("step", [0, 50, 100, 1000])
def test_ir_ring_module_follows_the_selector_schedule(step):
    """Annealed theta_outer 1.0 -> 0.1 over 100 steps, theta_inner 0.1 (Ring App. E)."""
    b = _batch(step=step)
    sel = build_selector("ring", {"theta_inner": 0.1}, "linear", {"init": 1.0, "final": 0.1, "steps": 100})
    loss = LOSSES.get("ir_ring")(temperature=0.07, num_negatives=9)
    loss.attach_selector(sel)
    theta = 1.0 - 0.9 * min(step, 99) / 99
    lower, upper = 100 * (1 - theta), 100 * (1 - 0.1 * theta)
    lo, hi = int(lower * 40 / 100), int(upper * 40 / 100)
    torch.manual_seed(5)
    value = loss(b).loss
    torch.manual_seed(5)
    noise = torch.randint(0, hi - lo, (5, 9))
    ref = ref_ir_ring(b.views[:, 0], b.negatives, b.indices, noise, 0.07, lower, upper)
    torch.testing.assert_close(value, ref, rtol=1e-12, atol=1e-12)


def test_ir_ring_fixed_percentiles_without_selector():
    b = _batch()
    loss = LOSSES.get("ir_ring")(temperature=0.2, num_negatives=4, lower=50, upper=90, include_positive=False)
    torch.manual_seed(1)
    value = loss(b).loss
    torch.manual_seed(1)
    noise = torch.randint(0, 16, (5, 4))
    ref = ref_ir_ring(b.views[:, 0], b.negatives, b.indices, noise, 0.2, 50, 90, False)
    torch.testing.assert_close(value, ref, rtol=1e-12, atol=1e-12)


def test_bad_arguments_name_the_key():
    with pytest.raises(ValueError, match="num_negatives"):
        LOSSES.get("ir_nce")(num_negatives=0)
    with pytest.raises(ValueError, match="lower must be < upper"):
        LOSSES.get("ir_ring")(lower=90, upper=50)
    with pytest.raises(ValueError, match="only a ring selector"):
        LOSSES.get("ir_ring")().attach_selector(build_selector("hard", {"num_hard": 3}))
    with pytest.raises(ValueError, match="indices"):
        LOSSES.get("ir_nce")()(ContrastiveBatch(views=torch.zeros(2, 1, 3), negatives=torch.zeros(4, 3)))
