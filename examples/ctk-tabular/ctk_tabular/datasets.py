"""Tables that ship offline, split and standardised.

* scikit-learn's bundled sets (no download): ``breast_cancer`` (569 rows x 30 features, 2
  classes), ``wine`` (178 x 13, 3 classes), ``digits`` (1,797 x 64 pixel intensities, 10
  classes, used here as plain features);
* ``csv``: any comma-separated file with a header row, numeric feature columns and one label
  column (``data.target``; labels may be strings).

The held-out test split is stratified and fixed by ``split_seed`` (not the training seed), so
runs with different seeds are probed on the same rows. Features are standardised with the
training split's mean and standard deviation (constant columns are left centred, not divided).
Pretraining sees only the training rows, without their labels.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = ["BUNDLED", "TabularSplits", "load_bundled", "load_csv", "split_and_standardise"]


def _sklearn(name: str) -> Callable[[], tuple[np.ndarray, np.ndarray, list[str]]]:
    def load() -> tuple[np.ndarray, np.ndarray, list[str]]:
        from sklearn import datasets

        bunch = getattr(datasets, f"load_{name}")()
        names = [str(f) for f in getattr(bunch, "feature_names", range(bunch.data.shape[1]))]
        return bunch.data.astype(np.float64), bunch.target.astype(np.int64), names

    return load


BUNDLED: dict[str, Callable[[], tuple[np.ndarray, np.ndarray, list[str]]]] = {
    "breast_cancer": _sklearn("breast_cancer"),
    "wine": _sklearn("wine"),
    "digits": _sklearn("digits"),
}


@dataclass
class TabularSplits:
    """Standardised float32 train/test tables with integer labels ``0..num_classes-1``."""

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    feature_names: list[str]
    mean: Tensor
    std: Tensor

    @property
    def num_features(self) -> int:
        return int(self.train_x.shape[1])

    @property
    def num_classes(self) -> int:
        return int(torch.cat([self.train_y, self.test_y]).max().item()) + 1


def load_bundled(name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(X [n, M] float64, y [n] int64, feature names)`` of a scikit-learn bundled set."""
    if name not in BUNDLED:
        raise ValueError(f"data.dataset must be one of {', '.join(map(repr, BUNDLED))} or 'csv', got {name!r}")
    return BUNDLED[name]()


def load_csv(path: str | Path, target: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Read a CSV with a header; every column but ``target`` must be numeric and non-empty.
    String labels are mapped to ``0..C-1`` in sorted order."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"data.path must be an existing CSV file, got {str(path)!r}")
    with p.open(newline="", encoding="utf-8") as handle:
        rows = [r for r in csv.reader(handle) if r]
    if len(rows) < 2:
        raise ValueError(f"data.path {str(path)!r} needs a header row and at least one data row")
    header = [h.strip() for h in rows[0]]
    if target not in header:
        raise ValueError(
            f"data.target must name a column of {str(path)!r}, got {target!r}; columns: {', '.join(header)}"
        )
    t = header.index(target)
    names = [h for i, h in enumerate(header) if i != t]
    features, labels = [], []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ValueError(f"{str(path)!r} line {line}: expected {len(header)} fields, got {len(row)}")
        values = []
        for i, cell in enumerate(row):
            if i == t:
                continue
            try:
                values.append(float(cell))
            except ValueError:
                raise ValueError(
                    f"{str(path)!r} line {line}, column {header[i]!r}: expected a number, "
                    f"got {cell!r} (the tabular domain reads numeric features only)"
                ) from None
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{str(path)!r} line {line}: features must be finite numbers")
        features.append(values)
        labels.append(row[t].strip())
    _, y = np.unique(np.asarray(labels), return_inverse=True)
    return np.asarray(features, dtype=np.float64), y.astype(np.int64), names


def split_and_standardise(
    x: np.ndarray, y: np.ndarray, feature_names: list[str], *, test_fraction: float = 0.3, split_seed: int = 0
) -> TabularSplits:
    """Stratified train/test split (``sklearn.model_selection.train_test_split``), then
    ``(x - mean_train) / std_train`` on both splits."""
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"data.test_fraction must lie in (0, 1), got {test_fraction!r}")
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2:
        raise ValueError(f"the label column needs at least 2 classes for a linear probe, got {len(classes)}")
    if counts.min() < 2:
        raise ValueError(
            f"every class needs at least 2 rows for a stratified split; class "
            f"{int(classes[counts.argmin()])} has {int(counts.min())}"
        )
    n_test = int(np.ceil(test_fraction * len(y)))
    if n_test < len(classes) or len(y) - n_test < len(classes):
        raise ValueError(
            f"data.test_fraction={test_fraction} leaves a split smaller than the {len(classes)} classes ({len(y)} rows)"
        )
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction, random_state=split_seed, stratify=y)
    mean = xtr.mean(axis=0)
    std = xtr.std(axis=0)
    std = np.where(std > 1e-12, std, 1.0)
    as_tensor = lambda a: torch.as_tensor((a - mean) / std, dtype=torch.float32)  # noqa: E731
    return TabularSplits(
        as_tensor(xtr),
        torch.as_tensor(ytr, dtype=torch.long),
        as_tensor(xte),
        torch.as_tensor(yte, dtype=torch.long),
        list(feature_names),
        torch.as_tensor(mean, dtype=torch.float32),
        torch.as_tensor(std, dtype=torch.float32),
    )
