"""Comparisons group runs by what the user set, never by what a run measured or ran on; every
comparison says what else differs, marks the tests that difference can move, and --strict
refuses them; runs logged with the old param names still compare (issue 40)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats as sps

import cli
from tests.reporting.conftest import log_run
from toolkit.studies.comparison import collect, compare_report
from toolkit.studies.tables import render
from toolkit.studies.ui_view import VIEW_TAG, publish_view
from toolkit.tracking.store import client_for, experiment_id

RECIPE = {
    "objective.loss.name": "nt_xent",
    "objective.loss.temperature": 0.2,
    "budget.minutes": 2.6,
    "budget.epochs": 10,
    "precision": "auto",
    "data.dataset": "fashion-mnist",
}
ENV = {
    "env.cpu_capability": "AVX512",
    "env.cpu_bf16": "native",
    "env.torch": "2.14.1",
    "env.ctk": "0.1.0",
    "env.git_commit": "39f43ea",
    "measured.precision": "bf16",
    "measured.device": "cpu",
}


def _run(client, eid, seed, top1, **extra):
    return log_run(client, eid, {**RECIPE, "seed": seed, **ENV, **extra}, {"linear_top1": top1})


def _cli(*args):
    return CliRunner().invoke(cli.main, ["compare", *args], env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store for the module (each test its own experiment): creating one takes seconds."""
    folder = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.chdir(folder)
        yield uri


def test_two_seeds_differing_only_in_measured_values_are_one_group_of_two(store):
    client = client_for(store)
    eid = experiment_id(client, "seeds")
    # the same steps, different ms/step and chosen C: things a run found, not settings
    _run(
        client,
        eid,
        0,
        87.91,
        **{
            "measured.budget_steps_fixed": 2573,
            "measured.budget_ms_per_step": 55.54,
            "measured.evaluation.chosen.linear_c": 0.1,
        },
    )
    _run(
        client,
        eid,
        1,
        88.53,
        **{
            "measured.budget_steps_fixed": 2573,
            "measured.budget_ms_per_step": 43.12,
            "measured.evaluation.chosen.linear_c": 100.0,
        },
    )
    comp = collect("seeds")
    assert comp.by == [] and len(comp.groups) == 1 and len(comp.groups[0].runs) == 2
    [rec] = compare_report(comp).records
    low, high = sps.t.interval(0.95, 1, loc=np.mean([87.91, 88.53]), scale=sps.sem([87.91, 88.53]))
    assert rec["n"] == 2 and (rec["ci_low"], rec["ci_high"]) == pytest.approx((low, high))
    assert rec["confounded"] is None and rec["differs"] is None
    out = _cli("seeds")
    assert out.exit_code == 0, out.output
    assert "1 group; no setting differs (seed aside)" in out.output
    assert "what else differs: nothing" in out.output and "n<2" not in out.output


def test_a_group_whose_runs_trained_different_steps_is_marked_and_strict_refuses(store):
    client = client_for(store)
    eid = experiment_id(client, "steps")
    _run(client, eid, 0, 87.91, **{"measured.budget_steps_fixed": 2573})
    _run(client, eid, 1, 88.53, **{"measured.budget_steps_fixed": 3353, "env.git_commit": "8dcd8c2"})
    [rec] = compare_report(collect("steps")).records
    assert rec["n"] == 2 and rec["confounded"] == "steps 2,573-3,353; commit 39f43ea / 8dcd8c2"
    out = _cli("steps")
    assert out.exit_code == 0, out.output
    assert "confounded: steps 2,573-3,353" in out.output
    assert (
        "what else differs: steps 2,573-3,353 (within all runs); commit 39f43ea / 8dcd8c2 (within all runs)"
        in out.output.replace("\n  ", " ")
    )
    strict = _cli("steps", "--strict")
    assert strict.exit_code != 0
    assert "--strict" in strict.output and "steps 2,573-3,353" in strict.output and "linear_top1" not in strict.output


def test_a_test_between_groups_that_trained_differently_still_runs_and_is_marked(store):
    client = client_for(store)
    eid = experiment_id(client, "arms")
    for seed, (a, b) in enumerate([(87.0, 88.1), (87.4, 88.2), (86.9, 88.4)]):
        _run(client, eid, seed, a, **{"measured.budget_steps_fixed": 125})
        log_run(
            client,
            eid,
            {**RECIPE, "objective.loss.temperature": 0.5, "seed": seed, **ENV, "measured.budget_steps_fixed": 121},
            {"linear_top1": b},
        )
    report = compare_report(collect("arms"), baseline="temperature=0.2")
    tested = next(r for r in report.records if r["group"] == "temperature=0.5")
    assert tested["test"] == "paired" and tested["p"] is not None  # the test still runs
    assert tested["confounded"] == "steps 121-125"
    base = next(r for r in report.records if r["group"] == "temperature=0.2")
    assert base["confounded"] is None  # within the baseline every run trained 125 steps
    assert report.notes[0] == "what else differs: steps 121-125 (between groups)"
    data = json.loads(render(report, "json"))
    assert data["differs"] == report.notes[0]
    assert [r["confounded"] for r in data["rows"]] == [None, "steps 121-125"]
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    assert rows[1]["confounded"] == "steps 121-125" and rows[1]["differs"] == "steps 121-125"
    assert _cli("arms", "--baseline", "temperature=0.2", "--strict").exit_code != 0


