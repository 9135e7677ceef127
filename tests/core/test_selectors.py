"""Selectors (hard / ring / all) against sorted-list references, and the step schedules against
values computed by hand (Wang & Liu Eq. 9; Ring Alg. 1, App. E; METHODS rows 10, 16-19)."""

from __future__ import annotations

import math

import pytest
import torch

from toolkit.samplers.masks import (
    _ring_mask_topk,
    all_mask,
    hard_count,
    hard_mask,
    ring_bounds,
    ring_mask,
    ring_mask_and_sums,
    ring_official_thresholds_to_percentiles,
    ring_percentiles_to_official_thresholds,
)
from toolkit.samplers.scheduled import ScheduledSelector
from toolkit.samplers.schedules import (
    AdaptiveSchedule,
    adaptive,
    constant,
    exponential,
    linear,
    make_schedule,
    staircase,
    step,
)


def sims(n: int, m: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, m, generator=g, dtype=torch.float64) * 2 - 1


def ref_hard(row: list[float], k: int) -> list[bool]:
    """Keep s >= the k-th largest value of the row (ties kept)."""
    threshold = sorted(row, reverse=True)[k - 1]
    return [s >= threshold for s in row]


def ref_ring_values(row: list[float], lo_pct: float, hi_pct: float) -> list[float]:
    """The ascending-sorted slice [int(lo/100*M), int(hi/100*M)) of Ring Alg. 1."""
    m = len(row)
    return sorted(row)[int(lo_pct * m / 100) : int(hi_pct * m / 100)]


# ----------------------------------------------------------------------------- hard_mask
@pytest.mark.parametrize(
    "kwargs,k",
    [
        ({"num_hard": 1}, 1),
        ({"num_hard": 5}, 5),
        ({"alpha": 0.25}, 5),
        ({"alpha": 0.26}, 6),
        ({"alpha": 1.0}, 20),
        ({}, 20),
    ],
)
def test_hard_mask_matches_kth_largest(kwargs, k):
    s = sims(4, 20)
    mask = hard_mask(s, **kwargs)
    assert mask.dtype == torch.bool and mask.shape == s.shape
    for i in range(4):
        assert mask[i].tolist() == ref_hard(s[i].tolist(), k)
        assert int(mask[i].sum()) == k


def test_hard_mask_keeps_ties():
    s = torch.tensor([[0.9, 0.5, 0.5, 0.5, 0.1], [0.3, 0.2, 0.1, 0.0, -0.1]], dtype=torch.float64)
    mask = hard_mask(s, num_hard=2)
    assert mask[0].tolist() == [True, True, True, True, False]  # three-way tie at the 2nd value
    assert mask[1].tolist() == [True, True, False, False, False]


def test_hard_count_is_robust_to_float_products():
    # 0.7 * 10 == 7.000000000000001 in binary floating point: K must still be 7.
    assert hard_count(10, alpha=0.7) == 7
    assert hard_count(100, alpha=0.29) == 29
    assert hard_count(3, alpha=0.01) == 1


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.5}, "alpha"),
        ({"num_hard": 0}, "num_hard"),
        ({"num_hard": 21}, "num_hard"),
        ({"num_hard": 2.0}, "num_hard"),
        ({"alpha": 0.5, "num_hard": 3}, "exactly one"),
    ],
)
def test_hard_mask_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        hard_mask(sims(2, 20), **kwargs)


def test_selectors_reject_bad_sims():
    with pytest.raises(ValueError, match="sims"):
        hard_mask(torch.zeros(5), num_hard=1)
    with pytest.raises(ValueError, match="sims"):
        ring_mask(torch.zeros(3, 4, dtype=torch.long), 0, 50)
    assert bool(all_mask(sims(3, 4)).all())


# ----------------------------------------------------------------------------- ring_mask
@pytest.mark.parametrize(
    "lower,upper", [(0, 100), (0, 90), (10, 60), (50, 90), (90, 99), (90, 100), (30, 100), (45, 55), (75, 100)]
)
def test_ring_mask_is_the_sorted_slice(lower, upper):
    s = sims(5, 40, seed=3)
    mask = ring_mask(s, lower, upper)
    lo, hi = int(lower * 40 / 100), int(upper * 40 / 100)
    for i in range(5):
        kept = sorted(v for v, k in zip(s[i].tolist(), mask[i].tolist()) if k)
        assert kept == ref_ring_values(s[i].tolist(), lower, upper)
        assert len(kept) == hi - lo


