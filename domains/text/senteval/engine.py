"""The SentEval-style engine: a two-function face and two named modes.

An embedder is anything with

* ``prepare(task)``: called once per task before embedding (a bag-of-words model fits its
  vocabulary here; a trained encoder does nothing), and
* ``batcher(sentences) -> array``: ``[len(sentences), dim]`` features (dense numpy or scipy
  sparse),

which is SentEval's ``prepare(params, samples)`` / ``batcher(params, batch)`` with the params
folded into the object. The engine feeds sentences in length-sorted batches, puts the rows back
in order, builds pair features for MSRP, and runs the probe of
:mod:`domains.text.senteval.classifier`.

Modes: ``literature`` is 10-fold CV with C chosen by an inner 10-fold CV over a wide grid
(the published protocol); ``prototyping`` is 5-fold CV with C chosen on one held-out tenth of
each training part over a short grid (about 15x cheaper, for CPU-scale runs). Every field can
be overridden.

:func:`quick_accuracy` is the cheap one-task check for monitoring during training: one seeded,
stratified split (a ``test_fraction`` of the examples held out, or the task's own test split
when it has one), one probe with a fixed C, no selection, no folds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp
from sklearn.model_selection import StratifiedShuffleSplit

from domains.text.senteval.classifier import ProbeResult, kfold_accuracy, pair_features, split_accuracy
from domains.text.senteval.tasks import Task

__all__ = [
    "Embedder",
    "ProbeSettings",
    "MODES",
    "settings_for",
    "embed_sentences",
    "run_task",
    "evaluate_tasks",
    "quick_accuracy",
    "grid_edge",
]


class Embedder(Protocol):
    def prepare(self, task: Task) -> None: ...

    def batcher(self, sentences: list[str]) -> Any: ...


@dataclass(frozen=True)
class ProbeSettings:
    folds: int = 10
    selection: str = "kfold"
    inner_folds: int = 10
    c_grid: tuple[float, ...] = (0.001, 0.01, 0.1, 1.0, 10.0)
    max_iter: int = 1000
    seed: int = 0
    batch_size: int = 512
    pair_features: tuple[str, ...] = ("absdiff", "product")


MODES: dict[str, ProbeSettings] = {
    "literature": ProbeSettings(),
    "prototyping": ProbeSettings(folds=5, selection="holdout", inner_folds=5, c_grid=(0.01, 0.1, 1.0)),
}


def settings_for(mode: str, **overrides: Any) -> ProbeSettings:
    """The settings of ``mode`` with the non-None ``overrides`` applied."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    given = {k: (tuple(v) if isinstance(v, list) else v) for k, v in overrides.items() if v is not None}
    return replace(MODES[mode], **given)


def embed_sentences(embedder: Embedder, sentences: Sequence[str], batch_size: int = 512) -> Any:
    """Features of ``sentences`` in input order, computed in length-sorted batches."""
    if len(sentences) == 0:
        raise ValueError("sentences must not be empty")
    order = np.argsort([len(s.split()) for s in sentences], kind="stable")
    chunks = [
        embedder.batcher([sentences[i] for i in order[a : a + batch_size]])
        for a in range(0, len(sentences), batch_size)
    ]
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    if sp.issparse(chunks[0]):
        return sp.vstack(chunks).tocsr()[inverse]
    return np.concatenate([np.asarray(c, dtype=np.float32) for c in chunks])[inverse]


def _features(embedder: Embedder, task: Task, train: bool, s: ProbeSettings) -> Any:
    if task.is_pair:
        a, b = task.pairs if train else task.test_pairs  # type: ignore[misc]
        both = embed_sentences(embedder, list(a) + list(b), s.batch_size)
        return pair_features(both[: len(a)], both[len(a) :], s.pair_features)
    sentences = task.sentences if train else task.test_sentences
    return embed_sentences(embedder, sentences, s.batch_size)  # type: ignore[arg-type]


def run_task(embedder: Embedder, task: Task, settings: ProbeSettings) -> ProbeResult:
    """Prepare, embed and probe one task (k-fold, or its fixed split when it has one)."""
    embedder.prepare(task)
    X = _features(embedder, task, True, settings)
    binary = bool(len(np.unique(task.labels)) == 2 and task.is_pair)
    kw = dict(
        seed=settings.seed,
        c_grid=settings.c_grid,
        selection=settings.selection,
        inner_folds=settings.inner_folds,
        max_iter=settings.max_iter,
        binary_f1=binary,
    )
    if task.has_test:
        X_test = _features(embedder, task, False, settings)
        return split_accuracy(X, task.labels, X_test, task.test_labels, **kw)
    return kfold_accuracy(X, task.labels, folds=settings.folds, **kw)


def evaluate_tasks(
    embedder: Embedder, tasks: Sequence[Task], settings: ProbeSettings, prefix: str = "", log: Any = None
) -> dict[str, float]:
    """``{prefix + task.name: accuracy}`` (plus ``_f1`` for paraphrase tasks and
    ``_seconds`` for the time each task took)."""
    metrics: dict[str, float] = {}
    for task in tasks:
        start = time.perf_counter()
        result = run_task(embedder, task, settings)
        seconds = time.perf_counter() - start
        metrics[prefix + task.name] = result.accuracy
        if result.f1 is not None:
            metrics[prefix + task.name + "_f1"] = result.f1
        metrics[prefix + task.name + "_seconds"] = seconds
        if log is not None:
            log(
                f"{prefix}{task.name}: {result.accuracy:.2f}% ({len(task)} examples, "
                f"C={result.chosen_c}, {seconds:.1f} s){grid_edge(result.chosen_c, settings)}"
            )
    return metrics


def grid_edge(chosen: Sequence[float], settings: ProbeSettings) -> str:
    """A note for the log line when every fold chose the same end of a searched C grid: the
    best C may lie beyond it, so the accuracy may be an underestimate (empty otherwise)."""
    grid = sorted(settings.c_grid)
    if len(grid) < 2 or settings.selection == "none" or not chosen:
        return ""
    for end, side, way in ((grid[0], "smallest", "lower"), (grid[-1], "largest", "higher")):
        if all(c == end for c in chosen):
            return (
                f"; every fold chose the grid's {side} C ({end:g}): the best may lie beyond it, "
                f"evaluation.c_grid could reach {way}"
            )
    return ""


def quick_accuracy(
    embedder: Embedder,
    task: Task,
    c: float = 0.1,
    seed: int = 0,
    test_fraction: float = 0.2,
    settings: ProbeSettings | None = None,
) -> float:
    """Accuracy (percent) of one L2 logistic regression with the fixed ``c``, trained on a
    stratified ``1 - test_fraction`` of ``task`` (seeded by ``seed``) and scored on the rest,
    or trained on the whole task and scored on its test split when it has one. Features are
    standardised with the training part's statistics (dense) like the full protocol's."""
    if not isinstance(c, (int, float)) or c <= 0:
        raise ValueError(f"c must be a number > 0, got {c!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    s = settings or MODES["prototyping"]
    embedder.prepare(task)
    X = _features(embedder, task, True, s)
    kw = dict(seed=seed, c_grid=(float(c),), selection="none", max_iter=s.max_iter)
    if task.has_test:
        return split_accuracy(X, task.labels, _features(embedder, task, False, s), task.test_labels, **kw).accuracy
    split = StratifiedShuffleSplit(n_splits=1, test_size=test_fraction, random_state=seed)
    tr, te = next(split.split(np.zeros(len(task)), task.labels))
    return split_accuracy(X[tr], task.labels[tr], X[te], task.labels[te], **kw).accuracy
