"""The command line answers at once: the commands that need no tensors import no torch.

Each command runs as users run it, ``python cli.py ...`` in an empty folder, under ``-X importtime``,
whose report names every module the process imported; torch (a few seconds to import) must not
be among them. ``ctk runs`` there must not create a store either. bench/cli_startup.py times them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = str(ROOT / "cli.py")

# (arguments, exit status): the commands that need no tensors, and failures they report
TORCH_FREE = [
    (["--help"], 0),
    (["--version"], 0),
    (["list", "losses"], 0),
    (["list", "selectors"], 0),
    (["list", "regularizers"], 0),
    (["list", "selector-schedules"], 0),
    (["list", "lr-schedules"], 0),
    (["list", "recipes"], 0),
    (["list", "tables"], 0),
    (["runs"], 0),
    (["runs", "nope"], 1),
    (["compare", "--help"], 0),
    (["compare", "nope"], 1),
    (["reproduce", "--list"], 0),
    (["reproduce", "nope"], 2),
    (["ui", "--help"], 0),
    (["server", "--help"], 0),
    (["data", "list"], 0),
    (["run", "--help"], 0),
    (["sweep", "--help"], 0),
]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "CTK_DATA", "PYTHONPATH")}
    return {**env, "PYTHONPATH": str(ROOT)}


def imported(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime ARGS`` in ``cwd``: the process and the modules it imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300
    )
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    return proc, modules


def _torch(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m == "torch" or m.startswith("torch."))


def test_the_probe_sees_torch_when_it_is_imported(tmp_path):
    proc, modules = imported(["-c", "import torch"], tmp_path)
    assert proc.returncode == 0 and "torch" in modules


def test_importing_the_cli_imports_no_torch(tmp_path):
    probe = "import cli, sys; assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)[:5]"
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize(
    "module",
    [
        "toolkit.studies.comparison",
        "toolkit.evaluation.plots",
        "toolkit.studies.listing",
        "toolkit.tracking.servers",
        "toolkit.studies.ui_view",
        "domains.vision.catalogue",
        "domains.text.catalogue",
    ],
)
def test_what_compare_runs_ui_and_data_import_needs_no_torch(tmp_path, module):
    """The modules behind ctk compare (--plot included), runs, ui, server and data."""
    proc, modules = imported(["-c", f"import {module}"], tmp_path)
    assert proc.returncode == 0 and not _torch(modules), (module, _torch(modules)[:3])


@pytest.mark.parametrize("args,code", TORCH_FREE, ids=[" ".join(a) for a, _ in TORCH_FREE])
def test_commands_without_tensors_import_no_torch(tmp_path, args, code):
    proc, modules = imported([CLI, *args], tmp_path)
    errors = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("import time:"))
    assert proc.returncode == code, errors[-2000:]
    assert not _torch(modules), f"ctk {' '.join(args)} imported torch ({_torch(modules)[:3]}...)"
    assert code == 0 or errors.startswith("error: "), errors


@pytest.mark.parametrize(
    "args,code",
    [(["runs"], 0), (["compare", "x"], 1), (["ui", "--port", "1"], 1), (["export", "0123abcd"], 1)],
    ids=["runs", "compare", "ui", "export"],
)
def test_reading_commands_in_an_empty_folder_create_no_store(tmp_path, args, code):
    """They say where they looked and how to point them elsewhere."""
    proc, _ = imported([CLI, *args], tmp_path)
    said = proc.stdout + "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("import time:"))
    assert proc.returncode == code, said[-2000:]
    assert f"no tracking store at sqlite:///{tmp_path.resolve()}" in said and "--uri" in said, said[-2000:]
    assert "MLFLOW_TRACKING_URI" in said
    assert list(tmp_path.iterdir()) == []


def test_the_two_schedule_families_are_listed_apart(tmp_path):
    """``ctk list selector-schedules`` is the selectors' registry; ``ctk list lr-schedules`` the
    names the recipe's ``schedule.name`` accepts (read from its schema); ``schedules`` alone is
    not a choice."""
    import typing

    from toolkit.recipe.sections import LRScheduleSection
    from toolkit.samplers import SELECTOR_SCHEDULES

    proc, _ = imported([CLI, "list", "selector-schedules"], tmp_path)
    assert [line.split()[0] for line in proc.stdout.splitlines()] == SELECTOR_SCHEDULES.names()
    proc, _ = imported([CLI, "list", "lr-schedules"], tmp_path)
    accepted = typing.get_args(LRScheduleSection.model_fields["name"].annotation)
    assert [line.split()[0] for line in proc.stdout.splitlines()] == sorted(accepted)
    proc, _ = imported([CLI, "list", "schedules"], tmp_path)
    assert proc.returncode == 2 and "selector-schedules" in proc.stderr and "lr-schedules" in proc.stderr


def test_runs_listing_a_store_with_a_killed_run_imports_no_torch(tmp_path):
    """ctk runs reads each run's checkpoint folder (toolkit.checkpoint.find): no torch for that."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    eid = client.create_experiment("e")
    run = client.create_run(eid, run_name="killed", tags={"ctk.recipe": "recipes/x.yaml"})
    folder = tmp_path / "checkpoints" / run.info.run_id
    folder.mkdir(parents=True)
    (folder / "step-000000004.pt").write_bytes(b"not read by the listing")
    client.set_terminated(run.info.run_id, "KILLED")
    proc, modules = imported([CLI, "runs"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert run.info.run_id in proc.stdout and "step 4" in proc.stdout, proc.stdout
    assert f"--resume {run.info.run_id}" in proc.stdout
    assert not _torch(modules), _torch(modules)[:3]
