"""Quick-thought sentence encoders (Logeswaran & Lee 2018, Sec. 3).

Two encoders with separate parameters, ``f`` for the input sentence and ``g`` for candidate
sentences; the score of a candidate ``c`` for a sentence ``s`` is ``f(s) . g(c)`` (Eq. 2), and
the sentence embedding used downstream is the concatenation ``[f(s), g(s)]`` (Sec. 4).

* :class:`GRUSentenceEncoder`: learned word embeddings and a GRU whose final hidden state is
  the sentence vector; ``bidirectional`` concatenates the last forward and backward states
  (``hidden_size`` is the output size: ``hidden_size // 2`` units per direction, as in the
  authors' code). Word embeddings start uniform in [-0.1, 0.1] (their ``uniform_init_scale``).
* :class:`TransformerSentenceEncoder`: a ``transformers`` BERT model, a small configuration
  built locally (offline) or a pretrained name where the hub is reachable; the sentence vector
  is the mean of the last hidden states over real tokens.
* :class:`BagOfWordsSentenceEncoder`: the mean of learned word embeddings over the real tokens
  (no recurrence, no order); ``embedding_dim`` is its output size. Each of f and g has its own
  table, initialised like the GRU's (uniform in [-init_scale, init_scale], padding row 0). Its
  CPU recipe (``recipes/text/cpu/qt_bow_books.yaml``) trains 13x the sentences per second of
  the GRU recipe's step (``bench/text_step.py --before``), so a few minutes see millions of
  tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from domains.base import Encoder
from domains.text.tokenizer import SentenceTokenizer

__all__ = ["GRUSentenceEncoder", "TransformerSentenceEncoder", "BagOfWordsSentenceEncoder", "QuickThoughtEncoder"]


def _word_embeddings(
    vocab_size: int, embedding_dim: int, pad_id: int, init_scale: float, bag: bool = False
) -> nn.Embedding | nn.EmbeddingBag:
    """Word embeddings ~ U(-init_scale, init_scale) (the authors' ``uniform_init_scale``), the
    padding row zero (``padding_idx`` keeps it out of the gradient). ``bag``: an
    ``nn.EmbeddingBag`` that averages each row's embeddings, leaving ``pad_id`` out."""
    if not isinstance(init_scale, (int, float)) or init_scale <= 0:
        raise ValueError(f"init_scale must be a number > 0, got {init_scale!r}")
    if not isinstance(pad_id, int) or not 0 <= pad_id < vocab_size:
        raise ValueError(f"pad_id must be an integer in [0, {vocab_size - 1}], got {pad_id!r}")
    embedding = (
        nn.EmbeddingBag(vocab_size, embedding_dim, mode="mean", padding_idx=pad_id)
        if bag
        else nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_id)
    )
    nn.init.uniform_(embedding.weight, -init_scale, init_scale)
    with torch.no_grad():
        embedding.weight[pad_id].zero_()
    return embedding


