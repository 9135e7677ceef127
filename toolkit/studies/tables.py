"""Rendering a report in the four formats of ``ctk compare`` / ``ctk reproduce``.

A :class:`Report` holds plain records (one dict per row, raw numbers) and the text columns
that show them. ``csv`` and ``json`` write the raw records (numbers stay numbers, a missing
value is empty / null); ``table`` and ``markdown`` write the text columns. The terminal table
fits ``width``: too-wide headers are abbreviated (full names in a legend under the table);
if that is not enough the columns are wrapped into blocks that repeat the identifying ones.
"""

from __future__ import annotations

import csv
import io
import json
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("table", "markdown", "csv", "json")


@dataclass
class Column:
    header: str
    cell: Callable[[dict[str, Any]], str]
    short: str | None = None  # preferred abbreviation when the table must shrink


@dataclass
class Report:
    title: str
    fields: list[str]  # record keys, in csv/json order
    records: list[dict[str, Any]]
    columns: list[Column]  # the text view
    key_columns: int = 1  # leading columns repeated when the table wraps
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # json: beside title and notes (e.g. differs)


def render(report: Report, fmt: str = "table", width: int | None = None) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=report.fields, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for rec in report.records:
            writer.writerow({k: "" if _missing(rec.get(k)) else rec.get(k) for k in report.fields})
        return buf.getvalue().rstrip("\n")
    if fmt == "json":
        rows = [{k: None if _missing(rec.get(k)) else rec.get(k) for k in report.fields} for rec in report.records]
        return json.dumps({"title": report.title, "notes": report.notes, **report.meta, "rows": rows}, indent=2)
    cells = [[c.cell(rec) for c in report.columns] for rec in report.records]
    headers = [c.header for c in report.columns]
    if fmt == "markdown":
        out = [f"**{report.title}**", "", _md_row(headers), _md_row(["---"] * len(headers))] + [
            _md_row(r) for r in cells
        ]
        if report.notes:
            out += [""] + [f"{n}  " for n in report.notes]
        return "\n".join(out).rstrip()
    return text_table(report.title, headers, cells, report.columns, report.key_columns, report.notes, width)


def aligned(rows: list[Sequence[str]]) -> str:
    """Plain left-aligned columns (two spaces apart), the first row a header; for listings
    such as ``ctk runs`` and a sweep's summary."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def num(value: float | None, digits: int = 4) -> str:
    """A number to ``digits`` significant digits; '-' when missing."""
    return "-" if _missing(value) else f"{value:.{digits}g}"


def interval(low: float | None, high: float | None) -> str:
    """``[low, high]``, or why there is none (fewer than two values)."""
    return "n<2: no interval" if low is None or high is None else f"[{num(low)}, {num(high)}]"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def _widths(headers: list[str], rows: list[list[str]]) -> list[int]:
    return [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]


def _lines(headers: list[str], rows: list[list[str]], cols: list[int]) -> list[str]:
    sub_h = [headers[i] for i in cols]
    sub_r = [[r[i] for i in cols] for r in rows]
    widths = _widths(sub_h, sub_r)
    out = ["  ".join(h.ljust(w) for h, w in zip(sub_h, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in sub_r]
    return out


def _total(widths: list[int]) -> int:
    return sum(widths) + 2 * (len(widths) - 1)


def abbreviate(headers: list[str], limits: list[int], preferred: list[str | None], truncate: bool = False) -> list[str]:
    """Shorten each header longer than its limit (the width of its cells) to its preferred
    short name, else its last dotted component; ``truncate`` also cuts those to the limit
    (at least 4 characters, ending in '~'). Made unique with a number."""
    out: list[str] = []
    for h, limit, pref in zip(headers, limits, preferred):
        if len(h) <= limit:
            out.append(h)
            continue
        cand = pref or h.rsplit(".", 1)[-1]
        if truncate and len(cand) > max(limit, 4):
            cand = cand[: max(limit, 4) - 1] + "~"
        base, k = cand, 2
        while cand in out or (cand in headers and cand != h):
            cand = f"{base}{k}"
            k += 1
        out.append(cand)
    return out


def text_table(
    title: str,
    headers: list[str],
    rows: list[list[str]],
    columns: list[Column],
    key_columns: int,
    notes: list[str],
    width: int | None,
) -> str:
    """A plain-text table no wider than ``width`` (None: no limit)."""
    out = [title] if title else []
    legend: list[str] = []
    shown = list(headers)
    if width and _total(_widths(shown, rows)) > width:
        # short names first; cut ones only when that makes the table fit, else wrap the blocks
        limits = [max([0] + [len(r[i]) for r in rows]) for i in range(len(headers))]
        shown = abbreviate(headers, limits, [c.short for c in columns])
        cut = abbreviate(headers, limits, [c.short for c in columns], truncate=True)
        if _total(_widths(shown, rows)) > width >= _total(_widths(cut, rows)):
            shown = cut
    legend = [f"{s} = {h}" for s, h in zip(shown, headers) if s != h]
    widths = _widths(shown, rows)
    if not width or _total(widths) <= width:
        out += _lines(shown, rows, list(range(len(shown))))
    else:
        keys = list(range(min(key_columns, len(shown))))
        block: list[int] = []
        for i in range(len(keys), len(shown)):
            if block and _total([widths[j] for j in keys + block + [i]]) > width:
                out += _lines(shown, rows, keys + block) + [""]
                block = []
            block.append(i)
        out += _lines(shown, rows, keys + block)
    tail = (["columns: " + "; ".join(legend)] if legend else []) + notes
    if tail:
        out.append("")
    for line in tail:  # legend and notes wrap at the same width as the table
        out += textwrap.wrap(line, width, subsequent_indent="  ") if width else [line]
    return "\n".join(out)
