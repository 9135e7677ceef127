"""``ctk ui`` in a real browser: a tiny toy sweep, then headless Chromium loads the experiment's
runs table (ctk's columns view), a two-run comparison and a run's artifacts, checks what the
pages show and saves screenshots (to ``$CTK_SCREENS`` when set, else a temporary folder).

    CTK_SCREENS=/tmp/screens python -m pytest -m browser tests/browser

Chromium is the Debian package (``apt-get install chromium``); without it the test is skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import run_here
from toolkit.locking import file_lock
from toolkit.tracking.store import client_for

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary")]


def _chromium(url: str, screenshot: Path, height: int = 1000) -> str:
    """Load ``url`` once in headless Chromium (15 s of virtual time for the React app), save a
    screenshot of the page at ``screenshot`` and return its DOM as it was then."""
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                f"--window-size=1600,{height}",
                "--virtual-time-budget=15000",
                f"--screenshot={screenshot}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert screenshot.stat().st_size > 10_000, (url, out.stderr[-2000:])
    return out.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sweep_store(tmp_path_factory, worker_id: str) -> Path:
    """A 2 temperatures x 2 seeds toy sweep in a fresh store, made once per test session: under
    pytest-xdist the first worker to get here makes it (in the folder the workers share) while
    the other waits on the lock, then reads it."""
    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent
    work = shared / "ui-sweep"
    with file_lock(shared / "ui-sweep.lock"):
        if not (work / "made").exists():
            work.mkdir(exist_ok=True)
            made = run_here(
                work,
                {"MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}", "CTK_CHECKPOINTS": None},
                "sweep",
                str(ROOT / "recipes/toy/lmcl_three_bars_cl.yaml"),
                "--grid",
                "objective.loss.temperature=0.1,1.0",
                "--grid",
                "seed=0,1",
                "--set",
                "budget.steps=60",
                "--set",
                "tracking.log_model=true",
                "--experiment",
                "ui-demo",
                "--quiet",
            )  # in this process: the store is under test
            assert made.returncode == 0, made.stderr[-3000:]
            (work / "made").touch()
    return work


@pytest.fixture(scope="module")
def ui(tmp_path_factory, worker_id):
    """The toy sweep's store (:func:`_sweep_store`), served by a ``ctk ui`` of this module's own."""
    work = _sweep_store(tmp_path_factory, worker_id)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}", "OMP_NUM_THREADS": "1"}
    port = _free_port()
    logged = tmp_path_factory.mktemp("ui") / "ui.log"
    log = open(logged, "w")
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), "ui", "--port", str(port)],
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        # ready once ctk ui has printed its links, which it does only after the UI answers (the
        # last line it prints): polling /health here would race with that print
        deadline = time.monotonic() + 180
        while "stop it with Ctrl-C" not in logged.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ctk ui did not get ready on {base}: {logged.read_text()[-2000:]}")
            time.sleep(0.2)
        urllib.request.urlopen(base + "/health", timeout=10)  # and the UI does answer
        yield base, env["MLFLOW_TRACKING_URI"], logged.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its workers: our own session
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def screens(tmp_path_factory) -> Path:
    out = Path(os.environ.get("CTK_SCREENS") or tmp_path_factory.mktemp("screens"))
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.mark.slow
def test_runs_table_shows_metric_and_swept_param_columns(ui, screens):
    _, _, log = ui
    route = re.search(r"ui-demo: (http\S+)", log)
    assert route, log  # ctk ui prints the link to the columns view
    url = route.group(1)
    assert "workflowType=machine_learning" in url and "viewStateShareKey=" in url
    dom = _chromium(url, screens / "ui-runs-columns.png")
    (screens / "ui-runs-columns.html").write_text(dom)
    headers = re.findall(r'role="columnheader"[^>]*>(?:<[^>]+>)*([^<]+)', dom)
    text = re.sub(r"<[^>]+>", " ", dom)
    for name in ("kmeans_accuracy", "dp_margin_occupancy", "objective.loss.temperature", "seed"):
        assert name in text, (name, headers)
    assert "sweep-lmcl_three_bars_cl" in text  # the sweep's parent run; mlflow nests the points under it
    # the metric of record is the first metric column: the grid's own order is by name, which
    # would put dp_margin_occupancy first. The grid keeps its header cells in the DOM in their
    # original order and places them on screen by aria-colindex, so read that.
    cells = re.findall(r'<div[^>]*role="columnheader"[^>]*aria-colindex="(\d+)" col-id="metrics\.`([^`]+)`"', dom)
    on_screen = [name for _, name in sorted(cells, key=lambda c: int(c[0]))]
    assert on_screen and on_screen[0] == "kmeans_accuracy", on_screen
    assert set(on_screen) >= {"kmeans_accuracy", "dp_margin_occupancy", "kmeans_accuracy_euclidean"}
    # the first screen says something: the points are folded under the sweep's parent, whose row
    # carries the sweep's answer (the best group's mean of the metric of record), not a dash
    client = client_for(ui[1])
    exp = client.get_experiment_by_name("ui-demo")
    [parent] = [r for r in client.search_runs([exp.experiment_id]) if "ctk.sweep_parent" in r.data.tags]
    best = parent.data.metrics["kmeans_accuracy"]
    assert "best temperature=" in parent.data.tags["mlflow.note.content"]
    # the grid draws a row in pieces (pinned name column, scrolled metric columns), each a
    # role="row" element with the run id as its row-id
    pieces = re.findall(
        rf'<div[^>]*role="row"[^>]*row-id="{parent.info.run_id}"[^>]*>(.*?)(?=<div[^>]*role="row"|$)', dom, flags=re.S
    )
    row = "".join(pieces)
    assert "sweep-lmcl_three_bars_cl" in row, "the parent run is not a row of the first screen"
    cell = re.search(
        r'role="gridcell" col-id="metrics\.`kmeans_accuracy`".*?class="ag-cell-value">([^<]*)<', row, flags=re.S
    )
    shown = cell.group(1).strip() if cell else ""
    assert re.fullmatch(r"\d+(\.\d+)?", shown) and float(shown) == pytest.approx(best, abs=0.01), (shown, best)


@pytest.mark.slow
def test_compare_page_and_run_artifacts(ui, screens):
    base, uri, _ = ui
    client = client_for(uri)
    exp = client.get_experiment_by_name("ui-demo")
    runs = [
        r
        for r in client.search_runs([exp.experiment_id], order_by=["attributes.run_name"])
        if "mlflow.parentRunId" in r.data.tags
    ]  # the points, not the sweep's parent
    a, b = runs[0].info.run_id, runs[-1].info.run_id
    assert client.get_run(a).data.tags["mlflow.note.content"].startswith("sweep ui-demo: ")
    compare = (
        f"{base}/#/compare-runs?runs={json.dumps([a, b], separators=(',', ':'))}"
        f"&experiments={json.dumps([exp.experiment_id])}&workflowType=machine_learning"
    )
    dom = _chromium(compare, screens / "ui-compare-two-runs.png", height=2600)
    assert 'artifact-name="recipe.yaml"' in dom  # the common artifacts pane lists the recipe
    assert "kmeans_accuracy" in dom
    for run in ("nt_xent-t0.1-s0", "nt_xent-t1.0-s1"):  # names say what differs
        assert run in dom
    page = f"{base}/#/experiments/{exp.experiment_id}/runs/{a}/artifacts?workflowType=machine_learning"
    dom = _chromium(page, screens / "ui-run-artifacts.png")
    for name in ("recipe.yaml", "figures", "model"):
        assert f'artifact-name="{name}"' in dom, name