def test_runs_logged_with_the_old_param_names_still_compare(store):
    """The issue's three quickstart runs as they were logged before the split: one group of
    three, whose steps and precision differ (and are said to)."""
    client = client_for(store)
    eid = experiment_id(client, "quickstart")
    old = {k: v for k, v in RECIPE.items() if k != "precision"}
    tags = {"ctk.version": "0.1.0", "mlflow.source.git.commit": "39f43ea"}
    for seed, steps, ms, c, precision, top1 in [
        (0, 2573, 55.54, 0.1, "bf16", 87.91),
        (1, 3353, 43.12, 100.0, "bf16", 88.53),
        (0, 1217, 122.27, 0.1, "fp32", 87.20),
    ]:
        log_run(
            client,
            eid,
            {
                **old,
                "seed": seed,
                "budget_steps_fixed": steps,
                "budget_ms_per_step": ms,
                "evaluation.chosen.linear_c": c,
                "precision": precision,
                "precision_requested": "auto",
            },
            {"linear_top1": top1},
            tags=tags,
        )
    comp = collect("quickstart")
    assert comp.by == [] and [len(g.runs) for g in comp.groups] == [3]
    [rec] = compare_report(comp).records
    assert rec["n"] == 3 and rec["ci_low"] is not None
    assert rec["confounded"] == "steps 1,217-3,353; precision bf16 / fp32"
    # grouping by a measurement is still possible when asked for, under its new name
    by_precision = collect("quickstart", by=["measured.precision"])
    assert sorted(len(g.runs) for g in by_precision.groups) == [1, 2]


def test_the_ui_view_shows_settings_and_seed_never_measurements(store):
    client = client_for(store)
    eid = experiment_id(client, "view")
    for seed in (0, 1):
        for t in (0.2, 0.5):
            log_run(
                client,
                eid,
                {
                    **RECIPE,
                    "objective.loss.temperature": t,
                    "seed": seed,
                    **ENV,
                    "measured.budget_steps_fixed": 100 + seed + int(10 * t),
                    "measured.evaluation.chosen.linear_c": seed,
                    "env.git_commit": f"c{seed}",
                },
                {"linear_top1": 80 + seed},
            )
    publish_view(client, "view")
    exp = client.get_experiment_by_name("view")
    columns = json.loads(exp.tags[VIEW_TAG])["selectedColumns"]
    assert columns == ["metrics.`linear_top1`", "params.`objective.loss.temperature`", "params.`seed`"]
    assert "swept: objective.loss.temperature (2 seeds)" in exp.tags["mlflow.note.content"]


def test_a_study_says_what_else_differs_per_domain_and_marks_confounded_verdicts():
    from types import SimpleNamespace

    from toolkit.studies.study_file import Study, StudyFile
    from toolkit.studies.study_report import Measured, study_report

    spec = StudyFile.model_validate(
        {
            "name": "s",
            "seeds": [0, 1, 2],
            "baseline": "cl",
            "arms": {"cl": {}, "dp": {}},
            "domains": {d: {"recipe": "r.yaml", "metrics": {"m": "max"}} for d in ("vision", "toy")},
        }
    )
    study = Study(spec, "s.yaml", {}, {}, {"vision": {"m": "max"}, "toy": {"m": "max"}}, [0, 1, 2])
    got = Measured()
    for domain, precision in (("vision", "bf16"), ("toy", "fp32")):  # domains differ: never compared
        for arm, steps, shift in (("cl", 400, 0.0), ("dp", 400 if domain == "toy" else 380, 1.0)):
            for seed in (0, 1, 2):
                params = {"measured.budget_steps_fixed": str(steps), "measured.precision": precision}
                got.metrics[(domain, arm, seed)] = {"m": 80.0 + shift + seed * (0.3 if arm == "dp" else 0.1)}
                got.runs[(domain, arm, seed)] = SimpleNamespace(data=SimpleNamespace(params=params, tags={}))
    report = study_report(study, got)
    by_domain = {r["domain"]: r for r in report.records}
    assert by_domain["vision"]["confounded"] == "steps 380-400"
    assert (
        by_domain["vision"]["verdict"].endswith("(confounded: steps 380-400)") and by_domain["vision"]["p"] is not None
    )
    assert by_domain["toy"]["confounded"] is None and "confounded" not in by_domain["toy"]["verdict"]
    assert report.notes[0] == "what else differs: vision: steps 380-400 (between groups)"  # not precision
