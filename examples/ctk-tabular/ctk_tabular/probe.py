"""Linear probe on frozen features with scikit-learn.

Features are standardised with the training split's statistics (``StandardScaler``), then a
multinomial logistic regression (L-BFGS, L2 penalty with inverse strength ``C``) is fit on the
training split and scored on the held-out split. Accuracy is returned in percent, like the
other domains' ``linear_top1``.
"""
from __future__ import annotations

import warnings

import numpy as np
from torch import Tensor

__all__ = ["linear_probe_top1"]


def _array(name: str, value: Tensor | np.ndarray, dims: int) -> np.ndarray:
    out = value.detach().cpu().numpy() if isinstance(value, Tensor) else np.asarray(value)
    if out.ndim != dims:
        raise ValueError(f"{name} must have {dims} dimension(s), got shape {out.shape}")
    return out


def linear_probe_top1(train_x: Tensor | np.ndarray, train_y: Tensor | np.ndarray,
                      test_x: Tensor | np.ndarray, test_y: Tensor | np.ndarray, *,
                      c: float = 1.0, max_iter: int = 2000, seed: int = 0) -> float:
    """Top-1 test accuracy (%) of logistic regression on standardised frozen features."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    xtr, xte = _array("train_x", train_x, 2), _array("test_x", test_x, 2)
    ytr, yte = _array("train_y", train_y, 1), _array("test_y", test_y, 1)
    if xtr.shape[1] != xte.shape[1] or len(xtr) != len(ytr) or len(xte) != len(yte) or len(xte) == 0:
        raise ValueError(f"probe inputs disagree: train {xtr.shape} / {ytr.shape}, test {xte.shape} / {yte.shape}")
    if not (c > 0 and np.isfinite(c)):
        raise ValueError(f"evaluation.probe_c must be a finite number > 0, got {c!r}")
    if not np.all(np.isfinite(xtr)) or not np.all(np.isfinite(xte)):
        raise ValueError("probe features contain NaN or infinity (did training diverge?)")
    scaler = StandardScaler().fit(xtr)
    clf = LogisticRegression(C=c, max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        clf.fit(scaler.transform(xtr), ytr)
    if any(issubclass(w.category, ConvergenceWarning) for w in caught):
        warnings.warn(f"linear probe: L-BFGS did not converge in {max_iter} iterations; "
                      "raise evaluation.max_iter or lower evaluation.probe_c", stacklevel=2)
    return float((clf.predict(scaler.transform(xte)) == yte).mean() * 100.0)
