"""Paragraph and sentence splitting for contiguous-text corpora.

Quick-thought (Logeswaran & Lee, 2018, Sec. 3) treats the sentences next to a sentence as its
positives, so a split that cuts "Mr. Darcy" in two or glues two lines of dialogue together
creates false neighbours. The rules below are deliberately small and explicit (no trained
model, no network); they were written for novels and speeches:

* a boundary candidate is a run of ``.``, ``?``, ``!`` or ``…``, optionally followed by closing
  quotes or brackets, then whitespace;
* it is *not* a boundary when the next word starts in lower case (``"Is it?" said he.``,
  ``e.g. the``, ``Well... perhaps``), when the word before a ``.`` is a title or a fixed
  abbreviation (``Mr.``, ``Mrs.``, ``Dr.``, ``St.``, ``e.g.``, ``i.e.``, ``viz.``), when that word
  is a single capital letter (initials: ``J. R. Smith``), or when a numbering abbreviation is
  followed by a digit (``No. 5``, ``p. 12``);
* everything else is a boundary, including ``?"``/``!"`` followed by a capitalised word and an
  ellipsis followed by one.

Paragraphs (blocks separated by blank lines) are split first; a sentence never spans two.
"""

from __future__ import annotations

import re

__all__ = ["TITLES", "ABBREVIATIONS", "split_paragraphs", "split_sentences", "is_heading"]

# Words that are (almost) never sentence-final when followed by a period.
TITLES = frozenset(
    {
        "mr",
        "mrs",
        "ms",
        "messrs",
        "mme",
        "mlle",
        "dr",
        "drs",
        "st",
        "prof",
        "rev",
        "revd",
        "hon",
        "col",
        "gen",
        "capt",
        "cpt",
        "lt",
        "sgt",
        "maj",
        "adm",
        "gov",
        "sen",
        "rep",
        "pres",
        "supt",
        "fr",
        "sr",
        "mt",
        "ft",
        "esq",
    }
)
ABBREVIATIONS = frozenset(
    {
        "e.g",
        "i.e",
        "viz",
        "cf",
        "vs",
        "al",
        "approx",
        "dept",
        "est",
        "fig",
        "figs",
        "inc",
        "ltd",
        "co",
        "corp",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "a.m",
        "p.m",
        "ch",
        "vol",
        "vols",
        "ed",
        "eds",
        "op",
    }
)
# Abbreviations that introduce a number ("No. 5", "p. 12", "Art. 3").
NUMBERING = frozenset({"no", "nos", "p", "pp", "vol", "ch", "art", "sec", "fig", "op", "nr"})

_CLOSERS = "\"'”’)]»"
_OPENERS = "\"'“‘([«_"
_CANDIDATE = re.compile(r"(\.{2,}|…|[.?!]+)([" + re.escape(_CLOSERS) + r"]*)(\s+)")
_NUMBER = (
    r"(\d+|[ivxlcdm]+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"the (first|second|third|last)|first|second|third|fourth|fifth|sixth|last)"
)
# "CHAPTER XII", "Volume I", "CHAPTER 1. Loomings." (a keyword, a number, an optional short title)
_HEADING = re.compile(
    r"^(chapter|volume|book|part|letter|stave)\s+" + _NUMBER + r"\b\.?(\s*[-:.]?\s*[^.!?]{0,60}[.!?]?)?$", re.IGNORECASE
)
_ROMAN = re.compile(r"^[IVXLC]+\.?$")


def split_paragraphs(text: str) -> list[str]:
    """Blocks separated by one or more blank lines, inner line breaks joined by spaces."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    blocks = re.split(r"\n[ \t\r\f\v]*\n", text.replace("\r\n", "\n"))
    out = []
    for block in blocks:
        joined = " ".join(line.strip() for line in block.split("\n") if line.strip())
        if joined:
            out.append(joined)
    return out


def is_heading(paragraph: str) -> bool:
    """Chapter / volume headings and bare roman numerals ("CHAPTER XII", "VOLUME I", "IV.")."""
    p = paragraph.strip()
    return bool(_HEADING.match(p)) or bool(_ROMAN.match(p))


def _word_before(text: str, end: int) -> str:
    """The whitespace-delimited word that ends at ``end`` (the terminator's start), stripped of
    opening quotes and brackets."""
    start = end
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start:end].lstrip(_OPENERS)


def _next_word(text: str, start: int) -> str:
    """The next word after ``start``, past any opening quotes or brackets."""
    i = start
    while i < len(text) and text[i] in _OPENERS:
        i += 1
    j = i
    while j < len(text) and not text[j].isspace():
        j += 1
    return text[i:j]


def _is_boundary(text: str, match: re.Match[str]) -> bool:
    terminator = match.group(1)
    nxt = _next_word(text, match.end())
    if not nxt:
        return True
    first = nxt[0]
    if first.islower():
        return False  # continuation: '"Is it?" said he', 'e.g. the', 'Well... perhaps'
    if terminator != ".":
        return True
    word = _word_before(text, match.start())
    key = word.lower()
    if key in TITLES or key in ABBREVIATIONS:
        return False
    if len(word) == 1 and word.isupper():
        return False  # an initial: "J. R. Smith"
    if key in NUMBERING and first.isdigit():
        return False
    if "." in word and len(word) <= 6 and all(len(p) <= 2 for p in word.split(".")):
        return False  # dotted abbreviations followed by a capital: "U.S. Navy", "e.g. Paris"
    return True


def split_sentences(paragraph: str) -> list[str]:
    """Split one paragraph into sentences (see the module docstring for the rules).

    >>> split_sentences('"Is it?" said Mr. Bennet. "It is!" She laughed.')
    ['"Is it?" said Mr. Bennet.', '"It is!"', 'She laughed.']
    """
    if not isinstance(paragraph, str):
        raise ValueError(f"paragraph must be a str, got {type(paragraph).__name__}")
    text = " ".join(paragraph.split())
    sentences: list[str] = []
    start = 0
    for m in _CANDIDATE.finditer(text):
        if _is_boundary(text, m):
            piece = text[start : m.end(2)].strip()
            if piece:
                sentences.append(piece)
            start = m.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences
