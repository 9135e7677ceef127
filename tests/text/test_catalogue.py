"""The R lazy-load reader behind the ``austen`` and ``mobydick`` builders, on a database written
here byte by byte from the format (R Internals 1.8, ``makeLazyLoadDB``), and the text
catalogue on the domain's face."""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest

from domains.text.catalogue import CATALOGUE, DATASETS, read_lazyload_db
from toolkit.data import FetchError


def _header() -> bytes:
    # "X\n", format version 3, writer R 4.2.1, min reader R 3.5.0, native encoding "UTF-8"
    return b"X\n" + struct.pack(">iii", 3, 0x040201, 0x030500) + struct.pack(">i", 5) + b"UTF-8"


def _charsxp(text: str, latin1: bool = False) -> bytes:
    levels = 1 << 2 if latin1 else 1 << 3  # LATIN1 / UTF8 flag
    raw = text.encode("latin-1" if latin1 else "utf-8")
    return struct.pack(">ii", 9 | (levels << 12), len(raw)) + raw


def _strsxp(items: list[tuple[str, bool]]) -> bytes:
    return struct.pack(">ii", 16, len(items)) + b"".join(_charsxp(t, l) for t, l in items)


def _named_list(entries: list[tuple[str, bytes]]) -> bytes:
    """VECSXP with a ``names`` attribute: flags 19 | has-attributes (bit 9)."""
    body = struct.pack(">ii", 19 | (1 << 9), len(entries)) + b"".join(v for _, v in entries)
    # attribute pairlist: LISTSXP (2) with a tag (bit 10): SYMSXP "names" -> STRSXP, then NILVALUE
    body += struct.pack(">ii", 2 | (1 << 10), 1) + _charsxp("names")
    return body + _strsxp([(k, False) for k, _ in entries]) + struct.pack(">i", 254)


def _database(tmp_path, objects: dict[str, list[tuple[str, bool]]], compressed: int = 1):
    rdb, offsets = b"", []
    for items in objects.values():
        stream = _header() + _strsxp(items)
        entry = struct.pack(">I", len(stream)) + zlib.compress(stream)
        offsets.append((len(rdb), len(entry)))
        rdb += entry
    variables = [
        (name, struct.pack(">ii", 13, 2) + struct.pack(">2i", *where)) for name, where in zip(objects, offsets)
    ]
    index = _named_list(
        [
            ("variables", _named_list(variables)),
            ("references", struct.pack(">ii", 19, 0)),
            ("compressed", struct.pack(">iii", 10, 1, compressed)),
        ]
    )
    (tmp_path / "Rdata.rdb").write_bytes(rdb)
    (tmp_path / "Rdata.rdx").write_bytes(gzip.compress(_header() + index))
    return tmp_path / "Rdata.rdx"


def test_lazyload_database_reads_every_object(tmp_path):
    objects = {"emma": [("EMMA", False), ("", False), ("Émma Woodhouse, handsome,", False)], "cafe": [("café", True)]}
    got = read_lazyload_db(_database(tmp_path, objects))
    assert list(got) == ["emma", "cafe"]
    assert got["emma"].tolist() == ["EMMA", "", "Émma Woodhouse, handsome,"]
    assert got["cafe"].tolist() == ["café"]


def test_lazyload_database_refuses_other_compressions(tmp_path):
    with pytest.raises(FetchError, match="compression .* expected TRUE"):
        read_lazyload_db(_database(tmp_path, {"x": [("a", False)]}, compressed=0))


def test_the_text_domain_declares_its_catalogue():
    from domains import installed

    names = {d.name for d in DATASETS}
    assert names == {"austen", "mobydick", "sotu", "brown", "rotten-tomatoes", "vader-groundtruth", "trec", "bibles"}
    assert installed.specs()["text"].catalogue() is CATALOGUE and CATALOGUE.datasets == DATASETS
    assert names <= set(installed.catalogue().names())
