"""The linear probe on frozen features, shared by every domain (scikit-learn's logistic
regression). The nearest-neighbour classifier and the top-k counts are in
:mod:`toolkit.evaluation.knn`; probes on data that does not fit in memory in
:mod:`toolkit.evaluation.streamed`.

* :func:`fit_linear_probe` / :func:`linear_probe`: multinomial logistic regression, L2 penalty
  with inverse strength ``c`` (scikit-learn's ``C``): minimise
  ``c * sum_i CE(W x_i + b, y_i) + ||W||^2 / 2`` (the bias is not penalised), i.e. the mean
  cross-entropy plus ``||W||^2 / (2 c N)``. Options: standardise the features with the
  training rows' mean / std (``standardize``); a fixed ``c``, or ``c`` chosen from ``c_grid``
  on a stratified held-out part (``holdout``) of the TRAINING rows, then refit on all of them
  (``select_c``; the test rows never choose anything), every grid entry fitted or, with
  ``search="ascend"``, the entries from the smallest ``c`` up until the held-out accuracy
  falls (:func:`select_c`). Deterministic: the held-out split is drawn from ``seed``, L-BFGS has
  no randomness. :func:`linear_probes` runs several probes in worker processes at once. Sparse
  features (bag-of-words) take ``solver="liblinear"``, one-vs-rest above two classes,
  unstandardised.

Why scikit-learn for the linear probe (``bench/probes.py``, one CPU thread, random ReLU
features of Fashion-MNIST, 10 classes, the objective above with ``c = 1 / (1e-4 N)``):

====================  ======================  =====================  ======================
size (N x d)           sklearn lbfgs, to tol   torch LBFGS, 100 it.   torch LBFGS, to tol
====================  ======================  =====================  ======================
10,000 x 256           1.1 s (376 it.)         1.0 s                  3.2 s (347 it.)
60,000 x 512           15.7 s (367 it.)        23.2 s                 79.3 s (332 it.)
====================  ======================  =====================  ======================

scikit-learn reaches the optimum 3-5x sooner than torch's strong-Wolfe L-BFGS (its loss /
gradient kernels need one evaluation per step where torch's line search needs several), at
60k x 512 sooner even than torch's truncated 100-iteration fit, and it covers the sparse
features of the text baselines. The probe takes tensors on any device and moves them to numpy
inside.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from toolkit.evaluation.knn import topk_accuracy

__all__ = [
    "LinearProbe",
    "fit_linear_probe",
    "linear_probe",
    "select_c",
    "workers",
    "C_GRID",
    "SOLVERS",
    "SEARCHES",
    "linear_probes",
]

C_GRID = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0)
SOLVERS = ("lbfgs", "liblinear")
SEARCHES = ("grid", "ascend")


def _matrix(name: str, x: Any) -> Any:
    """``x`` as a 2-D numpy array of its own float dtype (float32 stays float32: scikit-learn
    then fits in float32, as the callers always did), or as a sparse CSR matrix."""
    if sp.issparse(x):
        return x.tocsr()
    out = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    if out.ndim != 2:
        raise ValueError(f"{name} must be a 2-D [N, d] matrix, got shape {out.shape}")
    if not np.issubdtype(out.dtype, np.floating):
        out = out.astype(np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} contains NaN or infinity (did training diverge?)")
    return out


def _labels(name: str, y: Any, n: int) -> np.ndarray:
    out = y.detach().cpu().numpy() if isinstance(y, Tensor) else np.asarray(y)
    if out.shape != (n,):
        raise ValueError(f"{name} must have one entry per feature row ({n}), got shape {out.shape}")
    return out


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


@dataclass
class LinearProbe:
    """A fitted probe: ``scores(x)`` (decision values ``[N, C]``, or ``[N]`` for two classes),
    ``predict(x)`` (labels), and the ``c`` it was fitted with."""

    model: Any
    c: float

    def scores(self, x: Any) -> np.ndarray:
        return self.model.decision_function(_matrix("x", x))

    def predict(self, x: Any) -> np.ndarray:
        return self.model.predict(_matrix("x", x))

    @property
    def classes(self) -> np.ndarray:
        return self.model.classes_


def _build(c: float, standardize: bool, solver: str, max_iter: int, seed: int, classes: int) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if solver == "liblinear":
        # bag-of-words counts: liblinear is an order of magnitude faster than lbfgs on sparse rows
        model = LogisticRegression(C=c, max_iter=max_iter, solver="liblinear", random_state=seed)
        return OneVsRestClassifier(model) if classes > 2 else model
    model = LogisticRegression(C=c, max_iter=max_iter, random_state=seed)
    return make_pipeline(StandardScaler(), model) if standardize else model


def _fit(
    x: Any,
    y: np.ndarray,
    c: float,
    standardize: bool,
    solver: str,
    max_iter: int,
    seed: int,
    warn_convergence: bool | str,
) -> LinearProbe:
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    model = _build(c, standardize, solver, max_iter, seed, len(np.unique(y)))
    # one BLAS / OpenMP thread: beside torch's threads (or other fits), more threads contend and
    # spin; measured on 2 cores under load, 4 fits of 20k x 784 took 67 s with the default
    # two threads and 10.5 s with one
    with warnings.catch_warnings(record=True) as caught, threadpool_limits(1):
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(x, y)
    if warn_convergence and any(issubclass(w.category, ConvergenceWarning) for w in caught):
        advice = warn_convergence if isinstance(warn_convergence, str) else "raise max_iter or lower c"
        warnings.warn(
            f"linear probe: {solver} did not converge in {max_iter} iterations at c={c}; {advice}", stacklevel=3
        )
    return LinearProbe(model, c)


def _held_out_accuracy(
    x: Any, y: np.ndarray, c: float, fit_rows: np.ndarray, score_rows: np.ndarray, fit: dict[str, Any]
) -> float:
    return float(np.mean(_fit(x[fit_rows], y[fit_rows], c, **fit).predict(x[score_rows]) == y[score_rows]))


# Below this many feature values to fit (rows x dimensions, summed over the fits), ``n_jobs=None``
# fits in this process: starting the worker processes (each imports scikit-learn) took 2.2 s on a
# 2-core EPYC, while three probes of 512 rows (64, 64 and 784 dimensions) fit in 0.1 s.
SMALL_FIT_VALUES = 1_000_000


def workers(tasks: int, n_jobs: int | None = None, values: int | None = None) -> int:
    """Processes for ``tasks`` independent fits: ``n_jobs``, or the CPU cores this process may
    use (``None``; one when the fits hold fewer than :data:`SMALL_FIT_VALUES` feature
    ``values`` in all), never more than ``tasks``."""
    if n_jobs is None:
        small = values is not None and values < SMALL_FIT_VALUES
        n_jobs = (
            1
            if small
            else (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
        )
    if not isinstance(n_jobs, int) or n_jobs < 1:
        raise ValueError(f"n_jobs must be an integer >= 1 or None (all cores), got {n_jobs!r}")
    return max(1, min(n_jobs, tasks))


def _accuracies(
    x: Any,
    y: np.ndarray,
    cs: Sequence[float],
    splits: Sequence[tuple[np.ndarray, np.ndarray]],
    fit: dict[str, Any],
    n: int,
) -> np.ndarray:
    """Mean held-out accuracy over ``splits`` of each ``c`` of ``cs``, the fits in ``n`` processes."""
    jobs = [(float(c), a, b) for c in cs for a, b in splits]
    if n == 1:
        acc = [_held_out_accuracy(x, y, c, a, b, fit) for c, a, b in jobs]
    else:
        from joblib import Parallel, delayed

        acc = Parallel(n_jobs=n)(delayed(_held_out_accuracy)(x, y, c, a, b, fit) for c, a, b in jobs)
    return np.asarray(acc, dtype=np.float64).reshape(len(cs), len(splits)).mean(axis=1)


def select_c(
    x: Any,
    y: Any,
    c_grid: Sequence[float],
    splits: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    standardize: bool = True,
    solver: str = "lbfgs",
    max_iter: int = 1000,
    seed: int = 0,
    warn_convergence: bool | str = False,
    n_jobs: int | None = None,
    search: str = "grid",
) -> float:
    """The ``c`` of ``c_grid`` with the best mean accuracy over ``splits`` (pairs of row
    indices ``(fit_rows, score_rows)`` of the training set). ``search="grid"`` fits every
    entry; ties go to the earliest entry (the smallest ``c``, the strongest penalty, for an
    ascending grid). ``search="ascend"`` walks the grid from the smallest ``c`` up and stops at
    the first entry whose accuracy is below the best one before it; the choice is that best
    one (ties to the smaller ``c``). Where the accuracy rises to one peak and then falls, both
    choose the same ``c``; ``ascend`` skips the fits past the peak (the costly weak penalties).
    The fits run in ``n_jobs`` worker processes (default: one per core), each with one BLAS /
    OpenMP thread; ``ascend`` fits as many consecutive entries at a time as there are workers
    and ignores any past the first fall, so its choice does not depend on ``n_jobs``."""
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)}, got {search!r}")
    x, y = _matrix("x", x), np.asarray(y)
    fit = dict(
        standardize=standardize and solver == "lbfgs",
        solver=solver,
        max_iter=max_iter,
        seed=seed,
        warn_convergence=warn_convergence,
    )
    n = workers(len(c_grid) * len(splits), n_jobs, int(np.prod(x.shape)) * len(c_grid) * len(splits))
    if search == "grid":
        return float(c_grid[int(np.argmax(_accuracies(x, y, c_grid, splits, fit, n)))])
    grid = sorted(float(c) for c in c_grid)
    step = max(1, n // len(splits))  # entries per round: one fit per worker
    best, best_score = grid[0], -np.inf
    for start in range(0, len(grid), step):
        cs = grid[start : start + step]
        for c, score in zip(cs, _accuracies(x, y, cs, splits, fit, workers(len(cs) * len(splits), n))):
            if score < best_score:
                return best
            if score > best_score:
                best, best_score = c, score
    return best


def fit_linear_probe(
    x: Any,
    y: Any,
    *,
    c: float = 1.0,
    standardize: bool = True,
    select: bool = False,
    c_grid: Sequence[float] = C_GRID,
    holdout: float = 0.1,
    solver: str = "lbfgs",
    max_iter: int = 1000,
    seed: int = 0,
    warn_convergence: bool | str = False,
    n_jobs: int | None = None,
    search: str = "grid",
) -> LinearProbe:
    """Fit the probe on training features ``x`` ``[N, d]`` (tensor on any device, numpy, or
    scipy sparse) and labels ``y``; see the module doc. ``select=True`` chooses ``c`` from
    ``c_grid`` on a stratified ``holdout`` fraction of these rows (seeded by ``seed``).
    ``warn_convergence``: warn when L-BFGS stops at ``max_iter`` (a string is the advice the
    warning gives, e.g. which config keys to change). ``n_jobs``: processes for the selection
    fits (default: one per core); ``search``: how the grid is searched (:func:`select_c`)."""
    from sklearn.model_selection import StratifiedShuffleSplit

    x = _matrix("x", x)
    y = _labels("y", y, x.shape[0])
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)}, got {search!r}")
    if sp.issparse(x) and solver != "liblinear":
        raise ValueError(f"sparse features need solver='liblinear', got solver={solver!r}")
    if x.shape[0] < 2 or len(np.unique(y)) < 2:
        raise ValueError(
            f"the probe needs at least two rows of two classes, got {x.shape[0]} rows of {len(np.unique(y))} class(es)"
        )
    if not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    workers(1, n_jobs)  # checks n_jobs before anything is fitted
    fit = dict(
        standardize=standardize and solver == "lbfgs",
        solver=solver,
        max_iter=max_iter,
        seed=seed,
        warn_convergence=warn_convergence,
    )
    if not select:
        return _fit(x, y, _positive("c", c), **fit)
    if not c_grid:
        raise ValueError(f"c_grid must be a non-empty list of numbers > 0, got {list(c_grid)!r}")
    grid = [_positive("c_grid entry", v) for v in c_grid]
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"holdout must lie in (0, 1), got {holdout!r}")
    split = StratifiedShuffleSplit(n_splits=1, test_size=holdout, random_state=seed)
    best = select_c(
        x,
        y,
        grid,
        list(split.split(np.zeros(len(y)), y)),
        standardize=standardize,
        solver=solver,
        max_iter=max_iter,
        seed=seed,
        warn_convergence=warn_convergence,
        n_jobs=n_jobs,
        search=search,
    )
    return _fit(x, y, best, **fit)


def linear_probe(
    train_x: Any, train_y: Any, test_x: Any, test_y: Any, *, topk: Sequence[int] = (1,), **fit: Any
) -> dict[str, float]:
    """Fit on the training split, score the test split: ``{"top1": %, ..., "c": c used}``
    (``top5`` etc. for each ``k`` of ``topk``). ``fit``: the options of :func:`fit_linear_probe`."""
    probe = fit_linear_probe(train_x, train_y, **fit)
    xte = _matrix("test_x", test_x)
    if xte.shape[1] != probe.model.n_features_in_:
        raise ValueError(f"test_x must have {probe.model.n_features_in_} columns like train_x, got shape {xte.shape}")
    yte = _labels("test_y", test_y, xte.shape[0])
    out: dict[str, float] = {}
    if tuple(topk) == (1,):
        out["top1"] = float(np.mean(probe.predict(xte) == yte) * 100.0)
    else:
        scores = probe.scores(xte)
        scores = np.stack([-scores, scores], 1) if scores.ndim == 1 else scores
        idx = np.searchsorted(probe.classes, yte)
        known = (idx < len(probe.classes)) & (probe.classes[np.minimum(idx, len(probe.classes) - 1)] == yte)
        cols = torch.as_tensor(np.where(known, idx, -1))
        for k in topk:
            out[f"top{k}"] = topk_accuracy(torch.as_tensor(scores), cols, k)
    out["c"] = probe.c
    return out


def linear_probes(probes: Sequence[dict[str, Any]], n_jobs: int | None = None) -> list[dict[str, float]]:
    """:func:`linear_probe` for each dict of its arguments in ``probes`` (e.g. a trained encoder's
    features and its baselines'), each probe whole in one of ``n_jobs`` worker processes
    (default: one per core, largest features first) with its selection fits in that process:
    the same results as one call after another (every fit is deterministic and single-threaded
    either way), while the cores that the final fits of separate calls leave idle are used."""
    n = workers(len(probes), n_jobs, sum(int(np.prod(np.shape(p["train_x"]))) for p in probes))
    if n == 1:
        return [linear_probe(**p) for p in probes]
    from joblib import Parallel, delayed

    # numpy arrays, not tensors: joblib hands large arrays to the workers as memory maps
    shipped = [{k: (v.detach().cpu().numpy() if isinstance(v, Tensor) else v) for k, v in p.items()} for p in probes]
    # the largest feature matrices first, so that the last probe to start is a small one
    order = sorted(range(len(shipped)), key=lambda i: -int(np.prod(np.shape(shipped[i]["train_x"]))))
    done = Parallel(n_jobs=n)(delayed(linear_probe)(**dict(shipped[i], n_jobs=1)) for i in order)
    out: list[dict[str, float]] = [{}] * len(shipped)
    for i, res in zip(order, done):
        out[i] = res
    return out
