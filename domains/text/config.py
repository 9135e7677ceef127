"""The recipe sections the text domain owns: ``data``, ``encoder``, ``evaluation``.

Defaults are the CPU-scale setting on Austen; the paper-scale values of Logeswaran & Lee
(2018) and their code (lajanugen/S2V) are given in each field's description and used by
``recipes/text/paper/qt_bookcorpus.yaml``.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from domains.base import Section

__all__ = ["TokenizerConfig", "DataConfig", "EncoderConfig", "EvaluationConfig"]

TaskName = Literal["mr", "cr", "subj", "mpqa", "trec", "msrp"]


class TokenizerConfig(Section):
    kind: Literal["wordpiece", "bpe", "word"] = Field(
        "wordpiece", description="sub-word by default (no word vectors to expand the vocabulary "
                                 "with offline); the paper used words")
    vocab_size: int = Field(16000, ge=10, description="paper: 50,001 words on BookCorpus")
    lowercase: bool = True
    min_frequency: int = Field(2, ge=1)
    path: str | None = Field(None, description="load this tokenizer.json instead of training one")


class DataConfig(Section):
    corpus: Literal["austen", "mobydick", "sotu", "brown", "folder", "bookcorpus"] = "austen"
    path: str | None = Field(None, description="folder of plain-text books (corpus: folder), "
                                               "or a folder to read instead of the data provider's")
    data_root: str | None = Field(None, description="toolkit.data root; default $CTK_DATA or ./data")
    max_books: int | None = Field(None, ge=1)
    val_books: int | list[str] = Field(1, description="hold out the last N books, or these books")
    drop_headings: bool = True
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    max_length: int = Field(30, ge=1, description="tokens per sentence (paper: 30)")
    window: int = Field(1, ge=1, description="context window: positives within +-window (paper: 1)")
    run_length: int | None = Field(None, ge=2, description="contiguous run length; default batch_size")
    self_candidate: Literal["exclude", "zero_logit"] = Field(
        "exclude", description="drop s from its own candidates (paper) or give it logit 0 (authors' code)")

    @model_validator(mode="after")
    def _folder_needs_path(self) -> "DataConfig":
        if self.corpus == "folder" and not self.path:
            raise ValueError("corpus: folder needs path: a folder of plain-text books")
        return self


class EncoderConfig(Section):
    kind: Literal["gru", "transformer"] = "gru"
    embedding_dim: int = Field(128, ge=1, description="word embedding size (paper: 620 trained)")
    hidden_size: int = Field(512, ge=1, description="sentence vector size of f and of g "
                                                    "(paper uni-QT: 2400; bi-QT: 1200 = 2 x 600)")
    bidirectional: bool = False
    num_layers: int = Field(1, ge=1)
    init_scale: float = Field(0.1, gt=0, description="word embeddings ~ U(-s, s) (authors' code: 0.1)")
    num_heads: int = Field(4, ge=1, description="transformer only")
    intermediate_size: int | None = Field(None, ge=1, description="transformer only; default 4 x hidden")
    pretrained: str | None = Field(None, description="transformer only: a Hugging Face model name "
                                                     "(needs the hub); its tokenizer replaces ours")
    score: Literal["dot", "cosine"] = Field(
        "dot", description="f(s).g(c) as in the paper, or the cosine (bounded; for DCL/HCL)")


class EvaluationConfig(Section):
    tasks: list[TaskName] = Field(default_factory=lambda: ["mr", "cr", "subj", "mpqa", "trec", "msrp"])
    mode: Literal["prototyping", "literature"] = Field(
        "prototyping", description="prototyping: 5-fold CV, C on a held-out tenth; "
                                   "literature: 10-fold CV, C by inner 10-fold CV")
    folds: int | None = Field(None, ge=2)
    selection: Literal["kfold", "holdout", "none"] | None = None
    inner_folds: int | None = Field(None, ge=2)
    c_grid: list[float] | None = None
    max_examples: int | None = Field(None, ge=10, description="stratified subsample per task")
    senteval_path: str | None = Field(None, description="SentEval's data/downstream folder; "
                                                         "offline stand-ins are used where absent")
    data_root: str | None = None
    msrp_pairs: int = Field(4000, ge=2, description="size of the MSRP stand-in (even)")
    min_abs_rating: float = Field(0.5, ge=0, description="CR/MPQA stand-ins: drop |rating| below this")
    baselines: list[Literal["random", "bow"]] = Field(
        default_factory=list, description="also evaluate a random encoder of the same size and/or "
                                          "bag-of-words (metrics random_<task>, bow_<task>)")
    diagnostics: bool = True
    diagnostic_sentences: int = Field(2000, ge=3)
    d_plus: float = Field(0.1, ge=0, le=1)
    d_minus: float = Field(0.5, ge=0, le=1)
    batch_size: int = Field(256, ge=1, description="sentences per embedding batch")
    seed: int | None = Field(None, ge=0, description="folds and subsamples; default the recipe seed")
