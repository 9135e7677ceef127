"""An offline stand-in for MSRP (paraphrase identification): King James vs World English
Bible verse pairs, with negatives matched to the positives' word overlap.

Two human translations of the same verse are paraphrases (positives). DATA.md measured that
with naive negatives (another verse of the chapter) word overlap alone scores ~97%, so such a
task ranks nothing. Here, for each verse ``i`` of a chapter, the negative pairs KJV_i with the
WEB verse ``j != i`` of the same chapter whose overlap with KJV_i is closest to the positive's
overlap; a pair is kept only when the two overlaps differ by at most ``tolerance``, so the
positive and negative overlap distributions match and a classifier must read more than
shared words. ``n_pairs`` pairs (half positive) are then drawn with a seed.

Verses are read with ``pysword`` from the SWORD modules of ``toolkit.data.locate("bibles")``;
the OSIS markup is stripped (footnotes removed, word tags unwrapped).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np

__all__ = ["clean_osis", "word_overlap", "read_parallel_verses", "build_msrp_standin"]

_NOTE = re.compile(r"<note\b.*?</note>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def clean_osis(raw: str) -> str:
    """Plain text of one OSIS verse: footnotes and titles dropped, tags removed."""
    text = _NOTE.sub(" ", raw)
    text = re.sub(r"<title\b.*?</title>", " ", text, flags=re.DOTALL)
    text = _TAG.sub("", text)
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r"\s+([,.;:!?])", r"\1", text)


def _words(sentence: str) -> set[str]:
    return set(_WORD.findall(sentence.lower().replace("’", "'")))


def word_overlap(a: str, b: str) -> float:
    """Jaccard overlap of the two sentences' lower-cased word sets (0 when both are empty)."""
    wa, wb = _words(a), _words(b)
    union = wa | wb
    return len(wa & wb) / len(union) if union else 0.0


def read_parallel_verses(folder: str | Path, first: str = "engKJV2006eb",
                         second: str = "engWEB2015eb") -> list[list[tuple[str, str]]]:
    """Chapters of aligned verse pairs ``(first, second)``; verses empty in either are skipped."""
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
    for book in structure.get("ot", []) + structure.get("nt", []):
        for c in range(1, book.num_chapters + 1):
            va = list(a.get_iter(books=[book.osis_name], chapters=[c], clean=False))
            vb = list(b.get_iter(books=[book.osis_name], chapters=[c], clean=False))
            pairs = [(clean_osis(x), clean_osis(y)) for x, y in zip(va, vb)]
            pairs = [(x, y) for x, y in pairs if x and y]
            if len(pairs) >= 2:
                chapters.append(pairs)
    return chapters


def build_msrp_standin(chapters: list[list[tuple[str, str]]], n_pairs: int = 4000,
                       bin_width: float = 0.02, seed: int = 0
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
        seconds = [_words(y) for _, y in pairs]
        for i, (x, y) in enumerate(pairs):
            wx = _words(x)
            overlaps = np.array([len(wx & s) / max(len(wx | s), 1) for s in seconds])
            positives.append((x, y, float(overlaps[i])))
            overlaps[i] = -1.0
            j = int(np.argmax(overlaps))
            negatives.append((x, pairs[j][1], float(overlaps[j])))
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
