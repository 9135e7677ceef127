"""A small reader for R lazy-load databases (the ``data/Rdata.rdx`` + ``Rdata.rdb`` pair that an
installed R data package ships), so the provider can take text out of Debian's R packages
without R and without a third-party parser.

Format (R Internals, section 1.8 "Serialization formats", and ``makeLazyLoadDB`` in R's
``src/library/tools/R/makeLazyLoading.R``):

- ``.rdx`` is a gzip-compressed serialized R list ``list(variables=, references=, compressed=)``;
  ``variables`` maps each object name to ``c(offset, length)`` inside the ``.rdb`` file.
- Each ``.rdb`` entry is a 4-byte big-endian length of the uncompressed stream followed by the
  compressed serialized object: zlib when ``compressed`` is ``TRUE``; for ``2`` (bzip2) and ``3``
  (xz) a one-byte type (``'2'``/``'Z'``, or ``'0'`` for stored) comes before the data.
- A serialized object is the XDR stream ``"X\\n"``, format version (2 or 3), writer and minimum
  reader R versions, for version 3 the native encoding, then items. Each item starts with a
  32-bit flags word: bits 0-7 the SEXP type, bit 8 "is object", bit 9 "has attributes",
  bit 10 "has tag", bits 12-27 the ``levels`` (for CHARSXP: the encoding).

Only the subset that data packages use is read: character, integer, logical and double vectors,
generic vectors (lists), pairlists, symbols and the reference table. A vector with a ``names``
attribute is returned as a ``dict``; other attributes are dropped. Anything else raises
``ValueError`` naming the type, so an unexpected file fails loudly instead of decoding garbage.
"""
from __future__ import annotations

import bz2
import gzip
import lzma
import math
import struct
import zlib
from pathlib import Path
from typing import Any

__all__ = ["read_lazyload_db", "unserialize"]

# SEXP type codes (R Internals, section 1.1.1) and the serialization-only pseudo types.
_NILSXP, _SYMSXP, _LISTSXP, _CHARSXP, _LGLSXP = 0, 1, 2, 9, 10
_INTSXP, _REALSXP, _STRSXP, _VECSXP = 13, 14, 16, 19
_REFSXP, _NILVALUE_SXP = 255, 254
_ENVIRONMENT_PSEUDO = {253: "R_GlobalEnv", 242: "R_EmptyEnv", 241: "R_BaseEnv",
                       251: "R_MissingArg", 252: "R_UnboundValue", 250: "R_BaseNamespace"}
_NA_INTEGER = -(2 ** 31)
_CHARSXP_LATIN1 = 1 << 2
_CHARSXP_BYTES = 1 << 1


