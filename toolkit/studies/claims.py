"""The claims a paper draws from a table, tested on the measured runs (``ctk reproduce``).

A paper table YAML lists them under ``claims``; each is an ordering the paper states, written
as a chain of *sides* with a relation::

    claims:
      - id: bound
        text: "CNCE <= NCE <= the true MI (Thm. 3.1)"
        section: "Ring Sec. 3, Thm. 3.1"
        row: "optimal critic, 100 sampled negatives"   # string sides name metrics of this row
        chain: [mi_true, mi_nce, mi_cnce_w10]
        relation: ">"                                 # each side above the next
      - id: peak
        metric: linear_top1                           # string sides name rows, for this metric
        pairs: [["tau=0.3", "tau=0.07"], ["tau=0.3", "tau=1.0"]]   # each pair: first > second

A side is a metric name (with ``row``), a row label (with ``metric``), a mapping ``{row,
metric}``, or a number (a constant such as 0). ``chain`` compares neighbours; ``pairs`` lists
the comparisons. A sign is a chain against a number: ``chain: [mi_cnce_w50, 0]``.

Each comparison ``a > b`` is tested on the per-seed values: effect = mean(a - b) with the
paired t-test over seeds and its interval (:func:`toolkit.studies.stats.difference`; Welch
when the seeds differ), and the p-values of every comparison of the table are Holm-adjusted
together (:func:`toolkit.studies.stats.holm`). A comparison *holds* when the effect has the
claimed sign and the adjusted p is below ``ALPHA``, *fails* when the effect has the other sign
and the adjusted p is below ``ALPHA``, and is *inconclusive* otherwise (at this n). A claim
holds when all its comparisons hold and fails when any fails.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.studies import stats

ALPHA = 0.05
RELATIONS = (">", "<")


@dataclass(frozen=True)
class Side:
    row: str | None = None
    metric: str | None = None
    value: float | None = None  # a constant

    def label(self, claim: Claim) -> str:
        if self.value is not None:
            return f"{self.value:g}"
        if claim.row is not None and self.row == claim.row:
            return str(self.metric)
        if claim.metric is not None and self.metric == claim.metric:
            return str(self.row)
        return f"{self.row}: {self.metric}"


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    section: str
    relation: str
    pairs: tuple[tuple[Side, Side], ...]
    row: str | None = None
    metric: str | None = None


def _side(
    raw: Any, claim: Mapping[str, Any], where: str, rows: Sequence[str], metrics: Sequence[str], problems: list
) -> Side | None:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return Side(value=float(raw))
    if isinstance(raw, Mapping):
        side = Side(row=str(raw.get("row")), metric=str(raw.get("metric")))
    elif isinstance(raw, str) and claim.get("row") is not None:
        side = Side(row=str(claim["row"]), metric=raw)
    elif isinstance(raw, str) and claim.get("metric") is not None:
        side = Side(row=raw, metric=str(claim["metric"]))
    else:
        problems.append(
            (
                where,
                f"expected a number, a mapping {{row, metric}}, or a name with the "
                f"claim's row or metric set, got {raw!r}",
            )
        )
        return None
    if side.row not in rows:
        problems.append((where, f"row {side.row!r} is not a row of the table"))
    if side.metric not in metrics:
        problems.append((where, f"metric {side.metric!r} is not one of the table's metrics"))
    return side


def parse_claims(raw: Any, rows: Sequence[str], metrics: Sequence[str]) -> tuple[list[Claim], list]:
    """``(claims, problems)`` from a table's ``claims`` list; problems as ``(path, message)``."""
    claims: list[Claim] = []
    problems: list[tuple[str, str]] = []
    if raw is None:
        return claims, problems
    if not isinstance(raw, list):
        return claims, [("claims", "expected a list of claims")]
    for i, c in enumerate(raw):
        where = f"claims.{i}"
        if not isinstance(c, Mapping) or "text" not in c:
            problems.append((where, "expected a mapping with text and chain or pairs"))
            continue
        relation = str(c.get("relation", ">"))
        if relation not in RELATIONS:
            problems.append((f"{where}.relation", f"expected one of {RELATIONS}, got {relation!r}"))
        if ("chain" in c) == ("pairs" in c):
            problems.append((where, "give exactly one of chain (neighbours compared) or pairs"))
            continue
        if "chain" in c:
            chain = c["chain"] if isinstance(c["chain"], list) else []
            if len(chain) < 2:
                problems.append((f"{where}.chain", "expected a list of at least two sides"))
                continue
            raw_pairs = list(zip(chain[:-1], chain[1:]))
        else:
            raw_pairs = c["pairs"] if isinstance(c["pairs"], list) else [None]
        pairs = []
        for j, pair in enumerate(raw_pairs):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                problems.append((f"{where}.pairs.{j}", f"expected two sides, got {pair!r}"))
                continue
            a, b = (_side(s, c, f"{where}.{j}", rows, metrics, problems) for s in pair)
            if a is not None and b is not None:
                pairs.append((a, b))
        claims.append(
            Claim(
                str(c.get("id", f"C{i + 1}")),
                str(c["text"]),
                str(c.get("section", "")),
                relation,
                tuple(pairs),
                c.get("row"),
                c.get("metric"),
            )
        )
    return claims, problems


