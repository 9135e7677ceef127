"""The recipe sections the text domain owns: ``data``, ``encoder``, ``evaluation``.

Defaults are the CPU-scale setting on Austen; the paper-scale values of Logeswaran & Lee
(2018) and their code (lajanugen/S2V) are given in each field's description and used by
``recipes/text/paper/qt_bookcorpus.yaml``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from domains.base import Section
from domains.text.corpora import OFFLINE_CORPORA, SOURCES, check_corpus_names

__all__ = ["TokenizerConfig", "DataConfig", "EncoderConfig", "EvaluationConfig"]

TaskName = Literal["mr", "cr", "subj", "mpqa", "trec", "msrp"]


class TokenizerConfig(Section):
    kind: Literal["wordpiece", "bpe", "word"] = Field(
        "wordpiece",
        description="sub-word by default (no word vectors to expand the vocabulary with offline); the paper used words",
    )
    vocab_size: int = Field(16000, ge=10, description="paper: 50,001 words on BookCorpus")
    lowercase: bool = True
    min_frequency: int = Field(2, ge=1)
    path: str | None = Field(None, description="load this tokenizer.json instead of training one")


class DataConfig(Section):
    corpus: str | list[str] = Field(
        "austen",
        description="austen, mobydick, sotu, brown, folder or bookcorpus; or a list of the "
        "offline ones (austen, mobydick, sotu, brown), whose books are "
        "concatenated in that order (val_books counts from the end of it)",
    )
    path: str | None = Field(
        None,
        description="folder of plain-text books (corpus: folder), "
        "or a folder to read instead of the data provider's "
        "(one corpus only)",
    )
    data_root: str | None = Field(None, description="toolkit.data root; default $CTK_DATA or ./data")
    max_books: int | None = Field(None, ge=1)
    val_books: int | list[str] = Field(1, description="hold out the last N books, or these books")
    drop_headings: bool = True
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    max_length: int = Field(30, ge=1, description="tokens per sentence (paper: 30)")
    window: int = Field(1, ge=1, description="context window: positives within +-window (paper: 1)")
    run_length: int | None = Field(None, ge=2, description="contiguous run length; default batch_size")
    pairs: Literal["forward", "both"] = Field(
        "forward",
        description="the non-contrastive family's branch pairs: f(s) with g of the next sentence only, or "
        "both orders (f(s) with g of the sentences before and after it, as the QT softmax's positives)",
    )
    self_candidate: Literal["exclude", "zero_logit"] = Field(
        "exclude", description="drop s from its own candidates (paper) or give it logit 0 (authors' code)"
    )

    @field_validator("corpus", mode="before")
    @classmethod
    def _known_corpus(cls, value: object) -> str | list[str]:
        if isinstance(value, str):
            if value not in SOURCES:
                raise ValueError(
                    f"corpus must be one of {', '.join(SOURCES)}, or a list of {', '.join(OFFLINE_CORPORA)}"
                )  # the recipe error adds the value
            return value
        if isinstance(value, (list, tuple)):
            return check_corpus_names(value, "corpus")
        raise ValueError("corpus must be a name or a list of names")

    @model_validator(mode="after")
    def _folder_needs_path(self) -> DataConfig:
        if self.corpus == "folder" and not self.path:
            raise ValueError("corpus: folder needs path: a folder of plain-text books")
        if isinstance(self.corpus, list) and self.path:
            raise ValueError(
                f"path {self.path!r} cannot go with a list of corpora ({self.corpus!r}); set data_root instead"
            )
        return self


class EncoderConfig(Section):
    kind: Literal["gru", "transformer", "bow"] = Field(
        "gru",
        description="gru (the paper's), transformer (BERT, mean-pooled) or bow (the mean of "
        "the word embeddings: cheap, for short CPU budgets)",
    )
    embedding_dim: int = Field(
        128, ge=1, description="word embedding size (paper: 620 trained); bow: also the sentence vector size"
    )
    hidden_size: int = Field(
        512,
        ge=1,
        description="sentence vector size of f and of g (paper uni-QT: 2400; bi-QT: 1200 = 2 x 600); not used by bow",
    )
    bidirectional: bool = False
    num_layers: int = Field(1, ge=1)
    init_scale: float = Field(0.1, gt=0, description="word embeddings ~ U(-s, s) (authors' code: 0.1)")
    num_heads: int = Field(4, ge=1, description="transformer only")
    intermediate_size: int | None = Field(None, ge=1, description="transformer only; default 4 x hidden")
    pretrained: str | None = Field(
        None, description="transformer only: a Hugging Face model name (needs the hub); its tokenizer replaces ours"
    )
    score: Literal["dot", "cosine"] = Field(
        "dot", description="f(s).g(c) as in the paper, or the cosine (bounded; for DCL/HCL)"
    )


class EvaluationConfig(Section):
    tasks: list[TaskName] = Field(default_factory=lambda: ["mr", "cr", "subj", "mpqa", "trec", "msrp"])
    mode: Literal["prototyping", "literature"] = Field(
        "prototyping",
        description="prototyping: 5-fold CV, C on a held-out tenth; literature: 10-fold CV, C by inner 10-fold CV",
    )
    folds: int | None = Field(None, ge=2)
    selection: Literal["kfold", "holdout", "none"] | None = None
    inner_folds: int | None = Field(None, ge=2)
    c_grid: list[float] | None = None
    max_examples: int | None = Field(None, ge=10, description="stratified subsample per task")
    senteval_path: str | None = Field(
        None, description="SentEval's data/downstream folder; offline stand-ins are used where absent"
    )
    data_root: str | None = None
    msrp_pairs: int = Field(4000, ge=2, description="size of the MSRP stand-in (even)")
    min_abs_rating: float = Field(0.5, ge=0, description="CR/MPQA stand-ins: drop |rating| below this")
    baselines: list[Literal["random", "bow"]] = Field(
        default_factory=list,
        description="also evaluate a random encoder of the same size and/or "
        "bag-of-words (metrics random_<task>, bow_<task>)",
    )
    monitor_task: TaskName | None = Field(
        None,
        description="also report this task's accuracy at every budget.monitor_every step "
        "(online_senteval_<task>): one seeded 80/20 split, C = monitor_c, no "
        "folds, no selection (about 1-2 s with a bag-of-words encoder)",
    )
    monitor_c: float = Field(0.1, gt=0, description="the fixed L2 strength C of the monitor probe")
    diagnostics: bool = True
    diagnostic_sentences: int = Field(2000, ge=3)
    d_plus: float = Field(0.1, ge=0, le=1)
    d_minus: float = Field(0.5, ge=0, le=1)
    batch_size: int = Field(256, ge=1, description="sentences per embedding batch")
    seed: int | None = Field(None, ge=0, description="folds and subsamples; default the recipe seed")
