"""An offline stand-in for MSRP (paraphrase identification): King James vs World English
Bible verse pairs, with negatives matched to the positives' word overlap.

Two human translations of the same verse are paraphrases (positives). As docs/data.md (section
bibles) notes, with naive negatives (another verse of the chapter) word overlap alone scores
~97%, so such a task ranks nothing. Here, for each verse ``i`` of a chapter, the negative pairs
KJV_i with the WEB verse ``j != i`` of the same chapter whose overlap with KJV_i is closest to
the positive's overlap; a pair is kept only when the two overlaps differ by at most
``tolerance``, so the positive and negative overlap distributions match and a classifier must
read more than shared words. ``n_pairs`` pairs (half positive) are then drawn with a seed.

Verses are read with ``pysword`` from the SWORD modules of ``domains.text.catalogue.locate("bibles")``;
the OSIS markup is stripped (footnotes removed, word tags unwrapped).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["clean_osis", "word_overlap", "read_parallel_verses", "build_msrp_standin"]

_NOTE = re.compile(r"<note\b.*?</note>", re.DOTALL)
_TITLE = re.compile(r"<title\b.*?</title>", re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_SPACE_PUNCT = re.compile(r" ([,.;:!?])")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def clean_osis(raw: str) -> str:
    """Plain text of one OSIS verse: footnotes and titles dropped, tags removed."""
    text = _NOTE.sub(" ", raw) if "<note" in raw else raw
    if "<title" in text:
        text = _TITLE.sub(" ", text)
    text = " ".join(_TAG.sub("", text).split())
    return _SPACE_PUNCT.sub(r"\1", text) if " " in text else text


def _words(sentence: str) -> set[str]:
    return set(_WORD.findall(sentence.lower().replace("’", "'")))


def _overlap_matrix(firsts: list[str], seconds: list[str]) -> np.ndarray:
    """Jaccard overlaps of every first sentence with every second one (``[n, m]``)."""
    vocab: dict[str, int] = {}
    rows = [[vocab.setdefault(w, len(vocab)) for w in _words(t)] for t in firsts + seconds]
    m = np.zeros((len(rows), max(len(vocab), 1)), dtype=np.int32)  # int: no BLAS threads for tiny products
    for r, cols in enumerate(rows):
        m[r, cols] = 1
    a, b = m[: len(firsts)], m[len(firsts) :]
    inter = a @ b.T
    union = a.sum(1)[:, None] + b.sum(1)[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1.0), 0.0)


def word_overlap(a: str, b: str) -> float:
    """Jaccard overlap of the two sentences' lower-cased word sets (0 when both are empty)."""
    wa, wb = _words(a), _words(b)
    union = wa | wb
    return len(wa & wb) / len(union) if union else 0.0


def read_parallel_verses(
    folder: str | Path, first: str = "engKJV2006eb", second: str = "engWEB2015eb", books: Sequence[str] | None = None
) -> list[list[tuple[str, str]]]:
    """Chapters of aligned verse pairs ``(first, second)``; verses empty in either are skipped.
    ``books`` (OSIS names such as ``"Gen"``, ``"John"``) restricts the reading."""
    from pysword.modules import SwordModules

    modules = SwordModules(str(folder))
    found = modules.parse_modules()
    for name in (first, second):
        if name not in found:
            raise ValueError(f"SWORD module {name!r} not found under {str(folder)!r}; found {sorted(found)}")
    a, b = modules.get_bible_from_module(first), modules.get_bible_from_module(second)
    for bible in (a, b):
        # pysword decompresses a module's whole block (a book) for every verse it reads; keep
        # the last blocks so reading a bible takes a second instead of minutes.
        bible._decompressed_text = functools.lru_cache(maxsize=8)(bible._decompressed_text)
    chapters = []
    structure = a.get_structure().get_books()
    wanted = None if books is None else {b.lower() for b in books}
    for book in structure.get("ot", []) + structure.get("nt", []):
        if wanted is not None and book.osis_name.lower() not in wanted:
            continue
        for c in range(1, book.num_chapters + 1):
            va = list(a.get_iter(books=[book.osis_name], chapters=[c], clean=False))
            vb = list(b.get_iter(books=[book.osis_name], chapters=[c], clean=False))
            pairs = [(clean_osis(x), clean_osis(y)) for x, y in zip(va, vb)]
            pairs = [(x, y) for x, y in pairs if x and y]
            if len(pairs) >= 2:
                chapters.append(pairs)
    return chapters


def build_msrp_standin(
    chapters: list[list[tuple[str, str]]], n_pairs: int = 4000, bin_width: float = 0.02, seed: int = 0
) -> tuple[list[str], list[str], np.ndarray]:
    """Overlap-matched paraphrase pairs: ``(first sentences, second sentences, labels)``.

    Negatives: for each verse i, the second-translation verse j != i of the same chapter that
    shares the most words with the first translation of i (the hardest in-chapter negative).
    Positives: the aligned pairs. Both pools are binned by word overlap (``bin_width``) and
    each bin contributes as many positives as negatives (the smaller count, drawn with
    ``seed``), so the two classes have the same overlap histogram. At most ``n_pairs`` pairs
    are returned (half positive), shuffled.
    """
    if not isinstance(n_pairs, int) or n_pairs < 2 or n_pairs % 2:
        raise ValueError(f"n_pairs must be an even integer >= 2, got {n_pairs!r}")
    if not 0 < bin_width <= 1:
        raise ValueError(f"bin_width must lie in (0, 1], got {bin_width!r}")
    positives: list[tuple[str, str, float]] = []
    negatives: list[tuple[str, str, float]] = []
    for pairs in chapters:
        overlaps = _overlap_matrix([x for x, _ in pairs], [y for _, y in pairs])
        for i, (x, y) in enumerate(pairs):
            row = overlaps[i].copy()
            positives.append((x, y, float(row[i])))
            row[i] = -1.0
            j = int(np.argmax(row))
            negatives.append((x, pairs[j][1], float(row[j])))
    rng = np.random.default_rng(seed)
    n_bins = int(np.ceil(1.0 / bin_width)) + 1
    pos_bins = np.minimum((np.array([o for *_, o in positives]) / bin_width).astype(int), n_bins - 1)
    neg_bins = np.minimum((np.array([o for *_, o in negatives]) / bin_width).astype(int), n_bins - 1)
    keep_pos: list[int] = []
    keep_neg: list[int] = []
    for b in range(n_bins):
        p_idx, n_idx = np.flatnonzero(pos_bins == b), np.flatnonzero(neg_bins == b)
        k = min(len(p_idx), len(n_idx))
        if k:
            keep_pos += rng.choice(p_idx, size=k, replace=False).tolist()
            keep_neg += rng.choice(n_idx, size=k, replace=False).tolist()
    half = min(n_pairs // 2, len(keep_pos))
    if half < 1:
        raise ValueError("no overlap-matched verse pairs; raise bin_width")
    sel = rng.choice(len(keep_pos), size=half, replace=False)  # same bins for both classes
    rows = [positives[keep_pos[k]] for k in sel] + [negatives[keep_neg[k]] for k in sel]
    labels = np.array([1] * half + [0] * half)
    perm = rng.permutation(len(rows))
    return [rows[k][0] for k in perm], [rows[k][1] for k in perm], labels[perm]