@pytest.mark.parametrize("lower,upper", [(0, 50), (25, 75), (60, 80), (50, 100)])
def test_ring_mask_keeps_exact_count_under_ties(lower, upper):
    s = torch.zeros(3, 16, dtype=torch.float64)
    s[1, :8] = 1.0  # two tied blocks
    mask = ring_mask(s, lower, upper)
    lo, hi = ring_bounds(16, lower, upper)
    assert mask.sum(dim=1).tolist() == [hi - lo] * 3
    for i in range(3):  # the kept values are those of the sorted slice
        kept = sorted(v for v, k in zip(s[i].tolist(), mask[i].tolist()) if k)
        assert kept == sorted(s[i].tolist())[lo:hi]


# wide rows, as a MoCo queue gives them, with tied blocks at the cuts
WIDE = 12_000


def _wide_rows() -> torch.Tensor:
    """Random rows, a row of ties and rows with a tied block across the cuts."""
    s = sims(5, WIDE, seed=21).float()
    s[1, ::8] = -5.0  # a tied block at the bottom
    s[2] = 0.25  # all tied
    s[3, 4000:9000] = 0.5  # a tied block across the cuts
    return s


@pytest.mark.parametrize("lower,upper", [(50, 90), (90, 99), (0, 90), (30, 100), (1, 2)])
def test_wide_ring_mask_is_the_sorted_slice(lower, upper):
    s = _wide_rows()
    mask = ring_mask(s, lower, upper)
    lo, hi = ring_bounds(WIDE, lower, upper)
    assert mask.sum(dim=1).tolist() == [hi - lo] * 5
    for i in range(5):
        assert torch.equal(s[i][mask[i]].sort().values, s[i].sort().values[lo:hi])


