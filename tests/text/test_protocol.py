"""K-fold determinism of the prototyping mode (the mode of the CPU recipes) on real offline
tasks: the same seed gives the same folds, the same chosen C and the same accuracy; another
seed gives other folds. Both probe paths: sparse bag-of-words (liblinear, one-vs-rest on
TREC's six classes) and dense encoder features (standardised, lbfgs)."""

from __future__ import annotations

import numpy as np
import torch

from domains.text.config import EncoderConfig
from domains.text.domain import build_quick_thought_encoder
from domains.text.senteval import BagOfWords, EncoderEmbedder, load_task, run_task, settings_for, subsample
from domains.text.tokenizer import train_tokenizer


def _same(a, b) -> bool:  # noqa: ANN001
    return a.folds == b.folds and a.chosen_c == b.chosen_c and a.accuracy == b.accuracy


def test_prototyping_folds_are_seeded_on_real_tasks() -> None:
    trec = subsample(load_task("trec"), 600, seed=0)
    assert len(np.unique(trec.labels)) == 6
    mr = subsample(load_task("mr"), 400, seed=0)
    tok = train_tokenizer(mr.sentences, kind="word", vocab_size=500, min_frequency=1)
    torch.manual_seed(0)
    encoder = build_quick_thought_encoder(EncoderConfig(embedding_dim=8, hidden_size=8), tok)
    for task, embedder in ((trec, BagOfWords()), (mr, EncoderEmbedder(encoder))):
        settings = settings_for("prototyping", seed=5)
        assert settings.folds == 5 and settings.selection == "holdout"
        first, again = run_task(embedder, task, settings), run_task(embedder, task, settings)
        assert _same(first, again) and len(first.folds) == 5
        other = run_task(embedder, task, settings_for("prototyping", seed=6))
        assert other.folds != first.folds  # the seed decides the folds
