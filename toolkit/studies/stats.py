"""Statistics for comparing runs the way a paper does (``ctk compare``, ``ctk reproduce``).

* :func:`summarize` -- mean, sample std (ddof=1), n and the Student-t confidence interval
  ``mean ± t_{1-α/2, n-1} · s/√n``; no interval when n < 2.
* :func:`difference` -- a group against the baseline group: the paired t-test on the per-seed
  differences when both groups hold the same seeds (``scipy.stats.ttest_rel``), Welch's
  unequal-variance t-test otherwise (``scipy.stats.ttest_ind(equal_var=False)``, the
  Welch–Satterthwaite degrees of freedom); the interval is the test's own interval of the
  mean difference.
* :func:`holm` -- Holm's step-down adjustment of a family of p-values (Holm 1979):
  sort ``p_(1) <= ... <= p_(m)``, ``p~_(i) = max_{j<=i} min(1, (m-j+1) p_(j))``.

Every number comes from ``scipy.stats``; this module only decides which test applies.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Summary:
    mean: float
    std: float | None  # None when n < 2
    n: int
    low: float | None  # confidence interval; None when n < 2
    high: float | None


@dataclass(frozen=True)
class Difference:
    """``mean(group) - mean(baseline)`` with its interval and two-sided p-value."""

    diff: float
    low: float
    high: float
    p: float
    test: str  # "paired" | "welch"
    n: int  # pairs for "paired", group size for "welch"


def finite(values: Sequence[float | None]) -> list[float]:
    """The finite values (missing and NaN/inf metrics are left out, not counted in n)."""
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def summarize(values: Sequence[float | None], confidence: float = CONFIDENCE) -> Summary | None:
    """Mean, std, n and the t interval of ``values``; None when no value is finite."""
    x = np.asarray(finite(values), dtype=float)
    if x.size == 0:
        return None
    mean = float(x.mean())
    if x.size < 2:
        return Summary(mean, None, 1, None, None)
    std = float(x.std(ddof=1))
    if std == 0.0:  # t.interval with scale 0 is nan; the interval is the point itself
        return Summary(mean, 0.0, int(x.size), mean, mean)
    low, high = sps.t.interval(confidence, x.size - 1, loc=mean, scale=sps.sem(x))
    return Summary(mean, std, int(x.size), float(low), float(high))


def _pairs(values: Sequence[float | None], seeds: Sequence[object]) -> dict[object, float] | None:
    """seed -> value for the finite values; None when a seed repeats (no pairing possible)."""
    out: dict[object, float] = {}
    for v, s in zip(values, seeds):
        if v is None or not math.isfinite(float(v)):
            continue
        if s is None or s in out:
            return None
        out[s] = float(v)
    return out


def difference(
    values: Sequence[float | None],
    baseline: Sequence[float | None],
    seeds: Sequence[object] | None = None,
    baseline_seeds: Sequence[object] | None = None,
    confidence: float = CONFIDENCE,
) -> Difference | None:
    """Compare ``values`` with ``baseline``; None when either side has fewer than 2 values.

    Paired by seed when both sides have exactly the same (distinct) seeds, else Welch.
    """
    a, b = finite(values), finite(baseline)
    if len(a) < 2 or len(b) < 2:
        return None
    if seeds is not None and baseline_seeds is not None:
        pa, pb = _pairs(values, seeds), _pairs(baseline, baseline_seeds)
        if pa is not None and pb is not None and set(pa) == set(pb):
            order = sorted(pa, key=str)
            xa = np.array([pa[s] for s in order])
            xb = np.array([pb[s] for s in order])
            return _tested(sps.ttest_rel, xa, xb, {}, confidence, "paired")
    return _tested(sps.ttest_ind, np.asarray(a), np.asarray(b), {"equal_var": False}, confidence, "welch")


def _tested(test, xa: np.ndarray, xb: np.ndarray, kwargs: dict, confidence: float, name: str) -> Difference:
    # Zero-variance samples: scipy answers p = 0 (a constant non-zero shift) or NaN (no
    # difference at all) and warns about precision; the NaN shows as "-" and never counts
    # as significant.
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        res = test(xa, xb, **kwargs)
        ci = res.confidence_interval(confidence)
    return Difference(float(xa.mean() - xb.mean()), float(ci.low), float(ci.high), float(res.pvalue), name, len(xa))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the input order (reject where adjusted p < alpha)."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.maximum.accumulate(scaled)
    out = np.empty(m)
    out[order] = adjusted
    return out.tolist()


def printed_half_unit(text: str) -> float:
    """Half a unit of the last digit a number was printed with ("0.02041" -> 5e-6, "7.29e-5"
    -> 5e-8, "84" -> 0.5): a measured value this close to it reads as the same number."""
    mantissa, _, exponent = text.strip().lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def verdict(summary: Summary | None, reference: float | None, half_unit: float = 0.0) -> str:
    """Where a paper's number lies against the measured interval: 'contains', 'above' (the
    measured interval is above the paper's number), 'below', or why there is no verdict.

    ``half_unit`` is the paper's printed precision (:func:`printed_half_unit`): the paper's
    number stands for every value within it, so the interval is widened by it, and a single or
    constant measurement that rounds to the paper's number reads 'contains'."""
    if reference is None:
        return "no paper number"
    if summary is None:
        return "not measured"
    if summary.low is None or summary.high is None:
        return "contains" if abs(summary.mean - reference) <= half_unit else "n<2: no interval"
    if summary.low - half_unit <= reference <= summary.high + half_unit:
        return "contains"
    return "above" if summary.low - half_unit > reference else "below"
