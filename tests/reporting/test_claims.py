"""ctk reproduce's claims block and per-number verdicts, checked against plain references:
the claim verdicts against scipy.stats' paired t-test and a hand-written Holm adjustment on
the same numbers, the printed precision of a paper's number, and tables measured on another
dataset than the paper's."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from scipy import stats as sps

from toolkit import recipe as rc
from toolkit.studies import stats
from toolkit.studies.claims import parse_claims
from toolkit.studies.reproduce import (
    PaperTable,
    TableRow,
    claims_report,
    load_table,
    render_reproduction,
    reproduce_report,
)

SEEDS = [0, 1, 2, 3, 4]
# a > b by a clear margin; c vs b: a small, noisy gap; d < b clearly (so "d > b" fails)
VALUES = {
    "a": [0.90, 0.93, 0.91, 0.94, 0.92],
    "b": [0.80, 0.82, 0.79, 0.83, 0.81],
    "c": [0.81, 0.80, 0.80, 0.84, 0.80],
    "d": [0.60, 0.63, 0.61, 0.62, 0.64],
}


def _table(claims_raw, rows=("a", "b", "c", "d"), seeds=None, **extra) -> PaperTable:
    claims, problems = parse_claims(claims_raw, list(rows), ["acc"])
    assert not problems
    table = PaperTable(
        "t", "T", "paper", SEEDS, ["acc"], [TableRow(r, None, [], {}) for r in rows], None, claims=claims, **extra
    )
    for r in rows:
        table.measured[r] = {"acc": list(VALUES[r])}
        table.measured_seeds[r] = {"acc": list(seeds or SEEDS)}
    return table


def _reference_verdicts(pairs: list[tuple[str, str]], alpha: float = 0.05) -> list[str]:
    """ttest_rel per pair (a > b claimed), Holm written out from its definition."""
    p = [sps.ttest_rel(VALUES[a], VALUES[b]).pvalue for a, b in pairs]
    diffs = [np.mean(np.subtract(VALUES[a], VALUES[b])) for a, b in pairs]
    order = np.argsort(p)
    m, adjusted, running = len(p), [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    out = []
    for d, q in zip(diffs, adjusted):
        out.append("inconclusive" if q >= alpha else "holds" if d > 0 else "fails")
    return out


def test_claim_verdicts_match_scipy_paired_t_with_holm():
    raw = [
        {"id": "order", "text": "a > b > d", "metric": "acc", "chain": ["a", "b", "d"]},
        {"id": "small", "text": "c > b", "metric": "acc", "pairs": [["c", "b"]]},
        {"id": "wrong", "text": "d > b", "metric": "acc", "pairs": [["d", "b"]]},
    ]
    records = claims_report(_table(raw)).records
    pairs = [("a", "b"), ("b", "d"), ("c", "b"), ("d", "b")]
    assert [r["verdict"] for r in records] == _reference_verdicts(pairs)
    assert [r["verdict"] for r in records] == ["holds", "holds", "inconclusive", "fails"]
    for r, (a, b) in zip(records, pairs):
        ref = sps.ttest_rel(VALUES[a], VALUES[b])
        ci = ref.confidence_interval(0.95)
        assert r["p"] == pytest.approx(ref.pvalue)
        assert (r["ci_low"], r["ci_high"]) == pytest.approx((ci.low, ci.high))
        assert r["effect"] == pytest.approx(np.mean(VALUES[a]) - np.mean(VALUES[b]))
        assert r["test"] == "paired"
    assert {r["claim"]: r["claim_verdict"] for r in records} == {
        "order": "holds",
        "small": "inconclusive at n=5",
        "wrong": "fails",
    }


def test_claims_pair_by_seed_not_by_position():
    """The same numbers listed in another seed order are paired by seed."""
    table = _table([{"text": "a > b", "metric": "acc", "pairs": [["a", "b"]]}])
    order = [3, 0, 4, 1, 2]
    table.measured["a"]["acc"] = [VALUES["a"][s] for s in order]
    table.measured_seeds["a"]["acc"] = order
    (rec,) = claims_report(table).records
    assert rec["p"] == pytest.approx(sps.ttest_rel(VALUES["a"], VALUES["b"]).pvalue)


def test_a_sign_claim_is_a_one_sample_test_against_the_constant():
    table = _table([{"text": "b - 0.8 > 0", "row": "b", "chain": ["acc", 0.8], "relation": ">"}])
    (rec,) = claims_report(table).records
    assert rec["p"] == pytest.approx(sps.ttest_1samp(VALUES["b"], 0.8).pvalue)
    assert rec["comparison"] == "acc > 0.8"


def test_bad_claims_are_reported_with_their_path():
    _, problems = parse_claims(
        [{"text": "x", "metric": "acc", "chain": ["a", "nope"]}, {"text": "y", "chain": ["a", "b"], "pairs": []}],
        ["a", "b"],
        ["acc"],
    )
    assert problems[0][0] == "claims.0.0" and "nope" in problems[0][1]
    assert problems[1][0] == "claims.1"


@pytest.mark.parametrize(
    "printed, value, expected",
    [
        ("0.02041", 0.0204110, "contains"),  # Ring Table 5's true MI: equal to its printed digits
        ("0.02041", 0.0204160, "above"),  # 0.020416 rounds to 0.02042
        ("7.29e-5", 7.294e-5, "contains"),
        ("84", 84.4, "contains"),
        ("84.0", 84.4, "above"),
    ],
)
def test_a_value_equal_to_the_printed_number_reads_contains(printed, value, expected):
    """A constant measurement (std 0, the interval a point) against the paper's number as
    printed; also a single measurement (no interval)."""
    for values in ([value] * 5, [value]):
        s = stats.summarize(values)
        assert stats.verdict(s, float(printed), stats.printed_half_unit(printed)) == (
            expected if len(values) > 1 or expected == "contains" else "n<2: no interval"
        )


def test_table_yaml_keeps_the_printed_precision(tmp_path):
    (tmp_path / "r.yaml").write_text("name: r\n")
    path = tmp_path / "t.yaml"
    path.write_text(
        textwrap.dedent("""\
        name: t
        title: T
        metrics: [mi]
        rows:
          - {label: x, recipe: r.yaml, paper: &p {mi: 0.02041}}
          - {label: y, recipe: r.yaml, paper: *p}
        claims:
          - {text: "x > y", metric: mi, pairs: [[x, y]]}
        """)
    )
    table = load_table(path)
    assert [row.printed for row in table.rows] == [{"mi": "0.02041"}] * 2
    table.measured = {"x": {"mi": [0.020411] * 3}, "y": {"mi": [0.0204] * 3}}
    assert {r["row"]: r["verdict"] for r in reproduce_report(table).records} == {"x": "contains", "y": "below"}
    path.write_text(path.read_text().replace("[[x, y]]", "[[x, z]]"))
    with pytest.raises(rc.RecipeError, match="claims.0.0"):
        load_table(path)


def test_a_table_on_another_dataset_prints_no_per_number_verdict():
    raw = [{"id": "C1", "text": "a > b", "metric": "acc", "pairs": [["a", "b"]]}]
    table = _table(raw, dataset_differs="Measured on Fashion-MNIST, the paper on CIFAR-10.")
    for row in table.rows:
        row.paper["acc"] = 0.5  # far from every measured value: would read above
    records = reproduce_report(table).records
    assert all(r["verdict"] is None for r in records)
    text = render_reproduction(table, "table", 200)
    numbers = text.split("Claims of t")[0]
    assert "verdict" not in numbers.split("paper:")[0] and "above" not in numbers
    assert "no verdict per number: Measured on Fashion-MNIST" in numbers
    assert "C1: HOLDS: a > b" in text
    payload = json.loads(render_reproduction(table, "json"))
    assert [r["verdict"] for r in payload["rows"]] == [None] * 4
    assert payload["claims"][0]["verdict"] == "holds"
    # the same table on the paper's dataset keeps its verdicts
    table.dataset_differs = ""
    assert {r["verdict"] for r in reproduce_report(table).records} == {"above"}


def test_csv_holds_numbers_and_claims_with_a_kind_column():
    table = _table([{"text": "a > b", "metric": "acc", "pairs": [["a", "b"]]}])
    lines = render_reproduction(table, "csv").splitlines()
    assert lines[0].startswith("kind,row,metric,n,")
    assert [line.split(",")[0] for line in lines[1:]] == ["number"] * 4 + ["claim"]
