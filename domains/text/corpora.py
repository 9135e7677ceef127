"""Contiguous-sentence corpora for quick-thought: books split into paragraphs and sentences,
in reading order, with train / validation splits made *by book* so that no neighbour pair
straddles the two.

Sources (``load_corpus``):

* ``austen``: Jane Austen's six novels (offline, ``domains.text.catalogue.locate("austen")``: one UTF-8
  file per novel, blank lines between paragraphs);
* ``mobydick``, ``sotu`` (State of the Union, one "book" per speech), ``brown`` (one "book" per
  Brown-corpus sample, its own sentence split kept): offline, "more when asked";
* ``folder``: any folder of plain-text books (``*.txt``, blank lines between paragraphs);
* ``bookcorpus``: BookCorpus through the Hugging Face ``datasets`` library where the hub is
  reachable (``bookcorpusopen``, one record per book, split here like the others).

A list of the offline corpora (:data:`OFFLINE_CORPORA`: ``["brown", "sotu", "mobydick", "austen"]``)
concatenates their books in the order given; every book stays a book (quick-thought never pairs
sentences of two books) and ``max_books`` applies to each corpus. Book names must be unique
across the list, so ``split_by_book`` can hold out books by name or the last N of the combined
list.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from domains.text.splitting import is_heading, split_paragraphs, split_sentences

__all__ = ["Book", "book_from_text", "read_text_folder", "load_corpus", "split_by_book", "SOURCES", "OFFLINE_CORPORA"]

SOURCES = ("austen", "mobydick", "sotu", "brown", "folder", "bookcorpus")
OFFLINE_CORPORA = ("austen", "mobydick", "sotu", "brown")  # offline corpora a list may combine


@dataclass(frozen=True)
class Book:
    """One book: its sentences in reading order and the paragraph each sentence belongs to."""

    name: str
    sentences: tuple[str, ...]
    paragraphs: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.sentences) != len(self.paragraphs):
            raise ValueError(
                f"book {self.name!r}: {len(self.sentences)} sentences but {len(self.paragraphs)} paragraph ids"
            )

    def __len__(self) -> int:
        return len(self.sentences)


def book_from_text(name: str, text: str, drop_headings: bool = True) -> Book:
    """Split a whole book: paragraphs at blank lines, then sentences within each paragraph."""
    sentences: list[str] = []
    paragraphs: list[int] = []
    for p_index, para in enumerate(split_paragraphs(text)):
        if drop_headings and is_heading(para):
            continue
        for sentence in split_sentences(para):
            sentences.append(sentence)
            paragraphs.append(p_index)
    return Book(name, tuple(sentences), tuple(paragraphs))


def _natural_key(path: Path) -> list[object]:
    """Sort ``chapter_2`` before ``chapter_10``."""
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", path.name)]


def read_text_folder(
    folder: str | Path, pattern: str = "*.txt", drop_headings: bool = True, max_books: int | None = None
) -> list[Book]:
    """Every file matching ``pattern`` under ``folder`` is one book (natural name order)."""
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"folder must be an existing directory of text files, got {str(folder)!r}")
    files = sorted(root.rglob(pattern), key=_natural_key)
    if not files:
        raise ValueError(f"folder {str(folder)!r} holds no files matching {pattern!r}")
    books = [
        book_from_text(f.stem, f.read_text(encoding="utf-8", errors="replace"), drop_headings)
        for f in files[:max_books]
    ]
    return [b for b in books if len(b) > 0]


def _locate(name: str, root: str | Path | None) -> Path:
    from domains.text.catalogue import locate  # the data provider places files; we parse them

    return Path(locate(name, root=root))


def _json_text_folder(folder: Path, kind: str, max_books: int | None, drop_headings: bool = True) -> list[Book]:
    """stdlib-style datasets: ``<item>.json`` records with a ``text`` field (or ``.txt``)."""
    files = sorted(folder.rglob("*.json"), key=_natural_key)
    files = [f for f in files if f.name != "package.json"]
    books = []
    for f in files:
        try:
            record = json.loads(f.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(record, dict) and isinstance(record.get("text"), str):
            books.append((f.stem, record["text"]))
    if not books:
        return read_text_folder(folder, drop_headings=drop_headings, max_books=max_books)
    if kind == "mobydick":  # one book made of its chapters, in chapter order
        text = "\n\n".join(t for _, t in books)
        return [book_from_text("moby_dick", text, drop_headings)]
    return [b for b in (book_from_text(n, t, drop_headings) for n, t in books[:max_books]) if len(b)]


_BROWN_TOKEN = re.compile(r"(\S+)/\S+")


def _brown(folder: Path, max_books: int | None) -> list[Book]:
    """Brown corpus samples (``ca01`` ...): one tagged sentence per line, kept as split."""
    files = sorted(
        (f for f in folder.rglob("*") if f.is_file() and re.fullmatch(r"c[a-r]\d\d", f.name)), key=_natural_key
    )
    if not files:
        raise ValueError(f"no Brown-corpus sample files (ca01 ...) under {str(folder)!r}")
    books = []
    for f in files[:max_books]:
        sentences, paragraphs = [], []
        for p_index, block in enumerate(re.split(r"\n\s*\n", f.read_text(encoding="latin-1"))):
            for line in block.splitlines():
                words = _BROWN_TOKEN.findall(line)
                if words:
                    text = " ".join(words).replace("``", '"').replace("''", '"')
                    sentences.append(text)
                    paragraphs.append(p_index)
        if sentences:
            books.append(Book(f.name, tuple(sentences), tuple(paragraphs)))
    return books


def _bookcorpus(max_books: int | None, drop_headings: bool = True) -> list[Book]:
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise ValueError(
            "corpus 'bookcorpus' needs the Hugging Face 'datasets' package "
            "(pip install 'ctk[text]') and a reachable hub; offline, use "
            "corpus: austen or corpus: folder"
        ) from None
    try:
        ds = datasets.load_dataset("bookcorpusopen", split="train", streaming=True)
    except Exception as exc:  # noqa: BLE001 - the hub raises many kinds
        raise ValueError(
            f"corpus 'bookcorpus' could not be loaded from the Hugging Face hub "
            f"({type(exc).__name__}: {exc}); offline, use corpus: austen or a "
            "folder of plain-text books (corpus: folder, path: ...)"
        ) from None
    books = []
    for i, record in enumerate(ds):
        if max_books is not None and i >= max_books:
            break
        book = book_from_text(str(record.get("title", f"book_{i}")), record["text"], drop_headings)
        if len(book):
            books.append(book)
    return books


def check_corpus_names(names: Sequence[str], key: str = "corpus") -> list[str]:
    """``names`` as a list when it is a non-empty list of distinct offline corpora; otherwise a
    ``ValueError`` naming ``key``, the value and the names a list may hold."""
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ValueError(f"{key} must be a list of corpus names, got {names!r}")
    names = list(names)
    if not names:
        raise ValueError(f"{key} is an empty list; expected one or more of {', '.join(OFFLINE_CORPORA)}")
    for i, name in enumerate(names):
        if name not in OFFLINE_CORPORA:
            raise ValueError(f"{key}[{i}] is {name!r}; a list combines offline corpora: {', '.join(OFFLINE_CORPORA)}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{key} names {', '.join(repeated)} more than once, got {names!r}")
    return names


def _load_combined(
    names: Sequence[str], path: str | Path | None, root: str | Path | None, max_books: int | None, drop_headings: bool
) -> list[Book]:
    names = check_corpus_names(names, "source")
    if path is not None:
        raise ValueError(
            f"path {str(path)!r} cannot go with a list of corpora ({names!r}): each "
            "is read from the data root; set root (data.data_root) instead"
        )
    books: list[Book] = []
    for name in names:
        books += load_corpus(name, None, root, max_books, drop_headings)
    clashes = sorted(n for n, k in Counter(b.name for b in books).items() if k > 1)
    if clashes:
        raise ValueError(f"the corpora {names!r} share book names {clashes[:5]}; val_books could not tell them apart")
    return books


def load_corpus(
    source: str | Sequence[str],
    path: str | Path | None = None,
    root: str | Path | None = None,
    max_books: int | None = None,
    drop_headings: bool = True,
) -> list[Book]:
    """Load a corpus by name, or the books of several offline corpora, concatenated in the
    order given (see the module docstring); ``root`` is the data root of ``toolkit.data``
    (``$CTK_DATA`` or ``./data`` when None); ``path`` is the folder for ``source='folder'``."""
    if not isinstance(source, str):
        return _load_combined(source, path, root, max_books, drop_headings)
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    if max_books is not None and max_books < 1:
        raise ValueError(f"max_books must be >= 1 or None, got {max_books!r}")
    if source == "folder":
        if path is None:
            raise ValueError("source 'folder' needs path: a folder of plain-text books")
        return read_text_folder(path, max_books=max_books, drop_headings=drop_headings)
    if source == "bookcorpus":
        return _bookcorpus(max_books, drop_headings)
    folder = Path(path) if path is not None else _locate(source, root)
    if source == "austen":
        return read_text_folder(folder, max_books=max_books, drop_headings=drop_headings)
    if source == "brown":
        return _brown(folder, max_books)
    return _json_text_folder(folder, source, max_books, drop_headings)


def split_by_book(books: Sequence[Book], val_books: int | Iterable[str] = 1) -> tuple[list[Book], list[Book]]:
    """Hold out whole books: the last ``val_books`` books (an int) or the books named.

    Splitting by book is what keeps every neighbour pair on one side of the split.
    """
    books = list(books)
    if isinstance(val_books, int):
        if not 0 <= val_books < len(books):
            raise ValueError(
                f"val_books must lie in [0, {len(books) - 1}] for a corpus of {len(books)} books, got {val_books}"
            )
        cut = len(books) - val_books
        return books[:cut], books[cut:]
    names = set(val_books)
    known = {b.name for b in books}
    missing = names - known
    if missing:
        raise ValueError(
            f"val_books names {sorted(missing)} that are not in the corpus; expected some of {sorted(known)}"
        )
    train = [b for b in books if b.name not in names]
    if not train:
        raise ValueError("val_books holds out every book; keep at least one for training")
    return train, [b for b in books if b.name in names]
