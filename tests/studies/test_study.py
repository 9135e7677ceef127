"""ctk study: one objective change against its baseline in several domains, seeds paired, one
table whose differences and p-values are scipy's on the stored numbers; nothing runs twice and
nothing runs at all when a (domain, arm) recipe is invalid."""

import json
import math
from pathlib import Path

import pytest
import yaml
from scipy import stats as sps

from tests.sweeps.conftest import ROOT, ctk, runs_of  # noqa: F401 - the ctk fixture
from toolkit.studies.study_report import _verdict

TOY = ROOT / "recipes" / "toy"
FAST = {"budget.steps": 60, "budget.log_every": 30}
DP = [{"name": "distance_polarization", "weight": 0.1, "d_plus": 0.1, "d_minus": 0.5}]


def _write(folder: Path, study: dict) -> str:
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return str(path)


def _toy_study(**extra) -> dict:
    return {
        "name": "toy-dp",
        "seeds": [0, 1],
        "baseline": "cl",
        "arms": {"cl": {}, "dp": {"set": {"objective.regularizers": DP}}},
        "domains": {
            "three-bars": {
                "recipe": str(TOY / "lmcl_three_bars_cl.yaml"),
                "metrics": {"kmeans_accuracy": "max"},
                "set": FAST,
            },
            "nested-moons": {
                "recipe": str(TOY / "lmcl_nested_moons_cl.yaml"),
                "metrics": {"kmeans_accuracy": None},
                "set": FAST,
            },
        },
        **extra,
    }


