"""A tokenizer trained locally with Hugging Face ``tokenizers`` on the training corpus.

Quick-thought used a word vocabulary (50k words on BookCorpus) and, for evaluation, expanded
it with word2vec/GloVe (Logeswaran & Lee 2018, Sec. 4). Offline there are no pretrained word
vectors to expand with, and the evaluation sentences (film reviews, questions, news) share
only part of a novelist's vocabulary, so the default is a sub-word WordPiece vocabulary: an
unseen word becomes known pieces instead of ``[UNK]``. ``kind: word`` gives the paper's
word-level vocabulary.

The tokenizer is serialised as JSON (``to_json``) and travels with the encoder's state dict
(see ``encoders.QuickThoughtEncoder``), so evaluation always uses the vocabulary the encoder
was trained with.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from torch import Tensor

__all__ = ["PAD", "UNK", "SentenceTokenizer", "train_tokenizer"]

PAD, UNK = "[PAD]", "[UNK]"
KINDS = ("wordpiece", "bpe", "word")


class SentenceTokenizer:
    """Wraps a ``tokenizers.Tokenizer``: sentences -> right-padded id tensors."""

    def __init__(self, tokenizer: Tokenizer, max_length: int = 30, pad_token: str = PAD, unk_token: str = UNK) -> None:
        if not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"max_length must be an integer >= 1, got {max_length!r}")
        pad_id, unk_id = tokenizer.token_to_id(pad_token), tokenizer.token_to_id(unk_token)
        if pad_id is None or unk_id is None:
            raise ValueError(
                f"the tokenizer must know pad_token {pad_token!r} and unk_token "
                f"{unk_token!r}, got ids {pad_id!r} and {unk_id!r}"
            )
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.pad_token, self.unk_token = pad_token, unk_token
        self.pad_id, self.unk_id = int(pad_id), int(unk_id)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def ids(self, sentences: Sequence[str]) -> list[list[int]]:
        """Token ids of each sentence, truncated to ``max_length`` (at least one token: an
        empty sentence becomes ``[UNK]``)."""
        out = []
        for enc in self.tokenizer.encode_batch(list(sentences), add_special_tokens=False):
            ids = enc.ids[: self.max_length]
            out.append(ids if ids else [self.unk_id])
        return out

    def pad(self, ids: Sequence[Sequence[int]]) -> Tensor:
        """``[N, L]`` long tensor, right-padded with ``pad_id`` to the longest sequence."""
        if len(ids) == 0:
            raise ValueError("ids must hold at least one sequence, got none")
        width = max(len(x) for x in ids)
        out = torch.full((len(ids), width), self.pad_id, dtype=torch.long)
        for i, x in enumerate(ids):
            out[i, : len(x)] = torch.as_tensor(x, dtype=torch.long)
        return out

    def __call__(self, sentences: Sequence[str]) -> Tensor:
        return self.pad(self.ids(sentences))

    def to_json(self) -> str:
        return self.tokenizer.to_str()

    def state(self) -> dict[str, object]:
        """Everything needed to rebuild this tokenizer (stored in the encoder's state dict)."""
        return {
            "json": self.to_json(),
            "max_length": self.max_length,
            "pad_token": self.pad_token,
            "unk_token": self.unk_token,
        }

    @classmethod
    def from_state(cls, state: dict[str, object]) -> SentenceTokenizer:
        return cls(
            Tokenizer.from_str(str(state["json"])),
            int(state["max_length"]),  # type: ignore[arg-type]
            str(state["pad_token"]),
            str(state["unk_token"]),
        )

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(str(p))
        return p

    @classmethod
    def load(cls, path: str | Path, max_length: int = 30) -> SentenceTokenizer:
        return cls(Tokenizer.from_file(str(path)), max_length)

    @classmethod
    def pretrained(cls, name: str, max_length: int = 30) -> SentenceTokenizer:
        """The fast tokenizer of a Hugging Face model (needs the hub or a local cache)."""
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(name)
        backend = getattr(hf, "backend_tokenizer", None)
        if backend is None or hf.pad_token is None or hf.unk_token is None:
            raise ValueError(f"pretrained {name!r} has no fast tokenizer with pad and unk tokens")
        return cls(backend, max_length, hf.pad_token, hf.unk_token)


def train_tokenizer(
    sentences: Iterable[str],
    kind: str = "wordpiece",
    vocab_size: int = 16000,
    lowercase: bool = True,
    min_frequency: int = 2,
    max_length: int = 30,
) -> SentenceTokenizer:
    """Train a ``kind`` tokenizer (``wordpiece``, ``bpe`` or ``word``) on ``sentences``.

    Pre-tokenisation splits on whitespace and punctuation; ``lowercase`` also strips accents.
    ``[PAD]`` is id 0 and ``[UNK]`` id 1.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(vocab_size, int) or vocab_size < 10:
        raise ValueError(f"vocab_size must be an integer >= 10, got {vocab_size!r}")
    if not isinstance(min_frequency, int) or min_frequency < 1:
        raise ValueError(f"min_frequency must be an integer >= 1, got {min_frequency!r}")
    special = [PAD, UNK]
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=UNK))
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special, show_progress=False
        )
    elif kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=UNK))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special, show_progress=False
        )
    else:
        tok = Tokenizer(models.WordLevel(unk_token=UNK))
        trainer = trainers.WordLevelTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special, show_progress=False
        )
    steps = [normalizers.NFKC()]
    if lowercase:
        steps += [normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()]
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(sentences, trainer=trainer)
    return SentenceTokenizer(_canonical_ids(tok, special), max_length)


def _canonical_ids(tok: Tokenizer, special: list[str]) -> Tokenizer:
    """The same vocabulary with ids in a fixed order (the special tokens, then the rest
    sorted). The trainers of ``tokenizers`` give the same token set on every run but number
    tokens of equal count in an order that changes from run to run, and the ids decide which
    embedding row each token starts from: without this, two runs with one seed differ."""
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    if not isinstance(vocab, dict):
        return tok
    rest = sorted(t for t in vocab if t not in special)
    spec["model"]["vocab"] = {t: i for i, t in enumerate([*special, *rest])}
    for added in spec.get("added_tokens") or []:
        added["id"] = spec["model"]["vocab"].get(added["content"], added["id"])
    return Tokenizer.from_str(json.dumps(spec))