class _Reader:
    """Decoder for one XDR serialization stream."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.refs: list[Any] = []

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"R stream truncated: wanted {n} bytes at offset {self.pos}, "
                             f"stream has {len(self.data)}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def header(self) -> None:
        magic = self._take(2)
        if magic != b"X\n":
            raise ValueError(f"R stream must be XDR format (starting with b'X\\n'), got {magic!r}")
        version = self.int()
        if version not in (2, 3):
            raise ValueError(f"R serialization version must be 2 or 3, got {version}")
        self.int(), self.int()          # writer R version, minimum reader R version
        if version == 3:
            self._take(self.int())       # native encoding name, e.g. b"UTF-8"

    def item(self) -> Any:
        flags = self.int()
        sexp_type = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        levels = flags >> 12
        if sexp_type == _NILVALUE_SXP:
            return None
        if sexp_type in _ENVIRONMENT_PSEUDO:
            return _ENVIRONMENT_PSEUDO[sexp_type]
        if sexp_type == _REFSXP:
            index = flags >> 8 or self.int()
            return self.refs[index - 1]
        if sexp_type == _SYMSXP:
            name = self.item()
            self.refs.append(name)
            return name
        if sexp_type == _LISTSXP:
            return self._pairlist(has_attr, has_tag)
        if sexp_type == _CHARSXP:
            return self._charsxp(levels)
        if sexp_type in (_STRSXP, _VECSXP):
            values = [self.item() for _ in range(self._length())]
        elif sexp_type in (_INTSXP, _LGLSXP):
            n = self._length()
            raw = struct.unpack(f">{n}i", self._take(4 * n))
            na = None
            values = [na if v == _NA_INTEGER else (bool(v) if sexp_type == _LGLSXP else v)
                      for v in raw]
        elif sexp_type == _REALSXP:
            n = self._length()
            values = [None if math.isnan(v) else v for v in struct.unpack(f">{n}d", self._take(8 * n))]
        else:
            raise ValueError(f"R object of SEXP type {sexp_type} is not supported by this reader "
                             "(expected vectors, lists, pairlists or symbols)")
        attributes = self.item() if has_attr else {}
        names = attributes.get("names")
        if isinstance(names, list) and len(names) == len(values):
            return dict(zip(names, values))
        return values

    def _length(self) -> int:
        n = self.int()
        if n == -1:                      # long vector: two more words give the length
            upper, lower = self.int(), self.int()
            n = (upper << 32) + lower
        if n < 0:
            raise ValueError(f"R vector length must be >= 0, got {n}")
        return n

    def _charsxp(self, levels: int) -> str | None:
        n = self.int()
        if n == -1:
            return None                  # NA_character_
        raw = self._take(n)
        if levels & _CHARSXP_LATIN1:
            return raw.decode("latin-1")
        if levels & _CHARSXP_BYTES:
            return raw.decode("latin-1")
        return raw.decode("utf-8")

    def _pairlist(self, has_attr: bool, has_tag: bool) -> dict[str, Any]:
        """A pairlist (attribute lists, argument lists) as an ordered ``{tag: value}`` dict."""
        out: dict[str, Any] = {}
        while True:
            if has_attr:
                self.item()              # attributes of the pairlist cell itself: not needed
            tag = self.item() if has_tag else f"[[{len(out) + 1}]]"
            out[str(tag)] = self.item()
            flags = self.int()
            sexp_type = flags & 0xFF
            if sexp_type == _NILVALUE_SXP:
                return out
            if sexp_type != _LISTSXP:
                raise ValueError(f"R pairlist must end in NULL, found SEXP type {sexp_type}")
            has_attr = bool(flags & (1 << 9))
            has_tag = bool(flags & (1 << 10))


def unserialize(data: bytes) -> Any:
    """Decode one R serialization stream (XDR format, version 2 or 3) into Python values."""
    reader = _Reader(data)
    reader.header()
    return reader.item()


def _decompress_entry(blob: bytes, compressed: Any) -> bytes:
    expected = struct.unpack(">I", blob[:4])[0]
    kind = compressed[0] if isinstance(compressed, list) else compressed
    if kind is True or kind == 1:
        data = zlib.decompress(blob[4:])
    elif kind in (2, 3):
        tag, payload = blob[4:5], blob[5:]
        if tag == b"0":
            data = payload
        elif tag == b"2":
            data = bz2.decompress(payload)
        elif tag == b"Z":
            data = lzma.decompress(payload)
        else:
            raise ValueError(f"R lazy-load entry compression tag must be b'0', b'2' or b'Z', got {tag!r}")
    elif kind is False or kind == 0:
        data = blob[4:]
    else:
        raise ValueError(f"R lazy-load 'compressed' must be TRUE, FALSE, 2 or 3, got {kind!r}")
    if len(data) != expected:
        raise ValueError(f"R lazy-load entry decompressed to {len(data)} bytes, header says {expected}")
    return data


def read_lazyload_db(rdx: str | Path) -> dict[str, Any]:
    """All variables of an R lazy-load database: ``{name: value}`` from ``X.rdx`` and ``X.rdb``.

    ``rdx`` is the path of the ``.rdx`` index; the ``.rdb`` file must sit beside it.
    """
    rdx = Path(rdx)
    if rdx.suffix != ".rdx":
        raise ValueError(f"rdx must be the path of an R lazy-load index ending in .rdx, got {str(rdx)!r}")
    index = unserialize(gzip.decompress(rdx.read_bytes()))
    if not isinstance(index, dict) or "variables" not in index:
        raise ValueError(f"{rdx} is not an R lazy-load index (no 'variables' entry)")
    blob = rdx.with_suffix(".rdb").read_bytes()
    out: dict[str, Any] = {}
    for name, (offset, length) in index["variables"].items():
        entry = _decompress_entry(blob[offset:offset + length], index.get("compressed", True))
        out[name] = unserialize(entry)
    return out