@pytest.mark.slow
def test_two_arms_two_toy_domains_two_seeds_end_to_end_then_nothing(ctk):  # noqa: F811
    study = _write(ctk.folder, _toy_study())
    first = ctk("study", study, "--format", "json", "--quiet", timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "0 skipped (finished), 0 resumed, 8 launched" in first.stderr
    client = ctk.store()
    runs = runs_of(client, "study-toy-dp")
    parents = [r for r in runs if "ctk.sweep_parent" in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 8 and len(runs) == 9
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert all(c.info.status == "FINISHED" for c in children)

    # the table, against scipy on the numbers in the store
    table = json.loads(first.stdout)
    assert len(table["rows"]) == 2
    stored = {
        (c.data.tags["ctk.study_domain"], c.data.tags["ctk.study_arm"], int(c.data.params["seed"])): c.data.metrics[
            "kmeans_accuracy"
        ]
        for c in children
    }
    pvalues = []
    for row in table["rows"]:
        dp = [stored[(row["domain"], "dp", s)] for s in (0, 1)]
        cl = [stored[(row["domain"], "cl", s)] for s in (0, 1)]
        assert row["arm"] == "dp" and row["metric"] == "kmeans_accuracy" and row["direction"] == "max"
        assert row["baseline_mean"] == pytest.approx(sum(cl) / 2)
        assert row["diff"] == pytest.approx(sum(dp) / 2 - sum(cl) / 2)
        shifts = [a - b for a, b in zip(dp, cl)]
        if shifts[0] == shifts[1]:  # the same shift on both seeds: no t-test, no verdict
            assert row["p"] is None and row["verdict"].startswith("not tested")
            continue
        ref = sps.ttest_rel(dp, cl)
        assert row["p"] == pytest.approx(ref.pvalue)
        ci = ref.confidence_interval(0.95)
        assert (row["diff_low"], row["diff_high"]) == pytest.approx((ci.low, ci.high))
        pvalues.append((row, ref.pvalue))
    for row, p in pvalues:  # Holm over the tests of the study
        m = len(pvalues)
        rank = sorted(q for _, q in pvalues).index(p)
        expected = min(1.0, max((m - i) * q for i, q in enumerate(sorted(q for _, q in pvalues)) if i <= rank))
        assert row["p_holm"] == pytest.approx(expected)
    client.download_artifacts(parents[0].info.run_id, "study/table.md", str(ctk.folder))
    client.download_artifacts(parents[0].info.run_id, "study/forest.png", str(ctk.folder))
    assert "kmeans_accuracy" in (ctk.folder / "table.md").read_text()

    again = ctk.here("study", study, "--format", "json", "--quiet", "--plot", "forest.png")  # in this process
    assert again.returncode == 0, again.stderr[-3000:]
    assert "8 skipped (finished), 0 resumed, 0 launched" in again.stderr
    assert len(runs_of(ctk.store(), "study-toy-dp")) == 9
    assert json.loads(again.stdout)["rows"] == table["rows"]
    assert (ctk.folder / "forest.png").stat().st_size > 1000


def test_every_problem_of_a_study_is_listed_before_anything_runs(ctk, tmp_path):  # noqa: F811
    unknown = tmp_path / "unknown_domain.yaml"
    unknown.write_text((TOY / "lmcl_three_bars_cl.yaml").read_text().replace("domain: toy", "domain: sonar"))
    study = _toy_study(baseline="plain")
    study["arms"]["typo"] = {"set": {"objective.loss.temprature": 0.5}}
    study["domains"]["three-bars"]["metrics"] = {"kmeans_acc": "max"}
    study["domains"]["sonar"] = {"recipe": str(unknown), "metrics": {"x": "max"}}
    study["domains"]["missing"] = {"recipe": "nowhere.yaml", "metrics": {"x": "max"}}
    res = ctk("study", _write(ctk.folder, study))
    assert res.returncode == 2, res.stderr[-3000:]
    err = res.stderr
    assert "baseline: 'plain' is not an arm" in err
    assert "domains.three-bars.metrics.kmeans_acc" in err and "kmeans_accuracy" in err  # names what exists
    assert "temprature" in err and "arm 'typo' does not apply" in err
    assert "domains.sonar" in err and "sonar" in err
    assert "domains.missing.recipe: no such file" in err
    assert not (ctk.folder / "mlflow.db").exists()


def test_an_arm_that_does_not_apply_to_a_domain_is_refused_before_any_run(ctk):  # noqa: F811
    study = _toy_study()
    study["arms"]["kmeans"] = {"set": {"evaluation.protocol": "kmeans"}}
    study["domains"]["vision"] = {
        "recipe": str(ROOT / "recipes" / "vision" / "quickstart.yaml"),
        "metrics": {"linear_top1": "max"},
    }
    res = ctk("study", _write(ctk.folder, study))
    assert res.returncode == 2, res.stderr[-3000:]
    assert "domains.vision (arm 'kmeans' does not apply to this recipe)" in res.stderr
    assert "evaluation.protocol" in res.stderr
    assert "three-bars" not in res.stderr  # the toy domains take that arm
    assert not (ctk.folder / "mlflow.db").exists()


@pytest.mark.parametrize(
    "diff,direction,expected",
    [(2.0, "max", "helps"), (-2.0, "max", "hurts"), (-2.0, "min", "helps"), (2.0, "min", "hurts")],
)
def test_the_verdict_reads_the_metric_direction(diff, direction, expected):
    assert _verdict(diff, 0.01, direction, 0.05, 3) == expected
    assert _verdict(diff, 0.2, direction, 0.05, 3) == "no detectable difference at n=3"
    assert _verdict(diff, math.nan, direction, 0.05, 3).startswith("not tested")
    assert _verdict(None, None, direction, 0.05, 0) == "n/a"


@pytest.mark.parametrize("path", sorted((ROOT / "studies").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_studies_load_with_every_recipe_valid(path):
    """Each shipped study validates as `ctk study --dry-run` does: every (domain, arm) recipe
    loads, every metric of record is one its domain logs, the baseline is an arm."""
    from commands import load
    from domains import installed
    from toolkit.studies.study_file import load_study, study_points

    study = load_study(path, load, installed.get)
    assert study.spec.baseline in study.arms and len(study.arms) >= 2
    points = study_points(study, load)
    assert len(points) == len(study.recipes) * len(study.arms) * len(study.seeds)
    assert {d for _, d, _, _ in points} == set(yaml.safe_load(path.read_text())["domains"])