class GRUSentenceEncoder(nn.Module):
    """Embedding -> GRU; the final hidden state (last layer) is the sentence vector."""

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int = 300,
        hidden_size: int = 1200,
        bidirectional: bool = False,
        num_layers: int = 1,
        pad_id: int = 0,
        init_scale: float = 0.1,
    ) -> None:
        super().__init__()
        for name, value in (
            ("vocab_size", vocab_size),
            ("embedding_dim", embedding_dim),
            ("hidden_size", hidden_size),
            ("num_layers", num_layers),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if bidirectional and hidden_size % 2:
            raise ValueError(
                f"hidden_size must be even with bidirectional=True (each direction "
                f"gets hidden_size // 2 units), got {hidden_size}"
            )
        self.pad_id = pad_id
        self.out_dim = hidden_size
        self.embedding = _word_embeddings(vocab_size, embedding_dim, pad_id, init_scale)
        per_direction = hidden_size // 2 if bidirectional else hidden_size
        self.rnn = nn.GRU(
            embedding_dim, per_direction, num_layers=num_layers, batch_first=True, bidirectional=bidirectional
        )

    def forward(self, ids: Tensor) -> Tensor:
        """``ids`` ``[N, L]`` right-padded with ``pad_id`` -> ``[N, hidden_size]``."""
        lengths = (ids != self.pad_id).sum(1).clamp(min=1)
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embedding(ids), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        _, h = self.rnn(packed)  # [layers * directions, N, units]
        if self.rnn.bidirectional:
            return torch.cat([h[-2], h[-1]], dim=1)
        return h[-1]


class BagOfWordsSentenceEncoder(nn.Module):
    """The mean of the word embeddings of the real (non-padding) tokens: ``[N, L] -> [N, dim]``.

    An ``nn.EmbeddingBag`` computes it without materialising ``[N, L, dim]`` (about 2-5x faster
    than embedding, masking and averaging on a CPU); its ``padding_idx`` leaves the padding
    tokens out of the mean, whatever the padding row holds."""

    def __init__(self, vocab_size: int, embedding_dim: int = 300, pad_id: int = 0, init_scale: float = 0.1) -> None:
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("embedding_dim", embedding_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.pad_id = pad_id
        self.out_dim = embedding_dim
        self.embedding = _word_embeddings(vocab_size, embedding_dim, pad_id, init_scale, bag=True)

    def forward(self, ids: Tensor) -> Tensor:
        """``ids`` ``[N, L]`` padded with ``pad_id`` (anywhere) -> ``[N, embedding_dim]``; an
        all-padding row gives the zero vector."""
        return self.embedding(ids)


class TransformerSentenceEncoder(nn.Module):
    """A BERT encoder from ``transformers``, mean-pooled over the real tokens."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int = 256,
        num_layers: int = 2,
        num_heads: int = 4,
        intermediate_size: int | None = None,
        max_length: int = 64,
        pad_id: int = 0,
        pretrained: str | None = None,
    ) -> None:
        super().__init__()
        from transformers import AutoModel, BertConfig, BertModel

        self.pad_id = pad_id
        if pretrained:
            try:
                self.model = AutoModel.from_pretrained(pretrained)
            except Exception as exc:  # noqa: BLE001 - hub / cache errors vary
                raise ValueError(
                    f"pretrained {pretrained!r} could not be loaded ({type(exc).__name__}: "
                    f"{exc}); offline, leave pretrained unset to build a small "
                    "model locally"
                ) from None
        else:
            if hidden_size % num_heads:
                raise ValueError(f"hidden_size must be divisible by num_heads, got {hidden_size} and {num_heads}")
            config = BertConfig(
                vocab_size=vocab_size,
                hidden_size=hidden_size,
                num_hidden_layers=num_layers,
                num_attention_heads=num_heads,
                intermediate_size=intermediate_size or 4 * hidden_size,
                max_position_embeddings=max(max_length, 8),
                pad_token_id=pad_id,
            )
            self.model = BertModel(config, add_pooling_layer=False)
        self.out_dim = int(self.model.config.hidden_size)

    def forward(self, ids: Tensor) -> Tensor:
        mask = ids != self.pad_id
        hidden = self.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


class QuickThoughtEncoder(Encoder):
    """The pair (f, g) plus the tokenizer it was trained with.

    ``forward(ids)`` gives the L2-normalised concatenation ``[f, g]`` (what generic code and
    kNN-style monitors see); ``forward(ids, pair=True)`` gives the raw pair ``(f(s), g(s))``
    that the quick-thought scores are made of; ``features(ids)`` the raw concatenation used by
    the SentEval-style evaluation. ``out_dim`` is the width of one of f, g (the views the
    objective receives). The tokenizer is part of the state dict (``get_extra_state``).
    """

    def __init__(self, f: nn.Module, g: nn.Module, tokenizer: SentenceTokenizer) -> None:
        super().__init__()
        if getattr(f, "out_dim", None) != getattr(g, "out_dim", None):
            raise ValueError(
                f"f and g must have the same output size, got "
                f"{getattr(f, 'out_dim', None)} and {getattr(g, 'out_dim', None)}"
            )
        self.f, self.g = f, g
        self.tokenizer = tokenizer
        self.out_dim = int(f.out_dim)  # type: ignore[arg-type]

    def forward(self, ids: Tensor, pair: bool = False) -> Tensor | tuple[Tensor, Tensor]:  # type: ignore[override]
        u, v = self.f(ids), self.g(ids)
        if pair:
            return u, v
        return F.normalize(torch.cat([u, v], dim=1), dim=1)

    def features(self, ids: Tensor) -> Tensor:
        return torch.cat([self.f(ids), self.g(ids)], dim=1)

    @torch.no_grad()
    def embed(self, sentences: Sequence[str], batch_size: int = 256) -> np.ndarray:
        """SentEval's ``batcher``: ``[len(sentences), 2 * out_dim]`` float32 features.

        Sentences are encoded in length-sorted chunks (padding costs nothing then) and put
        back in the input order.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if len(sentences) == 0:
            return np.zeros((0, 2 * self.out_dim), dtype=np.float32)
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        ids = self.tokenizer.ids(sentences)
        order = np.argsort([len(x) for x in ids], kind="stable")
        out = np.empty((len(ids), 2 * self.out_dim), dtype=np.float32)
        for start in range(0, len(ids), batch_size):
            chunk = order[start : start + batch_size]
            x = self.tokenizer.pad([ids[i] for i in chunk]).to(device)
            out[chunk] = self.features(x).float().cpu().numpy()
        self.train(was_training)
        return out

    def get_extra_state(self) -> Any:
        return {"tokenizer": self.tokenizer.state()}

    def set_extra_state(self, state: Any) -> None:
        self.tokenizer = SentenceTokenizer.from_state(state["tokenizer"])
