"""ctk server: a sweep logs every run and artifact through HTTP; PostgreSQL as the backend."""

import collections
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import urllib.request

import pytest

from tests.sweeps.conftest import TOY, free_port, runs_of, wait_for

FAST = ["--set", "budget.steps=30", "--set", "budget.log_every=10", "--quiet"]


class Served:
    """A running ``ctk server`` whose output is read to the end in threads, the last lines kept:
    a pipe that nobody reads fills up (64 KiB), and the server's workers, writing their request
    log into it, then block on the write and stop answering (what tests/sweeps/test_two_nodes.py
    found in the full suite)."""

    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc, self.port = proc, port
        self.tails: dict[str, collections.deque] = {}
        self.threads: list[threading.Thread] = []

    def drain(self, name: str) -> None:
        tail = self.tails[name] = collections.deque(maxlen=200)
        thread = threading.Thread(target=tail.extend, args=(getattr(self.proc, name),), daemon=True)
        thread.start()
        self.threads.append(thread)

    def output(self) -> str:
        return "".join(line for tail in self.tails.values() for line in tail)[-3000:]


def _serve(ctk, store: str, artifacts: str) -> Served:
    port = free_port()
    served = Served(
        ctk.popen("server", "--port", str(port), "--backend-store-uri", store, "--artifacts", artifacts), port
    )
    served.drain("stderr")  # from the start: the server logs there before its ready line too
    line = wait_for(
        lambda: next((ln for ln in iter(served.proc.stdout.readline, "") if "MLFLOW_TRACKING_URI" in ln), None),
        timeout=90,
    )
    served.drain("stdout")  # the rest of it, past the ready line
    assert line.strip() == f"workers: export MLFLOW_TRACKING_URI=http://127.0.0.1:{port}"
    return served


def _sweep_through(ctk, port: int, experiment: str, seeds: str):
    ctk.env["MLFLOW_TRACKING_URI"] = f"http://127.0.0.1:{port}"
    res = ctk.here("sweep", TOY, "--grid", f"seed={seeds}", *FAST, "--experiment", experiment)  # in this process
    assert res.returncode == 0, res.stderr[-3000:]
    return ctk.store()


def _stopped(served: Served, timeout: float = 30) -> None:
    """Ctrl-C the server and wait for it to end (its output read by the drain threads, so no
    communicate() here); a server still running then is killed and the test fails with its
    last output."""
    proc = served.proc
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(
            f"ctk server still running {timeout} s after SIGINT; killed it:\n{served.output()}"
        ) from None
    for thread in served.threads:
        thread.join(timeout=10)
    assert proc.returncode == 0, served.output()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{served.port}/health", timeout=2)


@pytest.mark.slow
def test_sweep_against_ctk_server_logs_runs_and_artifacts_over_http(ctk, tmp_path):
    artifacts = tmp_path / "served"
    served = _serve(ctk, f"sqlite:///{tmp_path / 'server.db'}", str(artifacts))
    try:
        client = _sweep_through(ctk, served.port, "served", "0")
        runs = runs_of(client, "served")
        assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
        for run in runs:
            assert run.info.artifact_uri.startswith("mlflow-artifacts:"), run.info.artifact_uri
            names = {a.path for a in client.list_artifacts(run.info.run_id)}
            assert names & {"recipe.yaml", "sweep"}, names
        stored = {p.name for p in artifacts.rglob("*") if p.is_file()}
        assert {"recipe.yaml", "summary.txt", "grid.yaml"} <= stored  # written by the server, under --artifacts
        assert not (ctk.folder / "mlflow.db").exists()  # nothing went to a local store
    finally:
        _stopped(served)


def _pg_bin(name):
    found = shutil.which(name)
    if found:
        return found
    for version in ("17", "16", "15", "14"):
        path = f"/usr/lib/postgresql/{version}/bin/{name}"
        if os.path.exists(path):
            return path
    return None


@pytest.mark.skipif(not (_pg_bin("initdb") and _pg_bin("pg_ctl")), reason="PostgreSQL binaries not installed")
@pytest.mark.slow
def test_server_on_postgresql(ctk):
    pytest.importorskip("psycopg")
    folder = tempfile.mkdtemp(prefix="ctk-pg-")
    as_user = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, pg_port = os.path.join(folder, "data"), free_port()
    subprocess.run(
        [*as_user, _pg_bin("initdb"), "-D", data, "-U", "ctk", "--auth=trust"], check=True, capture_output=True
    )
    subprocess.run(
        [
            *as_user,
            _pg_bin("pg_ctl"),
            "-D",
            data,
            "-w",
            "-l",
            os.path.join(folder, "log"),
            "-o",
            f"-p {pg_port} -k {folder} -c listen_addresses=127.0.0.1",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        store = f"postgresql+psycopg://ctk@127.0.0.1:{pg_port}/postgres"
        served = _serve(ctk, store, str(ctk.folder / "served"))
        try:
            client = _sweep_through(ctk, served.port, "pg", "0")
            runs = runs_of(client, "pg")
            assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
            assert "kmeans_accuracy" in next(r for r in runs if "mlflow.parentRunId" in r.data.tags).data.metrics
        finally:
            _stopped(served)
    finally:
        subprocess.run(
            [*as_user, _pg_bin("pg_ctl"), "-D", data, "-m", "fast", "stop"], capture_output=True, check=False
        )
        shutil.rmtree(folder, ignore_errors=True)