def _values(side: Side, measured: Mapping, seeds: Mapping) -> tuple[list, list | None]:
    """The side's per-seed values and their seeds (a constant: none yet, see :func:`evaluate`)."""
    if side.value is not None:
        return [], None
    return (list(measured.get(side.row, {}).get(side.metric, [])), seeds.get(side.row, {}).get(side.metric))


def _comparison(claim: Claim, a: Side, b: Side) -> str:
    """``a > b`` in words: a shared row or metric is said once."""
    if a.value is None and b.value is None and a.row == b.row and claim.row is None:
        return f"{a.row}: {a.metric} {claim.relation} {b.metric}"
    if a.value is None and b.value is None and a.metric == b.metric and claim.metric is None:
        return f"{a.metric}: {a.row} {claim.relation} {b.row}"
    return f"{a.label(claim)} {claim.relation} {b.label(claim)}"


def comparison_verdict(diff: float, p_adjusted: float, relation: str, alpha: float = ALPHA) -> str:
    """'holds' / 'fails' / 'inconclusive' for ``a - b = diff`` claimed ``a relation b``."""
    if not math.isfinite(p_adjusted) or p_adjusted >= alpha or diff == 0:
        return "inconclusive"
    return "holds" if (diff > 0) == (relation == ">") else "fails"


def evaluate(claims: Sequence[Claim], measured: Mapping, seeds: Mapping, alpha: float = ALPHA) -> list[dict[str, Any]]:
    """One record per comparison: claim id, comparison, n, effect (mean of a - b), its
    interval, p, Holm-adjusted p over every comparison here, verdict; then the claim's verdict
    (``claim_verdict``, the same on each of its records)."""
    records: list[dict[str, Any]] = []
    for claim in claims:
        for a, b in claim.pairs:
            va, sa = _values(a, measured, seeds)
            vb, sb = _values(b, measured, seeds)
            if a.value is not None:  # a constant repeats for every seed of the other side
                va, sa = [a.value] * len(vb), sb
            if b.value is not None:
                vb, sb = [b.value] * len(va), sa
            d = stats.difference(va, vb, sa, sb)
            records.append(
                {
                    "claim": claim.id,
                    "comparison": _comparison(claim, a, b),
                    "n": d.n if d else len(stats.finite(va)),
                    "effect": d and d.diff,
                    "ci_low": d and d.low,
                    "ci_high": d and d.high,
                    "p": d and d.p,
                    "test": d.test if d else None,
                }
            )
    tested = [i for i, r in enumerate(records) if r["p"] is not None and math.isfinite(r["p"])]
    adjusted = stats.holm([records[i]["p"] for i in tested])
    by_claim = {c.id: c for c in claims}
    for r in records:
        r["p_holm"] = None
    for i, p in zip(tested, adjusted):
        records[i]["p_holm"] = p
    for r in records:
        claim = by_claim[r["claim"]]
        if r["effect"] is None:
            r["verdict"] = "not measured" if r["n"] == 0 else f"n={r['n']}: no test"
        else:
            p = r["p_holm"] if r["p_holm"] is not None else math.nan
            r["verdict"] = comparison_verdict(r["effect"], p, claim.relation, alpha)
    for claim in claims:
        mine = [r for r in records if r["claim"] == claim.id]
        verdicts = {r["verdict"] for r in mine}
        n = min((r["n"] for r in mine), default=0)
        overall = "fails" if "fails" in verdicts else "holds" if verdicts == {"holds"} else f"inconclusive at n={n}"
        for r in mine:
            r["claim_verdict"] = overall
    return records
