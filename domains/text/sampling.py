"""Training batches of contiguous sentences for quick-thought.

Logeswaran & Lee (2018, Sec. 3) build each mini-batch from consecutive sentences of the
corpus, so that the neighbours of a sentence are in its batch (the positives) and the rest of
the batch are the contrastive candidates. Here each book is cut into *runs* of ``run_length``
consecutive sentences; every epoch the order of the runs is shuffled (seeded by the epoch),
never the sentences within a run, and the shuffled stream of runs is cut into batches of
``batch_size``. With ``run_length == batch_size`` (the default) a batch holds one run, or the
tail of one and the head of the next.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from domains.text.corpora import Book
from domains.text.tokenizer import SentenceTokenizer
from toolkit.training.batches import Batches

__all__ = ["SentenceTable", "contiguous_runs", "ContiguousBatches"]


@dataclass
class SentenceTable:
    """All sentences of a list of books, flattened in reading order, pre-tokenised.

    ``book[i]`` and ``position[i]`` locate sentence ``i`` (its book's index and its index in
    that book); ``paragraph[i]`` is its paragraph in that book.
    """

    sentences: list[str]
    ids: list[list[int]]
    book: np.ndarray
    position: np.ndarray
    paragraph: np.ndarray
    book_names: list[str]

    @classmethod
    def build(cls, books: Sequence[Book], tokenizer: SentenceTokenizer) -> SentenceTable:
        if not books:
            raise ValueError("books must hold at least one book, got none")
        sentences = [s for b in books for s in b.sentences]
        book = np.concatenate([np.full(len(b), k, dtype=np.int64) for k, b in enumerate(books)])
        position = np.concatenate([np.arange(len(b), dtype=np.int64) for b in books])
        paragraph = np.concatenate([np.asarray(b.paragraphs, dtype=np.int64) for b in books])
        return cls(sentences, tokenizer.ids(sentences), book, position, paragraph, [b.name for b in books])

    def __len__(self) -> int:
        return len(self.sentences)

    def book_bounds(self) -> list[tuple[int, int]]:
        """``[start, end)`` of each book in the flat order."""
        edges = np.flatnonzero(np.diff(self.book)) + 1
        starts = np.concatenate([[0], edges])
        ends = np.concatenate([edges, [len(self.book)]])
        return list(zip(starts.tolist(), ends.tolist()))


def contiguous_runs(bounds: Sequence[tuple[int, int]], run_length: int, min_run: int = 2) -> list[tuple[int, int]]:
    """Cut each ``[start, end)`` book range into runs of ``run_length`` sentences; a last run
    shorter than ``min_run`` is dropped (a lone sentence has no neighbour in its run)."""
    if not isinstance(run_length, int) or run_length < 2:
        raise ValueError(f"run_length must be an integer >= 2, got {run_length!r}")
    runs = []
    for start, end in bounds:
        for a in range(start, end, run_length):
            b = min(a + run_length, end)
            if b - a >= min_run:
                runs.append((a, b))
    return runs


class ContiguousBatches(Batches):
    """An epoch-seeded iterable of quick-thought batches (the ``DataBundle.train`` object, the
    loop's :class:`~toolkit.training.batches.Batches` face).

    Each batch is a dict: ``x`` ``[N, L]`` padded token ids, ``index`` ``[N]`` sentence
    indices, ``book`` ``[N]`` book ids, ``position`` ``[N]`` positions in the book. The order
    of epoch ``e`` depends only on ``(seed, e)`` (resumable); the last incomplete batch of an
    epoch is dropped when ``drop_last``.
    """

    def __init__(
        self,
        table: SentenceTable,
        tokenizer: SentenceTokenizer,
        batch_size: int,
        run_length: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 2:
            raise ValueError(f"batch_size must be an integer >= 2, got {batch_size!r}")
        self.table, self.tokenizer = table, tokenizer
        self.batch_size = batch_size
        self.run_length = run_length or batch_size
        self.runs = contiguous_runs(table.book_bounds(), self.run_length)
        self.total = sum(b - a for a, b in self.runs)
        if self.total < batch_size:
            raise ValueError(
                f"batch_size {batch_size} exceeds the {self.total} sentences in "
                "training runs; lower budget.batch_size or add books"
            )
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        full, rest = divmod(self.total, self.batch_size)
        return full if self.drop_last or rest == 0 else full + 1

    def order(self) -> np.ndarray:
        """The sentence indices of this epoch: shuffled runs, each in reading order."""
        runs = self.runs
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
            perm = torch.randperm(len(runs), generator=g).tolist()
            runs = [runs[i] for i in perm]
        return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in runs])

    def batch(self, idx: np.ndarray) -> dict[str, Any]:
        t = self.table
        return {
            "x": self.tokenizer.pad([t.ids[i] for i in idx]),
            "index": torch.from_numpy(idx.copy()),
            "book": torch.from_numpy(t.book[idx]),
            "position": torch.from_numpy(t.position[idx]),
        }

    def iter_from(self, start: int) -> Iterator[dict[str, Any]]:
        order = self.order()
        for k in range(start, len(self)):
            yield self.batch(order[k * self.batch_size : (k + 1) * self.batch_size])
