"""ctk compare: intervals, tests and Holm's correction against scipy.stats computed directly
from the known numbers of the fixture; every --format parses back; groups of one say so."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats as sps

import cli
from tests.reporting.conftest import LOSS_KEY, STATS, log_run
from toolkit.studies import stats
from toolkit.studies.comparison import collect, compare_report
from toolkit.studies.tables import render
from toolkit.tracking.store import client_for, experiment_id


def _t_interval(x):
    x = np.asarray(x, dtype=float)
    return sps.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=x.std(ddof=1) / np.sqrt(len(x)))


def _holm_reference(p):
    """Holm (1979) as written: step down through the sorted p-values."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def _records(report, metric):
    return {r["group"].split("=")[1]: r for r in report.records if r["metric"] == metric}


def test_intervals_equal_scipy(stats_experiment):
    comp = collect("stats")
    assert comp.by == [LOSS_KEY]
    assert comp.notes and "1 run(s) not finished" in comp.notes[0]
    recs = _records(compare_report(comp), "linear_top1")
    for method, by_seed in STATS.items():
        x = list(by_seed.values())
        low, high = _t_interval(x)
        rec = recs[method]
        assert rec["n"] == 4
        assert rec["mean"] == pytest.approx(np.mean(x))
        assert rec["std"] == pytest.approx(np.std(x, ddof=1))
        assert (rec["ci_low"], rec["ci_high"]) == pytest.approx((low, high), rel=1e-12)


