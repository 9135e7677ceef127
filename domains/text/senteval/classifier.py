"""SentEval's evaluation protocol around the toolkit's linear probe (Conneau & Kiela
2018; the protocol of Logeswaran & Lee 2018, Sec. 4.1 and LMCL Sec. 5.3).

* :func:`kfold_accuracy`: stratified k-fold cross-validation (10 folds in the literature,
  5 for prototyping), seeded, so the same seed gives the same folds and the same score. In
  each outer fold the L2 strength C is chosen on the training part only (inner k-fold, or one
  held-out tenth), then the model is refit on the whole training part and scored on the fold.
* :func:`split_accuracy`: the same on a fixed train/test split (TREC, MSRP with SentEval's
  files).
* :func:`pair_features`: MSRP features ``[|u - v|, u * v]`` (and optionally ``u``, ``v``).

The probe is :func:`toolkit.evaluation.probes.fit_linear_probe` (L2 logistic regression); only the fold
logic lives here. Dense features are standardised with the statistics of each training part
(lbfgs); sparse ones (bag-of-words counts) are used as they are (liblinear, one-vs-rest for
TREC's 6 classes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold, StratifiedShuffleSplit

from toolkit.evaluation.probes import fit_linear_probe, select_c

__all__ = ["ProbeResult", "kfold_accuracy", "split_accuracy", "pair_features", "SELECTIONS"]

SELECTIONS = ("kfold", "holdout", "none")


@dataclass
class ProbeResult:
    """Accuracy in percent (mean over folds), its spread, the per-fold values and the C
    chosen in each fold; ``f1`` (percent, binary tasks) where asked."""

    accuracy: float
    std: float
    folds: list[float] = field(default_factory=list)
    chosen_c: list[float] = field(default_factory=list)
    f1: float | None = None


def _fit_predict(X_tr, y_tr, X_te, c: float, max_iter: int) -> np.ndarray:  # noqa: ANN001
    return fit_linear_probe(X_tr, y_tr, c=c, **_probe_options(X_tr, max_iter)).predict(X_te)


def _probe_options(X, max_iter: int) -> dict:  # noqa: ANN001
    # lbfgs may stop at max_iter on weakly regularised folds; the fit is still the probe's answer
    # for that budget (SentEval's sklearn path behaves the same), so no warning spam
    return dict(solver="liblinear" if sp.issparse(X) else "lbfgs", max_iter=max_iter)


def _choose_c(
    X,
    y,
    c_grid: Sequence[float],
    selection: str,
    inner_folds: int,
    seed: int,  # noqa: ANN001
    max_iter: int,
) -> float:
    if len(c_grid) == 1 or selection == "none":
        return float(c_grid[0])
    if selection == "holdout":
        splits = StratifiedShuffleSplit(n_splits=1, test_size=0.1, random_state=seed).split(X, y)
    else:
        splits = StratifiedKFold(inner_folds, shuffle=True, random_state=seed).split(X, y)
    # ties -> the first C of the grid (the smallest, the strongest L2)
    return select_c(X, y, c_grid, list(splits), **_probe_options(X, max_iter))


def _check(X, y, c_grid: Sequence[float], selection: str) -> None:  # noqa: ANN001
    if X.shape[0] != len(y):
        raise ValueError(f"features and labels must have the same length, got {X.shape[0]} and {len(y)}")
    if not c_grid or any((not isinstance(c, (int, float))) or c <= 0 for c in c_grid):
        raise ValueError(f"c_grid must be a non-empty list of numbers > 0, got {list(c_grid)!r}")
    if selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {', '.join(SELECTIONS)}, got {selection!r}")


def kfold_accuracy(
    X,
    y,
    folds: int = 10,
    seed: int = 0,  # noqa: ANN001
    c_grid: Sequence[float] = (0.01, 0.1, 1.0),
    selection: str = "kfold",
    inner_folds: int = 5,
    max_iter: int = 1000,
    binary_f1: bool = False,
) -> ProbeResult:
    """Stratified ``folds``-fold accuracy (percent) of an L2 logistic regression on ``X``."""
    y = np.asarray(y)
    _check(X, y, c_grid, selection)
    if not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds must be an integer >= 2, got {folds!r}")
    accs, chosen, preds = [], [], np.empty_like(y)
    for k, (tr, te) in enumerate(StratifiedKFold(folds, shuffle=True, random_state=seed).split(np.zeros(len(y)), y)):
        c = _choose_c(X[tr], y[tr], c_grid, selection, inner_folds, seed + 1 + k, max_iter)
        pred = _fit_predict(X[tr], y[tr], X[te], c, max_iter)
        preds[te] = pred
        accs.append(100.0 * float(np.mean(pred == y[te])))
        chosen.append(c)
    f1 = 100.0 * float(f1_score(y, preds)) if binary_f1 else None
    return ProbeResult(float(np.mean(accs)), float(np.std(accs)), accs, chosen, f1)


def split_accuracy(
    X_train,
    y_train,
    X_test,
    y_test,
    seed: int = 0,  # noqa: ANN001
    c_grid: Sequence[float] = (0.01, 0.1, 1.0),
    selection: str = "kfold",
    inner_folds: int = 5,
    max_iter: int = 1000,
    binary_f1: bool = False,
) -> ProbeResult:
    """Test accuracy (percent) on a fixed split; C chosen on the training set only."""
    y_train, y_test = np.asarray(y_train), np.asarray(y_test)
    _check(X_train, y_train, c_grid, selection)
    c = _choose_c(X_train, y_train, c_grid, selection, inner_folds, seed, max_iter)
    pred = _fit_predict(X_train, y_train, X_test, c, max_iter)
    acc = 100.0 * float(np.mean(pred == y_test))
    f1 = 100.0 * float(f1_score(y_test, pred)) if binary_f1 else None
    return ProbeResult(acc, 0.0, [acc], [c], f1)


def pair_features(u, v, include: Sequence[str] = ("absdiff", "product")):  # noqa: ANN001, ANN201
    """Features of sentence pairs: any of ``u``, ``v``, ``absdiff`` (|u - v|), ``product``
    (u * v), concatenated in that order (dense or sparse)."""
    known = ("u", "v", "absdiff", "product")
    bad = [k for k in include if k not in known]
    if bad or not include:
        raise ValueError(f"include must be a non-empty subset of {known}, got {list(include)!r}")
    if u.shape != v.shape:
        raise ValueError(f"u and v must have the same shape, got {u.shape} and {v.shape}")
    parts = {
        "u": lambda: u,
        "v": lambda: v,
        "absdiff": lambda: abs(u - v),
        "product": lambda: u.multiply(v) if sp.issparse(u) else u * v,
    }
    blocks = [parts[k]() for k in known if k in include]
    return sp.hstack(blocks).tocsr() if sp.issparse(u) else np.concatenate(blocks, axis=1)