@pytest.mark.parametrize("num_hard", [1, 4095, WIDE // 2])
def test_wide_hard_mask_matches_kth_largest(num_hard):
    s = _wide_rows()
    threshold = s.sort(dim=1, descending=True).values[:, num_hard - 1 : num_hard]
    assert torch.equal(hard_mask(s, num_hard=num_hard), s >= threshold)


def _mixed_rows(dtype: torch.dtype) -> torch.Tensor:
    """64 x 8192 (the rows split over two threads): random rows, ties across the cuts, NaNs."""
    s = sims(64, 8192, seed=5).to(dtype)
    s[1] = 0.25  # all tied
    s[2, ::2] = 0.5  # a tied block across every cut
    s[40] = s[40].mul(8).round()  # few distinct values (ties at the cuts)
    s[41, 7] = float("nan")
    s[42, :5000] = float("nan")  # NaN at a cut
    return s


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lower,upper", [(50, 90), (90, 99), (10, 60), (0, 90), (30, 100), (1, 2)])
def test_ring_mask_partition_path_is_the_topk_path(dtype, lower, upper):
    # CPU float rows take the partition-and-compare path (tied or NaN rows redone by topk):
    # the mask equals the topk path's, column for column
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        s = _mixed_rows(dtype)
        lo, hi = ring_bounds(s.shape[1], lower, upper)
        mask, sums = ring_mask_and_sums(s, lower, upper)
        assert torch.equal(mask, _ring_mask_topk(s, lo, hi))
        assert torch.equal(mask, ring_mask(s, lower, upper))
    finally:
        torch.set_num_threads(threads)
    ok = ~s.isnan().any(dim=1)  # the sums are those of the sorted slice's values
    ref = s.double().sort(dim=1).values[:, lo:hi].sum(1)
    assert torch.allclose(sums.double()[ok], ref[ok], rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_ring_mask_of_other_dtypes_is_the_sorted_slice(dtype):
    s = _wide_rows().to(dtype)  # the topk path (no partition for these dtypes)
    lo, hi = ring_bounds(WIDE, 50, 90)
    mask, sums = ring_mask_and_sums(s, 50, 90)
    assert mask.sum(dim=1).tolist() == [hi - lo] * 5
    for i in range(5):
        assert torch.equal(s[i][mask[i]].sort().values, s[i].sort().values[lo:hi])
    assert torch.equal(sums, torch.where(mask, s, s.new_zeros(())).sum(1))


def test_ring_bounds_truncation():
    assert ring_bounds(100, 50, 90) == (50, 90)
    assert ring_bounds(65536, 90, 99) == (int(0.9 * 65536), int(0.99 * 65536))
    assert ring_bounds(7, 10, 50) == (0, 3)  # int(0.7) = 0, int(3.5) = 3
    assert ring_bounds(100, 29, 58) == (29, 58)  # not 28 (0.29 * 100 = 28.999...)


@pytest.mark.parametrize(
    "lower,upper,match",
    [
        (50, 50, "lower must be < upper"),
        (60, 40, "lower must be < upper"),
        (-1, 50, "lower"),
        (0, 101, "upper"),
        (10, 12, "empty"),
    ],
)
def test_ring_mask_rejects_bad_percentiles(lower, upper, match):
    with pytest.raises(ValueError, match=match):
        ring_mask(sims(2, 20), lower, upper)


def test_official_threshold_map():
    assert ring_official_thresholds_to_percentiles(0.5, 0.2) == pytest.approx((50.0, 90.0))
    assert ring_official_thresholds_to_percentiles(0.1, 0.1) == pytest.approx((90.0, 99.0))
    assert ring_official_thresholds_to_percentiles(1.0, 0.1) == pytest.approx((0.0, 90.0))
    assert ring_percentiles_to_official_thresholds(50.0, 90.0) == pytest.approx((0.5, 0.2))
    with pytest.raises(ValueError, match="theta_outer"):
        ring_official_thresholds_to_percentiles(0.0, 0.1)
    with pytest.raises(ValueError, match="theta_inner"):
        ring_official_thresholds_to_percentiles(0.5, 1.0)


# ----------------------------------------------------------------------------- schedules
def test_linear_schedule_ring_policy():
    s = linear(1.0, 0.1, 10)  # init - (init - final) * s / (S - 1), then final
    assert s(0) == pytest.approx(1.0)
    assert s(3) == pytest.approx(0.7)
    assert s(9) == pytest.approx(0.1)
    assert s(1000) == pytest.approx(0.1)
    assert linear(1.0, 0.1, 1)(0) == pytest.approx(0.1)


def test_step_exponential_staircase_constant_values():
    assert step(1.0, 0.5, 10)(9) == pytest.approx(1.0)
    assert step(1.0, 0.5, 10)(25) == pytest.approx(0.25)
    assert step(1.0, 0.5, 10, final=0.3)(25) == pytest.approx(0.3)
    e = exponential(1.0, 0.01, 3)  # geometric: 1, 0.1, 0.01
    assert [e(i) for i in range(4)] == pytest.approx([1.0, 0.1, 0.01, 0.01])
    d = exponential(1.0, 0.1, 5, decay=0.5)  # (1 - 0.1) e^{-0.5 s} + 0.1, then 0.1
    assert d(2) == pytest.approx(0.9 * math.exp(-1.0) + 0.1)
    assert d(5) == pytest.approx(0.1)
    c = staircase(1.0, 0.1, 0.3, 8)  # levels 1.0, 0.7, 0.4, 0.1, 2 steps each
    assert [c(i) for i in range(9)] == pytest.approx([1.0, 1.0, 0.7, 0.7, 0.4, 0.4, 0.1, 0.1, 0.1])
    assert constant(0.3)(12345) == pytest.approx(0.3)


def test_adaptive_schedule_follows_the_window_mean():
    a = adaptive(init=0.5, low=0.1, high=1.0, delta=0.1, window=2, lower_is_better=True)
    a.record(1.0)  # nothing to compare with
    assert a(0) == pytest.approx(0.5)
    a.record(0.8)  # better than 1.0 -> harder (lower threshold)
    assert a(1) == pytest.approx(0.4)
    a.record(2.0)  # worse than mean(1.0, 0.8) -> easier
    assert a(2) == pytest.approx(0.5)
    a.record(1.4)  # equal to mean(0.8, 2.0) -> unchanged
    assert a(3) == pytest.approx(0.5)
    state = a.state_dict()
    b = AdaptiveSchedule(init=0.5, low=0.1, high=1.0, delta=0.1, window=2)
    b.load_state_dict(state)
    b.record(0.0)  # better than mean(2.0, 1.4) -> 0.4
    assert b(0) == pytest.approx(0.4)
    acc = adaptive(init=0.15, low=0.1, delta=0.1, lower_is_better=False)
    acc.record(0.5)
    acc.record(0.9)  # higher accuracy is better -> clipped at low
    assert acc(0) == pytest.approx(0.1)


def test_schedule_arguments_are_validated():
    with pytest.raises(ValueError, match="steps"):
        linear(1.0, 0.1, 0)
    with pytest.raises(ValueError, match="step"):
        linear(1.0, 0.1, 5)(-1)
    with pytest.raises(ValueError, match="same sign"):
        exponential(1.0, 0.0, 5)
    with pytest.raises(ValueError, match="unknown selector schedule"):
        make_schedule({"name": "cosine"})
    with pytest.raises(ValueError, match="linear"):
        make_schedule({"name": "linear", "init": 1.0})
    assert make_schedule(0.2)(7) == pytest.approx(0.2)
    spec = {"name": "linear", "init": 1.0, "final": 0.0, "steps": 3}
    assert make_schedule(spec)(1) == pytest.approx(0.5)


# ----------------------------------------------------------------------------- ScheduledSelector
def test_ring_annealing_anneals_theta_outer():
    sel = ScheduledSelector("ring", {"theta_inner": 0.1}, linear(1.0, 0.1, 10))
    # theta_o(s) = 1 - 0.1 s; w_l = 100 (1 - theta_o), w_u = 100 (1 - 0.1 theta_o)
    assert sel.arguments(0) == pytest.approx({"lower": 0.0, "upper": 90.0})
    assert sel.arguments(5) == pytest.approx({"lower": 50.0, "upper": 95.0})
    assert sel.arguments(9) == pytest.approx({"lower": 90.0, "upper": 99.0})
    s = sims(3, 200, seed=5)
    assert torch.equal(sel(s, 5), ring_mask(s, 50.0, 95.0))
    assert torch.equal(sel(s, 99), ring_mask(s, 90.0, 99.0))


def test_scheduled_selector_defaults_and_errors():
    s = sims(3, 50, seed=6)
    fixed = ScheduledSelector("ring")  # official config 0.1 / 0.1
    assert torch.equal(fixed(s, 0), ring_mask(s, 90.0, 99.0))
    hard = ScheduledSelector("hard", {}, linear(1.0, 0.2, 5))  # alpha annealed
    assert torch.equal(hard(s, 4), hard_mask(s, alpha=0.2))
    count = ScheduledSelector("hard", {"num_hard": 10}, linear(10, 2, 3))
    assert torch.equal(count(s, 1), hard_mask(s, num_hard=6))
    percent = ScheduledSelector("ring", {"lower": 0, "upper": 90}, linear(0, 80, 3))
    assert percent.arguments(2) == pytest.approx({"lower": 80.0, "upper": 90.0})
    with pytest.raises(ValueError, match="not both"):
        ScheduledSelector("ring", {"lower": 10, "theta_inner": 0.1})
    with pytest.raises(ValueError, match="unknown argument"):
        ScheduledSelector("hard", {"k": 3})
    with pytest.raises(ValueError, match="lower must be < upper"):
        ScheduledSelector("ring", {"lower": 90, "upper": 90})
    with pytest.raises(ValueError, match="alpha"):
        ScheduledSelector("hard", {"alpha": 1.5})
    with pytest.raises(ValueError, match="lower must be < upper"):  # the schedule ends at 95
        ScheduledSelector("ring", {"upper": 90}, linear(0, 95, 10))
    with pytest.raises(ValueError, match="missing"):
        ScheduledSelector("ring", {"lower": 10})
    with pytest.raises(ValueError, match="cannot be scheduled"):
        ScheduledSelector("all", {}, constant(1.0))


def test_selectors_are_named_by_the_registry():
    from toolkit.samplers import SELECTORS, NegativeSelector
    from toolkit.samplers.selectors import RingSelector

    assert [ScheduledSelector(n).name for n in ("all", "hard", "ring")] == ["all", "hard", "ring"]

    @SELECTORS.register("test_first", description="the first candidate only")
    class First(NegativeSelector):
        def mask(self, sims, **resolved):
            return torch.arange(sims.shape[1]).expand_as(sims) == 0

    class Annealed(RingSelector):  # not registered: it answers to its base's name
        pass

    try:
        assert SELECTORS.entry("test_first").description == "the first candidate only"
        assert ScheduledSelector("test_first").name == "test_first"
        assert Annealed().name == "ring"
        with pytest.raises(ValueError, match="selector 'test_first' got unknown argument"):
            First({"k": 1})
    finally:
        SELECTORS._entries.pop("test_first")