def test_baseline_paired_welch_and_holm(stats_experiment):
    report = compare_report(collect("stats"), baseline="nt_xent")
    base = STATS["nt_xent"]
    got_p, want_p = [], []
    for metric in ("linear_top1", "uniformity"):
        recs = _records(report, metric)
        assert recs["nt_xent"]["test"] == "baseline" and recs["nt_xent"]["p"] is None
        for method, by_seed in STATS.items():
            if method == "nt_xent":
                continue
            if metric == "linear_top1":
                a, b = list(by_seed.values()), list(base.values())
            else:  # the fixture's uniformity = -2 - top1 * seed / 10
                a = [-2.0 - v * s / 10 for s, v in by_seed.items()]
                b = [-2.0 - v * s / 10 for s, v in base.items()]
            rec = recs[method]
            if set(by_seed) == set(base):  # dcl: same seeds -> paired by seed
                ref = sps.ttest_rel(
                    [by_seed[s] if metric == "linear_top1" else -2.0 - by_seed[s] * s / 10 for s in sorted(base)],
                    [base[s] if metric == "linear_top1" else -2.0 - base[s] * s / 10 for s in sorted(base)],
                )
                assert rec["test"] == "paired"
            else:  # hcl: other seeds -> Welch
                ref = sps.ttest_ind(a, b, equal_var=False)
                assert rec["test"] == "welch"
            ci = ref.confidence_interval(0.95)
            assert rec["diff"] == pytest.approx(np.mean(a) - np.mean(b))
            assert rec["p"] == pytest.approx(ref.pvalue, rel=1e-12)
            assert (rec["diff_low"], rec["diff_high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
            got_p.append(rec["p_holm"])
            want_p.append(ref.pvalue)
    assert got_p == pytest.approx(_holm_reference(want_p), rel=1e-12)
    sig = [r["significant"] for r in report.records if r["p_holm"] is not None]
    assert sig == [p < 0.05 for p in _holm_reference(want_p)]
    assert any(sig) and not all(sig)  # the fixture has both outcomes


def test_holm_matches_reference():
    p = [0.01, 0.04, 0.03, 0.005, 0.5, 0.04]
    assert stats.holm(p) == pytest.approx(_holm_reference(p))
    assert stats.holm([]) == []


def test_paired_needs_the_same_seeds():
    # same values, seeds 0..3 vs 1..4: no pairing, so Welch
    d = stats.difference([1, 2, 3, 5], [0, 1, 3, 3], seeds=[0, 1, 2, 3], baseline_seeds=[1, 2, 3, 4])
    assert d.test == "welch"
    assert d.p == pytest.approx(sps.ttest_ind([1, 2, 3, 5], [0, 1, 3, 3], equal_var=False).pvalue)
    d = stats.difference([1, 2, 3, 5], [0, 1, 3, 3], seeds=[3, 2, 1, 0], baseline_seeds=[0, 1, 2, 3])
    assert d.test == "paired"  # paired by seed, not by position
    assert d.p == pytest.approx(sps.ttest_rel([5, 3, 2, 1], [0, 1, 3, 3]).pvalue)
    assert stats.difference([1.0], [0, 1]) is None


def test_group_of_one_prints_no_interval(store):
    client = client_for(store)
    eid = experiment_id(client, "single")
    for method, seeds in (("nt_xent", [0, 1, 2]), ("dcl", [0])):
        for s in seeds:
            log_run(client, eid, {LOSS_KEY: method, "seed": s}, {"linear_top1": 0.5 + s / 10})
    report = compare_report(collect("single"), baseline="nt_xent")
    one = _records(report, "linear_top1")["dcl"]
    assert one["n"] == 1 and one["ci_low"] is None and one["std"] is None and one["p"] is None
    text = render(report, "table")
    line = next(ln for ln in text.splitlines() if ln.startswith("dcl"))
    assert "n<2: no interval" in line and "[" not in line
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    dcl = next(r for r in rows if r[LOSS_KEY] == "dcl")
    assert dcl["ci_low"] == dcl["ci_high"] == dcl["p"] == ""
    data = json.loads(render(report, "json"))
    dcl = next(r for r in data["rows"] if r[LOSS_KEY] == "dcl")
    assert dcl["ci_low"] is None and dcl["ci_high"] is None and dcl["n"] == 1


@pytest.mark.parametrize("fmt", ["csv", "json", "markdown", "table"])
def test_every_format_parses_back(stats_experiment, fmt):
    result = CliRunner().invoke(
        cli.main, ["compare", "stats", "--baseline", "loss=nt_xent", "--format", fmt], env={"COLUMNS": "72"}
    )
    assert result.exit_code == 0, result.output
    report = compare_report(collect("stats"), baseline="nt_xent")
    out = result.stdout
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        assert len(rows) == len(report.records) == 6
        for row, rec in zip(rows, report.records):
            assert row["metric"] == rec["metric"] and int(row["n"]) == rec["n"]
            assert float(row["ci_low"]) == pytest.approx(rec["ci_low"], rel=1e-12)
            assert row["p"] == ("" if rec["p"] is None else row["p"])
            if rec["p"] is not None:
                assert float(row["p_holm"]) == pytest.approx(rec["p_holm"], rel=1e-12)
    elif fmt == "json":
        data = json.loads(out)
        assert [r["ci_high"] for r in data["rows"]] == pytest.approx([r["ci_high"] for r in report.records])
        assert [r["significant"] for r in data["rows"]] == [r["significant"] for r in report.records]
    elif fmt == "markdown":
        lines = [ln for ln in out.splitlines() if ln.startswith("|")]
        cells = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]
        assert len(cells) == 2 + 6 and len({len(c) for c in cells}) == 1
        assert cells[0][:2] == [LOSS_KEY, "metric"] and set(cells[1]) == {"---"}
    else:  # the terminal table fits the width; abbreviated headers are in the legend
        assert max(len(ln) for ln in out.splitlines()) <= 72
        assert "columns: " in out and f"= {LOSS_KEY}" in out


def test_by_and_baseline_errors_name_the_choices(stats_experiment):
    with pytest.raises(ValueError, match="--by 'nope'.*objective.loss.name"):
        collect("stats", by=["nope"])
    with pytest.raises(ValueError, match="--baseline 'x'.*'loss=dcl'"):
        compare_report(collect("stats"), baseline="x")
    with pytest.raises(ValueError, match="no experiment 'missing'"):
        collect("missing")
