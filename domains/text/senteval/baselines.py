"""Embedders for the SentEval engine: a trained encoder, and the baselines that give its
numbers a meaning.

* :class:`EncoderEmbedder`: ``[f(s), g(s)]`` of a :class:`~domains.text.encoders.QuickThoughtEncoder`
  (the quick-thought sentence embedding). Wrapping an untrained encoder of the same size gives
  the random-encoder baseline (random projections of the same architecture are known to be a
  strong baseline for sentence tasks, so "beats random" is the bar a trained encoder must clear).
* :class:`BagOfWords`: binary unigram counts with the vocabulary of each task's own sentences
  (the standard bag-of-words anchor; docs/data.md lists its accuracies on the offline tasks).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

from domains.text.senteval.tasks import Task

__all__ = ["EncoderEmbedder", "BagOfWords"]


class EncoderEmbedder:
    """SentEval face over an encoder with ``embed(sentences, batch_size)``."""

    def __init__(self, encoder: Any, batch_size: int = 256) -> None:
        if not hasattr(encoder, "embed"):
            raise ValueError(f"encoder must have an embed(sentences) method, got {type(encoder).__name__}")
        self.encoder, self.batch_size = encoder, batch_size

    def prepare(self, task: Task) -> None:
        return None

    def batcher(self, sentences: list[str]) -> np.ndarray:
        return self.encoder.embed(sentences, batch_size=self.batch_size)


class BagOfWords:
    """Binary unigram features; the vocabulary is fitted on the task's sentences (words seen
    at least ``min_df`` times)."""

    def __init__(self, min_df: int = 1, ngram_range: tuple[int, int] = (1, 1)) -> None:
        self.vectorizer = CountVectorizer(
            binary=True, lowercase=True, min_df=min_df, ngram_range=ngram_range, token_pattern=r"(?u)\b\w+\b"
        )
        self.fitted = False

    def prepare(self, task: Task) -> None:
        texts = list(task.sentences or [])
        if task.pairs is not None:
            texts = list(task.pairs[0]) + list(task.pairs[1])
        self.vectorizer.fit(texts)
        self.fitted = True

    def batcher(self, sentences: list[str]) -> Any:
        if not self.fitted:
            raise ValueError("BagOfWords.batcher called before prepare(task)")
        return self.vectorizer.transform(sentences).astype(np.float32)
