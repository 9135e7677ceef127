"""SCARF corruption (Bahri et al. 2022, Sec. 2) against plain loops over rows, views and
features: exactly floor(c * M) features replaced per row and view, each replacement taken
from the same column of the training table, subsets and donors spread uniformly."""

from __future__ import annotations

import math

import pytest
import torch


@pytest.fixture
def scarf(source_on_path):
    import ctk_tabular

    return ctk_tabular


def _distinct_table(rows: int, cols: int, offset: float, dtype=torch.float64) -> torch.Tensor:
    """Every entry distinct and every column's values disjoint from every other column's, so a
    value tells which column (and row) it came from."""
    return torch.arange(rows * cols, dtype=dtype).view(rows, cols) * 1.0 + offset


def _reference_check(x, pool, views, q, clean_first=False):
    """Loop over every row n, view v and feature j."""
    n_rows, n_views, m = views.shape
    columns = [set(pool[:, j].tolist()) for j in range(m)]
    for n in range(n_rows):
        for v in range(n_views):
            changed = []
            for j in range(m):
                value = float(views[n, v, j])
                if value != float(x[n, j]):
                    changed.append(j)
                    assert value in columns[j], (n, v, j, value)
                    assert not any(value in columns[k] for k in range(m) if k != j)
            expected = 0 if (clean_first and v == 0) else q
            assert len(changed) == expected, (n, v, changed)


@pytest.mark.parametrize(
    "m,c,q",
    [(10, 0.3, 3), (30, 0.6, 18), (13, 0.6, 7), (4, 0.6, 2), (64, 0.6, 38), (7, 0.0, 0), (7, 1.0, 7), (5, 0.19, 0)],
)
def test_count_is_floor_of_rate_times_features(scarf, m, c, q):
    assert q == math.floor(c * m + 1e-9)
    assert scarf.corrupted_count(m, c) == q
    mask = scarf.corruption_mask(6, 3, m, c, generator=torch.Generator().manual_seed(0))
    assert mask.shape == (6, 3, m) and mask.dtype == torch.bool
    for n in range(6):
        for v in range(3):
            assert int(sum(bool(b) for b in mask[n, v])) == q


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_views_against_loop_reference(scarf, dtype):
    n, m, p = 9, 11, 40
    pool = _distinct_table(p, m, 0.5, dtype)
    x = -_distinct_table(n, m, 1.0, dtype)  # negative: never equal to a pool value
    g = torch.Generator().manual_seed(3)
    views = scarf.scarf_views(x, pool, 4, 0.6, generator=g)
    assert views.shape == (n, 4, m) and views.dtype == dtype
    _reference_check(x, pool, views, q=6)


def test_clean_first_view_is_scarf_pairing(scarf):
    pool = _distinct_table(30, 8, 0.5)
    x = -_distinct_table(5, 8, 1.0)
    views = scarf.scarf_views(x, pool, 3, 0.5, clean_first_view=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(views[:, 0], x)
    _reference_check(x, pool, views, q=4, clean_first=True)


def test_subsets_and_donors_are_uniform_and_independent(scarf):
    n, v, m, p, c = 400, 2, 10, 25, 0.3
    pool = _distinct_table(p, m, 0.5)
    x = -_distinct_table(n, m, 1.0)
    views = scarf.scarf_views(x, pool, v, c, generator=torch.Generator().manual_seed(1))
    mask = views != x[:, None]
    # every feature position is chosen with probability q / M = 0.3 (800 draws each)
    per_feature = mask.flatten(0, 1).float().mean(0)
    assert torch.all((per_feature - 0.3).abs() < 0.06), per_feature
    # rows and views get their own subsets: the two views of a row rarely coincide
    same = (mask[:, 0] == mask[:, 1]).all(dim=1).float().mean().item()
    assert same < 0.05  # P(same 3-subset of 10) = 1 / 120
    # donor rows are uniform over the pool: recover each donor's row from its value
    donors = []
    for i, vi, j in mask.nonzero().tolist():
        row = int((float(views[i, vi, j]) - 0.5 - j) / m)
        assert float(pool[row, j]) == float(views[i, vi, j])
        donors.append(row)
    counts = torch.bincount(torch.tensor(donors), minlength=p).float()
    expected = len(donors) / p
    assert counts.min() > 0.6 * expected and counts.max() < 1.4 * expected


def test_seeded_generator_repeats(scarf):
    pool, x = torch.randn(20, 6), torch.randn(4, 6)
    a = scarf.scarf_views(x, pool, 2, generator=torch.Generator().manual_seed(5))
    b = scarf.scarf_views(x, pool, 2, generator=torch.Generator().manual_seed(5))
    c = scarf.scarf_views(x, pool, 2, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize(
    "kwargs,word",
    [
        (dict(corruption_rate=1.5), "corruption_rate"),
        (dict(corruption_rate=-0.1), "corruption_rate"),
        (dict(num_views=0), "num_views"),
        (dict(pool=torch.randn(5, 3)), "pool"),
        (dict(pool=torch.randn(0, 4)), "pool"),
        (dict(x=torch.ones(3, 4, dtype=torch.long)), "x"),
    ],
)
def test_bad_arguments_name_themselves(scarf, kwargs, word):
    args = dict(x=torch.randn(3, 4), pool=torch.randn(5, 4), num_views=2, corruption_rate=0.6)
    args.update(kwargs)
    with pytest.raises(ValueError, match=word):
        scarf.scarf_views(**args)
