"""A domain from another package, found through the ``ctk.domains`` entry point with no edit
to ``toolkit/`` or ``cli.py``: the example ``ctk-tabular`` installed into a temporary folder,
listed by ``ctk list domains`` with its origin, run by ``ctk run`` into an mlflow store; two
claims on one name and a plug-in that fails to import give clear errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from domains import installed
from tests.plugin.helpers import ROOT, fake_distribution

EXPECTED_METRICS = ("linear_top1", "linear_top1_random_init", "linear_top1_raw_features")


def _cli(*args: str):
    import cli

    result = CliRunner().invoke(cli.main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_core_knows_nothing_of_the_plugin():
    files = [
        ROOT / "cli.py",
        *(p for p in (ROOT / "toolkit").rglob("*") if p.is_file() and "__pycache__" not in p.parts),
    ]
    assert len(files) > 20
    named = [
        str(p.relative_to(ROOT))
        for p in files
        if re.search(r"tabular", p.read_text(encoding="utf-8", errors="ignore"), re.IGNORECASE)
    ]
    assert named == []
    assert "tabular" not in installed.BUILTIN


def test_install_ships_entry_point_and_recipes(installed_plugin):
    infos = list(installed_plugin.glob("ctk_tabular-*.dist-info"))
    assert len(infos) == 1
    text = (infos[0] / "entry_points.txt").read_text()
    assert re.search(r"^\[ctk\.domains\]\s*\ntabular = ctk_tabular:TabularDomain$", text, re.MULTILINE)
    recipes = installed_plugin / "ctk_tabular" / "recipes"
    assert len(list(recipes.glob("*.yaml"))) >= 3 and list((recipes / "tables").glob("*.yaml"))


def test_registry_and_cli_list_the_plugin_with_its_origin(plugin_on_path, tmp_path, monkeypatch):
    spec = installed.specs()["tabular"]
    assert (spec.origin, spec.target) == ("ctk-tabular 0.1.0", "ctk_tabular:TabularDomain")
    cls = installed.get("tabular")
    assert cls.__module__.startswith("ctk_tabular") and Path(cls.recipe_dirs[0]).is_dir()
    assert cls.recipe_dirs[0].startswith(str(plugin_on_path.resolve()))  # the installed copy, not the source
    broken = fake_distribution(
        tmp_path / "broken",
        "ctk-fake-broken",
        {"broken": "ctk_fake_broken:Domain"},
        module="ctk_fake_broken",
        module_source="raise ImportError('needs the package ctk-fake-extras')\n",
    )
    monkeypatch.syspath_prepend(str(broken))
    code, out = _cli("list", "domains")
    assert code == 0, out
    line = next(l for l in out.splitlines() if l.startswith("tabular"))
    assert "[ctk-tabular 0.1.0: ctk_tabular:TabularDomain]" in line and "SCARF" in line
    assert any(l.startswith("vision") and "built-in" in l for l in out.splitlines())
    line = next(l for l in out.splitlines() if l.startswith("broken"))
    assert "unavailable" in line and "ctk-fake-broken 0.0.1" in line
    assert "ImportError: needs the package ctk-fake-extras" in line
    code, out = _cli("reproduce", "--list")
    assert code == 0, out
    assert re.search(r"^tabular-scarf-probe .*\(9 rows x 2 seeds\)$", out, re.MULTILINE)


def test_broken_plugin_fails_at_the_domain_key(plugin_on_path, tmp_path, monkeypatch):
    broken = fake_distribution(
        tmp_path / "site",
        "ctk-fake-broken",
        {"broken": "ctk_fake_broken:Domain"},
        module="ctk_fake_broken",
        module_source="import ctk_fake_missing_dependency\n",
    )
    monkeypatch.syspath_prepend(str(broken))
    with pytest.raises(
        installed.DomainError,
        match=r"domain 'broken' \(ctk_fake_broken:Domain, "
        r"ctk-fake-broken 0.0.1\) failed to import: ModuleNotFoundError",
    ):
        installed.get("broken")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("domain: broken\nobjective: {loss: {name: nt_xent}}\nbudget: {steps: 1}\n")
    code, out = _cli("show", str(recipe))
    assert code == 2
    assert "domain: domain 'broken'" in out and "ctk_fake_missing_dependency" in out


@pytest.mark.parametrize(
    "claimed,first",
    [
        ("tabular", "ctk-tabular 0.1.0 (ctk_tabular:TabularDomain)"),
        ("vision", "built-in (domains.vision:VisionDomain)"),
    ],
)
def test_two_claims_on_one_name_are_an_error(plugin_on_path, tmp_path, monkeypatch, claimed, first):
    dup = fake_distribution(tmp_path / "dup", "ctk-fake-dup", {claimed: "ctk_fake_dup:Other"})
    monkeypatch.syspath_prepend(str(dup))
    with pytest.raises(installed.DomainError) as info:
        installed.specs()
    message = str(info.value)
    assert f"domain name {claimed!r} is claimed twice" in message
    assert first in message and "ctk-fake-dup 0.0.1 (ctk_fake_dup:Other)" in message
    code, out = _cli("list", "domains")
    assert code == 1 and "claimed twice" in out


@pytest.mark.slow
def test_ctk_run_logs_the_plugin_run_to_mlflow(installed_plugin, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "CTK_CHECKPOINTS", "PYTHONPATH")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(installed_plugin), str(ROOT)]),
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    recipe = installed_plugin / "ctk_tabular" / "recipes" / "scarf_nt_xent.yaml"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "cli.py"),
            "run",
            str(recipe),
            "--quiet",
            "--verbose",
            "--experiment",
            "plugin-e2e",
            "--set",
            "budget.steps=3",
            "--set",
            "encoder.hidden=64",
            "--set",
            "encoder.head_hidden=64",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed = proc.stdout.split("(", 1)[1].split(")", 1)[0]  # run ID (NAME) finished in ...
    assert "s3" in printed and "h64" in printed  # the name says what differs from the recipe file

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("plugin-e2e")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.info.run_name == printed
    assert run.data.tags["ctk.domain"] == "tabular" and run.data.tags["ctk.loss"] == "nt_xent"
    assert run.data.params["data.dataset"] == "breast_cancer"
    assert run.data.params["data.corruption_rate"] == "0.6" and run.data.params["encoder.hidden"] == "64"
    for name in ("alignment", "uniformity", "tolerance"):
        assert name in run.data.metrics
    for name in EXPECTED_METRICS:
        assert 0.0 <= run.data.metrics[name] <= 100.0
        assert f"{name}: " in proc.stdout
    assert run.data.metrics["linear_top1_raw_features"] > 85.0  # breast cancer is nearly linear
    # the domain's metric of record comes first, beside its baselines from the same run
    summary = proc.stdout.splitlines()[1:4]
    assert summary[0].split()[0] == "linear_top1" and summary[0].endswith("(metric of record)"), summary
    assert [line.split()[0] for line in summary[1:]] == ["linear_top1_random_init", "linear_top1_raw_features"]
    assert all("baseline; difference" in line for line in summary[1:]), summary
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.step for m in history] == [3]  # logged at the last step
    assert "recipe.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}
